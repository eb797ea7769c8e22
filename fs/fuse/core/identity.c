/* SPDX-License-Identifier: MIT */
/*
 * Acting as the caller.  When the daemon runs as root, every backing
 * operation made on behalf of a caller runs on its thread with the
 * caller's fsuid, fsgid and supplementary groups, so the backing
 * filesystem checks it again with exactly the caller's rights and never
 * the daemon's: a grant or a deny made on the host (mode or ACL, user or
 * group entry) takes effect at once, whatever the kernel has cached.  A
 * caller with uid 0 keeps the daemon's capabilities (FUSE does not say
 * which it has, so the kernel's own check on the mount is the one that
 * counts) and its groups are not looked up.
 *
 * Scoped: caller_enter() switches what differs from the daemon's
 * identity, caller_leave() switches exactly that back, so no thread keeps
 * a caller's identity past the operation (each switch is a credential
 * update, 2-3 us on a VM: scripts/BENCH.md, "Scoped identity"; a uid 0
 * caller with the daemon's gid changes nothing).  Opening an inode by handle, registering a backing
 * file and the daemon's own chmods happen outside a scope, as the daemon.
 *
 * FUSE does not send a caller's supplementary groups: they are read from
 * /proc/PID/task/PID/status (about 18 us) and kept per thread for
 * GROUPS_TTL_MS per (pid, uid, gid).  So a process that changes its own
 * groups in place (setgroups(2), which needs CAP_SETGID: setpriv
 * --groups, newgrp keeps the pid but changes the gid) is seen with its
 * old groups for at most that long.  A caller whose groups cannot be read
 * (one in a pid namespace the daemon cannot see has pid 0) acts with
 * none.
 *
 * Modes: each thread has its own umask (unshare(CLONE_FS)), set to the
 * caller's around a creating call, so the backing filesystem applies
 * either the umask or the parent's default ACL, exactly as natively.
 */
#include <errno.h>
#include <grp.h>
#include <linux/capability.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core.h"

#define GROUPS_TTL_MS 1000
#define GROUPS_SLOTS 8

/* One caller's supplementary groups as read at `at`. */
struct groups_entry {
	pid_t pid;           /* 0: free slot */
	uid_t uid;
	gid_t gid;
	int64_t at;          /* CLOCK_MONOTONIC_COARSE ns */
	int n;
	gid_t *list;
};

/* A thread's cache of callers' groups; used by that thread alone, freed
 * when it exits. */
struct thread_groups {
	struct groups_entry slot[GROUPS_SLOTS];
	unsigned next;       /* the slot a new caller takes */
};

static pthread_key_t groups_key;
static pthread_once_t groups_once = PTHREAD_ONCE_INIT;
static bool groups_key_ok;

static void thread_groups_free(void *p)
{
	struct thread_groups *tg = p;

	for (int i = 0; i < GROUPS_SLOTS; i++)
		free(tg->slot[i].list);
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
	if (tg && pthread_setspecific(groups_key, tg) != 0) {
		free(tg);
		tg = NULL;
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
 * This thread's own fs context (umask), so that the caller's umask can be
 * set per call.  False if the kernel refused: the caller's umask is then
 * applied to the mode by hand (a default ACL then sees a masked mode).
 */
static bool thread_fs_private(void)
{
	static __thread int state; /* 0 unknown, 1 private, -1 refused */

	if (state == 0)
		state = unshare(CLONE_FS) == 0 ? 1 : -1;
	return state > 0;
}

/* The gids of a "Groups:" line's rest, however many: their count. */
static int parse_groups(const char *s, gid_t **out)
{
	size_t n = 0, cap = 0;
	gid_t *g = NULL;
	char *end;

	for (;;) {
		unsigned long v = strtoul(s, &end, 10);

		if (end == s)
			break;
		if (n == cap) {
			gid_t *more = realloc(g, sizeof(*g) * (cap = cap ? cap * 2 : 32));

			if (!more) {
				free(g);
				return -ENOMEM;
			}
			g = more;
		}
		g[n++] = (gid_t)v;
		s = end;
	}
	*out = g;
	return (int)n;
}

/* The supplementary groups of the thread `pid` (NULL, 0 if none). */
static int read_groups(pid_t pid, gid_t **out)
{
	char path[64], *line = NULL;
	size_t cap = 0;
	int n = -ENOENT;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/status", (int)pid,
		 (int)pid);
	f = fopen(path, "re");
	if (!f)
		return neg_errno();
	*out = NULL;
	while (n == -ENOENT && getline(&line, &cap, f) > 0)
		if (strncmp(line, "Groups:", 7) == 0)
			n = parse_groups(line + 7, out);
	free(line);
	fclose(f);
	return n;
}

static struct groups_entry *find_entry(struct thread_groups *tg,
				       const struct caller *c)
{
	for (int i = 0; i < GROUPS_SLOTS; i++) {
		struct groups_entry *e = &tg->slot[i];

		if (e->pid == c->pid && e->uid == c->uid && e->gid == c->gid)
			return e;
	}
	return NULL;
}

/* c's groups from this thread's cache, read again when missing or older
 * than GROUPS_TTL_MS; NULL when they cannot be read. */
static const struct groups_entry *cached_groups(struct thread_groups *tg,
						const struct caller *c)
{
	struct groups_entry *e = find_entry(tg, c);
	int64_t now = coarse_now_ns();
	gid_t *list = NULL;
	int n;

	if (e && now - e->at < GROUPS_TTL_MS * 1000000LL)
		return e;
	if (c->pid <= 0 || (n = read_groups(c->pid, &list)) < 0)
		return NULL;
	if (!e)
		e = &tg->slot[tg->next++ % GROUPS_SLOTS];
	free(e->list);
	*e = (struct groups_entry){ .pid = c->pid, .uid = c->uid,
				    .gid = c->gid, .at = now, .n = n,
				    .list = list };
	return e;
}

bool caller_in_group(const struct caller *c, gid_t gid)
{
	struct thread_groups *tg;
	const struct groups_entry *e;

	if (c->gid == gid)
		return true;
	tg = thread_groups();
	e = tg ? cached_groups(tg, c) : NULL;
	for (int i = 0; e && i < e->n; i++)
		if (e->list[i] == gid)
			return true;
	return false;
}

bool caller_lacks_fsetid(const struct caller *c)
{
	char path[64], line[256];
	unsigned long long eff = 0;
	bool found = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)c->pid);
	f = fopen(path, "re");
	if (!f)
		return true;
	while (!found && fgets(line, sizeof(line), f))
		found = sscanf(line, "CapEff: %llx", &eff) == 1;
	fclose(f);
	return !found || !(eff & (1ULL << CAP_FSETID));
}

/*
 * Per-thread setgroups (the raw syscall; glibc's wrapper would change
 * every thread).  A thread that cannot change its groups must not serve
 * anyone again (it would act with the wrong ones): a broken invariant,
 * not an error.
 */
static void thread_setgroups(size_t n, const gid_t *groups)
{
	if (syscall(SYS_setgroups, n, groups) < 0)
		abort();
}

/* The umask part: the caller's where the thread has its own, else by
 * hand on *mode. */
static void enter_umask(const struct caller *c, mode_t *mode,
			struct acting *a)
{
	if (!mode)
		return;
	if (thread_fs_private()) {
		a->old_umask = umask(c->umask);
		a->umask = true;
	} else {
		*mode &= ~c->umask;
	}
}

/* The gid first: while fsuid is not 0 the filesystem capabilities are
 * gone, CAP_SETGID is not.  Groups that cannot be read are none. */
void caller_enter(struct lfs *fs, const struct caller *c, mode_t *mode,
		  struct acting *a)
{
	const struct groups_entry *e = NULL;
	struct thread_groups *tg;

	*a = (struct acting){ 0 };
	enter_umask(c, mode, a);
	if (!fs->switch_creds)
		return;
	if (c->uid != 0 && (tg = thread_groups()) != NULL)
		e = cached_groups(tg, c);
	if (e && e->n > 0) {
		thread_setgroups((size_t)e->n, e->list);
		a->groups = true;
	}
	if (c->gid != fs->own_gid) {
		setfsgid(c->gid);
		a->gid = true;
	}
	if (c->uid != fs->own_uid) {
		setfsuid(c->uid);
		a->uid = true;
	}
}

void caller_leave(struct lfs *fs, const struct acting *a)
{
	int saved = errno;

	if (a->uid)
		setfsuid(fs->own_uid);
	if (a->gid)
		setfsgid(fs->own_gid);
	if (a->groups)
		thread_setgroups(0, NULL);
	if (a->umask)
		umask(a->old_umask);
	errno = saved;
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
