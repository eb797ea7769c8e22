/* SPDX-License-Identifier: MIT */
/*
 * The backing core: directory streams and statfs.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "core.h"

/* A directory stream for `c` in d->dp, or -errno. */
static int open_dir(struct lfs *fs, struct lfs_inode *inode,
		    const struct caller *c, struct lfs_dir *d)
{
	int rc = 0, fd = reopen_inode(fs, inode,
				      O_RDONLY | O_DIRECTORY | O_CLOEXEC, c,
				      NULL);

	if (fd < 0)
		return fd;
	opened(fs, fd);
	d->dp = fdopendir(fd);
	if (!d->dp) {
		rc = neg_errno();
		close(fd);
	}
	return rc;
}

int core_opendir(struct lfs *fs, struct lfs_inode *inode,
		 const struct caller *c, struct lfs_dir **out)
{
	struct lfs_dir *d = calloc(1, sizeof(*d));
	int rc = d ? open_get(fs, c->uid) : -ENOMEM;

	if (rc == 0) {
		d->uid = c->uid;
		rc = open_dir(fs, inode, c, d);
		if (rc < 0)
			open_put(fs, c->uid);
	}
	if (rc < 0) {
		free(d);
		return rc;
	}
	*out = d;
	return 0;
}

void core_releasedir(struct lfs *fs, struct lfs_dir *d)
{
	closedir(d->dp);
	open_put(fs, d->uid);
	free(d);
}

const struct dirent *core_dir_peek(struct lfs_dir *d, off_t off, int *err)
{
	*err = 0;
	if (off != d->offset) {
		seekdir(d->dp, off);
		d->pending = NULL;
		d->offset = off;
	}
	if (!d->pending) {
		errno = 0;
		d->pending = readdir(d->dp);
		if (!d->pending)
			*err = errno ? -errno : 0;
	}
	return d->pending;
}

void core_dir_next(struct lfs_dir *d)
{
	if (!d->pending)
		return;
	d->offset = d->pending->d_off;
	d->pending = NULL;
}

/* Dots, and names the caller may list but not look up (a directory with
 * read but no search permission), are -EACCES: the front end answers them
 * without attributes, and the kernel looks them up itself if asked. */
int core_dir_lookup(struct lfs *fs, struct lfs_dir *d, const struct dirent *de,
		    const struct caller *c, struct lfs_entry *e)
{
	struct acting a;
	int rc;

	if (is_dot(de->d_name))
		return -EACCES;
	caller_enter(fs, c, NULL, &a);
	rc = lookup_at(fs, dirfd(d->dp), de->d_name, e);
	caller_leave(fs, &a);
	return rc;
}

int core_fsyncdir(struct lfs_dir *d, bool datasync)
{
	int fd = dirfd(d->dp);
	int res = datasync ? fdatasync(fd) : fsync(fd);

	return res < 0 ? neg_errno() : 0;
}

/* The FUSE statfs reply carries no flags: ST_RDONLY after loss comes from
 * the read-only remount (session.h). */
int core_statfs(struct lfs *fs, struct lfs_inode *inode, struct statvfs *sv)
{
	int fd = inode_fd(fs, inode);
	int rc = fd;

	if (fd >= 0)
		rc = fstatvfs(fd, sv) < 0 ? neg_errno() : 0;
	inode_fd_put(inode, fd);
	return rc;
}
