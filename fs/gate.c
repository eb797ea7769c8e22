/* SPDX-License-Identifier: MIT */
/*
 * The lease gate (contract in gate.h).
 *
 * State: a gate's coord, inner and ops are written by gate_new() before
 * any session uses the gate and only read afterwards, so the hot path
 * takes no lock and allocates nothing.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "gate.h"

enum gate_op {
	GOP_lookup,
	GOP_forget,
	GOP_forget_multi,
	GOP_getattr,
	GOP_setattr,
	GOP_readlink,
	GOP_mknod,
	GOP_mkdir,
	GOP_symlink,
	GOP_link,
	GOP_unlink,
	GOP_rmdir,
	GOP_rename,
	GOP_create,
	GOP_open,
	GOP_read,
	GOP_write,
	GOP_write_buf,
	GOP_flush,
	GOP_release,
	GOP_fsync,
	GOP_fallocate,
	GOP_copy_file_range,
	GOP_lseek,
	GOP_opendir,
	GOP_readdir,
	GOP_readdirplus,
	GOP_releasedir,
	GOP_fsyncdir,
	GOP_statfs,
	GOP_setxattr,
	GOP_getxattr,
	GOP_listxattr,
	GOP_removexattr,
	GOP_COUNT,
};

static const char *const op_names[GOP_COUNT] = {
	[GOP_lookup] = "lookup",
	[GOP_forget] = "forget",
	[GOP_forget_multi] = "forget_multi",
	[GOP_getattr] = "getattr",
	[GOP_setattr] = "setattr",
	[GOP_readlink] = "readlink",
	[GOP_mknod] = "mknod",
	[GOP_mkdir] = "mkdir",
	[GOP_symlink] = "symlink",
	[GOP_link] = "link",
	[GOP_unlink] = "unlink",
	[GOP_rmdir] = "rmdir",
	[GOP_rename] = "rename",
	[GOP_create] = "create",
	[GOP_open] = "open",
	[GOP_read] = "read",
	[GOP_write] = "write",
	[GOP_write_buf] = "write_buf",
	[GOP_flush] = "flush",
	[GOP_release] = "release",
	[GOP_fsync] = "fsync",
	[GOP_fallocate] = "fallocate",
	[GOP_copy_file_range] = "copy_file_range",
	[GOP_lseek] = "lseek",
	[GOP_opendir] = "opendir",
	[GOP_readdir] = "readdir",
	[GOP_readdirplus] = "readdirplus",
	[GOP_releasedir] = "releasedir",
	[GOP_fsyncdir] = "fsyncdir",
	[GOP_statfs] = "statfs",
	[GOP_setxattr] = "setxattr",
	[GOP_getxattr] = "getxattr",
	[GOP_listxattr] = "listxattr",
	[GOP_removexattr] = "removexattr",
};

struct gate {
	struct coord *coord;
	struct fuse_lowlevel_ops inner;
	struct fuse_lowlevel_ops ops;
	/* Counters, relaxed atomics: exact totals, no ordering needed. */
	_Atomic uint64_t requests[GOP_COUNT];
	_Atomic uint64_t refused[GOP_COUNT];
};

/* Whether the request this thread serves was admitted as a mutation (set
 * by admit(), cleared when its inner operation returned). */
static __thread struct gate *tl_admitted;

static struct gate *gate_of(fuse_req_t req)
{
	return ((struct lfs_session *)fuse_req_userdata(req))->gate;
}

static void bump(_Atomic uint64_t *c)
{
	atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

/* Admission for `req` (operation `op`); NULL means EROFS was already
 * replied.  Lost (-ENOLINK), shutting down (-ESHUTDOWN) or any other
 * refusal: the mount is read-only from here on. */
static struct gate *admit(fuse_req_t req, enum gate_op op)
{
	struct gate *g = gate_of(req);

	bump(&g->requests[op]);
	if (coord_enter(g->coord) == 0) {
		tl_admitted = g;
		return g;
	}
	bump(&g->refused[op]);
	fuse_reply_err(req, EROFS);
	return NULL;
}

static void leave(struct gate *g)
{
	tl_admitted = NULL;
	coord_exit(g->coord);
}

int gate_recheck(void)
{
	struct gate *g = tl_admitted;

	return g && coord_healthy(g->coord) < 0 ? -EROFS : 0;
}

/*
 * A gated entry: admission, the inner op (which replies), exit.
 * `params` is the op's parameter list, `args` the same names as a call.
 */
#define GATED(op, params, args)                         \
	static void g_##op params                       \
	{                                               \
		struct gate *g = admit(req, GOP_##op);  \
                                                        \
		if (!g)                                 \
			return;                         \
		g->inner.op args;                       \
		leave(g);                               \
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

/*
 * A counted entry: not gated, only counted, then the inner op.
 */
#define COUNTED(op, params, args)                       \
	static void g_##op params                       \
	{                                               \
		struct gate *g = gate_of(req);          \
                                                        \
		bump(&g->requests[GOP_##op]);          \
		g->inner.op args;                       \
	}

COUNTED(lookup, (fuse_req_t req, fuse_ino_t parent, const char *name),
	(req, parent, name))
COUNTED(forget, (fuse_req_t req, fuse_ino_t ino, uint64_t nlookup),
	(req, ino, nlookup))
COUNTED(forget_multi, (fuse_req_t req, size_t count, struct fuse_forget_data *forgets),
	(req, count, forgets))
COUNTED(getattr, (fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi),
	(req, ino, fi))
COUNTED(readlink, (fuse_req_t req, fuse_ino_t ino),
	(req, ino))
COUNTED(read, (fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi),
	(req, ino, size, off, fi))
COUNTED(flush, (fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi),
	(req, ino, fi))
COUNTED(release, (fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi),
	(req, ino, fi))
COUNTED(fsync, (fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi),
	(req, ino, datasync, fi))
COUNTED(lseek, (fuse_req_t req, fuse_ino_t ino, off_t off, int whence, struct fuse_file_info *fi),
	(req, ino, off, whence, fi))
COUNTED(opendir, (fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi),
	(req, ino, fi))
COUNTED(readdir, (fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi),
	(req, ino, size, off, fi))
COUNTED(readdirplus, (fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi),
	(req, ino, size, off, fi))
COUNTED(releasedir, (fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi),
	(req, ino, fi))
COUNTED(fsyncdir, (fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi),
	(req, ino, datasync, fi))
COUNTED(statfs, (fuse_req_t req, fuse_ino_t ino),
	(req, ino))
COUNTED(getxattr, (fuse_req_t req, fuse_ino_t ino, const char *name, size_t size),
	(req, ino, name, size))
COUNTED(listxattr, (fuse_req_t req, fuse_ino_t ino, size_t size),
	(req, ino, size))

/* Only opens that can write (write access or O_TRUNC) are gated. */
static void g_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	bool mutating = (fi->flags & O_ACCMODE) != O_RDONLY ||
			(fi->flags & O_TRUNC);
	struct gate *g;

	if (!mutating) {
		g = gate_of(req);
		bump(&g->requests[GOP_open]);
		g->inner.open(req, ino, fi);
		return;
	}
	g = admit(req, GOP_open);
	if (!g)
		return;
	g->inner.open(req, ino, fi);
	leave(g);
}

#define GATE(field)                                     \
	do {                                            \
		if (g->inner.field)                     \
			g->ops.field = g_##field;       \
	} while (0)

int gate_new(struct coord *coord, const struct fuse_lowlevel_ops *inner,
	     struct gate **out)
{
	struct gate *g = calloc(1, sizeof(*g));

	if (!g)
		return -ENOMEM;
	g->coord = coord;
	g->inner = *inner;
	g->ops = *inner;
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
	GATE(lookup);
	GATE(forget);
	GATE(forget_multi);
	GATE(getattr);
	GATE(readlink);
	GATE(read);
	GATE(flush);
	GATE(release);
	GATE(fsync);
	GATE(lseek);
	GATE(opendir);
	GATE(readdir);
	GATE(readdirplus);
	GATE(releasedir);
	GATE(fsyncdir);
	GATE(statfs);
	GATE(getxattr);
	GATE(listxattr);
	*out = g;
	return 0;
}

const struct fuse_lowlevel_ops *gate_ops(const struct gate *g)
{
	return &g->ops;
}

size_t gate_nops(void)
{
	return GOP_COUNT;
}

const char *gate_op_name(size_t op)
{
	return op < GOP_COUNT ? op_names[op] : NULL;
}

bool gate_op_mutating(size_t op)
{
	switch (op) {
	case GOP_write:
	case GOP_write_buf:
	case GOP_create:
	case GOP_mknod:
	case GOP_mkdir:
	case GOP_symlink:
	case GOP_link:
	case GOP_unlink:
	case GOP_rmdir:
	case GOP_rename:
	case GOP_setattr:
	case GOP_setxattr:
	case GOP_removexattr:
	case GOP_fallocate:
	case GOP_copy_file_range:
	case GOP_open:
		return true;
	default:
		return false;
	}
}

uint64_t gate_requests(const struct gate *g, size_t op)
{
	return op < GOP_COUNT ? atomic_load_explicit(&g->requests[op],
						      memory_order_relaxed) : 0;
}

uint64_t gate_refused(const struct gate *g, size_t op)
{
	return op < GOP_COUNT ? atomic_load_explicit(&g->refused[op],
						      memory_order_relaxed) : 0;
}

void gate_free(struct gate *g)
{
	free(g);
}
