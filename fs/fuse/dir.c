/* SPDX-License-Identifier: MIT */
/*
 * The passthrough's front end: directories.  opendir, readdir(plus),
 * releasedir, fsyncdir; statfs (the backing calls: core/dir.c).
 * (Conventions: lfs.c; shared internals: lfs_int.h.)
 */
#include <dirent.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

#include "lfs_int.h"

static struct lfs_dir *dir_of(struct fuse_file_info *fi)
{
	return (struct lfs_dir *)(uintptr_t)fi->fh;
}

void lfs_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct lfs *fs = req_fs(req);
	struct caller c = caller_of(req);
	struct lfs_dir *d;
	int rc = core_opendir(fs, inode_of(fs, ino), &c, &d);

	if (rc < 0) {
		reply_err(req, rc);
		return;
	}
	fi->fh = (uint64_t)(uintptr_t)d;
	/* Exclusive: the kernel's cached listing stays valid; it is
	 * invalidated by changes made through this mount. */
	fi->cache_readdir = atomic_load(&fs->keep_cache);
	fi->keep_cache = atomic_load(&fs->keep_cache);
	if (fuse_reply_open(req, fi) != 0)
		core_releasedir(fs, d);
}

/* One entry without attributes (node id 0: the kernel looks it up itself
 * if asked). */
static size_t add_plain(fuse_req_t req, char *buf, size_t rem,
			const struct dirent *de, bool plus)
{
	struct fuse_entry_param e = { 0 };

	e.attr.st_ino = de->d_ino;
	e.attr.st_mode = (mode_t)de->d_type << 12;
	if (!plus)
		return fuse_add_direntry(req, buf, rem, de->d_name, &e.attr,
					 de->d_off);
	return fuse_add_direntry_plus(req, buf, rem, de->d_name, &e,
				      de->d_off);
}

/* Adds one entry at buf; returns its size (> rem means it did not fit
 * and no reference was taken) or -errno. */
static ssize_t dir_add(fuse_req_t req, struct lfs_dir *d, char *buf,
		       size_t rem, const struct dirent *de, bool plus)
{
	struct lfs *fs = req_fs(req);
	struct caller c = caller_of(req);
	struct fuse_entry_param out;
	struct lfs_entry e;
	size_t n;
	int rc;

	if (!plus)
		return (ssize_t)add_plain(req, buf, rem, de, false);
	rc = core_dir_lookup(fs, d, de, &c, &e);
	if (rc == -EACCES)
		return (ssize_t)add_plain(req, buf, rem, de, true);
	if (rc < 0)
		return rc;
	entry_fill(fs, &e, &out);
	n = fuse_add_direntry_plus(req, buf, rem, de->d_name, &out, de->d_off);
	if (n > rem)
		table_unref(fs, e.inode, 1);
	return (ssize_t)n;
}

/* Entries from `off` into buf until it is full: the bytes used, or the
 * first error (*err). */
static size_t fill(fuse_req_t req, struct lfs_dir *d, char *buf, size_t size,
		   off_t off, bool plus, int *err)
{
	const struct dirent *de;
	size_t pos = 0;

	while ((de = core_dir_peek(d, off, err)) != NULL) {
		ssize_t n = dir_add(req, d, buf + pos, size - pos, de, plus);

		if (n < 0)
			*err = (int)n;
		if (n < 0 || (size_t)n > size - pos)
			break;
		pos += (size_t)n;
		core_dir_next(d);
		off = d->offset;
	}
	return pos;
}

static void do_readdir(fuse_req_t req, size_t size, off_t off,
		       struct fuse_file_info *fi, bool plus)
{
	char *buf = malloc(size);
	size_t pos;
	int rc = 0;

	if (!buf) {
		reply_err(req, -ENOMEM);
		return;
	}
	pos = fill(req, dir_of(fi), buf, size, off, plus, &rc);
	/* A partial listing is still progress; the error recurs next call. */
	if (pos == 0 && rc < 0)
		reply_err(req, rc);
	else
		fuse_reply_buf(req, buf, pos);
	free(buf);
}

void lfs_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		 struct fuse_file_info *fi)
{
	(void)ino; /* the handle names the directory */
	do_readdir(req, size, off, fi, false);
}

void lfs_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	(void)ino; /* the handle names the directory */
	do_readdir(req, size, off, fi, true);
}

void lfs_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino; /* the handle names the directory */
	core_releasedir(req_fs(req), dir_of(fi));
	fuse_reply_err(req, 0);
}

void lfs_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync,
		  struct fuse_file_info *fi)
{
	(void)ino; /* the handle names the directory */
	reply_err(req, core_fsyncdir(dir_of(fi), datasync != 0));
}

void lfs_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct lfs *fs = req_fs(req);
	struct statvfs sv;
	int rc = core_statfs(fs, inode_of(fs, ino), &sv);

	if (rc < 0)
		reply_err(req, rc);
	else
		fuse_reply_statfs(req, &sv);
}
