/* SPDX-License-Identifier: MIT */
/*
 * The passthrough's front end: extended attributes (the backing calls:
 * core/xattr.c).
 * (Conventions: lfs.c; shared internals: lfs_int.h.)
 */
#include <errno.h>
#include <stdlib.h>

#include "lfs_int.h"

void lfs_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
		  const char *value, size_t size, int flags)
{
	struct lfs *fs = req_fs(req);
	struct caller c = caller_of(req);
	struct admission adm = admission_of(req);

	reply_err(req, core_setxattr(fs, inode_of(fs, ino), name, value, size,
				     flags, &c, &adm));
}

void lfs_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	struct lfs *fs = req_fs(req);
	struct caller c = caller_of(req);
	struct admission adm = admission_of(req);

	reply_err(req, core_removexattr(fs, inode_of(fs, ino), name, &c, &adm));
}

/* Size query (size == 0) or value; shared by getxattr and listxattr. */
static void reply_xattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			size_t size)
{
	struct lfs *fs = req_fs(req);
	struct caller c = caller_of(req);
	char *buf = NULL;
	ssize_t n;

	if (size && !(buf = malloc(size))) {
		reply_err(req, -ENOMEM);
		return;
	}
	n = core_getxattr(fs, inode_of(fs, ino), name, buf, size, &c);
	if (n < 0)
		reply_err(req, (int)n);
	else if (size)
		fuse_reply_buf(req, buf, (size_t)n);
	else
		fuse_reply_xattr(req, (size_t)n);
	free(buf);
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
