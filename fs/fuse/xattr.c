/* SPDX-License-Identifier: MIT */
/*
 * The passthrough: extended attributes.
 * (Conventions: lfs.c; shared internals: lfs_int.h.)
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <sys/xattr.h>

#include "lfs_int.h"

/* ---- xattrs --------------------------------------------------------------
 * Through /proc/self/fd/N, which reaches the inode itself (symlinks
 * included, where the kernel refuses user.* with EPERM as natively). */

/* What one xattr call needs; `name` NULL means list. */
struct xattr_args {
	const char *name;
	const char *value;   /* set; NULL for get/list/remove */
	char *buf;           /* get/list result */
	size_t size;
	int flags;
	bool remove;
};

static ssize_t xattr_call(const char *path, const struct xattr_args *a)
{
	if (a->remove)
		return removexattr(path, a->name);
	if (a->value)
		return setxattr(path, a->name, a->value, a->size, a->flags);
	if (a->name)
		return getxattr(path, a->name, a->buf, a->size);
	return listxattr(path, a->buf, a->size);
}

struct xattr_call_args {
	const char *path;
	const struct xattr_args *a;
	ssize_t n;
};

static int xattr_fn(void *a_)
{
	struct xattr_call_args *c = a_;

	c->n = xattr_call(c->path, c->a);
	return c->n < 0 ? neg_errno() : 0;
}

/* The call on inode `ino`, as the caller: result size or -errno. */
static ssize_t xattr_on(fuse_req_t req, fuse_ino_t ino,
			const struct xattr_args *a)
{
	struct lfs *fs = req_fs(req);
	struct lfs_inode *inode = inode_of(fs, ino);
	char p[PROC_FD_PATH_MAX];
	int fd = inode_fd(fs, inode);
	struct xattr_call_args c = { .a = a };
	int rc;

	if (fd < 0)
		return fd;
	c.path = proc_path(p, fd);
	rc = as_caller(req, xattr_fn, &c);
	inode_fd_put(inode, fd);
	return rc < 0 ? rc : c.n;
}

void lfs_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			 const char *value, size_t size, int flags)
{
	struct xattr_args a = { .name = name, .value = value, .size = size,
				.flags = flags };
	ssize_t n = xattr_on(req, ino, &a);

	reply_err(req, n < 0 ? (int)n : 0);
}

void lfs_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	struct xattr_args a = { .name = name, .remove = true };
	ssize_t n = xattr_on(req, ino, &a);

	reply_err(req, n < 0 ? (int)n : 0);
}

/* Size query (size == 0) or value; shared by getxattr and listxattr. */
static void reply_xattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			size_t size)
{
	struct xattr_args a = { .name = name, .size = size };
	ssize_t n;

	if (size) {
		a.buf = malloc(size);
		if (!a.buf) {
			reply_err(req, -ENOMEM);
			return;
		}
	}
	n = xattr_on(req, ino, &a);
	/* The kernel asks for ACLs on every permission check: a backing fs
	 * without xattrs has none, which is ENODATA, not an error. */
	if (n == -EOPNOTSUPP && name && strncmp(name, "system.posix_acl_", 17) == 0)
		n = -ENODATA;
	if (n < 0)
		reply_err(req, (int)n);
	else if (size)
		fuse_reply_buf(req, a.buf, (size_t)n);
	else
		fuse_reply_xattr(req, (size_t)n);
	free(a.buf);
}

void lfs_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			 size_t size)
{
	reply_xattr(req, ino, name, size);
}

void lfs_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	reply_xattr(req, ino, NULL, size);
}
