/* SPDX-License-Identifier: MIT */
/*
 * The passthrough's front end: attributes.  getattr, setattr, readlink
 * (the backing calls and the suid/sgid rules: core/attr.c).
 * (Conventions: lfs.c; shared internals: lfs_int.h.)
 */
#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <sys/stat.h>

#include "lfs_int.h"

/* The core's SET_* are FUSE's FUSE_SET_ATTR_*, passed through. */
_Static_assert(SET_MODE == FUSE_SET_ATTR_MODE && SET_UID == FUSE_SET_ATTR_UID &&
	       SET_GID == FUSE_SET_ATTR_GID && SET_SIZE == FUSE_SET_ATTR_SIZE &&
	       SET_ATIME == FUSE_SET_ATTR_ATIME &&
	       SET_MTIME == FUSE_SET_ATTR_MTIME &&
	       SET_ATIME_NOW == FUSE_SET_ATTR_ATIME_NOW &&
	       SET_MTIME_NOW == FUSE_SET_ATTR_MTIME_NOW,
	       "core.h's SET_* and libfuse's FUSE_SET_ATTR_* agree");

void mode_changed(fuse_req_t req, fuse_ino_t ino)
{
	const struct lfs_session *s = fuse_req_userdata(req);

	if (s->se)
		fuse_lowlevel_notify_inval_inode(s->se, ino, -1, 0);
}

static void reply_attr(fuse_req_t req, int rc, const struct stat *st)
{
	if (rc < 0)
		reply_err(req, rc);
	else
		fuse_reply_attr(req, st, atomic_load(&req_fs(req)->attr_timeout));
}

void lfs_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct lfs *fs = req_fs(req);
	struct stat st;
	int rc = core_getattr(fs, inode_of(fs, ino), fi ? fh_fd(fi) : -1, &st);

	reply_attr(req, rc, &st);
}

void lfs_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
		 int valid, struct fuse_file_info *fi)
{
	struct lfs *fs = req_fs(req);
	struct caller c = caller_of(req);
	struct admission adm = admission_of(req);
	struct stat st;
	int rc = core_setattr(fs, inode_of(fs, ino), fi ? fh_fd(fi) : -1, attr,
			      valid, kill_flagged(req), &c, &adm, &st);

	reply_attr(req, rc, &st);
}

void lfs_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct lfs *fs = req_fs(req);
	char buf[PATH_MAX + 1];
	ssize_t n = core_readlink(fs, inode_of(fs, ino), buf, sizeof(buf));

	if (n < 0)
		reply_err(req, (int)n);
	else
		fuse_reply_readlink(req, buf);
}
