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

/* A reply's buffer being filled with entries (core_readdir()). */
struct dir_sink {
	fuse_req_t req;
	struct lfs *fs;
	char *buf;
	size_t size, pos;
	bool plus;
};

/* One entry packed as the kernel reads it: plain, or with attributes
 * (`e`; NULL: node id 0, which the kernel looks up itself if asked).  > 0
 * when it did not fit, its reference dropped. */
static int add_entry(struct dir_sink *k, const struct dirent *de,
		     const struct lfs_entry *e)
{
	struct fuse_entry_param out = { 0 };
	size_t rem = k->size - k->pos, n;

	if (e) {
		entry_fill(k->fs, e, &out);
	} else {
		out.attr.st_ino = de->d_ino;
		out.attr.st_mode = (mode_t)de->d_type << 12;
	}
	if (k->plus)
		n = fuse_add_direntry_plus(k->req, k->buf + k->pos, rem,
					   de->d_name, &out, de->d_off);
	else
		n = fuse_add_direntry(k->req, k->buf + k->pos, rem, de->d_name,
				      &out.attr, de->d_off);
	if (n > rem) {
		if (e)
			table_unref(k->fs, e->inode, 1);
		return 1;
	}
	k->pos += n;
	return 0;
}

static void do_readdir(fuse_req_t req, size_t size, off_t off,
		       struct fuse_file_info *fi, bool plus)
{
	struct caller c = caller_of(req);
	struct dir_sink k = { .req = req, .fs = req_fs(req),
			      .buf = malloc(size), .size = size, .plus = plus };
	int rc;

	if (!k.buf) {
		reply_err(req, -ENOMEM);
		return;
	}
	rc = core_readdir(k.fs, dir_of(fi), off, plus, &c, add_entry, &k);
	/* A partial listing is still progress; the error recurs next call. */
	if (k.pos == 0 && rc < 0)
		reply_err(req, rc);
	else
		fuse_reply_buf(req, k.buf, k.pos);
	free(k.buf);
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
