/* SPDX-License-Identifier: MIT */
/*
 * The passthrough's front end: names.  Looking up, forgetting, creating,
 * linking, removing and renaming entries (the backing calls:
 * core/entry.c).
 * (Conventions: lfs.c; shared internals: lfs_int.h.)
 */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>

#include "lfs_int.h"

void entry_fill(struct lfs *fs, const struct lfs_entry *e,
		struct fuse_entry_param *out)
{
	memset(out, 0, sizeof(*out));
	out->ino = node_id(fs, e->inode);
	out->attr = e->st;
	out->attr_timeout = atomic_load(&fs->attr_timeout);
	out->entry_timeout = atomic_load(&fs->entry_timeout);
}

/* The one reply to a name operation that made or found `e`. */
static void reply_entry(fuse_req_t req, int rc, const struct lfs_entry *e)
{
	struct fuse_entry_param out;

	if (rc < 0) {
		reply_err(req, rc);
		return;
	}
	entry_fill(req_fs(req), e, &out);
	fuse_reply_entry(req, &out);
}

void lfs_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct lfs *fs = req_fs(req);
	struct caller c = caller_of(req);
	double neg_timeout = atomic_load(&fs->entry_timeout);
	struct fuse_entry_param out;
	struct lfs_entry e;
	int rc = core_lookup(fs, inode_of(fs, parent), name, &c, &e);

	if (rc == -ENOENT && neg_timeout > 0) {
		/* Negative entry: cached by the kernel for entry_timeout. */
		memset(&out, 0, sizeof(out));
		out.entry_timeout = neg_timeout;
		fuse_reply_entry(req, &out);
		return;
	}
	reply_entry(req, rc, &e);
}

/* Through libfuse's log, which the daemon takes into its own (the journal
 * or syslog; stderr under -d): no dependency on fs/daemon. */
static void forget_one(struct lfs *fs, fuse_ino_t ino, uint64_t n)
{
	uint64_t over = table_unref(fs, inode_of(fs, ino), n);

	if (over)
		fuse_log(FUSE_LOG_ERR, "BUG: the kernel forgot %llu references "
			 "of node %llu, %llu more than it held\n",
			 (unsigned long long)n, (unsigned long long)ino,
			 (unsigned long long)over);
}

void lfs_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	forget_one(req_fs(req), ino, nlookup);
	fuse_reply_none(req);
}

void lfs_forget_multi(fuse_req_t req, size_t count,
		      struct fuse_forget_data *forgets)
{
	struct lfs *fs = req_fs(req);

	for (size_t i = 0; i < count; i++)
		forget_one(fs, forgets[i].ino, forgets[i].nlookup);
	fuse_reply_none(req);
}

/* ---- creating entries --------------------------------------------------- */

static void make_entry(fuse_req_t req, fuse_ino_t parent, const char *name,
		       mode_t mode, dev_t rdev, const char *target)
{
	struct lfs *fs = req_fs(req);
	struct caller c = caller_of(req);
	struct admission adm = admission_of(req);
	struct lfs_entry e;
	int rc = core_make(fs, inode_of(fs, parent), name, mode, rdev, target,
			   &c, &adm, &e);

	reply_entry(req, rc, &e);
}

void lfs_mknod(fuse_req_t req, fuse_ino_t parent, const char *name,
	       mode_t mode, dev_t rdev)
{
	make_entry(req, parent, name, mode, rdev, NULL);
}

void lfs_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name,
	       mode_t mode)
{
	make_entry(req, parent, name, S_IFDIR | mode, 0, NULL);
}

void lfs_symlink(fuse_req_t req, const char *link, fuse_ino_t parent,
		 const char *name)
{
	make_entry(req, parent, name, S_IFLNK, 0, link);
}

void lfs_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
	      const char *newname)
{
	struct lfs *fs = req_fs(req);
	struct caller c = caller_of(req);
	struct admission adm = admission_of(req);
	struct lfs_entry e;
	int rc = core_link(fs, inode_of(fs, ino), inode_of(fs, newparent),
			   newname, &c, &adm, &e);

	reply_entry(req, rc, &e);
}

/* ---- removing and renaming ---------------------------------------------- */

void lfs_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct lfs *fs = req_fs(req);
	struct caller c = caller_of(req);
	struct admission adm = admission_of(req);

	reply_err(req, core_unlink(fs, inode_of(fs, parent), name, &c, &adm));
}

void lfs_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct lfs *fs = req_fs(req);
	struct caller c = caller_of(req);
	struct admission adm = admission_of(req);

	reply_err(req, core_rmdir(fs, inode_of(fs, parent), name, &c, &adm));
}

void lfs_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
		fuse_ino_t newparent, const char *newname, unsigned int flags)
{
	struct lfs *fs = req_fs(req);
	struct caller c = caller_of(req);
	struct admission adm = admission_of(req);

	reply_err(req, core_rename(fs, inode_of(fs, parent), name,
				   inode_of(fs, newparent), newname, flags,
				   &c, &adm));
}
