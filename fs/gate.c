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
#include <stdlib.h>

#include "gate.h"

struct gate {
	struct coord *coord;
	struct fuse_lowlevel_ops inner;
	struct fuse_lowlevel_ops ops;
};

static struct gate *gate_of(fuse_req_t req)
{
	return ((struct lfs_session *)fuse_req_userdata(req))->gate;
}

/* Admission for `req`; NULL means EROFS was already replied.  Lost
 * (-ENOLINK), shutting down (-ESHUTDOWN) or any other refusal: the mount
 * is read-only from here on. */
static struct gate *admit(fuse_req_t req)
{
	struct gate *g = gate_of(req);

	if (coord_enter(g->coord) == 0)
		return g;
	fuse_reply_err(req, EROFS);
	return NULL;
}

/*
 * A gated entry: admission, the inner op (which replies), exit.
 * `params` is the op's parameter list, `args` the same names as a call.
 */
#define GATED(op, params, args)                         \
	static void g_##op params                       \
	{                                               \
		struct gate *g = admit(req);            \
                                                        \
		if (!g)                                 \
			return;                         \
		g->inner.op args;                       \
		coord_exit(g->coord);                   \
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
	struct gate *g;

	if (!mutating) {
		gate_of(req)->inner.open(req, ino, fi);
		return;
	}
	g = admit(req);
	if (!g)
		return;
	g->inner.open(req, ino, fi);
	coord_exit(g->coord);
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
	*out = g;
	return 0;
}

const struct fuse_lowlevel_ops *gate_ops(const struct gate *g)
{
	return &g->ops;
}

void gate_free(struct gate *g)
{
	free(g);
}
