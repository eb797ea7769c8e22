/* SPDX-License-Identifier: MIT */
/*
 * Host locks (contract in hostlock.h; the threat model: README.md).
 *
 * One lock file per identity and mode, roots/<hex sha256 of id>.<mode>:
 *   .0 (X)   an exclusive mount of the directory
 *   .1 (S)   shared and session mounts of it
 *   .2 (IX)  exclusive mounts below it
 *   .3 (IS)  shared mounts below it, directories the daemon writes
 * A holder read-locks the files of its modes whole (announce), then asks
 * F_OFD_GETLK whether another open file description holds a lock on a
 * file of a mode its own conflicts with.  The kernel orders the lock
 * operations on a file, so of two conflicting holders the one that
 * announced second sees the first.  Every lock is a read lock on an fd
 * opened read-only: the fd is all a holder gets (the arbiter passes it to
 * a user's daemon), and it can do nothing with it but hold what it was
 * given (no other mode's lock, no write to root's file).  A write lock on
 * a lock file is a sweep's (rundir.h), which takes it only from a file
 * nobody holds and removes the name while it has it.
 *
 * Each holder also has a record of what it holds under holders/
 * (read-locked while it lives), so that a refused contender can be told
 * who is in the way: root is told who holds a directory, a user only its
 * own mounts, else that a mount on this host does.
 *
 * Only real root opens these files (rundir.h): root's daemons directly,
 * everyone else's through the arbiter (hostd.c), so that a user's mount and
 * root's exclude each other whatever their stores, and nothing a user
 * creates decides whether a mount succeeds.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hostlock_int.h"

#define ROOTS_DIR RUNDIR_ROOTS
#define HOLDERS_DIR RUNDIR_HOLDERS
/* "maj:min:" and a path inside the filesystem. */
#define ID_MAX (PATH_MAX + 32)

enum { B_X, B_S, B_IX, B_IS, NBYTES };

/* Which bytes a lock on byte b conflicts with (bit per byte). */
static const unsigned conflicts[NBYTES] = {
	[B_X] = 1u << B_X | 1u << B_S | 1u << B_IX | 1u << B_IS,
	[B_S] = 1u << B_X | 1u << B_IX,
	[B_IX] = 1u << B_X | 1u << B_S,
	[B_IS] = 1u << B_X,
};


/* ---- identities ------------------------------------------------------ */

/* A directory whose identity is wanted, the mount it resolved on, and
 * that mount's line once found. */
struct want {
	char path[PATH_MAX];
	char dev[32];
	char root[PATH_MAX];      /* the mount's root inside its filesystem */
	size_t point_len;         /* of the mount point; 0 for "/" */
	int mnt_id;               /* the mount it was resolved on */
	bool found;
};

/* One mount: the directories resolved on it take its line, if its mount
 * point contains them (else the table does not show what was resolved). */
static void mount_seen(struct want *w, size_t n, int id, const char *dev,
		       const char *root, const char *point)
{
	size_t l = strlen(point);

	for (size_t i = 0; i < n; i++) {
		if (w[i].mnt_id != id || !ws_path_within(w[i].path, point))
			continue;
		snprintf(w[i].dev, sizeof(w[i].dev), "%s", dev);
		snprintf(w[i].root, sizeof(w[i].root), "%s", root);
		w[i].point_len = strcmp(point, "/") == 0 ? 0 : l;
		w[i].found = true;
	}
}

/* One pass over `mountinfo` (a /proc/PID/mountinfo) for all of w (no copy
 * of it kept: with a thousand mounts it is large). */
static int mounts_scan(const char *mountinfo, struct want *w, size_t n)
{
	FILE *f = fopen(mountinfo, "re");
	char *line = NULL, dev[32], *root = malloc(PATH_MAX), *point = malloc(PATH_MAX);
	size_t cap = 0;
	int r = f && root && point ? 0 : -ENOMEM, id;

	if (!f)
		r = -errno;
	while (r == 0 && getline(&line, &cap, f) > 0) {
		if (sscanf(line, "%d %*d %31s %4095s %4095s", &id, dev, root, point) != 4)
			continue;
		ws_mountinfo_unescape(root);
		ws_mountinfo_unescape(point);
		mount_seen(w, n, id, dev, root, point);
	}
	free(line);
	free(root);
	free(point);
	if (f)
		fclose(f);
	return r;
}

int hostlock_resolve(int rootfd, const char *path, int *ids)
{
	char at[PATH_MAX];
	int n = 0;

	snprintf(at, sizeof(at), "%s", path);
	do {
		if (++n > HOSTLOCK_MAX_DEPTH)
			return -ENAMETOOLONG;
	} while (ws_path_parent(at));
	for (int i = n - 1; i >= 0; i--) {
		struct statx stx;
		int fd, r;

		snprintf(at, sizeof(at), "%s", path);
		for (int k = 0; k < i; k++)
			ws_path_parent(at);
		fd = lease_open_beneath(rootfd, at[1] ? at + 1 : ".",
					O_PATH | O_DIRECTORY, 0);
		if (fd == -ENOENT && i < n - 1) {
			ids[i] = ids[i + 1];
			continue;
		}
		if (fd < 0)
			return fd;
		r = statx(fd, "", AT_EMPTY_PATH, STATX_MNT_ID, &stx);
		close(fd);
		if (r < 0)
			return -errno;
		if (!(stx.stx_mask & STATX_MNT_ID))
			return -ENOSYS;
		ids[i] = (int)stx.stx_mnt_id;
	}
	return n;
}

/* The identity of w: the device, and the path inside its filesystem. */
static int identity(const struct want *w, char *out)
{
	const char *rest = w->path + w->point_len;
	bool root_slash = strcmp(w->root, "/") == 0;

	if (!w->found)
		return -ENOENT;
	if (snprintf(out, ID_MAX, "%s:%s%s", w->dev,
		     root_slash && *rest ? "" : w->root, rest) >= ID_MAX)
		return -ENAMETOOLONG;
	return 0;
}

/* The identity of the directory above `id` inside its filesystem, in
 * place; false at the filesystem's root. */
static bool id_parent(char *id)
{
	return ws_path_parent(strchr(strchr(id, ':') + 1, ':') + 1);
}

/* ---- the set of locks --------------------------------------------------- */

static bool has_lock(const struct hostlock *h, const char *id, int byte)
{
	for (size_t i = 0; i < h->n; i++)
		if (h->locks[i].byte == byte && strcmp(h->locks[i].id, id) == 0)
			return true;
	return false;
}

static int add_lock(struct hostlock *h, const char *id, int byte, bool target)
{
	if (has_lock(h, id, byte))
		return 0;
	if (h->n == h->cap) {
		size_t cap = h->cap ? h->cap * 2 : 16;
		struct held *v = realloc(h->locks, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		h->locks = v;
		h->cap = cap;
	}
	h->locks[h->n] = (struct held){ .fd = -1, .byte = byte, .target = target,
					.id = strdup(id) };
	if (!h->locks[h->n].id)
		return -ENOMEM;
	h->n++;
	return 0;
}

/* `id` and every directory above it inside its filesystem. */
static int add_with_parents(struct hostlock *h, const char *id, int byte)
{
	char up[ID_MAX];
	int r = 0;

	snprintf(up, sizeof(up), "%s", id);
	while (r == 0 && id_parent(up))
		r = add_lock(h, up, byte, false);
	return r;
}

static int target_byte(enum hostlock_mode m)
{
	return m == HOSTLOCK_X ? B_X : m == HOSTLOCK_S ? B_S : B_IS;
}

/*
 * What `spec` locks: its directory in its own mode, and with an intent
 * every directory above it along its canonical path and inside each of
 * those directories' filesystems.  Each directory is named by the mount
 * `who` resolved it on (its line in who's mountinfo), never by the mount
 * table's text: a mount over a parent hides what the table's longest
 * matching mount point would name.
 */
static int plan(struct hostlock *h, const struct hostlock_spec *spec,
		const struct hostlock_who *who)
{
	int intent = spec->mode == HOSTLOCK_X ? B_IX : B_IS;
	char path[PATH_MAX], id[ID_MAX];
	struct want *w;
	size_t n = 1;
	int r;

	snprintf(path, sizeof(path), "%s", spec->path);
	while (ws_path_parent(path))
		n++;
	w = calloc(n, sizeof(*w));
	if (!w)
		return -ENOMEM;
	if (who->n_mnt_ids != n) {
		free(w);
		return -EINVAL;
	}
	snprintf(path, sizeof(path), "%s", spec->path);
	for (size_t i = 0; i < n; i++) {
		snprintf(w[i].path, sizeof(w[i].path), "%s", path);
		w[i].mnt_id = who->mnt_ids[i];
		ws_path_parent(path);
	}
	r = mounts_scan(who->mountinfo, w, n);
	for (size_t i = 0; r == 0 && i < n; i++) {
		r = identity(&w[i], id);
		if (r == 0)
			r = add_lock(h, id, i == 0 ? target_byte(spec->mode) : intent,
				     i == 0);
		if (r == 0)
			r = add_with_parents(h, id, intent);
	}
	free(w);
	return r;
}

/* ---- lock files ------------------------------------------------------- */

/* The lock file of `id` in mode `byte`: ROOTS_DIR/<hex sha256 of id>.<byte>. */
static void lock_path(const char *id, int byte, char *out, size_t sz)
{
	uint8_t md[32];
	char hex[65];

	lease_sha256(id, strlen(id), md);
	for (int i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	snprintf(out, sz, ROOTS_DIR "/%s.%d", hex, byte);
}

/* Announce one lock: 0 or -errno. */
static int announce(struct held *l)
{
	char path[PATH_MAX];

	lock_path(l->id, l->byte, path, sizeof(path));
	l->fd = rundir_lock_file(path, true);
	return l->fd < 0 ? l->fd : 0;
}

/* Our own lock of `id` in mode `byte`, if we hold one. */
static const struct held *own_lock(const struct hostlock *h, const char *id, int byte)
{
	for (size_t i = 0; i < h->n; i++)
		if (h->locks[i].byte == byte && h->locks[i].fd >= 0 &&
		    strcmp(h->locks[i].id, id) == 0)
			return &h->locks[i];
	return NULL;
}

/* Whether another holder has `id` in mode `byte`: asked through our own
 * fd when we hold that mode too (the kernel then shows only the others),
 * else through a fresh one.  1, 0 or -errno. */
static int held_by_other(const struct hostlock *h, const char *id, int byte)
{
	const struct held *own = own_lock(h, id, byte);
	char path[PATH_MAX];
	int fd, r;

	if (own)
		return rundir_file_held(own->fd);
	lock_path(id, byte, path, sizeof(path));
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	r = rundir_file_held(fd);
	close(fd);
	return r;
}

/* The first mode another holder has that conflicts with l: its index, or
 * -1 if none (or -errno). */
static int conflict_on(const struct hostlock *h, const struct held *l)
{
	for (int b = 0; b < NBYTES; b++) {
		int r;

		if (!(conflicts[l->byte] & 1u << b))
			continue;
		r = held_by_other(h, l->id, b);
		if (r < 0)
			return r;
		if (r)
			return b;
	}
	return -1;
}

/* ---- holder records ------------------------------------------------------ */

/* Our record, "UID-PID-SEQ.rec": written, then read-locked (a sweep may
 * take a name not yet locked: then another is made). */
static int record_create(struct hostlock *h, const char *text,
			 const struct hostlock_who *who)
{
	static unsigned seq;
	int flags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW;
	int r = -EAGAIN;

	for (int tries = 0; r < 0 && (r == -EAGAIN || r == -EEXIST || r == -ENOENT) &&
	     tries < 1000; tries++) {
		size_t len = strlen(text);
		int fd;

		snprintf(h->rec_path, sizeof(h->rec_path), HOLDERS_DIR "/%u-%d-%u.rec",
			 (unsigned)who->uid, (int)who->pid,
			 __atomic_fetch_add(&seq, 1, __ATOMIC_RELAXED));
		fd = open(h->rec_path, flags, 0600);
		if (fd < 0) {
			r = -errno;
			continue;
		}
		r = write(fd, text, len) == (ssize_t)len ? 0 : -EIO;
		close(fd);
		if (r == 0)
			r = h->rec_fd = rundir_lock_file(h->rec_path, false);
		r = r < 0 ? r : 0;
	}
	if (r < 0)
		h->rec_path[0] = '\0';
	return r;
}

/* Our record: who we are, then one line per lock. */
static int record_write(struct hostlock *h, const struct hostlock_spec *spec,
			const struct hostlock_who *who)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	int r;

	if (!f)
		return -errno;
	fprintf(f, "%d\t%" PRIu64 "\t%s\t%s\t%s\n", (int)who->pid, spec->epoch,
		spec->what, spec->mountpoint ? spec->mountpoint : "-", spec->path);
	for (size_t i = 0; i < h->n; i++)
		fprintf(f, "%d %s\n", h->locks[i].byte, h->locks[i].id);
	r = fclose(f) == 0 ? record_create(h, text, who) : -ENOMEM;
	free(text);
	return r;
}

/* What a live record says of its holder. */
struct holder {
	uid_t uid;
	int pid;
	uint64_t epoch;
	char what[64];
	char mountpoint[PATH_MAX];
	char path[PATH_MAX];
};

/* Whether the record at `path` is live and holds mode `byte` of `id`. */
static bool record_matches(const char *path, const char *id, int byte,
			   struct holder *who)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	char *line = NULL;
	size_t cap = 0;
	bool hit = false;
	FILE *f;

	if (fd < 0)
		return false;
	if (rundir_file_held(fd) != 1 || !(f = fdopen(fd, "r"))) {
		close(fd);
		return false;
	}
	who->uid = (uid_t)strtoul(strrchr(path, '/') + 1, NULL, 10);
	if (getline(&line, &cap, f) > 0 &&
	    sscanf(line, "%d\t%" SCNu64 "\t%63[^\t]\t%4095[^\t]\t%4095[^\n]",
		   &who->pid, &who->epoch, who->what, who->mountpoint,
		   who->path) == 5) {
		while (!hit && getline(&line, &cap, f) > 0) {
			int b = -1, n = 0;

			line[strcspn(line, "\n")] = '\0';
			hit = sscanf(line, "%d %n", &b, &n) == 1 && b == byte &&
			      strcmp(line + n, id) == 0;
		}
	}
	free(line);
	fclose(f);
	return hit;
}

/* A live holder of mode `byte` of `id`, other than us. */
static bool find_holder(const struct hostlock *h, const char *id, int byte,
			struct holder *who)
{
	DIR *d = opendir(HOLDERS_DIR);
	struct dirent *de;
	bool found = false;

	while (d && !found && (de = readdir(d)) != NULL) {
		char p[PATH_MAX];

		if (de->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), HOLDERS_DIR "/%s", de->d_name);
		found = strcmp(p, h->rec_path) != 0 &&
			record_matches(p, id, byte, who);
	}
	if (d)
		closedir(d);
	return found;
}

/* ---- refusal ----------------------------------------------------------- */

/*
 * Say what keeps `spec` out: our lock `l` met another holder's mode `b`.
 * On our directory itself that is an exclusive holder of it (X), shared
 * or session mounts of it (S), or something below it (an intent); on a
 * directory above ours, what contains ours.  Who holds it is said to root
 * and to the holder's own uid; anyone else learns that a mount on this
 * host does.
 */
static int refuse(const struct hostlock *h, const struct hostlock_spec *spec,
		  const struct held *l, int b, uid_t viewer, struct lease_err *err)
{
	struct holder who = { 0 };
	char desc[2 * PATH_MAX + 160];
	bool known = find_holder(h, l->id, b, &who) &&
		     (viewer == 0 || viewer == who.uid);
	int r;

	if (!known)
		snprintf(desc, sizeof(desc), "another mount on this host");
	else if (who.epoch)
		snprintf(desc, sizeof(desc), "%s %s, held at epoch %" PRIu64
			 " (pid %d, mounted at %s)", who.what, who.path,
			 who.epoch, who.pid, who.mountpoint);
	else
		snprintf(desc, sizeof(desc), "%s %s (pid %d, mounted at %s)",
			 who.what, who.path, who.pid, who.mountpoint);
	if (l->target && b == B_X && known)
		r = lease_err_set(err, LEASE_E_HELD, 0, spec->path,
				  "%s busy: %s held at epoch %" PRIu64 " (pid %d, "
				  "mounted at %s%s%s)", spec->what, spec->path,
				  who.epoch, who.pid, who.mountpoint,
				  strcmp(who.path, spec->path) ? ", as " : "",
				  strcmp(who.path, spec->path) ? who.path : "");
	else if (l->target && b == B_X)
		r = lease_err_set(err, LEASE_E_HELD, 0, spec->path,
				  "%s busy: %s held by %s", spec->what,
				  spec->path, desc);
	else if (l->target && b == B_S)
		r = lease_err_set(err, LEASE_E_HELD, 0, spec->path,
				  "%s busy: %s has shared or session mounts on "
				  "this host (%s)", spec->what, spec->path, desc);
	else
		r = lease_err_set(err, LEASE_E_HELD, 0, spec->path,
				  "%s busy: %s %s %s", spec->what, spec->path,
				  l->target ? "contains" : "is inside", desc);
	if (err)
		err->holder_epoch = b == B_X && known ? who.epoch : 0;
	return r;
}

/* ---- take and free ----------------------------------------------------- */

static void drop_locks(struct hostlock *h)
{
	for (size_t i = 0; i < h->n; i++) {
		if (h->locks[i].fd >= 0)
			close(h->locks[i].fd);
		h->locks[i].fd = -1;
	}
}

/*
 * One try: announce everything, then check everything.  0, -EAGAIN with
 * *busy (the lock in the way) and *byte, or -errno.
 */
static int try_once(struct hostlock *h, size_t *busy, int *byte)
{
	int r = 0;

	for (size_t i = 0; i < h->n && r == 0; i++)
		r = announce(&h->locks[i]);
	for (size_t i = 0; i < h->n && r == 0; i++) {
		int b = conflict_on(h, &h->locks[i]);

		if (b >= 0) {
			*busy = i;
			*byte = b;
			r = -EAGAIN;
		} else if (b < -1) {
			r = b;
		}
	}
	if (r < 0)
		drop_locks(h);
	return r;
}

struct hostlock *hostlock_new(void)
{
	struct hostlock *h = calloc(1, sizeof(*h));

	if (h)
		h->rec_fd = -1;
	return h;
}

size_t hostlock_fds(const struct hostlock *h, int *fds, size_t max)
{
	size_t n = 0;

	for (size_t i = 0; i < h->n && n < max; i++)
		if (h->locks[i].fd >= 0)
			fds[n++] = h->locks[i].fd;
	if (h->rec_fd >= 0 && n < max)
		fds[n++] = h->rec_fd;
	return n;
}

/* Lock files and our record are collected as we let go (real root): a
 * name nobody else holds goes with us. */
static void collect_ours(const struct hostlock *h)
{
	char path[PATH_MAX];

	for (size_t i = 0; i < h->n; i++) {
		if (!h->locks[i].id)
			continue;
		lock_path(h->locks[i].id, h->locks[i].byte, path, sizeof(path));
		rundir_collect(path);
	}
	if (h->rec_path[0])
		rundir_collect(h->rec_path);
}

static void hostlock_release(struct hostlock *h, bool let_go)
{
	bool local = h->rec_path[0] != '\0';

	if (let_go) {
		drop_locks(h);
		if (h->rec_fd >= 0)
			close(h->rec_fd);
		if (local)
			collect_ours(h);
		else if (h->n)
			hostd_released();
	}
	for (size_t i = 0; i < h->n; i++)
		free(h->locks[i].id);
	free(h->locks);
	free(h);
}

void hostlock_forget(struct hostlock *h)
{
	if (h)
		hostlock_release(h, false);
}

void hostlock_free(struct hostlock *h)
{
	if (h)
		hostlock_release(h, true);
}

/* Wait for the lock file in the way to be closed by someone (a holder
 * letting go), watched before the retry so that a release in between is
 * not missed. */
static int take_until(struct hostlock *h, int64_t deadline, size_t *busy,
		      int *byte)
{
	int r = try_once(h, busy, byte);

	while (r == -EAGAIN && !lease_deadline_passed(deadline)) {
		struct lease_close_watch w;
		char path[PATH_MAX];

		lock_path(h->locks[*busy].id, *byte, path, sizeof(path));
		r = lease_close_watch_open(&w, path,
					   IN_CLOSE_WRITE | IN_CLOSE_NOWRITE);
		if (r == -ENOENT) { /* gone meanwhile: try again */
			r = try_once(h, busy, byte);
			continue;
		}
		if (r < 0)
			return r;
		r = try_once(h, busy, byte);
		if (r == -EAGAIN)
			(void)lease_close_watch_wait(&w, deadline);
		lease_close_watch_close(&w);
	}
	return r;
}

int hostlock_take_local(struct hostlock *h, const struct hostlock_spec *spec,
			const struct hostlock_who *who, int64_t deadline,
			struct lease_err *err)
{
	size_t busy = 0;
	int byte = 0, r = plan(h, spec, who);

	if (r < 0)
		return lease_err_set(err, LEASE_E_IO, r, spec->path, "%s %s: "
				     "cannot find it in %s: %s", spec->what,
				     spec->path, who->mountinfo, strerror(-r));
	r = record_write(h, spec, who);
	if (r < 0)
		return lease_err_set(err, LEASE_E_IO, r, spec->path, "cannot "
				     "write the host lock record in %s: %s",
				     HOLDERS_DIR, strerror(-r));
	r = take_until(h, deadline, &busy, &byte);
	if (r == -EAGAIN)
		return refuse(h, spec, &h->locks[busy], byte, who->uid, err);
	if (r < 0)
		return lease_err_set(err, LEASE_E_IO, r, spec->path,
				     "cannot take the host lock on %s: %s",
				     spec->path, strerror(-r));
	return 0;
}

/* Real root: spec's path resolved from our own root, as the arbiter
 * resolves a caller's from theirs, then the locks on what it resolved. */
static int take_as_self(struct hostlock *h, const struct hostlock_spec *spec,
			int64_t deadline, struct lease_err *err)
{
	struct hostlock_who self = { .uid = 0, .pid = getpid(),
				     .mountinfo = "/proc/self/mountinfo" };
	int *ids = calloc(HOSTLOCK_MAX_DEPTH, sizeof(*ids));
	int rootfd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC), n, r;

	n = !ids ? -ENOMEM : rootfd < 0 ? -errno
	  : hostlock_resolve(rootfd, spec->path, ids);
	if (n < 0) {
		r = lease_err_set(err, LEASE_E_IO, n, spec->path, "cannot take "
				  "the host lock on %s: %s", spec->path,
				  strerror(-n));
	} else {
		self.mnt_ids = ids;
		self.n_mnt_ids = (size_t)n;
		r = hostlock_take_local(h, spec, &self, deadline, err);
	}
	if (rootfd >= 0)
		close(rootfd);
	free(ids);
	return r;
}

int hostlock_take(const struct hostlock_spec *spec, int64_t deadline,
		  struct hostlock **out, struct lease_err *err)
{
	struct hostlock *h = hostlock_new();
	char msg[512];
	int r;

	*out = NULL;
	if (!h)
		return lease_err_set(err, LEASE_E_IO, -ENOMEM, spec->path,
				     "out of memory");
	r = rundir_prepare(msg, sizeof(msg));
	if (r < 0)
		r = lease_err_set(err, LEASE_E_IO, r, spec->path, "%s", msg);
	else if (rundir_real_root())
		r = take_as_self(h, spec, deadline, err);
	else
		r = hostd_take(spec, deadline, h, err);
	if (r < 0) {
		hostlock_free(h);
		return r;
	}
	*out = h;
	return 0;
}
