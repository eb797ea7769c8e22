/* SPDX-License-Identifier: MIT */
/*
 * Opening what a store's owner can write: a store directory belongs to a
 * user (or the harness), and root reads and writes it for that user, so
 * everything in it is hostile.  Nothing is reached through a symlink or
 * outside the store's directory fd, no open waits on what is there (a
 * FIFO, a file with a kernel lease), and a record is a regular file or
 * nothing (lease/fsstore/README.md).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "lease.h"

/* Flags every open in a store carries (openat2 refuses O_NONBLOCK with
 * O_PATH, which opens nothing that could block). */
#define BENEATH_FLAGS(flags) (O_CLOEXEC | O_NOFOLLOW | \
			      ((flags) & O_PATH ? 0 : O_NONBLOCK))

/* Without openat2 (valgrind knows it not): component by component, none
 * followed if it is a symlink, ".." refused. */
static int openat_walk(int dirfd, const char *rel, int flags, mode_t mode)
{
	char path[PATH_MAX], *save = NULL, *c, *next;
	int fd;

	if (snprintf(path, sizeof(path), "%s", rel) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	fd = dup(dirfd);
	if (fd < 0)
		return -errno;
	for (c = strtok_r(path, "/", &save); c; c = next) {
		int sub;

		next = strtok_r(NULL, "/", &save);
		if (strcmp(c, "..") == 0) {
			close(fd);
			return -EXDEV;
		}
		sub = next ? openat(fd, c, O_PATH | O_DIRECTORY | O_NOFOLLOW |
				    O_CLOEXEC)
			   : openat(fd, c, flags | BENEATH_FLAGS(flags), mode);
		sub = sub < 0 ? -errno : sub;
		close(fd);
		fd = sub;
		if (fd < 0)
			break;
	}
	return fd;
}

/* The fd if it is what `flags` asked for (a regular file unless
 * O_DIRECTORY or O_PATH), else closed and -LEASE_ENOTREG; one opened for
 * writing must have no other hard link (-EMLINK): with
 * fs.protected_hardlinks off, a store's owner could link any file of the
 * filesystem there for root to write its epoch into. */
static int regular_only(int fd, int flags)
{
	struct stat st;
	int r = 0;

	if (fd < 0 || (flags & (O_DIRECTORY | O_PATH)))
		return fd;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		r = -LEASE_ENOTREG;
	else if ((flags & O_ACCMODE) != O_RDONLY && st.st_nlink > 1)
		r = -EMLINK;
	if (r < 0) {
		close(fd);
		return r;
	}
	return fd;
}

int lease_open_beneath(int dirfd, const char *rel, int flags, mode_t mode)
{
	struct open_how how = {
		.flags = (uint64_t)(unsigned)(flags | BENEATH_FLAGS(flags)),
		.mode = (flags & O_CREAT) ? mode : 0u,
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
			   RESOLVE_NO_MAGICLINKS,
	};
	long fd = syscall(SYS_openat2, dirfd, rel, &how, sizeof(how));

	if (fd < 0 && errno == ENOSYS)
		return regular_only(openat_walk(dirfd, rel, flags, (mode_t)how.mode),
				    flags);
	return regular_only(fd < 0 ? -errno : (int)fd, flags);
}

int lease_parent_beneath(int dirfd, const char *rel, const char **last)
{
	char dir[PATH_MAX];
	const char *slash = strrchr(rel, '/');

	*last = slash ? slash + 1 : rel;
	if (!slash)
		return lease_open_beneath(dirfd, ".", O_PATH | O_DIRECTORY, 0);
	if ((size_t)(slash - rel) >= sizeof(dir))
		return -ENAMETOOLONG;
	memcpy(dir, rel, (size_t)(slash - rel));
	dir[slash - rel] = '\0';
	return lease_open_beneath(dirfd, dir, O_PATH | O_DIRECTORY, 0);
}

int lease_mkdir_beneath(int dirfd, const char *rel, mode_t mode)
{
	const char *last;
	int p = lease_parent_beneath(dirfd, rel, &last), r = 0;

	if (p < 0)
		return p;
	if (mkdirat(p, last, mode) < 0)
		r = -errno;
	close(p);
	return r;
}

int lease_unlink_beneath(int dirfd, const char *rel, int flags)
{
	const char *last;
	int p = lease_parent_beneath(dirfd, rel, &last), r = 0;

	if (p < 0)
		return p;
	if (unlinkat(p, last, flags) < 0)
		r = -errno;
	close(p);
	return r;
}

int lease_rename_beneath(int dirfd, const char *from, const char *to)
{
	const char *lf, *lt;
	int pf = lease_parent_beneath(dirfd, from, &lf), pt, r = 0;

	if (pf < 0)
		return pf;
	pt = lease_parent_beneath(dirfd, to, &lt);
	if (pt < 0) {
		close(pf);
		return pt;
	}
	if (renameat(pf, lf, pt, lt) < 0)
		r = -errno;
	close(pf);
	close(pt);
	return r;
}

int lease_open_canonical_dir(const char *path, int flags)
{
	int fd;

	if (path[0] != '/')
		return -EINVAL;
	fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (path[1]) {
		int sub = lease_open_beneath(fd, path + 1, flags | O_DIRECTORY, 0);
		struct stat st;

		close(fd);
		/* O_NOFOLLOW says ENOTDIR for a symlink last: say it. */
		if (sub == -ENOTDIR && lstat(path, &st) == 0 && S_ISLNK(st.st_mode))
			sub = -ELOOP;
		fd = sub;
	}
	return fd;
}

const char *lease_strerror(int neg_errno)
{
	if (neg_errno == -LEASE_ENOTREG)
		return "not a regular file (a FIFO, socket, device or "
		       "directory where a store's file goes)";
	if (neg_errno == -EMLINK)
		return "has another hard link (a store's files have one name)";
	return strerror(-neg_errno);
}
