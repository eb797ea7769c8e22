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

/* The entry at the kernel's offset `off`: NULL at the end (*err 0) or on
 * an error (*err -errno).  It stays the next one until dir_next(). */
static const struct dirent *dir_peek(struct lfs_dir *d, off_t off, int *err)
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

static void dir_next(struct lfs_dir *d)
{
	d->offset = d->pending->d_off;
	d->pending = NULL;
}

/* One entry to the sink, looked up first with `plus`.  Dots, and names
 * the caller may list but not look up (a directory with read but no
 * search permission), go without attributes: the kernel then looks them
 * up itself if asked. */
static int dir_emit(struct lfs *fs, struct lfs_dir *d, const struct dirent *de,
		    bool plus, dir_emit_fn *emit, struct dir_sink *sink)
{
	struct lfs_entry e;
	int rc;

	if (!plus || is_dot(de->d_name))
		return emit(sink, de, NULL);
	rc = lookup_at(fs, dirfd(d->dp), de->d_name, &e);
	if (rc == -EACCES)
		return emit(sink, de, NULL);
	return rc < 0 ? rc : emit(sink, de, &e);
}

int core_readdir(struct lfs *fs, struct lfs_dir *d, off_t off, bool plus,
		 const struct caller *c, dir_emit_fn *emit,
		 struct dir_sink *sink)
{
	const struct dirent *de;
	struct acting a;
	int rc = 0;

	/* The entries' lookups are the caller's. */
	if (plus)
		caller_enter(fs, c, NULL, &a);
	while ((de = dir_peek(d, off, &rc)) != NULL) {
		rc = dir_emit(fs, d, de, plus, emit, sink);
		if (rc != 0)
			break;
		dir_next(d);
		off = d->offset;
	}
	if (plus)
		caller_leave(fs, &a);
	return rc < 0 ? rc : 0;
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
