/* SPDX-License-Identifier: MIT */
/*
 * Acting as the caller.  When the daemon runs as root, every backing
 * operation made on behalf of a caller runs with the caller's fsuid/fsgid
 * on the worker thread, so the backing filesystem checks it again with the
 * caller's rights and never the daemon's.  A worker keeps the identity of
 * the caller it served last and switches only when the next caller differs
 * (a switch is two credential syscalls); opening an inode by handle acts
 * as the daemon (inode_fd()).  The daemon holds no supplementary groups;
 * a caller's are installed, per thread, only when a call failed with
 * EACCES or EPERM without them, and are always dropped again.  A caller
 * with uid 0 keeps the daemon's capabilities: FUSE does not say which it
 * has, so the kernel's own check on the mount is the one that counts.
 *
 * Modes: each worker thread has its own umask (unshare(CLONE_FS)), set to
 * the caller's around a creating call, so the backing filesystem applies
 * either the umask or the parent's default ACL, exactly as natively.
 */
#include <errno.h>
#include <grp.h>
#include <linux/capability.h>
#include <stdio.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/fsuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "lfs_int.h"

/* The fsuid/fsgid this worker thread acts as; unknown (-1) until set,
 * since a thread libfuse starts inherits its creator's. */
static __thread uid_t thread_uid = (uid_t)-1;
static __thread gid_t thread_gid = (gid_t)-1;

/*
 * This worker thread's own fs context (umask), so that the caller's umask
 * can be set per call.  False if the kernel refused: the caller's umask is
 * then applied to the mode by hand (a default ACL then sees a masked mode).
 */
static bool thread_fs_private(void)
{
	static __thread int state; /* 0 unknown, 1 private, -1 refused */

	if (state == 0)
		state = unshare(CLONE_FS) == 0 ? 1 : -1;
	return state > 0;
}

/* The caller's supplementary groups, however many (NULL, 0 if none). */
static int caller_groups(fuse_req_t req, gid_t **out)
{
	int size = 32, n;

	for (;;) {
		gid_t *g = malloc(sizeof(*g) * (size_t)size);

		if (!g)
			return -ENOMEM;
		n = fuse_req_getgroups(req, size, g);
		if (n <= 0) {
			free(g);
			*out = NULL;
			return n < 0 ? n : 0;
		}
		if (n <= size) {
			*out = g;
			return n;
		}
		free(g);
		size = n;
	}
}

bool caller_in_group(fuse_req_t req, gid_t gid)
{
	gid_t *g = NULL;
	bool in = fuse_req_ctx(req)->gid == gid;
	int n = in ? 0 : caller_groups(req, &g);

	for (int i = 0; i < n && !in; i++)
		in = g[i] == gid;
	free(g);
	return in;
}

bool caller_lacks_fsetid(fuse_req_t req)
{
	char path[64], line[256];
	unsigned long long eff = 0;
	bool found = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)fuse_req_ctx(req)->pid);
	f = fopen(path, "re");
	if (!f)
		return true;
	while (!found && fgets(line, sizeof(line), f))
		found = sscanf(line, "CapEff: %llx", &eff) == 1;
	fclose(f);
	return !found || !(eff & (1ULL << CAP_FSETID));
}

/* Per-thread setgroups (the raw syscall; glibc's wrapper would change
 * every thread).  A worker that cannot drop a caller's groups again must
 * not serve another request: that is a broken invariant, not an error. */
static int thread_setgroups(size_t n, const gid_t *groups)
{
	return syscall(SYS_setgroups, n, groups) < 0 ? neg_errno() : 0;
}

static void thread_dropgroups(void)
{
	if (thread_setgroups(0, NULL) < 0)
		abort();
}

/* After fn failed with `rc` (EACCES or EPERM) under fsuid/fsgid alone:
 * once more with the caller's supplementary groups, if it has any. */
static int retry_with_groups(fuse_req_t req, int (*fn)(void *), void *arg,
			     int rc)
{
	gid_t *groups = NULL;
	int n = caller_groups(req, &groups), r;

	if (n <= 0)
		return rc;
	r = thread_setgroups((size_t)n, groups);
	free(groups);
	if (r < 0)
		return rc;
	r = fn(arg);
	thread_dropgroups();
	return r;
}

/* Make this thread act as uid/gid.  The gid first: while fsuid is not 0
 * the filesystem capabilities are gone, CAP_SETGID is not. */
void act_as(uid_t uid, gid_t gid)
{
	if (thread_gid != gid) {
		setfsgid(gid);
		thread_gid = gid;
	}
	if (thread_uid != uid) {
		setfsuid(uid);
		thread_uid = uid;
	}
}

/* Act as the caller of req (a privileged daemon only). */
void act_as_caller(fuse_req_t req)
{
	struct lfs *fs = req_fs(req);
	const struct fuse_ctx *ctx = fuse_req_ctx(req);

	if (fs->switch_creds)
		act_as(ctx->uid, ctx->gid);
}

/*
 * Runs fn(arg) as the caller (fsuid/fsgid), and with the caller's umask
 * when `mode` is non-NULL (the mode fn will use; masked by hand if the
 * thread cannot have its own umask).  An EACCES or EPERM without
 * supplementary groups is retried once with the caller's.
 */
int as_caller_masked(fuse_req_t req, int (*fn)(void *), void *arg,
			    mode_t *mode)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	int rc;

	if (mode) {
		if (thread_fs_private())
			umask(ctx->umask);
		else
			*mode &= ~ctx->umask;
	}
	act_as_caller(req);
	rc = fn(arg);
	if ((rc == -EACCES || rc == -EPERM) && req_fs(req)->switch_creds)
		rc = retry_with_groups(req, fn, arg, rc);
	return rc;
}

int as_caller(fuse_req_t req, int (*fn)(void *), void *arg)
{
	return as_caller_masked(req, fn, arg, NULL);
}

/* A privileged daemon acts as each caller, and holds no supplementary
 * groups of its own that a caller's request could borrow. */
int save_creds(struct lfs *fs)
{
	fs->own_uid = geteuid();
	fs->own_gid = getegid();
	fs->switch_creds = fs->own_uid == 0;
	if (fs->switch_creds && setgroups(0, NULL) < 0)
		return neg_errno();
	return 0;
}
