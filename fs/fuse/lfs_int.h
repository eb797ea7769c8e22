/* SPDX-License-Identifier: MIT */
/*
 * Internals of the passthrough's FUSE front end, shared by its units and
 * nothing else.  Each lfs_<op> translates a request: its caller (struct
 * caller), its admission if the gate let it in as a mutation, its inodes
 * and open files, into one call of the backing core (core/core.h, FUSE-
 * free), and the result into exactly one reply.
 *   lfs.c     the object, INIT, the ops table, what a loss changes
 *   entry.c   names: lookup, forget, create/link/remove/rename entries
 *   attr.c    attributes, readlink
 *   file.c    open files: create, open, read, write, sync, ranges
 *   dir.c     directories and statfs
 *   xattr.c   extended attributes
 *   iomode.c  how the kernel serves each open: cached, direct, passthrough
 * The daemon and the gate see only fs.h.
 */
#ifndef LEASEFS_LFS_INT_H
#define LEASEFS_LFS_INT_H

#include <fcntl.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "core.h"
#include "fs.h"
#include "ops.h"

/* ---- small helpers ------------------------------------------------------ */

/* An open file's fh: its fd, and the uid whose budget it counts against. */
static inline uint64_t fh_make(int fd, uid_t uid)
{
	return (uint64_t)uid << 32 | (uint32_t)fd;
}

static inline int fh_fd(const struct fuse_file_info *fi)
{
	return (int)(uint32_t)fi->fh;
}

static inline uid_t fh_uid(const struct fuse_file_info *fi)
{
	return (uid_t)(fi->fh >> 32);
}

static inline struct lfs_open fh_open(const struct fuse_file_info *fi)
{
	return (struct lfs_open){ .fd = fh_fd(fi), .uid = fh_uid(fi) };
}

/* The passthrough of the session req came in on. */
static inline struct lfs *req_fs(fuse_req_t req)
{
	return ((struct lfs_session *)fuse_req_userdata(req))->fs;
}

/* Whether req carries the kernel's kill-suid/sgid flag. */
static inline bool kill_flagged(fuse_req_t req)
{
	const struct lfs_session *s = fuse_req_userdata(req);

	return s->kill_suidgid && s->kill_suidgid();
}

/* Who sent req, as the core acts for it. */
static inline struct caller caller_of(fuse_req_t req)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);

	return (struct caller){ .uid = ctx->uid, .gid = ctx->gid,
				.pid = ctx->pid, .umask = ctx->umask };
}

/* The admission of a request the gate let in as a mutation: the core
 * re-checks it right before its backing call. */
static inline struct admission admission_of(fuse_req_t req)
{
	const struct lfs_session *s = fuse_req_userdata(req);

	return (struct admission){ .recheck = s->recheck, .gate = s->gate };
}

static inline struct lfs_inode *inode_of(struct lfs *fs, fuse_ino_t ino)
{
	if (ino == FUSE_ROOT_ID)
		return &fs->root;
	return (struct lfs_inode *)(uintptr_t)ino;
}

static inline fuse_ino_t node_id(struct lfs *fs, struct lfs_inode *inode)
{
	if (inode == &fs->root)
		return FUSE_ROOT_ID;
	return (fuse_ino_t)(uintptr_t)inode;
}

/* ---- the operations ----------------------------------------------------- */

/* lfs_<op> for every op of the table (ops.h); lfs.c builds lfs_ops() of
 * exactly these. */
#define LFS_DECLARE_OP(op, kind, doc, params, args) void lfs_##op params;
LFS_OPS(LFS_DECLARE_OP)
#undef LFS_DECLARE_OP

/* The one mapping of an internal error (0 or -errno) to a FUSE reply. */
static inline void reply_err(fuse_req_t req, int rc)
{
	fuse_reply_err(req, rc < 0 ? -rc : rc);
}

/* ---- entry.c ------------------------------------------------------------ */

/* The reply to a name that resolved to e. */
void entry_fill(struct lfs *fs, const struct lfs_entry *e,
		struct fuse_entry_param *out);

/* ---- attr.c ------------------------------------------------------------- */

/* Drop the kernel's cached attributes of ino: a write, truncate or chown
 * changed its mode (settle_sxid()). */
void mode_changed(fuse_req_t req, fuse_ino_t ino);

/* ---- iomode.c ---------------------------------------------------------- */

/* How the kernel is to serve one open (iomode_opened()). */
struct io_mode {
	int backing_id;         /* > 0: FUSE passthrough of this backing */
	bool direct_io;         /* reads and writes through the daemon, not
				 * the page cache (with a backing: all but
				 * mmaps) */
	bool drop_cache;        /* the page cache from before is not kept */
};

/* fs->io_idle, on the monotonic clock. */
void iomode_init(struct lfs *fs);
/* The clone of the root's mount for backing files (cfg.passthrough and a
 * privileged daemon; else passthrough stays off).  0 or -errno. */
int backing_setup(struct lfs *fs);
void backing_teardown(struct lfs *fs);
/* After loss: backing files read without atime updates. */
void backing_noatime(struct lfs *fs);
/* Before the backing open of an open with open(2) `flags`: 0, or
 * -ETXTBSY for a read-write open the inode's passthrough period refuses,
 * decided before anything (O_TRUNC) changes the backing file.  From then
 * on the inode starts no passthrough period (inode->read_write). */
int iomode_may_open(struct lfs *fs, struct lfs_inode *inode, int flags);
/* An open of inode by req's caller, open at fd with open(2) `flags`,
 * about to be answered: decide and count it (until iomode_released()).
 * `may_pass` false: never passthrough (creates).  0, or -ETXTBSY: the
 * open may not be served while the inode's passthrough period lasts
 * (nothing counted; the caller replies the error). */
int iomode_opened(fuse_req_t req, struct lfs_inode *inode, int fd,
		  int flags, bool may_pass, struct io_mode *m);
/* The reply flags of an open or create decided so (not passthrough). */
void iomode_apply(const struct io_mode *m, struct fuse_file_info *fi);
/* fuse_reply_open() of an open decided so. */
int iomode_reply_open(fuse_req_t req, struct fuse_file_info *fi,
		      const struct io_mode *m);
/* An open counted by iomode_opened() was released (or never answered). */
void iomode_released(struct lfs *fs, const struct lfs_session *s,
		     struct lfs_inode *inode);

#endif
