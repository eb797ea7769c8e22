/* SPDX-License-Identifier: MIT */
/*
 * The fsstore backend: the store, acquire and release (the layout and
 * what the units share: fsstore_int.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/openat2.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fsstore_int.h"

/* How long a contender waits at least for H.acq: a winner holds it for a
 * write and an fsync; longer is the store's owner holding it (then the
 * contender is refused as busy, or reports the epoch before). */
#define ACQ_SETTLE_MS 2000


/* Under the grant: the epoch one above the file's, written at 0,
 * truncated and synced before the grant is returned. */
static int epoch_raise(struct fss_store *fs, int fd, const char *name,
		       uint64_t *out, struct lease_err *err)
{
	char buf[32];
	uint64_t e;
	int n, r = fss_epoch_read(fs, fd, name, true, &e, err);

	if (r < 0)
		return r;
	if (e == UINT64_MAX)
		return lease_err_set(err, LEASE_E_CORRUPT, 0, name,
				     "lease '%s' in %s has used up its epochs "
				     "(2^64-1); an epoch is never reused",
				     name, fs->dir);
	n = snprintf(buf, sizeof(buf), "%" PRIu64 "\n", e + 1);
	if (pwrite(fd, buf, (size_t)n, 0) != n || ftruncate(fd, n) < 0 ||
	    fsync(fd) < 0)
		return lease_err_set(err, LEASE_E_IO, -errno, name,
				     "write lease '%s' in %s: %s", name,
				     fs->dir, strerror(errno));
	*out = e + 1;
	return 0;
}

/* ---- records of our own -------------------------------------------- */

/*
 * Make dir/base with `text`, locked (flock LOCK_EX), replacing a dead
 * holder's: written under a unique name, locked, then renamed.  The
 * locked fd, or -errno.
 */
static int record_make(struct fss_store *fs, const char *dir, const char *base,
		       const char *text)
{
	char tmp[FSS_HEX_LEN + 64];
	uint64_t rnd = 0;
	size_t len = strlen(text);
	int dfd = fss_dir_open(fs, dir, true), fd, r = 0;

	if (dfd < 0)
		return dfd;
	if (getrandom(&rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
		rnd = (uint64_t)lease_now_ns();
	snprintf(tmp, sizeof(tmp), ".%s.%016" PRIx64 ".tmp", base, rnd);
	fd = lease_open_beneath(dfd, tmp, O_RDWR | O_CREAT | O_EXCL, 0600);
	if (fd < 0) {
		r = fd;
		goto out;
	}
	if (write(fd, text, len) != (ssize_t)len || flock(fd, LOCK_EX | LOCK_NB) < 0 ||
	    renameat(dfd, tmp, dfd, base) < 0) {
		r = -errno;
		unlinkat(dfd, tmp, 0);
		close(fd);
		goto out;
	}
	r = fd;
out:
	close(dfd);
	return r;
}

static void record_remove(struct fss_store *fs, const char *dir,
			  const char *base)
{
	int dfd = fss_dir_open(fs, dir, false);

	if (dfd >= 0) {
		unlinkat(dfd, base, 0);
		close(dfd);
	}
}

static void marker_dir(char *buf, size_t sz, const char *scope)
{
	char hex[FSS_HEX_LEN + 1];

	fss_hex(scope, hex);
	snprintf(buf, sz, "leasefs/within/%s", hex);
}

static int markers_make(struct fss_store *fs, struct fss_lease *fl,
			const struct lease_scopes *sc)
{
	char dir[FSS_HEX_LEN + 32], text[LEASE_NAME_MAX + 32];

	snprintf(text, sizeof(text), "%" PRIu64 " %s\n", fl->lease->epoch,
		 fl->lease->name);
	for (size_t i = 0; i < sc->n; i++) {
		marker_dir(dir, sizeof(dir), sc->names[i]);
		fl->marker_fds[i] = record_make(fs, dir, fl->hex, text);
		if (fl->marker_fds[i] < 0)
			return fl->marker_fds[i];
	}
	return 0;
}

static int holder_make(struct fss_store *fs, struct fss_lease *fl)
{
	char base[FSS_HEX_LEN + 8], *text = NULL;
	const char *desc = fl->lease->store->opts.holder;
	int r;

	if (asprintf(&text, "%020" PRIu64 " %010d held   \n%s\n",
		     fl->lease->epoch, (int)getpid(), desc ? desc : "") < 0)
		return -ENOMEM;
	snprintf(base, sizeof(base), "%s.holder", fl->hex);
	r = record_make(fs, "leasefs/holders", base, text);
	free(text);
	if (r < 0)
		return r;
	fl->holder_fd = r;
	return 0;
}

/* ---- acquire -------------------------------------------------------- */

/*
 * leasefs acquirers of one name take leasefs/holders/H.acq (flock
 * LOCK_EX) around locking NAME.lock and raising its epoch, and a leasefs
 * contender refused by NAME.lock waits for it (LOCK_SH) before it reads
 * the epoch: it reports the winner's epoch, never the one before.  The
 * section is local I/O only (a write and an fsync), so the wait is short.
 * A harness winner takes no such lock: a contender that loses to one in
 * the moment between its lock and its write reports the epoch before.
 */
static int acq_try(int fd, int op)
{
	while (flock(fd, op | LOCK_NB) < 0)
		if (errno != EINTR)
			return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	return 0;
}

/* H.acq locked with `op`, waiting for its holder (whose close wakes us)
 * until `deadline` at most: the store's owner can hold it for ever.  The
 * fd, -EAGAIN at the deadline, or -errno. */
static int acq_lock(struct fss_store *fs, const char *hex, int op,
		    int64_t deadline)
{
	char rel[FSS_HEX_LEN + 32], path[PATH_MAX + FSS_HEX_LEN + 32];
	struct lease_close_watch w;
	int fd, r;

	snprintf(rel, sizeof(rel), "leasefs/holders/%s.acq", hex);
	fd = fss_openat(fs, rel, O_RDWR | O_CREAT, 0600);
	if (fd < 0 || (r = acq_try(fd, op)) == 0)
		return fd;
	snprintf(path, sizeof(path), "%s/%s", fs->dir, rel);
	if (r == -EAGAIN && lease_close_watch_open(&w, path, IN_CLOSE) == 0) {
		/* Watch first, then try: a close after the try wakes us. */
		while ((r = acq_try(fd, op)) == -EAGAIN &&
		       lease_close_watch_wait(&w, deadline) == 0)
			;
		lease_close_watch_close(&w);
	}
	if (r < 0) {
		close(fd);
		return r;
	}
	return fd;
}

/* LEASE_E_HELD naming `who` with its epoch (read leniently). */
static int held(struct fss_store *fs, const char *who, int fd, uint64_t epoch,
		struct lease_err *err)
{
	uint64_t e = epoch;
	int r;

	if (fd >= 0 && fss_epoch_read(fs, fd, who, false, &e, NULL) < 0)
		e = 0;
	r = lease_err_set(err, LEASE_E_HELD, 0, who, "lease '%s' is held at "
			  "epoch %" PRIu64, who, e);
	if (err)
		err->holder_epoch = e;
	return r;
}

/* Refused by NAME.lock's holder: its epoch once a leasefs winner has
 * written it.  (fl->lock_fd is open on NAME.lock; fl->acq_fd is ours.) */
static int held_settled(struct fss_store *fs, struct fss_lease *fl,
			const char *name, struct lease_err *err)
{
	int wait;

	/* We hold H.acq ourselves: give it up to wait for the winner's. */
	close(fl->acq_fd);
	fl->acq_fd = -1;
	wait = acq_lock(fs, fl->hex, LOCK_SH, lease_deadline_ms(ACQ_SETTLE_MS));
	if (wait >= 0)
		close(wait);
	return held(fs, name, fl->lock_fd, 0, err);
}

/* Shared locks on the scopes' lock files: a scope granted is busy. */
static int scopes_lock(struct fss_store *fs, struct fss_lease *fl,
		       const struct lease_scopes *sc, struct lease_err *err)
{
	for (size_t i = 0; i < sc->n; i++) {
		int fd = fss_lock_open(fs, sc->names[i], true);

		if (fd < 0)
			return lease_err_set(err, LEASE_E_IO, fd, sc->names[i],
					     "open lease '%s': %s/leases/%s.lock: %s",
					     sc->names[i], fs->dir, sc->names[i], lease_strerror(fd));
		fl->scope_fds[i] = fd;
		if (flock(fd, LOCK_SH | LOCK_NB) < 0)
			return errno == EWOULDBLOCK
				? held(fs, sc->names[i], fd, 0, err)
				: lease_err_set(err, LEASE_E_IO, -errno,
						sc->names[i], "flock %s: %s",
						sc->names[i], strerror(errno));
	}
	return 0;
}

/* The grant's own lock; refused by a holder of the name or by a grant
 * living within it (named, if its marker is there already). */
static int name_lock(struct fss_store *fs, struct fss_lease *fl,
		     const char *name, struct lease_err *err)
{
	char inner[LEASE_NAME_MAX + 1];
	uint64_t inner_epoch = 0;
	int fd = fss_lock_open(fs, name, true);

	if (fd < 0)
		return lease_err_set(err, fd == -ENAMETOOLONG ? LEASE_E_BADNAME
				     : LEASE_E_IO, fd, name,
				     "open lease '%s': %s/leases/%s.lock: %s", name, fs->dir, name,
				     lease_strerror(fd));
	fl->lock_fd = fd;
	if (flock(fd, LOCK_EX | LOCK_NB) == 0)
		return 0;
	if (errno != EWOULDBLOCK)
		return lease_err_set(err, LEASE_E_IO, -errno, name, "flock %s: %s",
				     name, strerror(errno));
	if (fss_within(fs, name, inner, sizeof(inner), &inner_epoch) > 0)
		return held(fs, inner, -1, inner_epoch, err);
	return held_settled(fs, fl, name, err);
}

static struct fss_lease *fss_lease_new(const char *name, size_t nscopes)
{
	struct fss_lease *fl = calloc(1, sizeof(*fl));

	if (!fl)
		return NULL;
	fl->lock_fd = fl->holder_fd = fl->bell_fd = fl->acq_fd = -1;
	fl->nscopes = nscopes;
	fl->scope_fds = calloc(nscopes ? nscopes : 1, sizeof(int));
	fl->marker_fds = calloc(nscopes ? nscopes : 1, sizeof(int));
	if (!fl->scope_fds || !fl->marker_fds) {
		free(fl->scope_fds);
		free(fl->marker_fds);
		free(fl);
		return NULL;
	}
	for (size_t i = 0; i < nscopes; i++)
		fl->scope_fds[i] = fl->marker_fds[i] = -1;
	fss_hex(name, fl->hex);
	return fl;
}

/* Our bell and markers go first, then the grant's lock: from then on a
 * successor may come, and nothing we remove can be its. */
static void fss_lease_drop(struct fss_store *fs, struct fss_lease *fl,
			   const struct lease *l)
{
	char dir[FSS_HEX_LEN + 32];

	fss_bell_close(fs, fl);
	for (size_t i = 0; i < fl->nscopes; i++) {
		if (fl->marker_fds[i] < 0)
			continue;
		if (l) {
			marker_dir(dir, sizeof(dir), l->scopes[i]);
			record_remove(fs, dir, fl->hex);
		}
		close(fl->marker_fds[i]);
		fl->marker_fds[i] = -1;
	}
	for (size_t i = 0; i < fl->nscopes; i++) {
		if (fl->scope_fds[i] >= 0)
			close(fl->scope_fds[i]);
		fl->scope_fds[i] = -1;
	}
	if (fl->lock_fd >= 0)
		close(fl->lock_fd);
	fl->lock_fd = -1;
	/* The holder's record outlives the grant's lock by a moment, so that
	 * a revoker waiting for the fence never takes a leasefs holder for a
	 * harness one; it is left in place, unlocked (a successor's replaces
	 * it: removing it could remove the successor's). */
	if (fl->holder_fd >= 0)
		close(fl->holder_fd);
	fl->holder_fd = -1;
}

static void fss_lease_free(struct fss_lease *fl)
{
	free(fl->scope_fds);
	free(fl->marker_fds);
	free(fl);
}

/* What the grant needs besides its locks: the lease, its markers, the
 * holder's record and bell. */
static int grant(struct lease_store *store, struct fss_lease *fl,
		 const char *name, uint64_t epoch, const struct lease_scopes *sc,
		 struct lease **out, struct lease_err *err)
{
	struct fss_store *fs = fss_of(store);
	struct lease *l = NULL;
	int r = lease_alloc(store, name, epoch, sc, &l);

	if (r < 0)
		return lease_err_set(err, LEASE_E_IO, r, name, "out of memory");
	fl->lease = l;
	l->priv = fl;
	r = markers_make(fs, fl, sc);
	if (r == 0)
		r = holder_make(fs, fl);
	if (r == 0)
		r = fss_bell_open(fs, fl);
	if (r < 0) {
		lease_err_set(err, LEASE_E_IO, r, name, "lease '%s' in %s: its "
			      "records: %s", name, fs->dir, lease_strerror(r));
		fss_lease_drop(fs, fl, l);
		l->priv = NULL;
		lease_dispose(l);
		return r;
	}
	*out = l;
	return 0;
}

static int fss_try_acquire(struct lease_store *store, const char *name,
			   const struct lease_scopes *sc, int64_t deadline,
			   struct lease **out, struct lease_err *err)
{
	struct fss_store *fs = fss_of(store);
	struct fss_lease *fl = fss_lease_new(name, sc->n);
	uint64_t epoch = 0;
	int r;

	/* Every step is a non-blocking try or local I/O, but for H.acq's
	 * wait, bounded by `deadline`. */
	if (!fl)
		return lease_err_set(err, LEASE_E_IO, -ENOMEM, name,
				     "out of memory");
	r = scopes_lock(fs, fl, sc, err);
	if (r == 0) {
		int64_t settle = lease_deadline_ms(ACQ_SETTLE_MS);

		/* A winner's section is short: wait it out even past a
		 * deadline of 0, so that a refusal names its epoch. */
		fl->acq_fd = acq_lock(fs, fl->hex, LOCK_EX,
				      deadline > settle ? deadline : settle);
		if (fl->acq_fd == -EAGAIN)
			r = held(fs, name, -1, 0, err);
		else if (fl->acq_fd < 0)
			r = lease_err_set(err, LEASE_E_IO, fl->acq_fd, name,
					  "lease '%s': %s/leasefs/holders/%s.acq: "
					  "%s", name, fs->dir, fl->hex,
					  lease_strerror(fl->acq_fd));
	}
	if (r == 0)
		r = name_lock(fs, fl, name, err);
	if (r == 0)
		r = epoch_raise(fs, fl->lock_fd, name, &epoch, err);
	if (fl->acq_fd >= 0)
		close(fl->acq_fd);
	fl->acq_fd = -1;
	if (r == 0)
		r = grant(store, fl, name, epoch, sc, out, err);
	if (r == 0)
		return 0;
	/* What grant() made it removed itself; the locks go here. */
	fss_lease_drop(fs, fl, NULL);
	fss_lease_free(fl);
	return r;
}

/* Wake on a close of any lock file that refused us. */
static void fss_await_change(struct lease_store *store, const char *name,
			     const struct lease_scopes *sc, int64_t deadline)
{
	struct fss_store *fs = fss_of(store);
	struct lease_close_watch w;
	char rel[PATH_MAX], path[PATH_MAX * 2];

	fss_lock_rel(rel, sizeof(rel), name);
	snprintf(path, sizeof(path), "%s/%s", fs->dir, rel);
	if (lease_close_watch_open(&w, path, IN_CLOSE) < 0)
		return;
	for (size_t i = 0; i < sc->n; i++) {
		fss_lock_rel(rel, sizeof(rel), sc->names[i]);
		snprintf(path, sizeof(path), "%s/%s", fs->dir, rel);
		lease_close_watch_add(&w, path, IN_CLOSE);
	}
	lease_close_watch_wait(&w, deadline);
	lease_close_watch_close(&w);
}

static int fss_release(struct lease *l, int64_t deadline)
{
	struct fss_lease *fl = l->priv;

	(void)deadline;
	if (fl)
		fss_lease_drop(fss_of(l->store), fl, l);
	return 0;
}

static void fss_free_lease(struct lease *l)
{
	struct fss_lease *fl = l->priv;

	if (!fl)
		return;
	fss_lease_drop(fss_of(l->store), fl, l);
	fss_lease_free(fl);
	l->priv = NULL;
}

/* ---- store ---------------------------------------------------------- */

static int fss_mkdirs(struct fss_store *fs)
{
	static const char *const dirs[] = {
		"leases", "leasefs", "leasefs/holders", "leasefs/within",
	};

	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		int fd = fss_dir_open(fs, dirs[i], true);

		if (fd < 0)
			return fd;
		close(fd);
	}
	return 0;
}

static int fss_open(struct lease_store *store, const char *rest,
		    struct lease_err *err)
{
	struct fss_store *fs = calloc(1, sizeof(*fs));
	char real[PATH_MAX];
	struct stat st;
	int r;

	if (!fs)
		return lease_err_set(err, LEASE_E_IO, -ENOMEM, NULL, "out of memory");
	fs->dirfd = -1;
	fs->worker.kick_fd = -1;
	pthread_mutex_init(&fs->lock, NULL);
	if (!rest || rest[0] != '/') {
		r = lease_err_set(err, LEASE_E_USAGE, 0, NULL, "fsstore: '%s' is "
				  "not an absolute directory (fsstore:/DIR)",
				  rest ? rest : "");
		goto fail;
	}
	if ((mkdir(rest, 0700) < 0 && errno != EEXIST) || !realpath(rest, real)) {
		r = lease_err_set(err, LEASE_E_UNREACHABLE, 0, NULL, "fsstore %s: "
				  "%s", rest, strerror(errno));
		goto fail;
	}
	/* The directory realpath() named, only if no component of it has
	 * become a symlink since: the store is never somewhere else. */
	fs->dirfd = lease_open_canonical_dir(real, O_PATH);
	if (fs->dirfd < 0 || fstat(fs->dirfd, &st) < 0 ||
	    !(fs->dir = strdup(real))) {
		r = lease_err_set(err, LEASE_E_UNREACHABLE, 0, NULL, "fsstore %s: "
				  "%s%s", real, fs->dirfd == -ELOOP ? "a component "
				  "became a symbolic link while it was opened: " : "",
				  strerror(fs->dirfd < 0 ? -fs->dirfd : errno ? errno : ENOMEM));
		goto fail;
	}
	fs->owner = st.st_uid;
	fs->group = st.st_gid;
	fs->chown = geteuid() == 0 && st.st_uid != 0;
	r = fss_mkdirs(fs);
	if (r < 0) {
		r = lease_err_set(err, LEASE_E_UNREACHABLE, 0, NULL, "fsstore %s: "
				  "cannot make its directories: %s", real,
				  lease_strerror(r));
		goto fail;
	}
	store->priv = fs;
	return 0;
fail:
	if (fs->dirfd >= 0)
		close(fs->dirfd);
	pthread_mutex_destroy(&fs->lock);
	free(fs->dir);
	free(fs);
	return r;
}

/* Leases of the store must have been freed before close. */
static void fss_close(struct lease_store *store)
{
	struct fss_store *fs = fss_of(store);

	if (!fs)
		return;
	fss_watcher_stop(fs);
	close(fs->dirfd);
	pthread_mutex_destroy(&fs->lock);
	free(fs->dir);
	free(fs);
	store->priv = NULL;
}

static const char *fss_local_dir(const struct lease_store *store)
{
	return fss_of(store)->dir;
}

const struct lease_backend lease_backend_fsstore = {
	.scheme = "fsstore",
	.open = fss_open,
	.close = fss_close,
	.try_acquire = fss_try_acquire,
	.await_change = fss_await_change,
	.release = fss_release,
	.free_lease = fss_free_lease,
	.list = fss_list,
	.show = fss_show,
	.revoke = fss_revoke,
	.await_fence = fss_await_fence,
	.local_dir = fss_local_dir,
};
