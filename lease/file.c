/* SPDX-License-Identifier: MIT */
/*
 * File backend ("file:DIR", "file" = LEASE_FILE_DEFAULT_DIR).
 *
 * Per name NAME (segments become subdirectories of DIR):
 *   NAME.lock  lock target; never replaced or deleted.
 *              byte 0: F_OFD_SETLK write lock held for the life of a grant
 *                      (the kernel drops it when the holder dies).
 *              byte 1: record lock, held only around a read-modify-write
 *                      of NAME.rec (acquire, release, revoke).
 *   NAME.rec   the record (version, name, epoch, state, pid, holder and a
 *              sha256 over the rest), replaced atomically by writing
 *              NAME.rec.tmp, fsync, rename, fsync of the directory.
 *   NAME.in/H  a marker of grant H living within NAME (lease_acquire_in(),
 *              H's '/' written '!'), byte 0 write-locked by H's holder for
 *              the life of its grant, fence included.  A grant of NAME
 *              first locks its byte 0, then looks for a locked marker; a
 *              grant within NAME first locks its marker, then looks at
 *              NAME.lock's byte 0: of two that conflict, one sees the
 *              other.  Markers are never removed (an unlocked one means
 *              nothing).
 *
 * Lock order: byte 1 before byte 0.  Nobody ever waits for byte 0 (it is
 * only tried), so the order cannot deadlock.
 *
 * A missing record means epoch 0.  A record that fails to parse or fails
 * its checksum is LEASE_E_CORRUPT and nothing is written.  Writers never
 * lower the epoch.
 *
 * Loss is detected by the holder's watcher: a revoker rings the holder's
 * bell (NAME.bell, a datagram socket the holder binds for the life of the
 * grant), and the watcher rechecks every held record each second for
 * changes made by hand.  The byte-0 lock is kept until the holder
 * releases: that release is its fence acknowledgement (it comes after the
 * holder drained its writes), and no successor can be granted the name
 * before it.  A holder that dies is fenced by the kernel dropping its
 * lock.  A grant costs the holder descriptors only: no kernel object with
 * a per-user limit.
 *
 * Epochs never wrap: a name whose record reached 2^64-1 is refused.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"

#define REC_MAGIC "leasefs-lease-record v1"
#define REC_MAX 4096
/* A record-lock holder only does a read-modify-write; wait at least this
 * long for it even when the caller's deadline has already passed. */
#define REC_LOCK_GRACE_MS 2000

struct file_lease;

/*
 * The store's one watcher thread for every lease held through the store:
 * it polls their bells and sweeps their records (see "doorbell").
 */
struct hub {
	/* lock protects leases (and each member's next, watched and seen),
	 * running and stopping; the thread checks records and fires losses
	 * under it. */
	pthread_mutex_t lock;
	struct file_lease *leases; /* watched, linked through next */
	int kick_fd;               /* eventfd: the set changed, or stop */
	pthread_t thr;
	bool running;
	bool stopping;
};

struct file_store {
	char *dir;  /* canonical absolute path of the lease directory */
	int dirfd;  /* O_DIRECTORY fd of dir; read-only after open */
	struct hub hub;
};

struct rec {
	uint64_t epoch;
	enum lease_state state;
	pid_t pid;
	char holder[1024];
};

/* One version of a record file, as the sweep compares them. */
struct rec_stamp {
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime, ctime;
};

struct file_lease {
	/* fd_lock protects lock_fd (the byte-0 grant lock) and markers. */
	pthread_mutex_t fd_lock;
	int lock_fd;    /* -1 once dropped */
	int *markers;   /* locked markers in the scopes' NAME.in */
	size_t nmarkers;
	struct lease *lease;       /* immutable */
	int bell_fd;               /* immutable until destroy */
	/* Whether NAME.bell is ours; only the lease's own calls (grant,
	 * release, free) touch it, and it is cleared before the grant lock
	 * is dropped. */
	bool bell_linked;
	/* In the store's hub: */
	bool watched;              /* hub.lock */
	struct rec_stamp seen;     /* hub.lock: as last checked */
	struct file_lease *next;   /* hub.lock */
};

static struct file_store *fs_of(const struct lease_store *store)
{
	return store->priv;
}

/* ---- paths ---------------------------------------------------------- */

/* "NAME" + suffix, relative to the store directory. */
static int rel_path(char *buf, size_t sz, const char *name, const char *sfx)
{
	int n = snprintf(buf, sz, "%s%s", name, sfx);

	return n < 0 || (size_t)n >= sz ? -ENAMETOOLONG : 0;
}

/* Create the parent directories of NAME under dirfd (0700). */
static int make_parents(int dirfd, const char *name)
{
	char buf[LEASE_NAME_MAX + 1];

	snprintf(buf, sizeof(buf), "%s", name);
	for (char *p = strchr(buf, '/'); p; p = strchr(p + 1, '/')) {
		*p = '\0';
		if (mkdirat(dirfd, buf, 0700) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	return 0;
}

/* Open the directory holding NAME's files (for fsync and inotify). */
static int open_parent(int dirfd, const char *name)
{
	char buf[LEASE_NAME_MAX + 1];
	const char *slash = strrchr(name, '/');
	int fd;

	if (!slash)
		fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	else {
		snprintf(buf, sizeof(buf), "%.*s", (int)(slash - name), name);
		fd = openat(dirfd, buf, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	}
	return fd < 0 ? -errno : fd;
}

static int mkdir_p(const char *path)
{
	char buf[PATH_MAX];
	int n = snprintf(buf, sizeof(buf), "%s", path);

	if (n < 0 || (size_t)n >= sizeof(buf))
		return -ENAMETOOLONG;
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0700) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, 0700) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/* ---- byte locks ----------------------------------------------------- */

static int ofd_lock(int fd, int cmd, short type, off_t byte)
{
	struct flock fl = {
		.l_type = type, .l_whence = SEEK_SET, .l_start = byte, .l_len = 1,
	};

	return fcntl(fd, cmd, &fl) < 0 ? -errno : 0;
}

/* Try the byte-0 grant lock: 0, -EAGAIN if held elsewhere, or -errno. */
static int grant_trylock(int fd)
{
	int r = ofd_lock(fd, F_OFD_SETLK, F_WRLCK, 0);

	return r == -EACCES ? -EAGAIN : r;
}

/* Whether some open file description holds byte 0 (a live grant). */
static int grant_is_held(int fd, bool *held)
{
	struct flock fl = {
		.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1,
	};

	if (fcntl(fd, F_OFD_GETLK, &fl) < 0)
		return -errno;
	*held = fl.l_type != F_UNLCK;
	return 0;
}

/* Absolute path of NAME<sfx> in the store. */
static int abs_path(const struct file_store *fs, const char *name,
		    const char *sfx, char *buf, size_t sz)
{
	int n = snprintf(buf, sz, "%s/%s%s", fs->dir, name, sfx);

	return n < 0 || (size_t)n >= sz ? -ENAMETOOLONG : 0;
}

/*
 * Take the byte-1 record lock, waiting until `deadline` but at least
 * REC_LOCK_GRACE_MS (a holder only ever does one read-modify-write).
 * Returns 0 or -ETIMEDOUT / -errno.
 */
static int rec_lock(const struct file_store *fs, const char *name, int fd,
		    int64_t deadline)
{
	int64_t grace = lease_deadline_ms(REC_LOCK_GRACE_MS);
	char path[PATH_MAX];
	int r = abs_path(fs, name, ".lock", path, sizeof(path));

	if (r == 0)
		r = lease_ofd_lock_wait(fd, path, F_WRLCK, 1, 1,
					deadline > grace ? deadline : grace);
	return r == -EAGAIN ? -ETIMEDOUT : r;
}

/* Release the record lock but keep fd (a new grant's): waiters are woken
 * explicitly, since no close tells them. */
static void rec_unlock(const struct file_store *fs, const char *name, int fd)
{
	char path[PATH_MAX];

	if (abs_path(fs, name, ".lock", path, sizeof(path)) == 0)
		lease_ofd_unlock_notify(fd, path, 1, 1);
}

/* Open (creating if asked) NAME.lock.  Returns fd or -errno. */
static int open_lockfile(struct file_store *fs, const char *name, bool create)
{
	char rel[LEASE_NAME_MAX + 16];
	int r = rel_path(rel, sizeof(rel), name, ".lock");
	int fd;

	if (r < 0)
		return r;
	if (create) {
		r = make_parents(fs->dirfd, name);
		if (r < 0)
			return r;
	}
	fd = openat(fs->dirfd, rel,
		    O_RDWR | O_CLOEXEC | O_NOFOLLOW | (create ? O_CREAT : 0),
		    0600);
	return fd < 0 ? -errno : fd;
}

/* ---- records -------------------------------------------------------- */

static int sha256_hex(const char *data, size_t len, char out[65])
{
	uint8_t md[32];

	lease_sha256(data, len, md);
	for (unsigned int i = 0; i < sizeof(md); i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
	return 0;
}

static int state_parse(const char *s, enum lease_state *st)
{
	if (strcmp(s, "held") == 0)
		*st = LEASE_STATE_HELD;
	else if (strcmp(s, "free") == 0)
		*st = LEASE_STATE_FREE;
	else if (strcmp(s, "revoked") == 0)
		*st = LEASE_STATE_REVOKED;
	else
		return -EINVAL;
	return 0;
}

/* Holder descriptions are one printable line. */
static void holder_clean(char *dst, size_t sz, const char *src)
{
	size_t i = 0;

	for (; src && src[i] && i + 1 < sz; i++)
		dst[i] = (src[i] >= 0x20 && src[i] < 0x7f) ? src[i] : '?';
	dst[i] = '\0';
}

static int rec_format(char *buf, size_t sz, const char *name,
		      const struct rec *rec)
{
	char hex[65];
	int n = snprintf(buf, sz, REC_MAGIC "\nname %s\nepoch %" PRIu64
			 "\nstate %s\npid %d\nholder %s\n", name, rec->epoch,
			 lease_state_str(rec->state), (int)rec->pid, rec->holder);
	int m;

	if (n < 0 || (size_t)n >= sz)
		return -ENAMETOOLONG;
	if (sha256_hex(buf, (size_t)n, hex) < 0)
		return -EIO;
	m = snprintf(buf + n, sz - (size_t)n, "sha256 %s\n", hex);
	if (m < 0 || (size_t)(n + m) >= sz)
		return -ENAMETOOLONG;
	return n + m;
}

/* Next line of `*p` (NUL-terminated in place); NULL at the end. */
static char *next_line(char **p)
{
	char *s = *p, *nl;

	if (!s || !*s)
		return NULL;
	nl = strchr(s, '\n');
	if (!nl)
		return NULL; /* every line ends in '\n' */
	*nl = '\0';
	*p = nl + 1;
	return s;
}

static const char *field(char *line, const char *key)
{
	size_t n = strlen(key);

	if (!line || strncmp(line, key, n) != 0 || line[n] != ' ')
		return NULL;
	return line + n + 1;
}

static int parse_u64(const char *s, uint64_t *out)
{
	char *end;

	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	*out = strtoull(s, &end, 10);
	return errno || *end ? -EINVAL : 0;
}

/* Parse and verify a record.  Returns 0 or -EINVAL with *why set. */
static int rec_parse(char *buf, size_t len, const char *name, struct rec *rec,
		     const char **why)
{
	char hex[65], *p = buf, *l, *sum = NULL;
	const char *v;
	uint64_t u;

	for (char *q = strstr(buf, "\nsha256 "); q; q = strstr(q + 1, "\nsha256 "))
		sum = q + 1;
	*why = "checksum line missing";
	if (!sum || strlen(buf) != len || strlen(sum) != 7 + 64 + 1 ||
	    sum[7 + 64] != '\n')
		return -EINVAL;
	*why = "checksum mismatch";
	if (sha256_hex(buf, (size_t)(sum - buf), hex) < 0 ||
	    strncmp(sum + 7, hex, 64) != 0)
		return -EINVAL;
	*sum = '\0'; /* the checked body ends here */
	*why = "bad header";
	l = next_line(&p);
	if (!l || strcmp(l, REC_MAGIC) != 0)
		return -EINVAL;
	*why = "name does not match";
	v = field(next_line(&p), "name");
	if (!v || strcmp(v, name) != 0)
		return -EINVAL;
	*why = "bad epoch";
	if (parse_u64(field(next_line(&p), "epoch"), &rec->epoch) < 0)
		return -EINVAL;
	*why = "bad state";
	v = field(next_line(&p), "state");
	if (!v || state_parse(v, &rec->state) < 0)
		return -EINVAL;
	*why = "bad pid";
	if (parse_u64(field(next_line(&p), "pid"), &u) < 0 || u > INT_MAX)
		return -EINVAL;
	rec->pid = (pid_t)u;
	*why = "bad holder";
	v = field(next_line(&p), "holder");
	if (!v)
		return -EINVAL;
	holder_clean(rec->holder, sizeof(rec->holder), v);
	return 0;
}

static int read_all(int fd, char *buf, size_t sz, size_t *len)
{
	size_t n = 0;

	while (n < sz) {
		ssize_t k = read(fd, buf + n, sz - n);

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		if (k == 0)
			break;
		n += (size_t)k;
	}
	*len = n;
	return 0;
}

/*
 * Read NAME.rec.  Missing record: epoch 0, free, *exists = false.
 * Failure to parse: LEASE_E_CORRUPT naming the file.
 */
static int rec_read(struct file_store *fs, const char *name, struct rec *rec,
		    bool *exists, struct lease_err *err)
{
	char rel[LEASE_NAME_MAX + 16], buf[REC_MAX + 1];
	const char *why = NULL;
	size_t len = 0;
	int fd, r;

	memset(rec, 0, sizeof(*rec));
	rec->state = LEASE_STATE_FREE;
	if (exists)
		*exists = false;
	r = rel_path(rel, sizeof(rel), name, ".rec");
	if (r < 0)
		return lease_err_set(err, LEASE_E_IO, r, name, "name too long");
	fd = openat(fs->dirfd, rel, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 && errno == ENOENT)
		return 0;
	if (fd < 0)
		return lease_err_set(err, LEASE_E_IO, -errno, name,
				     "cannot open lease record %s/%s: %s",
				     fs->dir, rel, strerror(errno));
	r = read_all(fd, buf, sizeof(buf), &len);
	close(fd);
	if (r < 0)
		return lease_err_set(err, LEASE_E_IO, r, name,
				     "cannot read lease record %s/%s: %s",
				     fs->dir, rel, strerror(-r));
	if (exists)
		*exists = true;
	buf[len < sizeof(buf) ? len : sizeof(buf) - 1] = '\0';
	if (len > REC_MAX)
		why = "record too large";
	else if (rec_parse(buf, len, name, rec, &why) == 0)
		return 0;
	return lease_err_set(err, LEASE_E_CORRUPT, 0, name,
			     "lease record %s/%s is corrupt (%s); fix or remove "
			     "it by hand, its epoch must not be reset",
			     fs->dir, rel, why);
}

static int write_all(int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t k = write(fd, buf, len);

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		buf += k;
		len -= (size_t)k;
	}
	return 0;
}

static void bell_ring(struct file_store *fs, const char *name);

/* Write tmp, fsync, rename over NAME.rec.  Caller holds the record lock.
 * With `ring`, NAME's holder is told as soon as the record is in place,
 * before the directory's fsync: telling it early is safe, since a holder
 * that hears of loss only ever stops writing. */
static int rec_replace(struct file_store *fs, const char *name, const char *data,
		       size_t len, bool ring)
{
	char rel[LEASE_NAME_MAX + 16], tmp[LEASE_NAME_MAX + 16];
	int fd, dfd, r;

	r = rel_path(rel, sizeof(rel), name, ".rec");
	if (r == 0)
		r = rel_path(tmp, sizeof(tmp), name, ".rec.tmp");
	if (r < 0)
		return r;
	fd = openat(fs->dirfd, tmp,
		    O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -errno;
	r = write_all(fd, data, len);
	if (r == 0 && fsync(fd) < 0)
		r = -errno;
	if (close(fd) < 0 && r == 0)
		r = -errno;
	if (r < 0)
		goto out_unlink;
	if (renameat(fs->dirfd, tmp, fs->dirfd, rel) < 0) {
		r = -errno;
		goto out_unlink;
	}
	if (ring)
		bell_ring(fs, name);
	dfd = open_parent(fs->dirfd, name);
	if (dfd < 0)
		return dfd;
	r = fsync(dfd) < 0 ? -errno : 0;
	close(dfd);
	return r;
out_unlink:
	unlinkat(fs->dirfd, tmp, 0);
	return r;
}

/* Durably store `rec` as NAME's record, ringing its holder's bell if
 * `ring`.  Caller holds the record lock. */
static int rec_store(struct file_store *fs, const char *name,
		     const struct rec *rec, bool ring, struct lease_err *err)
{
	char buf[REC_MAX];
	int n = rec_format(buf, sizeof(buf), name, rec);
	int r = n < 0 ? n : rec_replace(fs, name, buf, (size_t)n, ring);

	if (r < 0)
		return lease_err_set(err, LEASE_E_IO, r, name,
				     "cannot write lease record for '%s' in %s: %s",
				     name, fs->dir, strerror(-r));
	return 0;
}

static int rec_write(struct file_store *fs, const char *name,
		     const struct rec *rec, struct lease_err *err)
{
	return rec_store(fs, name, rec, false, err);
}

/* ---- doorbell ------------------------------------------------------- */

/*
 * While it holds a grant, the holder has a datagram socket bound at
 * NAME.bell; whoever rewrites a live holder's record (revoke) rings it.
 * A bell is one descriptor, bounded by the holder's RLIMIT_NOFILE alone,
 * where an inotify instance counts against a small per-user limit
 * (fs.inotify.max_user_instances, 128), and it works across pid and
 * mount namespaces: all it needs is the store directory.  A ring that
 * cannot be delivered (no bell, no /proc, a full queue) costs only time:
 * every holder also rechecks its record every RECHECK_MS, which is how a
 * record edited, replaced or removed by hand is noticed.
 */
#define RECHECK_MS 1000

/* sun_path holds 108 bytes: a socket is named through a descriptor, as
 * "/proc/self/fd/N" (the socket itself) or "/proc/self/fd/N/REL". */
static int fd_sockaddr(struct sockaddr_un *sa, int fd, const char *rel)
{
	int n;

	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	if (rel)
		n = snprintf(sa->sun_path, sizeof(sa->sun_path),
			     "/proc/self/fd/%d/%s", fd, rel);
	else
		n = snprintf(sa->sun_path, sizeof(sa->sun_path),
			     "/proc/self/fd/%d", fd);
	return n < 0 || (size_t)n >= sizeof(sa->sun_path) ? -ENAMETOOLONG : 0;
}

/* A bell bound in directory pfd as `bell`, replacing a dead holder's: bound
 * under a unique short name, then renamed.  Returns the socket or -errno. */
static int bell_bind(int pfd, const char *bell)
{
	struct sockaddr_un sa;
	uint64_t nonce = 0;
	char tmp[64];
	int s, r;

	if (getrandom(&nonce, sizeof(nonce), 0) != sizeof(nonce))
		nonce = (uint64_t)lease_now_ns() ^ (uint64_t)getpid();
	snprintf(tmp, sizeof(tmp), ".bell-%016" PRIx64, nonce);
	s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (s < 0)
		return -errno;
	r = fd_sockaddr(&sa, pfd, tmp);
	if (r == 0 && bind(s, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		r = -errno;
	if (r == 0 && renameat(pfd, tmp, pfd, bell) < 0) {
		r = -errno;
		unlinkat(pfd, tmp, 0);
	}
	if (r < 0) {
		close(s);
		return r;
	}
	return s;
}

/* Ring NAME's bell if it has one.  Best effort: see above. */
static void bell_ring(struct file_store *fs, const char *name)
{
	char rel[LEASE_NAME_MAX + 16];
	struct sockaddr_un sa;
	struct stat st;
	int p, s = -1;

	if (rel_path(rel, sizeof(rel), name, ".bell") < 0)
		return;
	p = openat(fs->dirfd, rel, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (p < 0)
		return;
	if (fstat(p, &st) == 0 && S_ISSOCK(st.st_mode) &&
	    fd_sockaddr(&sa, p, NULL) == 0)
		s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s >= 0 && connect(s, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	    send(s, "r", 1, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
		/* full queue: the holder has a ring pending anyway */
	}
	if (s >= 0)
		close(s);
	close(p);
}

/* ---- watcher -------------------------------------------------------- */

static void close_markers(int *fds, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	free(fds);
}

static void drop_grant(struct file_lease *fl)
{
	pthread_mutex_lock(&fl->fd_lock);
	if (fl->lock_fd >= 0) {
		close(fl->lock_fd);
		fl->lock_fd = -1;
	}
	close_markers(fl->markers, fl->nmarkers);
	fl->markers = NULL;
	fl->nmarkers = 0;
	pthread_mutex_unlock(&fl->fd_lock);
}

/* A failure to read a record that says nothing about it: the process is
 * out of descriptors or memory for a moment. */
static bool transient(int code)
{
	return code == -EMFILE || code == -ENFILE || code == -ENOMEM ||
	       code == -EINTR || code == -EAGAIN;
}

/* Loss reason implied by the record, or NONE while it is still ours (or
 * cannot be read for a moment: *retry, and nothing is concluded). */
static enum lease_loss check_record(struct lease *l, bool *retry)
{
	struct lease_err err = { 0 };
	struct rec rec;
	bool exists;
	int r = rec_read(fs_of(l->store), l->name, &rec, &exists, &err);

	*retry = r < 0 && err.kind == LEASE_E_IO && transient(err.code);
	if (*retry)
		return LEASE_LOSS_NONE;
	if (r < 0 || !exists)
		return LEASE_LOSS_STORE;
	if (rec.state == LEASE_STATE_REVOKED)
		return LEASE_LOSS_REVOKED;
	if (rec.epoch != l->epoch)
		return LEASE_LOSS_TAKEOVER;
	if (rec.state != LEASE_STATE_HELD)
		return LEASE_LOSS_STORE;
	return LEASE_LOSS_NONE;
}

/* What identifies one version of a record file (zero if it is missing). */
static struct rec_stamp record_stamp(struct file_store *fs, const char *name)
{
	struct rec_stamp s = { 0 };
	char rel[LEASE_NAME_MAX + 16];
	struct stat st;

	if (rel_path(rel, sizeof(rel), name, ".rec") == 0 &&
	    fstatat(fs->dirfd, rel, &st, AT_SYMLINK_NOFOLLOW) == 0)
		s = (struct rec_stamp){ st.st_dev, st.st_ino, st.st_size,
					st.st_mtim, st.st_ctim };
	return s;
}

static bool stamp_equal(const struct rec_stamp *a, const struct rec_stamp *b)
{
	return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
	       a->mtime.tv_sec == b->mtime.tv_sec &&
	       a->mtime.tv_nsec == b->mtime.tv_nsec &&
	       a->ctime.tv_sec == b->ctime.tv_sec &&
	       a->ctime.tv_nsec == b->ctime.tv_nsec;
}

/* Caller holds hub->lock. */
static void hub_unlink_locked(struct hub *h, struct file_lease *fl)
{
	struct file_lease **pp = &h->leases;

	while (*pp && *pp != fl)
		pp = &(*pp)->next;
	if (*pp)
		*pp = fl->next;
	fl->watched = false;
}

/* Caller holds hub->lock.  Wake the thread to rebuild its poll set. */
static void hub_kick_locked(struct hub *h)
{
	uint64_t one = 1;

	if (h->running && write(h->kick_fd, &one, sizeof(one)) < 0) {
		/* the counter is nonzero already: the thread wakes */
	}
}

/* Whether fd polled readable in p[0..n). */
static bool rang(const struct pollfd *p, size_t n, int fd)
{
	char b[16];
	bool hit = false;

	for (size_t i = 0; i < n; i++)
		hit |= p[i].fd == fd && p[i].revents;
	if (hit)
		while (recv(fd, b, sizeof(b), MSG_DONTWAIT) > 0)
			;
	return hit;
}

/* Caller holds hub->lock.  Check the record of every lease whose bell
 * rang, and, when `sweep`, of every lease whose record file changed.  A
 * lost lease leaves the hub and is told (its grant lock stays until
 * release, after the holder drained: no successor while it may still
 * write). */
static void hub_check_locked(struct hub *h, struct file_store *fs,
			     const struct pollfd *p, size_t n, bool sweep)
{
	struct file_lease *fl = h->leases, *next;

	for (; fl; fl = next) {
		struct rec_stamp now;
		enum lease_loss why;

		next = fl->next;
		if (!rang(p, n, fl->bell_fd) && !sweep)
			continue;
		now = record_stamp(fs, fl->lease->name);
		if (!sweep || !stamp_equal(&now, &fl->seen)) {
			bool retry;

			fl->seen = now;
			why = check_record(fl->lease, &retry);
			if (retry) /* matches no stamp: the next sweep reads */
				fl->seen = (struct rec_stamp){ .size = -1 };
			if (why != LEASE_LOSS_NONE) {
				hub_unlink_locked(h, fl);
				lease_mark_lost(fl->lease, why);
			}
		}
	}
}

/* Caller holds hub->lock.  The kick eventfd and every bell, in *p. */
static size_t hub_pollset_locked(struct hub *h, struct pollfd **p, size_t *cap)
{
	size_t n = 1;

	for (struct file_lease *fl = h->leases; fl; fl = fl->next)
		n++;
	if (n > *cap) {
		struct pollfd *q = realloc(*p, n * sizeof(**p));

		if (!q)
			n = *cap ? 1 : 0; /* bells wait for the sweep */
		else {
			*p = q;
			*cap = n;
		}
	}
	if (n == 0)
		return 0;
	(*p)[0] = (struct pollfd){ .fd = h->kick_fd, .events = POLLIN };
	n = 1;
	for (struct file_lease *fl = h->leases; fl && n < *cap; fl = fl->next)
		(*p)[n++] = (struct pollfd){ .fd = fl->bell_fd, .events = POLLIN };
	return n;
}

/* The store's watcher thread: until stopped. */
static void *hub_main(void *arg)
{
	struct file_store *fs = arg;
	struct hub *h = &fs->hub;
	int64_t sweep_at = lease_deadline_ms(RECHECK_MS);
	struct pollfd *p = NULL;
	size_t cap = 0, n;
	uint64_t v;

	for (;;) {
		int64_t left = sweep_at - lease_now_ns();
		bool sweep;

		pthread_mutex_lock(&h->lock);
		if (h->stopping) {
			pthread_mutex_unlock(&h->lock);
			break;
		}
		n = hub_pollset_locked(h, &p, &cap);
		pthread_mutex_unlock(&h->lock);
		if (poll(p, n, left > 0 ? (int)(left / 1000000 + 1) : 0) < 0 &&
		    errno != EINTR)
			break;
		if (read(h->kick_fd, &v, sizeof(v)) < 0) {
			/* not kicked */
		}
		sweep = lease_now_ns() >= sweep_at;
		if (sweep)
			sweep_at = lease_deadline_ms(RECHECK_MS);
		pthread_mutex_lock(&h->lock);
		hub_check_locked(h, fs, p, n, sweep);
		pthread_mutex_unlock(&h->lock);
	}
	free(p);
	return NULL;
}

/* Caller holds hub->lock: the thread, on first use. */
static int hub_start_locked(struct file_store *fs)
{
	struct hub *h = &fs->hub;
	int r;

	if (h->running)
		return 0;
	h->kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (h->kick_fd < 0)
		return -errno;
	r = -pthread_create(&h->thr, NULL, hub_main, fs);
	if (r < 0) {
		close(h->kick_fd);
		h->kick_fd = -1;
		return r;
	}
	h->running = true;
	return 0;
}

/* Watch fl's record (before the record is written, so that a ring after
 * the write finds the bell in the poll set or the stamp outdated). */
static int hub_add(struct file_store *fs, struct file_lease *fl)
{
	struct hub *h = &fs->hub;
	int r;

	pthread_mutex_lock(&h->lock);
	r = hub_start_locked(fs);
	if (r == 0) {
		/* Matches no real stamp: the first sweep checks. */
		fl->seen = (struct rec_stamp){ .size = -1 };
		fl->next = h->leases;
		h->leases = fl;
		fl->watched = true;
		hub_kick_locked(h);
	}
	pthread_mutex_unlock(&h->lock);
	return r;
}

/* Stop watching fl; once this returns the thread no longer touches it. */
static void hub_remove(struct file_store *fs, struct file_lease *fl)
{
	struct hub *h = &fs->hub;

	pthread_mutex_lock(&h->lock);
	if (fl->watched) {
		hub_unlink_locked(h, fl);
		hub_kick_locked(h);
	}
	pthread_mutex_unlock(&h->lock);
}

/* At store close; every lease was freed before. */
static void hub_stop(struct hub *h)
{
	pthread_mutex_lock(&h->lock);
	h->stopping = true;
	hub_kick_locked(h);
	pthread_mutex_unlock(&h->lock);
	if (h->running) {
		pthread_join(h->thr, NULL);
		close(h->kick_fd);
		h->running = false;
	}
	pthread_mutex_destroy(&h->lock);
}

/* Unlink fl's bell.  Only while fl holds the grant lock: after that the
 * name, and its bell, may be a successor's. */
static void bell_unlink(struct file_store *fs, struct file_lease *fl)
{
	char rel[LEASE_NAME_MAX + 16];

	if (!fl->bell_linked)
		return;
	if (rel_path(rel, sizeof(rel), fl->lease->name, ".bell") == 0)
		unlinkat(fs->dirfd, rel, 0);
	fl->bell_linked = false;
}

static void file_lease_destroy(struct file_store *fs, struct file_lease *fl)
{
	if (!fl)
		return;
	hub_remove(fs, fl);
	bell_unlink(fs, fl); /* still linked: the grant failed */
	if (fl->lock_fd >= 0)
		close(fl->lock_fd);
	close_markers(fl->markers, fl->nmarkers);
	if (fl->bell_fd >= 0)
		close(fl->bell_fd);
	pthread_mutex_destroy(&fl->fd_lock);
	free(fl);
}

/* A lease's watch state with its bell bound.  The caller holds NAME's
 * grant lock. */
static int file_lease_new(struct file_store *fs, struct lease *l,
			  struct file_lease **out)
{
	struct file_lease *fl = calloc(1, sizeof(*fl));
	const char *slash = strrchr(l->name, '/');
	char bell[NAME_MAX + 1];
	int n, pfd;

	if (!fl)
		return -ENOMEM;
	pthread_mutex_init(&fl->fd_lock, NULL);
	fl->lock_fd = fl->bell_fd = -1;
	fl->lease = l;
	n = snprintf(bell, sizeof(bell), "%s.bell", slash ? slash + 1 : l->name);
	pfd = n < 0 || (size_t)n >= sizeof(bell) ? -ENAMETOOLONG
						  : open_parent(fs->dirfd, l->name);
	if (pfd >= 0) {
		fl->bell_fd = bell_bind(pfd, bell);
		close(pfd);
	}
	if (pfd < 0 || fl->bell_fd < 0) {
		n = pfd < 0 ? pfd : fl->bell_fd;
		pthread_mutex_destroy(&fl->fd_lock);
		free(fl);
		return n;
	}
	fl->bell_linked = true;
	*out = fl;
	return 0;
}

/* ---- store ---------------------------------------------------------- */

static int file_open(struct lease_store *store, const char *rest,
		     struct lease_err *err)
{
	const char *dir = lease_uri_local_dir(store->uri);
	struct file_store *fs = calloc(1, sizeof(*fs));
	char real[PATH_MAX];
	int r;

	if (!fs)
		return lease_err_set(err, LEASE_E_IO, -ENOMEM, NULL, "out of memory");
	fs->dirfd = -1;
	pthread_mutex_init(&fs->hub.lock, NULL);
	fs->hub.kick_fd = -1;
	r = mkdir_p(dir);
	if (r == 0 && !realpath(dir, real))
		r = -errno;
	if (r < 0) {
		lease_err_set(err, LEASE_E_UNREACHABLE, 0, NULL,
			      "cannot create lease directory %s: %s", dir,
			      strerror(-r));
		goto err_free;
	}
	fs->dir = strdup(real);
	fs->dirfd = open(real, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (!fs->dir || fs->dirfd < 0) {
		lease_err_set(err, LEASE_E_UNREACHABLE, 0, NULL,
			      "cannot open lease directory %s: %s", real,
			      strerror(fs->dir ? errno : ENOMEM));
		r = lease_errkind_errno(LEASE_E_UNREACHABLE);
		goto err_free;
	}
	store->priv = fs;
	return 0;
err_free:
	if (fs->dirfd >= 0)
		close(fs->dirfd);
	pthread_mutex_destroy(&fs->hub.lock);
	free(fs->dir);
	free(fs);
	return lease_errkind_errno(LEASE_E_UNREACHABLE);
}

/* Leases of the store must have been freed before close. */
static void file_close(struct lease_store *store)
{
	struct file_store *fs = fs_of(store);

	if (!fs)
		return;
	hub_stop(&fs->hub);
	close(fs->dirfd);
	free(fs->dir);
	free(fs);
	store->priv = NULL;
}

static const char *file_local_dir(const struct lease_store *store)
{
	return fs_of(store)->dir;
}

/* ---- epoch floor ------------------------------------------------------ */

/*
 * Store-wide floor, kept as the record of a pseudo-name no lease can have
 * ('!' cannot start a segment): every epoch ever granted to a name whose
 * files were removed (forgotten) is at most the floor, and a name without
 * a record starts above it.  Raised durably before any file is removed.
 */
#define FLOOR_NAME "!floor"

static int floor_read(struct file_store *fs, uint64_t *floor,
		      struct lease_err *err)
{
	struct rec rec;
	int r = rec_read(fs, FLOOR_NAME, &rec, NULL, err);

	*floor = r == 0 ? rec.epoch : 0;
	return r;
}

static int floor_raise(struct file_store *fs, uint64_t epoch, int64_t deadline)
{
	struct rec rec;
	int fd = open_lockfile(fs, FLOOR_NAME, true), r;

	if (fd < 0)
		return fd;
	r = rec_lock(fs, FLOOR_NAME, fd, deadline);
	if (r == 0)
		r = rec_read(fs, FLOOR_NAME, &rec, NULL, NULL);
	if (r == 0 && rec.epoch < epoch) {
		rec.epoch = epoch;
		rec.state = LEASE_STATE_FREE;
		r = rec_write(fs, FLOOR_NAME, &rec, NULL);
	}
	close(fd);
	return r;
}

/* Whether fd is the lock file still linked at name's path. */
static bool lockfile_current(struct file_store *fs, const char *name, int fd)
{
	char rel[LEASE_NAME_MAX + 16];
	struct stat a, b;

	return rel_path(rel, sizeof(rel), name, ".lock") == 0 &&
	       fstat(fd, &a) == 0 &&
	       fstatat(fs->dirfd, rel, &b, AT_SYMLINK_NOFOLLOW) == 0 &&
	       a.st_ino == b.st_ino && a.st_dev == b.st_dev;
}

/* ---- acquire -------------------------------------------------------- */

static int epoch_exhausted(struct file_store *fs, const char *name,
			   struct lease_err *err)
{
	return lease_err_set(err, LEASE_E_CORRUPT, 0, name,
			     "lease '%s' in %s has used up its epochs (2^64-1); "
			     "an epoch is never reused, so the name cannot be "
			     "granted again", name, fs->dir);
}

static int held_error(const char *name, const struct rec *rec,
		      struct lease_err *err)
{
	/* A revoked record carries the epoch that superseded the holder. */
	uint64_t e = rec->state == LEASE_STATE_REVOKED && rec->epoch
		? rec->epoch - 1 : rec->epoch;
	int r = lease_err_set(err, LEASE_E_HELD, 0, name,
			      "lease '%s' %s at epoch %" PRIu64
			      " by pid %d%s%s", name,
			      rec->state == LEASE_STATE_REVOKED ?
			      "was revoked and is not yet released" : "is held",
			      e, (int)rec->pid, rec->holder[0] ? " " : "",
			      rec->holder);

	if (err)
		err->holder_epoch = e;
	return r;
}

/* ---- scopes ---------------------------------------------------------- */

/* "SCOPE.in/NAME" with NAME's '/' as '!' (no name has a '!'), or with
 * name NULL the directory "SCOPE.in". */
static int marker_rel(char *buf, size_t sz, const char *scope, const char *name)
{
	int n = snprintf(buf, sz, "%s.in%s%s", scope, name ? "/" : "",
			 name ? name : "");

	if (n < 0 || (size_t)n >= sz)
		return -ENAMETOOLONG;
	for (char *p = buf + strlen(scope) + 4; name && *p; p++)
		if (*p == '/')
			*p = '!';
	return 0;
}

/* Create and write-lock NAME's marker in `scope`: fd or -errno. */
static int marker_take(struct file_store *fs, const char *scope,
		       const char *name)
{
	char rel[2 * LEASE_NAME_MAX + 16];
	int fd, r = make_parents(fs->dirfd, scope);

	if (r == 0)
		r = marker_rel(rel, sizeof(rel), scope, NULL);
	if (r == 0 && mkdirat(fs->dirfd, rel, 0700) < 0 && errno != EEXIST)
		r = -errno;
	if (r == 0)
		r = marker_rel(rel, sizeof(rel), scope, name);
	if (r < 0)
		return r;
	fd = openat(fs->dirfd, rel, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -errno;
	r = grant_trylock(fd);
	if (r < 0) {
		close(fd);
		return r;
	}
	return fd;
}

/* Every scope's marker, locked; on failure none.  *fds has sc->n. */
static int markers_take(struct file_store *fs, const char *name,
			const struct lease_scopes *sc, int **fds,
			struct lease_err *err)
{
	int r = 0;

	*fds = calloc(sc->n ? sc->n : 1, sizeof(**fds));
	if (!*fds)
		return lease_err_set(err, LEASE_E_IO, -ENOMEM, name, "out of memory");
	for (size_t i = 0; i < sc->n; i++)
		(*fds)[i] = -1;
	for (size_t i = 0; i < sc->n && r == 0; i++) {
		r = (*fds)[i] = marker_take(fs, sc->names[i], name);
		if (r >= 0)
			r = 0;
	}
	if (r < 0) {
		close_markers(*fds, sc->n);
		*fds = NULL;
		return lease_err_set(err, LEASE_E_IO, r, name, "cannot mark "
				     "'%s' within its scopes: %s", name,
				     strerror(-r));
	}
	return 0;
}

/* Whether the grant lock (byte 0) of `name` is held; its record in *rec. */
static bool name_granted(struct file_store *fs, const char *name, struct rec *rec)
{
	char rel[LEASE_NAME_MAX + 16];
	bool held = false;
	int fd;

	if (rel_path(rel, sizeof(rel), name, ".lock") < 0)
		return false;
	fd = openat(fs->dirfd, rel, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return false;
	if (grant_is_held(fd, &held) < 0)
		held = false;
	close(fd);
	if (held && rec_read(fs, name, rec, NULL, NULL) < 0)
		memset(rec, 0, sizeof(*rec));
	return held;
}

/* The grants living within `name` (locked markers in NAME.in): how many,
 * and the name of one in first (of LEASE_NAME_MAX + 1 bytes). */
static unsigned grants_within(struct file_store *fs, const char *name,
			      char *first)
{
	char rel[LEASE_NAME_MAX + 16];
	struct dirent *de;
	unsigned n = 0;
	int dfd;
	DIR *d;

	if (marker_rel(rel, sizeof(rel), name, NULL) < 0)
		return 0;
	dfd = openat(fs->dirfd, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (dfd < 0 || !(d = fdopendir(dfd))) {
		if (dfd >= 0)
			close(dfd);
		return 0;
	}
	while ((de = readdir(d)) != NULL) {
		bool held = false;
		int fd;

		if (de->d_name[0] == '.')
			continue;
		fd = openat(dirfd(d), de->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0)
			continue;
		if (grant_is_held(fd, &held) == 0 && held && n++ == 0) {
			snprintf(first, LEASE_NAME_MAX + 1, "%s", de->d_name);
			for (char *p = first; *p; p++)
				if (*p == '!')
					*p = '/';
		}
		close(fd);
	}
	closedir(d);
	return n;
}

/*
 * After `name`'s grant lock and its markers are taken: refused if a scope
 * is granted (or fenced) or something is granted within `name`.
 */
static int scopes_refuse(struct file_store *fs, const char *name,
			 const struct lease_scopes *sc, struct lease_err *err)
{
	char inner[LEASE_NAME_MAX + 1];
	struct rec rec;

	for (size_t i = 0; i < sc->n; i++)
		if (name_granted(fs, sc->names[i], &rec))
			return held_error(sc->names[i], &rec, err);
	if (grants_within(fs, name, inner) == 0)
		return 0;
	if (rec_read(fs, inner, &rec, NULL, NULL) < 0)
		memset(&rec, 0, sizeof(rec));
	return held_error(inner, &rec, err);
}

/* Record the grant and start its watcher.  Caller holds both locks on
 * lock_fd and the markers; on success both belong to *out. */
static int grant(struct lease_store *store, const char *name,
		 const struct lease_scopes *sc, int lock_fd, int *markers,
		 const struct rec *old, struct lease **out,
		 struct lease_err *err)
{
	struct file_store *fs = fs_of(store);
	struct file_lease *fl = NULL;
	struct lease *l = NULL;
	struct rec rec = { .epoch = old->epoch + 1, .state = LEASE_STATE_HELD,
			   .pid = getpid() };
	int r;

	if (old->epoch == UINT64_MAX)
		return epoch_exhausted(fs, name, err);
	holder_clean(rec.holder, sizeof(rec.holder), store->opts.holder);
	r = lease_alloc(store, name, rec.epoch, sc, &l);
	if (r == 0)
		r = file_lease_new(fs, l, &fl);
	if (r == 0)
		r = hub_add(fs, fl);
	if (r < 0) {
		r = lease_err_set(err, LEASE_E_IO, r, name,
				  "cannot watch lease '%s': %s", name,
				  strerror(-r));
		goto err_free;
	}
	r = rec_write(fs, name, &rec, err);
	if (r < 0)
		goto err_free;
	l->priv = fl;
	pthread_mutex_lock(&fl->fd_lock);
	fl->lock_fd = lock_fd;
	fl->markers = markers;
	fl->nmarkers = sc->n;
	pthread_mutex_unlock(&fl->fd_lock);
	*out = l;
	return 0;
err_free:
	file_lease_destroy(fs, fl);
	lease_dispose(l);
	return r;
}

/* The lock file of `name` with its record lock (byte 1) taken, on the inode
 * still linked at its path (a forget may unlink it while we wait:
 * then the next try creates a new one).  fd, or -errno with err set. */
static int lock_current(struct file_store *fs, const char *name,
			int64_t deadline, struct lease_err *err)
{
	for (int tries = 0; tries < 8; tries++) {
		int fd = open_lockfile(fs, name, true), r;

		if (fd < 0)
			return lease_err_set(err, LEASE_E_IO, fd, name,
					     "cannot open lock file for '%s' in "
					     "%s: %s", name, fs->dir,
					     strerror(-fd));
		r = rec_lock(fs, name, fd, deadline);
		if (r < 0) {
			close(fd);
			return r == -ETIMEDOUT
				? lease_err_set(err, LEASE_E_TIMEOUT, 0, name,
						"record lock of '%s' stayed busy",
						name)
				: lease_err_set(err, LEASE_E_IO, r, name,
						"cannot lock record of '%s': %s",
						name, strerror(-r));
		}
		if (lockfile_current(fs, name, fd))
			return fd;
		close(fd);
	}
	return lease_err_set(err, LEASE_E_IO, -ESTALE, name, "lock file of "
			     "'%s' keeps being replaced", name);
}

/*
 * Whether the grant lock of `name` is held, asked through a read-only
 * descriptor: its close raises no IN_CLOSE_WRITE, so a refused try wakes
 * no waiter for a change (file_await_change()).  With `rec`, the record is
 * read under a shared record lock, so a grant being written is seen whole.
 */
static bool grant_busy(struct file_store *fs, const char *name,
		       struct rec *rec, int64_t deadline)
{
	char rel[LEASE_NAME_MAX + 16], path[PATH_MAX];
	int64_t grace = lease_deadline_ms(REC_LOCK_GRACE_MS);
	bool held = false;
	int fd;

	if (rel_path(rel, sizeof(rel), name, ".lock") < 0 ||
	    abs_path(fs, name, ".lock", path, sizeof(path)) < 0)
		return false;
	fd = openat(fs->dirfd, rel, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return false;
	if (grant_is_held(fd, &held) < 0)
		held = false;
	if (held && rec &&
	    (lease_ofd_lock_wait(fd, path, F_RDLCK, 1, 1,
				 deadline > grace ? deadline : grace) < 0 ||
	     rec_read(fs, name, rec, NULL, NULL) < 0))
		held = false; /* let the full try say what is wrong */
	close(fd);
	return held;
}

static int file_try_acquire(struct lease_store *store, const char *name,
			    const struct lease_scopes *sc, int64_t deadline,
			    struct lease **out, struct lease_err *err)
{
	struct file_store *fs = fs_of(store);
	int *markers = NULL;
	struct rec rec;
	bool exists = false;
	int fd, r;

	/* Refused without opening the lock file for writing (see above). */
	if (grant_busy(fs, name, &rec, deadline))
		return held_error(name, &rec, err);
	fd = lock_current(fs, name, deadline, err);
	if (fd < 0)
		return fd;
	r = grant_trylock(fd);
	if (r < 0 && r != -EAGAIN) {
		r = lease_err_set(err, LEASE_E_IO, r, name,
				  "cannot lock '%s': %s", name, strerror(-r));
		goto out_close;
	}
	bool contended = r == -EAGAIN;
	r = rec_read(fs, name, &rec, &exists, err);
	/* A name without a record may have been forgotten: its epochs are
	 * under the store's floor. */
	if (r == 0 && !exists)
		r = floor_read(fs, &rec.epoch, err);
	if (r < 0)
		goto out_close;
	if (contended) {
		r = held_error(name, &rec, err);
		goto out_close;
	}
	/* Announced (grant lock, markers), then checked: see the top. */
	r = markers_take(fs, name, sc, &markers, err);
	if (r == 0)
		r = scopes_refuse(fs, name, sc, err);
	if (r == 0)
		r = grant(store, name, sc, fd, markers, &rec, out, err);
	if (r < 0)
		goto out_close;
	rec_unlock(fs, name, fd);
	return 0;
out_close:
	if (markers)
		close_markers(markers, sc->n);
	close(fd); /* drops both byte locks */
	return r;
}

/* ---- release and revoke -------------------------------------------- */

static int file_release(struct lease *l, int64_t deadline)
{
	struct file_store *fs = fs_of(l->store);
	struct file_lease *fl = l->priv;
	struct rec rec;
	int fd, r;

	hub_remove(fs, fl);
	bell_unlink(fs, fl);
	fd = open_lockfile(fs, l->name, false);
	if (fd < 0) {
		r = fd;
		goto out_drop;
	}
	r = rec_lock(fs, l->name, fd, deadline);
	if (r < 0)
		goto out_close;
	r = rec_read(fs, l->name, &rec, NULL, NULL);
	if (r < 0 || rec.epoch != l->epoch || rec.state != LEASE_STATE_HELD)
		goto out_close; /* superseded or unreadable: not ours to clear */
	rec.state = LEASE_STATE_FREE;
	r = rec_write(fs, l->name, &rec, NULL);
out_close:
	drop_grant(fl);
	close(fd);
	return r < 0 ? r : 0;
out_drop:
	drop_grant(fl);
	return r;
}

static int unlink_files(struct file_store *fs, const char *name)
{
	char rel[LEASE_NAME_MAX + 16];

	if (rel_path(rel, sizeof(rel), name, ".rec") < 0 ||
	    (unlinkat(fs->dirfd, rel, 0) < 0 && errno != ENOENT))
		return -errno;
	if (rel_path(rel, sizeof(rel), name, ".bell") < 0 ||
	    (unlinkat(fs->dirfd, rel, 0) < 0 && errno != ENOENT))
		return -errno; /* a dead holder's */
	if (rel_path(rel, sizeof(rel), name, ".lock") < 0 ||
	    (unlinkat(fs->dirfd, rel, 0) < 0 && errno != ENOENT))
		return -errno;
	return 0;
}

/*
 * Remove the released name's files if nobody took it since: under both of
 * its locks, raise the floor to its epoch, then unlink the record and the
 * lock file.  An acquirer that opened the old lock file meanwhile sees it
 * unlinked once it has the locks and starts over (lock_current()).
 */
static int file_forget(struct lease *l, int64_t deadline)
{
	struct file_store *fs = fs_of(l->store);
	bool exists = false;
	struct rec rec;
	int fd = open_lockfile(fs, l->name, false), r;

	if (fd < 0)
		return fd == -ENOENT ? 0 : fd;
	r = rec_lock(fs, l->name, fd, deadline);
	if (r == 0)
		r = grant_trylock(fd);
	if (r == 0)
		r = rec_read(fs, l->name, &rec, &exists, NULL);
	if (r == 0 && exists && rec.epoch == l->epoch &&
	    rec.state == LEASE_STATE_FREE && lockfile_current(fs, l->name, fd)) {
		r = floor_raise(fs, rec.epoch, deadline);
		if (r == 0)
			r = unlink_files(fs, l->name);
	}
	close(fd);
	return r == -EAGAIN ? 0 : r; /* taken again meanwhile: keep it */
}

static void file_free_lease(struct lease *l)
{
	file_lease_destroy(fs_of(l->store), l->priv);
	l->priv = NULL;
}

static int file_revoke(struct lease_store *store, const char *name,
		       int64_t deadline, uint64_t *epoch, struct lease_err *err)
{
	struct file_store *fs = fs_of(store);
	struct rec rec;
	bool held = false;
	int fd, r;

	fd = open_lockfile(fs, name, false);
	if (fd == -ENOENT)
		return lease_err_set(err, LEASE_E_IO, -ENOENT, name,
				     "cannot revoke '%s': not held", name);
	if (fd < 0)
		return lease_err_set(err, LEASE_E_IO, fd, name,
				     "cannot open lock file of '%s': %s", name,
				     strerror(-fd));
	r = rec_lock(fs, name, fd, deadline);
	if (r < 0) {
		r = lease_err_set(err, r == -ETIMEDOUT ? LEASE_E_TIMEOUT : LEASE_E_IO,
				  r, name, "cannot lock record of '%s': %s",
				  name, strerror(-r));
		goto out_close;
	}
	r = grant_is_held(fd, &held);
	if (r < 0) {
		r = lease_err_set(err, LEASE_E_IO, r, name,
				  "cannot test lock of '%s': %s", name,
				  strerror(-r));
		goto out_close;
	}
	if (held)
		r = rec_read(fs, name, &rec, NULL, err);
	if (r < 0)
		goto out_close;
	if (!held || rec.state != LEASE_STATE_HELD) {
		r = lease_err_set(err, LEASE_E_IO, -ENOENT, name,
				  "cannot revoke '%s': not held", name);
		goto out_close;
	}
	if (rec.epoch == UINT64_MAX) {
		r = epoch_exhausted(fs, name, err);
		goto out_close;
	}
	*epoch = rec.epoch++;
	rec.state = LEASE_STATE_REVOKED;
	r = rec_store(fs, name, &rec, true, err);
out_close:
	close(fd);
	return r;
}

/*
 * Wait for the grant lock's holder to let go: it closes its descriptor,
 * opened for writing, which raises IN_CLOSE_WRITE on the lock file (a
 * forget unlinks it: IN_DELETE_SELF).  The watch is set before the check.
 */
static void file_await_change(struct lease_store *store, const char *name,
			      const struct lease_scopes *sc, int64_t deadline)
{
	struct file_store *fs = fs_of(store);
	struct lease_close_watch w;
	char path[PATH_MAX], rel[LEASE_NAME_MAX + 16], inner[LEASE_NAME_MAX + 1];
	struct rec rec;
	bool busy;

	if (lease_deadline_passed(deadline) ||
	    abs_path(fs, name, ".lock", path, sizeof(path)) < 0 ||
	    lease_close_watch_open(&w, path, IN_CLOSE_WRITE | IN_DELETE_SELF) < 0)
		return;
	/* The scopes' grant locks, and the markers of grants within. */
	for (size_t i = 0; i < sc->n; i++)
		if (abs_path(fs, sc->names[i], ".lock", path, sizeof(path)) == 0)
			lease_close_watch_add(&w, path, IN_CLOSE_WRITE);
	if (marker_rel(rel, sizeof(rel), name, NULL) == 0 &&
	    snprintf(path, sizeof(path), "%s/%s", fs->dir, rel) < (int)sizeof(path))
		lease_close_watch_add(&w, path, IN_CLOSE_WRITE);
	busy = grant_busy(fs, name, NULL, deadline);
	for (size_t i = 0; !busy && i < sc->n; i++)
		busy = name_granted(fs, sc->names[i], &rec);
	if (!busy)
		busy = grants_within(fs, name, inner) > 0;
	if (busy)
		(void)lease_close_watch_wait(&w, deadline);
	lease_close_watch_close(&w);
}

/* Fenced once the grant lock is free, or once a later grant shows that
 * it was freed and taken again. */
static int fence_check(struct file_store *fs, const char *name, int fd,
		       uint64_t epoch, bool *done)
{
	struct rec rec = { 0 };
	bool held = true;
	int r = grant_is_held(fd, &held);

	if (r == 0 && held)
		r = rec_read(fs, name, &rec, NULL, NULL);
	*done = r == 0 && (!held || rec.epoch > epoch + 1);
	return r;
}

/*
 * Wait for the revoked holder's grant lock to go.  Its holder opened the
 * lock file for writing, so closing it raises IN_CLOSE_WRITE: the wait is
 * on that event, with a check after each.
 */
static int file_await_fence(struct lease_store *store, const char *name,
			    uint64_t epoch, int64_t deadline,
			    enum lease_fence *out, struct lease_err *err)
{
	struct file_store *fs = fs_of(store);
	struct lease_close_watch w = { .ino = -1 };
	char path[PATH_MAX];
	bool done = false;
	int fd = -1, r;

	*out = LEASE_FENCE_PENDING;
	r = abs_path(fs, name, ".lock", path, sizeof(path));
	if (r == 0)
		r = lease_close_watch_open(&w, path, IN_CLOSE_WRITE);
	if (r == 0) {
		fd = open_lockfile(fs, name, false);
		r = fd < 0 ? fd : 0;
	}
	while (r == 0 && (r = fence_check(fs, name, fd, epoch, &done)) == 0 &&
	       !done && lease_close_watch_wait(&w, deadline) == 0)
		;
	if (done)
		*out = LEASE_FENCE_ACKED;
	if (fd >= 0)
		close(fd);
	lease_close_watch_close(&w);
	if (r < 0)
		return lease_err_set(err, LEASE_E_IO, r, name,
				     "cannot wait for '%s' to be released: %s",
				     name, strerror(-r));
	return 0;
}

/* ---- operator view -------------------------------------------------- */

static int file_show(struct lease_store *store, const char *name,
		     struct lease_info *info, struct lease_err *err)
{
	struct file_store *fs = fs_of(store);
	struct rec rec;
	bool held = false;
	int fd, r;

	memset(info, 0, sizeof(*info));
	snprintf(info->name, sizeof(info->name), "%s", name);
	r = rec_read(fs, name, &rec, NULL, err);
	if (r < 0)
		return r;
	fd = open_lockfile(fs, name, false);
	if (fd >= 0) {
		r = grant_is_held(fd, &held);
		close(fd);
	} else if (fd != -ENOENT) {
		r = fd;
	}
	if (r < 0)
		return lease_err_set(err, LEASE_E_IO, r, name,
				     "cannot test lock of '%s': %s", name,
				     strerror(-r));
	info->within = grants_within(fs, name, info->within_name);
	if (info->within) {
		struct rec in;

		if (rec_read(fs, info->within_name, &in, NULL, NULL) == 0)
			info->within_epoch = in.epoch;
	}
	info->epoch = rec.epoch;
	if (rec.state == LEASE_STATE_REVOKED)
		info->state = LEASE_STATE_REVOKED;
	else
		info->state = held ? LEASE_STATE_HELD : LEASE_STATE_FREE;
	if (info->state == LEASE_STATE_HELD) {
		info->holder_pid = rec.pid;
		snprintf(info->holder, sizeof(info->holder), "%s", rec.holder);
	}
	return 0;
}

struct walk {
	struct lease_store *store;
	lease_list_cb cb;
	void *userdata;
	struct lease_err *err;
};

static int walk_dir(struct walk *w, int dfd, char *prefix, size_t plen);

/* One directory entry: recurse into directories, report *.rec files. */
static int walk_entry(struct walk *w, int dfd, const char *ent, char *prefix,
		      size_t plen)
{
	size_t n = strlen(ent);
	struct lease_info info;
	struct stat st;
	int r;

	if (plen + n + 2 > LEASE_NAME_MAX + 8)
		return 0;
	if (fstatat(dfd, ent, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return 0; /* vanished */
	if (S_ISDIR(st.st_mode)) {
		int sub = openat(dfd, ent, O_RDONLY | O_DIRECTORY | O_CLOEXEC |
				 O_NOFOLLOW);

		if (sub < 0)
			return 0;
		sprintf(prefix + plen, "%s/", ent);
		r = walk_dir(w, sub, prefix, plen + n + 1);
		prefix[plen] = '\0';
		return r;
	}
	if (!S_ISREG(st.st_mode) || n <= 4 || strcmp(ent + n - 4, ".rec") != 0)
		return 0;
	sprintf(prefix + plen, "%.*s", (int)(n - 4), ent);
	r = 0;
	if (lease_name_validate(prefix, NULL) == 0) {
		r = file_show(w->store, prefix, &info, w->err);
		if (r == 0)
			r = w->cb(&info, w->userdata);
	}
	prefix[plen] = '\0';
	return r;
}

/* Takes ownership of dfd. */
static int walk_dir(struct walk *w, int dfd, char *prefix, size_t plen)
{
	DIR *d = fdopendir(dfd);
	struct dirent *de;
	int r = 0;

	if (!d) {
		close(dfd);
		return 0;
	}
	while (r == 0 && (de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		r = walk_entry(w, dirfd(d), de->d_name, prefix, plen);
	}
	closedir(d);
	return r;
}

static int file_list(struct lease_store *store, lease_list_cb cb,
		     void *userdata, struct lease_err *err)
{
	struct file_store *fs = fs_of(store);
	struct walk w = { store, cb, userdata, err };
	char prefix[LEASE_NAME_MAX + 16] = "";
	int dfd = openat(fs->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (dfd < 0)
		return lease_err_set(err, LEASE_E_IO, -errno, NULL,
				     "cannot open lease directory %s: %s",
				     fs->dir, strerror(errno));
	return walk_dir(&w, dfd, prefix, 0);
}

const struct lease_backend lease_backend_file = {
	.scheme = "file",
	.open = file_open,
	.close = file_close,
	.try_acquire = file_try_acquire,
	.release = file_release,
	.free_lease = file_free_lease,
	.list = file_list,
	.show = file_show,
	.revoke = file_revoke,
	.await_fence = file_await_fence,
	.await_change = file_await_change,
	.forget = file_forget,
	.local_dir = file_local_dir,
};
