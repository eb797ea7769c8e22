/* SPDX-License-Identifier: MIT */
/*
 * The lease gate: one layer over the passthrough's ops table.
 *
 * Every mutating entry is replaced by a wrapper that enters the
 * coordinator's admission, answers EROFS if the lease is not healthy, and
 * otherwise runs the original operation (which replies) inside admission.
 * A mutation already inside its backing syscall when loss fires completes;
 * none starts after loss.  Reads, lookups, read-only opens, flush, fsync,
 * release and locks are never gated.
 *
 * State: `gate_coord` and `inner` are written once, by lfs_gate_init() and
 * lfs_gate_ops(), before the FUSE session starts, and only read afterwards,
 * so the hot path takes no lock and allocates nothing.  A NULL coordinator
 * means "no gate" (always admitted).
 */
#include <errno.h>
#include <fcntl.h>

#include "fs.h"

static struct coord *gate_coord;
static struct fuse_lowlevel_ops inner;

void lfs_gate_init(struct coord *coord)
{
	gate_coord = coord;
}

int lfs_gate_enter(void)
{
	if (!gate_coord)
		return 0;
	/* Lost (-ENOLINK), shutting down (-ESHUTDOWN) or any other refusal:
	 * the mount is read-only from here on. */
	return coord_enter(gate_coord) == 0 ? 0 : -EROFS;
}

void lfs_gate_exit(void)
{
	if (gate_coord)
		coord_exit(gate_coord);
}

/* Admission for `req`; false means EROFS was already replied. */
static bool admit(fuse_req_t req)
{
	int rc = lfs_gate_enter();

	if (rc == 0)
		return true;
	fuse_reply_err(req, -rc);
	return false;
}

static void g_write(fuse_req_t req, fuse_ino_t ino, const char *buf,
		    size_t size, off_t off, struct fuse_file_info *fi)
{
	if (!admit(req))
		return;
	inner.write(req, ino, buf, size, off, fi);
	lfs_gate_exit();
}

static void g_write_buf(fuse_req_t req, fuse_ino_t ino,
			struct fuse_bufvec *bufv, off_t off,
			struct fuse_file_info *fi)
{
	if (!admit(req))
		return;
	inner.write_buf(req, ino, bufv, off, fi);
	lfs_gate_exit();
}

static void g_create(fuse_req_t req, fuse_ino_t parent, const char *name,
		     mode_t mode, struct fuse_file_info *fi)
{
	if (!admit(req))
		return;
	inner.create(req, parent, name, mode, fi);
	lfs_gate_exit();
}

static void g_mknod(fuse_req_t req, fuse_ino_t parent, const char *name,
		    mode_t mode, dev_t rdev)
{
	if (!admit(req))
		return;
	inner.mknod(req, parent, name, mode, rdev);
	lfs_gate_exit();
}

static void g_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name,
		    mode_t mode)
{
	if (!admit(req))
		return;
	inner.mkdir(req, parent, name, mode);
	lfs_gate_exit();
}

static void g_symlink(fuse_req_t req, const char *link, fuse_ino_t parent,
		      const char *name)
{
	if (!admit(req))
		return;
	inner.symlink(req, link, parent, name);
	lfs_gate_exit();
}

static void g_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
		   const char *newname)
{
	if (!admit(req))
		return;
	inner.link(req, ino, newparent, newname);
	lfs_gate_exit();
}

static void g_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	if (!admit(req))
		return;
	inner.unlink(req, parent, name);
	lfs_gate_exit();
}

static void g_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	if (!admit(req))
		return;
	inner.rmdir(req, parent, name);
	lfs_gate_exit();
}

static void g_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
		     fuse_ino_t newparent, const char *newname,
		     unsigned int flags)
{
	if (!admit(req))
		return;
	inner.rename(req, parent, name, newparent, newname, flags);
	lfs_gate_exit();
}

static void g_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
		      int to_set, struct fuse_file_info *fi)
{
	if (!admit(req))
		return;
	inner.setattr(req, ino, attr, to_set, fi);
	lfs_gate_exit();
}

static void g_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
		       const char *value, size_t size, int flags)
{
	if (!admit(req))
		return;
	inner.setxattr(req, ino, name, value, size, flags);
	lfs_gate_exit();
}

static void g_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	if (!admit(req))
		return;
	inner.removexattr(req, ino, name);
	lfs_gate_exit();
}

static void g_fallocate(fuse_req_t req, fuse_ino_t ino, int mode,
			off_t offset, off_t length, struct fuse_file_info *fi)
{
	if (!admit(req))
		return;
	inner.fallocate(req, ino, mode, offset, length, fi);
	lfs_gate_exit();
}

/* The destination is written: gated as a whole. */
static void g_copy_file_range(fuse_req_t req, fuse_ino_t ino_in,
			      off_t off_in, struct fuse_file_info *fi_in,
			      fuse_ino_t ino_out, off_t off_out,
			      struct fuse_file_info *fi_out, size_t len,
			      int flags)
{
	if (!admit(req))
		return;
	inner.copy_file_range(req, ino_in, off_in, fi_in, ino_out, off_out,
			      fi_out, len, flags);
	lfs_gate_exit();
}

/* Only opens that can write (write access or O_TRUNC) are gated. */
static void g_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	bool mutating = (fi->flags & O_ACCMODE) != O_RDONLY ||
			(fi->flags & O_TRUNC);

	if (!mutating) {
		inner.open(req, ino, fi);
		return;
	}
	if (!admit(req))
		return;
	inner.open(req, ino, fi);
	lfs_gate_exit();
}

#define GATE(field, wrapper)                   \
	do {                                   \
		if (ops->field)                \
			ops->field = wrapper;  \
	} while (0)

void lfs_gate_ops(struct fuse_lowlevel_ops *ops)
{
	inner = *ops;
	GATE(write, g_write);
	GATE(write_buf, g_write_buf);
	GATE(create, g_create);
	GATE(mknod, g_mknod);
	GATE(mkdir, g_mkdir);
	GATE(symlink, g_symlink);
	GATE(link, g_link);
	GATE(unlink, g_unlink);
	GATE(rmdir, g_rmdir);
	GATE(rename, g_rename);
	GATE(setattr, g_setattr);
	GATE(setxattr, g_setxattr);
	GATE(removexattr, g_removexattr);
	GATE(fallocate, g_fallocate);
	GATE(copy_file_range, g_copy_file_range);
	GATE(open, g_open);
}
