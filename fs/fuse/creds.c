/* SPDX-License-Identifier: MIT */
/*
 * Acting as the caller.  When the daemon runs as root, every backing
 * operation made on behalf of a caller runs on the worker thread with the
 * caller's fsuid, fsgid and supplementary groups, so the backing
 * filesystem checks it again with exactly the caller's rights and never
 * the daemon's: a grant or a deny made on the host (mode or ACL, user or
 * group entry) takes effect at once, whatever the kernel has cached.  A
 * caller with uid 0 keeps the daemon's capabilities (FUSE does not say
 * which it has, so the kernel's own check on the mount is the one that
 * counts) and its groups are not looked up.  Opening an inode by handle
 * acts as the daemon (inode_fd()).
 *
 * FUSE does not send a caller's supplementary groups: they are read from
 * /proc/PID/task/PID/status (about 18 us) and kept per worker thread for
 * GROUPS_TTL_MS per (pid, uid, gid).  So a process that changes its own
 * groups in place (setgroups(2), which needs CAP_SETGID: setpriv
 * --groups, newgrp keeps the pid but changes the gid) is seen with its
 * old groups for at most that long.  A caller whose groups cannot be read
 * (one in a pid namespace the daemon cannot see has pid 0) acts with
 * none.  A worker switches identity only when the next caller differs
 * (setfsgid, setfsuid, and setgroups when the groups differ).
 *
 * Modes: each worker thread has its own umask (unshare(CLONE_FS)), set to
 * the caller's around a creating call, so the backing filesystem applies
 * either the umask or the parent's default ACL, exactly as natively.
 */
#include <errno.h>
#include <grp.h>
#include <linux/capability.h>
#include <pthread.h>
#include <stdio.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "lfs_int.h"

#define GROUPS_TTL_MS 1000
#define GROUPS_SLOTS 8

/* The fsuid/fsgid this worker thread acts as; unknown (-1) until set,
 * since a thread libfuse starts inherits its creator's. */
static __thread uid_t thread_uid = (uid_t)-1;
static __thread gid_t thread_gid = (gid_t)-1;

/* One caller's supplementary groups as read at `at`. */
struct groups_entry {
	pid_t pid;           /* 0: free slot */
	uid_t uid;
	gid_t gid;
	int64_t at;          /* CLOCK_MONOTONIC_COARSE ns */
	int n;
	gid_t *list;
};

/* A worker thread's cache of callers' groups and the set it has
 * installed; used by that thread alone, freed when it exits. */
struct thread_groups {
	struct groups_entry slot[GROUPS_SLOTS];
	unsigned next;       /* the slot a new caller takes */
	int ninst;           /* groups installed; -1: unknown */
	gid_t *inst;
};

static pthread_key_t groups_key;
static pthread_once_t groups_once = PTHREAD_ONCE_INIT;
static bool groups_key_ok;

static void thread_groups_free(void *p)
{
	struct thread_groups *tg = p;

	for (int i = 0; i < GROUPS_SLOTS; i++)
		free(tg->slot[i].list);
	free(tg->inst);
	free(tg);
}

static void groups_key_make(void)
{
	groups_key_ok = pthread_key_create(&groups_key, thread_groups_free) == 0;
}

/* This thread's cache; NULL when it cannot have one (out of memory). */
static struct thread_groups *thread_groups(void)
{
	struct thread_groups *tg;

	pthread_once(&groups_once, groups_key_make);
	if (!groups_key_ok)
		return NULL;
	tg = pthread_getspecific(groups_key);
	if (tg)
		return tg;
	tg = calloc(1, sizeof(*tg));
	if (!tg)
		return NULL;
	tg->ninst = -1;
	if (pthread_setspecific(groups_key, tg) != 0) {
		free(tg);
		return NULL;
	}
	return tg;
}

static int64_t coarse_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

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

static struct groups_entry *find_entry(struct thread_groups *tg,
				       const struct fuse_ctx *ctx)
{
	for (int i = 0; i < GROUPS_SLOTS; i++) {
		struct groups_entry *e = &tg->slot[i];

		if (e->pid == ctx->pid && e->uid == ctx->uid &&
		    e->gid == ctx->gid)
			return e;
	}
	return NULL;
}

/* req's caller's groups from this thread's cache, read again when missing
 * or older than GROUPS_TTL_MS; NULL when they cannot be read. */
static const struct groups_entry *cached_groups(struct thread_groups *tg,
						fuse_req_t req)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct groups_entry *e = find_entry(tg, ctx);
	int64_t now = coarse_now_ns();
	gid_t *list = NULL;
	int n;

	if (e && now - e->at < GROUPS_TTL_MS * 1000000LL)
		return e;
	if (ctx->pid <= 0 || (n = caller_groups(req, &list)) < 0)
		return NULL;
	if (!e)
		e = &tg->slot[tg->next++ % GROUPS_SLOTS];
	free(e->list);
	*e = (struct groups_entry){ .pid = ctx->pid, .uid = ctx->uid,
				    .gid = ctx->gid, .at = now, .n = n,
				    .list = list };
	return e;
}

bool caller_in_group(fuse_req_t req, gid_t gid)
{
	struct thread_groups *tg;
	const struct groups_entry *e;

	if (fuse_req_ctx(req)->gid == gid)
		return true;
	tg = thread_groups();
	e = tg ? cached_groups(tg, req) : NULL;
	for (int i = 0; e && i < e->n; i++)
		if (e->list[i] == gid)
			return true;
	return false;
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
 * every thread). */
static int thread_setgroups(size_t n, const gid_t *groups)
{
	return syscall(SYS_setgroups, n, groups) < 0 ? neg_errno() : 0;
}

/*
 * Install `n` groups on this thread unless they are installed already.  A
 * worker that cannot change its groups must not serve anyone again (it
 * would act with the previous caller's): a broken invariant, not an error.
 */
static void install_groups(struct thread_groups *tg, int n, const gid_t *g)
{
	size_t sz = sizeof(*g) * (size_t)n;
	gid_t *copy = NULL;

	if (tg && tg->ninst == n && (n == 0 || memcmp(tg->inst, g, sz) == 0))
		return;
	if (thread_setgroups((size_t)n, g) < 0)
		abort();
	if (!tg)
		return;
	if (n > 0 && (copy = malloc(sz)) != NULL)
		memcpy(copy, g, sz);
	free(tg->inst);
	tg->inst = copy;
	tg->ninst = n == 0 || copy ? n : -1; /* unknown: set again next time */
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

/* Act as the caller of req, its groups included (a privileged daemon
 * only).  Groups that cannot be read are none. */
void act_as_caller(fuse_req_t req)
{
	struct lfs *fs = req_fs(req);
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct thread_groups *tg;
	const struct groups_entry *e = NULL;

	if (!fs->switch_creds)
		return;
	tg = thread_groups();
	if (tg && ctx->uid != 0)
		e = cached_groups(tg, req);
	install_groups(tg, e ? e->n : 0, e ? e->list : NULL);
	act_as(ctx->uid, ctx->gid);
}

/*
 * Runs fn(arg) as the caller (fsuid, fsgid, groups), and with the
 * caller's umask when `mode` is non-NULL (the mode fn will use; masked by
 * hand if the thread cannot have its own umask).  A mutation whose
 * admission no longer holds is refused right before fn (may_mutate()).
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
	rc = may_mutate(req); /* the last check before the backing call */
	return rc < 0 ? rc : fn(arg);
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
