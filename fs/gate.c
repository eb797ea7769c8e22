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

/*
 * A gated entry: admission, the original op (which replies), exit.
 * `params` is the op's parameter list, `args` the same names as a call.
 */
#define GATED(op, params, args)                 \
	static void g_##op params               \
	{                                       \
		if (!admit(req))                \
			return;                 \
		inner.op args;                  \
		lfs_gate_exit();                \
	}

GATED(write, (fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size,
	      off_t off, struct fuse_file_info *fi),
      (req, ino, buf, size, off, fi))
GATED(write_buf, (fuse_req_t req, fuse_ino_t ino, struct fuse_bufvec *bufv,
		  off_t off, struct fuse_file_info *fi),
      (req, ino, bufv, off, fi))
GATED(create, (fuse_req_t req, fuse_ino_t parent, const char *name,
	       mode_t mode, struct fuse_file_info *fi),
      (req, parent, name, mode, fi))
GATED(mknod, (fuse_req_t req, fuse_ino_t parent, const char *name,
	      mode_t mode, dev_t rdev),
      (req, parent, name, mode, rdev))
GATED(mkdir, (fuse_req_t req, fuse_ino_t parent, const char *name,
	      mode_t mode),
      (req, parent, name, mode))
GATED(symlink, (fuse_req_t req, const char *link, fuse_ino_t parent,
		const char *name),
      (req, link, parent, name))
GATED(link, (fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
	     const char *newname),
      (req, ino, newparent, newname))
GATED(unlink, (fuse_req_t req, fuse_ino_t parent, const char *name),
      (req, parent, name))
GATED(rmdir, (fuse_req_t req, fuse_ino_t parent, const char *name),
      (req, parent, name))
GATED(rename, (fuse_req_t req, fuse_ino_t parent, const char *name,
	       fuse_ino_t newparent, const char *newname, unsigned int flags),
      (req, parent, name, newparent, newname, flags))
GATED(setattr, (fuse_req_t req, fuse_ino_t ino, struct stat *attr,
		int to_set, struct fuse_file_info *fi),
      (req, ino, attr, to_set, fi))
GATED(setxattr, (fuse_req_t req, fuse_ino_t ino, const char *name,
		 const char *value, size_t size, int flags),
      (req, ino, name, value, size, flags))
GATED(removexattr, (fuse_req_t req, fuse_ino_t ino, const char *name),
      (req, ino, name))
GATED(fallocate, (fuse_req_t req, fuse_ino_t ino, int mode, off_t offset,
		  off_t length, struct fuse_file_info *fi),
      (req, ino, mode, offset, length, fi))
/* The destination is written: gated as a whole. */
GATED(copy_file_range, (fuse_req_t req, fuse_ino_t ino_in, off_t off_in,
			struct fuse_file_info *fi_in, fuse_ino_t ino_out,
			off_t off_out, struct fuse_file_info *fi_out,
			size_t len, int flags),
      (req, ino_in, off_in, fi_in, ino_out, off_out, fi_out, len, flags))

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

#define GATE(field)                            \
	do {                                   \
		if (ops->field)                \
			ops->field = g_##field; \
	} while (0)

void lfs_gate_ops(struct fuse_lowlevel_ops *ops)
{
	inner = *ops;
	GATE(write);
	GATE(write_buf);
	GATE(create);
	GATE(mknod);
	GATE(mkdir);
	GATE(symlink);
	GATE(link);
	GATE(unlink);
	GATE(rmdir);
	GATE(rename);
	GATE(setattr);
	GATE(setxattr);
	GATE(removexattr);
	GATE(fallocate);
	GATE(copy_file_range);
	GATE(open);
}
