/* SPDX-License-Identifier: MIT */
/*
 * Host locks (contract in hostlock.h).
 *
 * Bytes of an identity's lock file, one per mode a holder may have there:
 *   B_X   write-locked by an exclusive mount of the directory
 *   B_S   read-locked by shared and session mounts of it
 *   B_IX  read-locked by exclusive mounts below it
 *   B_IS  read-locked by shared mounts below it and by directories the
 *         daemon writes at or below it
 * A holder locks its bytes (announce), then asks F_OFD_GETLK whether
 * another open file description holds a byte its mode conflicts with.
 * The kernel orders lock operations on a file, so of two conflicting
 * holders the one that announced second sees the first.
 *
 * Each holder also keeps a record of what it holds under
 * LEASEFS_RUN_DIR/holders (write-locked by it while it lives), written
 * before it announces, so that a refused contender can say who is in
 * the way.  Records are their owner's alone (0600): root is told who
 * holds a directory, a user only that a mount on this host does.
 *
 * Root's and users' daemons lock the same files (rundir.h), so that a
 * user's mount and root's exclude each other whatever their stores.
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

#include "hostlock.h"
#include "rundir.h"

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

struct held {
	int fd;                /* the identity's lock file; -1 once closed */
	int byte;
	bool target;           /* the directory itself, not one above it */
	char *id;              /* malloc'ed: a daemon keeps these for life */
};

struct hostlock {
	struct held *locks;
	size_t n, cap;
	int rec_fd;
	char rec_path[sizeof(HOLDERS_DIR) + 32];
};

/* ---- identities ------------------------------------------------------ */

/* A directory whose identity is wanted, and the topmost mount found so
 * far whose mount point contains it. */
struct want {
	char path[PATH_MAX];
	char dev[32];
	char root[PATH_MAX];      /* the mount's root inside its filesystem */
	size_t point_len;         /* of the mount point; 0: none yet */
	bool found;
};

/* One mount: the topmost one (the later line) wins for every wanted
 * directory its mount point contains. */
static void mount_seen(struct want *w, size_t n, const char *dev,
		       const char *root, const char *point)
{
	size_t l = strlen(point);

	for (size_t i = 0; i < n; i++) {
		if (!ws_path_within(w[i].path, point) ||
		    (w[i].found && l < w[i].point_len))
			continue;
		snprintf(w[i].dev, sizeof(w[i].dev), "%s", dev);
		snprintf(w[i].root, sizeof(w[i].root), "%s", root);
		w[i].point_len = strcmp(point, "/") == 0 ? 0 : l;
		w[i].found = true;
	}
}

/* One pass over /proc/self/mountinfo for all of w (no copy of it kept:
 * with a thousand mounts it is large). */
static int mounts_scan(struct want *w, size_t n)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char *line = NULL, dev[32], *root = malloc(PATH_MAX), *point = malloc(PATH_MAX);
	size_t cap = 0;
	int r = f && root && point ? 0 : -ENOMEM;

	if (!f)
		r = -errno;
	while (r == 0 && getline(&line, &cap, f) > 0) {
		if (sscanf(line, "%*d %*d %31s %4095s %4095s", dev, root, point) != 3)
			continue;
		ws_mountinfo_unescape(root);
		ws_mountinfo_unescape(point);
		mount_seen(w, n, dev, root, point);
	}
	free(line);
	free(root);
	free(point);
	if (f)
		fclose(f);
	return r;
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
 * those directories' filesystems.
 */
static int plan(struct hostlock *h, const struct hostlock_spec *spec)
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
	snprintf(path, sizeof(path), "%s", spec->path);
	for (size_t i = 0; i < n; i++) {
		snprintf(w[i].path, sizeof(w[i].path), "%s", path);
		ws_path_parent(path);
	}
	r = mounts_scan(w, n);
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

/* The lock file's name in ROOTS_DIR: "<hex sha256 of id>.lock". */
static void lock_name(const char *id, char *out, size_t sz)
{
	uint8_t md[32];
	char hex[65];

	lease_sha256(id, strlen(id), md);
	for (int i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	snprintf(out, sz, "%s.lock", hex);
}

static void lock_path(const char *id, char *out, size_t sz)
{
	char name[80];

	lock_name(id, name, sizeof(name));
	snprintf(out, sz, ROOTS_DIR "/%s", name);
}

static int byte_lock(int fd, int cmd, short type, int byte, struct flock *out)
{
	struct flock fl = { .l_type = type, .l_whence = SEEK_SET,
			    .l_start = byte, .l_len = 1 };

	if (fcntl(fd, cmd, &fl) < 0)
		return -errno;
	if (out)
		*out = fl;
	return 0;
}

/* Announce one lock: 0, -EAGAIN if another holds a conflicting one of the
 * same byte (only X's write lock can meet that), or -errno. */
static int announce(struct held *l)
{
	char name[80];
	int r;

	lock_name(l->id, name, sizeof(name));
	l->fd = rundir_open_shared(ROOTS_DIR, name);
	if (l->fd < 0)
		return l->fd;
	r = byte_lock(l->fd, F_OFD_SETLK, l->byte == B_X ? F_WRLCK : F_RDLCK,
		      l->byte, NULL);
	return r == -EACCES ? -EAGAIN : r;
}

/* The first byte another holder has that conflicts with l: its index, or
 * -1 if none (or -errno). */
static int conflict_on(const struct held *l)
{
	for (int b = 0; b < NBYTES; b++) {
		struct flock fl = { 0 };
		int r;

		if (!(conflicts[l->byte] & 1u << b) || b == l->byte)
			continue;
		r = byte_lock(l->fd, F_OFD_GETLK, F_WRLCK, b, &fl);
		if (r < 0)
			return r;
		if (fl.l_type != F_UNLCK)
			return b;
	}
	return -1;
}

/* ---- holder records ------------------------------------------------------ */

/* A new record file of ours, "UID-PID-SEQ.rec"; one left under the name
 * by a dead daemon whose pid we reuse is removed first. */
static int record_create(struct hostlock *h)
{
	static unsigned seq;
	int flags = O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW;

	snprintf(h->rec_path, sizeof(h->rec_path), HOLDERS_DIR "/%u-%d-%u.rec",
		 (unsigned)geteuid(), (int)getpid(),
		 __atomic_fetch_add(&seq, 1, __ATOMIC_RELAXED));
	h->rec_fd = open(h->rec_path, flags, 0600);
	if (h->rec_fd < 0 && errno == EEXIST && unlink(h->rec_path) == 0)
		h->rec_fd = open(h->rec_path, flags, 0600);
	return h->rec_fd < 0 ? -errno : 0;
}

/* Our record: who we are, then one line per lock. */
static int record_write(struct hostlock *h, const struct hostlock_spec *spec)
{
	FILE *f;
	int r = record_create(h);

	if (r < 0)
		return r;
	r = byte_lock(h->rec_fd, F_OFD_SETLK, F_WRLCK, 0, NULL);
	if (r < 0)
		return r;
	f = fdopen(dup(h->rec_fd), "w");
	if (!f)
		return -errno;
	fprintf(f, "%d\t%" PRIu64 "\t%s\t%s\t%s\n", (int)getpid(), spec->epoch,
		spec->what, spec->mountpoint ? spec->mountpoint : "-", spec->path);
	for (size_t i = 0; i < h->n; i++)
		fprintf(f, "%d %s\n", h->locks[i].byte, h->locks[i].id);
	return fclose(f) == 0 ? 0 : -EIO;
}

/* What a live record says of its holder. */
struct holder {
	int pid;
	uint64_t epoch;
	char what[64];
	char mountpoint[PATH_MAX];
	char path[PATH_MAX];
};

/* Whether the daemon named in a record's file name ("UID-PID-SEQ.rec")
 * is gone (a live one may not have locked its new record yet). */
static bool record_dead(const char *path)
{
	const char *base = strrchr(path, '/');
	const char *dash = base ? strchr(base, '-') : NULL;
	int pid = dash ? atoi(dash + 1) : 0;

	return pid > 0 && kill(pid, 0) < 0 && errno == ESRCH;
}

/* Whether the record at `path` is live and holds byte `byte` of `id`. */
static bool record_matches(const char *path, const char *id, int byte,
			   struct holder *who)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	char *line = NULL;
	size_t cap = 0;
	struct flock fl = { 0 };
	bool hit = false;
	FILE *f;

	if (fd < 0)
		return false;
	if (byte_lock(fd, F_OFD_GETLK, F_WRLCK, 0, &fl) < 0 ||
	    fl.l_type == F_UNLCK || !(f = fdopen(fd, "r"))) {
		if (fl.l_type == F_UNLCK && record_dead(path))
			unlink(path); /* a crashed daemon's */
		close(fd);
		return false;
	}
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

/* A live holder of byte `byte` of `id`, other than us. */
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
 * Say what keeps `spec` out: our lock `l` met another holder's byte `b`.
 * On our directory itself that is an exclusive holder of it (X), shared
 * or session mounts of it (S), or something below it (an intent); on a
 * directory above ours, what contains ours.
 */
static int refuse(const struct hostlock *h, const struct hostlock_spec *spec,
		  const struct held *l, int b, struct lease_err *err)
{
	struct holder who = { 0 };
	char desc[2 * PATH_MAX + 160];
	bool known = find_holder(h, l->id, b, &who);
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
		err->holder_epoch = b == B_X ? who.epoch : 0;
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

	for (size_t i = 0; i < h->n && r == 0; i++) {
		r = announce(&h->locks[i]);
		if (r == -EAGAIN) {
			*busy = i;
			*byte = h->locks[i].byte;
		}
	}
	for (size_t i = 0; i < h->n && r == 0; i++) {
		int b = conflict_on(&h->locks[i]);

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

void hostlock_free(struct hostlock *h)
{
	if (!h)
		return;
	drop_locks(h);
	if (h->rec_fd >= 0) {
		unlink(h->rec_path); /* while it is still ours */
		close(h->rec_fd);
	}
	for (size_t i = 0; i < h->n; i++)
		free(h->locks[i].id);
	free(h->locks);
	free(h);
}

static int setup(struct hostlock *h, const struct hostlock_spec *spec,
		 struct lease_err *err)
{
	char msg[512];
	int r = rundir_prepare(msg, sizeof(msg));

	if (r < 0)
		return lease_err_set(err, LEASE_E_IO, r, spec->path, "%s", msg);
	r = plan(h, spec);
	if (r < 0)
		return lease_err_set(err, LEASE_E_IO, r, spec->path, "%s %s: "
				     "cannot find it in /proc/self/mountinfo: %s",
				     spec->what, spec->path, strerror(-r));
	r = record_write(h, spec);
	if (r < 0)
		return lease_err_set(err, LEASE_E_IO, r, spec->path, "cannot "
				     "write the host lock record %s: %s",
				     h->rec_path, strerror(-r));
	return 0;
}

/*
 * Try until `deadline`; between tries, wait for the lock file in the way
 * to be closed by someone (a holder letting go), watched before the retry
 * so that a release in between is not missed.
 */
static int take_until(struct hostlock *h, int64_t deadline, size_t *busy,
		      int *byte)
{
	int r = try_once(h, busy, byte);

	while (r == -EAGAIN && !lease_deadline_passed(deadline)) {
		struct lease_close_watch w;
		char path[PATH_MAX];

		lock_path(h->locks[*busy].id, path, sizeof(path));
		r = lease_close_watch_open(&w, path,
					   IN_CLOSE_WRITE | IN_CLOSE_NOWRITE);
		if (r < 0)
			return r;
		r = try_once(h, busy, byte);
		if (r == -EAGAIN)
			(void)lease_close_watch_wait(&w, deadline);
		lease_close_watch_close(&w);
	}
	return r;
}

int hostlock_take(const struct hostlock_spec *spec, int64_t deadline,
		  struct hostlock **out, struct lease_err *err)
{
	struct hostlock *h = calloc(1, sizeof(*h));
	size_t busy = 0;
	int byte = 0, r;

	*out = NULL;
	if (!h)
		return lease_err_set(err, LEASE_E_IO, -ENOMEM, spec->path,
				     "out of memory");
	h->rec_fd = -1;
	r = setup(h, spec, err);
	if (r == 0) {
		r = take_until(h, deadline, &busy, &byte);
		if (r == -EAGAIN)
			r = refuse(h, spec, &h->locks[busy], byte, err);
		else if (r < 0)
			r = lease_err_set(err, LEASE_E_IO, r, spec->path,
					  "cannot take the host lock on %s: %s",
					  spec->path, strerror(-r));
	}
	if (r < 0) {
		hostlock_free(h);
		return r;
	}
	*out = h;
	return 0;
}
