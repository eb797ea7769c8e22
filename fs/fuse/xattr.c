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
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <sys/xattr.h>

#include "lfs_int.h"

/* ---- xattrs --------------------------------------------------------------
 * Through the inode's O_PATH fd by its name N under /proc/self/fd, which
 * reaches the inode itself (symlinks included, where the kernel refuses
 * user.* with EPERM as natively): by the *xattrat() calls relative to the
 * kept fs->proc_fd, one name to resolve (1.9 us a getxattr against 2.8 us
 * natively), or by the path /proc/self/fd/N (four) before Linux 6.13.
 * (The *xattrat() calls refuse the O_PATH fd itself with AT_EMPTY_PATH.) */

#ifndef SYS_setxattrat
#define SYS_setxattrat 463      /* Linux 6.13; glibc 2.36 names none */
#define SYS_getxattrat 464
#define SYS_listxattrat 465
#define SYS_removexattrat 466
#endif

/* The kernel's struct xattr_args (uapi, Linux 6.13). */
struct xattrat_value {
	uint64_t value;
	uint32_t size;
	uint32_t flags;
};

/* What one xattr call needs; `name` NULL means list. */
struct xattr_args {
	const char *name;
	const char *value;   /* set; NULL for get/list/remove */
	char *buf;           /* get/list result */
	size_t size;
	int flags;
	bool remove;
};

/* By name `n` under the directory dirfd; -1 with ENOSYS before 6.13. */
static ssize_t xattr_call_at(int dirfd, const char *n,
			     const struct xattr_args *a)
{
	struct xattrat_value v = {
		.value = (uintptr_t)(a->value ? (const void *)a->value : a->buf),
		.size = (uint32_t)a->size,
		.flags = (uint32_t)a->flags,
	};

	if (a->remove)
		return syscall(SYS_removexattrat, dirfd, n, 0, a->name);
	if (a->value)
		return syscall(SYS_setxattrat, dirfd, n, 0, a->name, &v,
			       sizeof(v));
	if (a->name)
		return syscall(SYS_getxattrat, dirfd, n, 0, a->name, &v,
			       sizeof(v));
	return syscall(SYS_listxattrat, dirfd, n, 0, a->buf, a->size);
}

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
	int proc_fd;
	int fd;                 /* the inode's O_PATH fd */
	const struct xattr_args *a;
	ssize_t n;
};

static int xattr_fn(void *a_)
{
	static atomic_bool no_xattrat;
	struct xattr_call_args *c = a_;
	char p[PROC_FD_PATH_MAX];

	if (!atomic_load_explicit(&no_xattrat, memory_order_relaxed)) {
		c->n = xattr_call_at(c->proc_fd, fd_name(p, c->fd), c->a);
		if (c->n >= 0 || errno != ENOSYS)
			return c->n < 0 ? neg_errno() : 0;
		atomic_store_explicit(&no_xattrat, true, memory_order_relaxed);
	}
	c->n = xattr_call(proc_path(p, c->fd), c->a);
	return c->n < 0 ? neg_errno() : 0;
}

/* The call on inode `ino`, as the caller: result size or -errno. */
static ssize_t xattr_on(fuse_req_t req, fuse_ino_t ino,
			const struct xattr_args *a)
{
	struct lfs *fs = req_fs(req);
	struct lfs_inode *inode = inode_of(fs, ino);
	int fd = inode_fd(fs, inode);
	struct xattr_call_args c = { .proc_fd = fs->proc_fd, .fd = fd,
				     .a = a };
	int rc;

	if (fd < 0)
		return fd;
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
