/* SPDX-License-Identifier: MIT */
/*
 * The backing core: extended attributes.
 *
 * Through the inode's O_PATH fd by its name N under /proc/self/fd, which
 * reaches the inode itself (symlinks included, where the kernel refuses
 * user.* with EPERM as natively): by the *xattrat() calls relative to the
 * kept fs->proc_fd, one name to resolve (1.9 us a getxattr against 2.8 us
 * natively), or by the path /proc/self/fd/N (four) before Linux 6.13.
 * (The *xattrat() calls refuse the O_PATH fd itself with AT_EMPTY_PATH.)
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "core.h"

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
struct xattr_req {
	const char *name;
	const char *value;   /* set; NULL for get/list/remove */
	char *buf;           /* get/list result */
	size_t size;
	int flags;
	bool remove;
};

/* By name `n` under the directory dirfd; -1 with ENOSYS before 6.13. */
static ssize_t xattr_call_at(int dirfd, const char *n,
			     const struct xattr_req *x)
{
	struct xattrat_value v = {
		.value = (uintptr_t)(x->value ? (const void *)x->value : x->buf),
		.size = (uint32_t)x->size,
		.flags = (uint32_t)x->flags,
	};

	if (x->remove)
		return syscall(SYS_removexattrat, dirfd, n, 0, x->name);
	if (x->value)
		return syscall(SYS_setxattrat, dirfd, n, 0, x->name, &v,
			       sizeof(v));
	if (x->name)
		return syscall(SYS_getxattrat, dirfd, n, 0, x->name, &v,
			       sizeof(v));
	return syscall(SYS_listxattrat, dirfd, n, 0, x->buf, x->size);
}

static ssize_t xattr_call(const char *path, const struct xattr_req *x)
{
	if (x->remove)
		return removexattr(path, x->name);
	if (x->value)
		return setxattr(path, x->name, x->value, x->size, x->flags);
	if (x->name)
		return getxattr(path, x->name, x->buf, x->size);
	return listxattr(path, x->buf, x->size);
}

/* The call on the inode open at O_PATH fd: result size or -errno. */
static ssize_t xattr_fd(struct lfs *fs, int fd, const struct xattr_req *x)
{
	static atomic_bool no_xattrat;
	char p[PROC_FD_PATH_MAX];
	ssize_t n;

	if (!atomic_load_explicit(&no_xattrat, memory_order_relaxed)) {
		n = xattr_call_at(fs->proc_fd, fd_name(p, fd), x);
		if (n >= 0 || errno != ENOSYS)
			return n < 0 ? neg_errno() : n;
		atomic_store_explicit(&no_xattrat, true, memory_order_relaxed);
	}
	n = xattr_call(proc_path(p, fd), x);
	return n < 0 ? neg_errno() : n;
}

/* The call on inode, as `c`. */
static ssize_t xattr_on(struct lfs *fs, struct lfs_inode *inode,
			const struct xattr_req *x, const struct caller *c,
			const struct admission *adm)
{
	int fd = inode_fd(fs, inode);
	struct acting a;
	ssize_t n;

	if (fd < 0)
		return fd;
	n = caller_enter_admitted(fs, c, NULL, adm, &a);
	if (n == 0)
		n = xattr_fd(fs, fd, x);
	caller_leave(fs, &a);
	inode_fd_put(inode, fd);
	return n;
}

int core_setxattr(struct lfs *fs, struct lfs_inode *inode, const char *name,
		  const char *value, size_t size, int flags,
		  const struct caller *c, const struct admission *adm)
{
	struct xattr_req x = { .name = name, .value = value, .size = size,
			       .flags = flags };
	ssize_t n = xattr_on(fs, inode, &x, c, adm);

	return n < 0 ? (int)n : 0;
}

int core_removexattr(struct lfs *fs, struct lfs_inode *inode,
		     const char *name, const struct caller *c,
		     const struct admission *adm)
{
	struct xattr_req x = { .name = name, .remove = true };
	ssize_t n = xattr_on(fs, inode, &x, c, adm);

	return n < 0 ? (int)n : 0;
}

/* The kernel asks for ACLs on every permission check: a backing fs
 * without xattrs has none, which is ENODATA, not an error. */
ssize_t core_getxattr(struct lfs *fs, struct lfs_inode *inode,
		      const char *name, char *buf, size_t size,
		      const struct caller *c)
{
	struct xattr_req x = { .name = name, .buf = buf, .size = size };
	ssize_t n = xattr_on(fs, inode, &x, c, NULL);

	if (n == -EOPNOTSUPP && name &&
	    strncmp(name, "system.posix_acl_", 17) == 0)
		n = -ENODATA;
	return n;
}
