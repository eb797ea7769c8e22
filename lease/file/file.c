/* SPDX-License-Identifier: MIT */
/*
 * The file backend: the store and the backend operations.
 * The layout and what the units share: file_int.h.
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

#include "file_int.h"

/* ---- store ---------------------------------------------------------- */

static int file_open(struct lease_store *store, const char *rest,
		     struct lease_err *err)
{
	const char *dir = lease_uri_local_dir(store->uri);
	struct file_store *fs = calloc(1, sizeof(*fs));
	char real[PATH_MAX];
	int r;

	(void)rest; /* a file: URI names only its directory */
	if (!fs)
		return lease_err_set(err, LEASE_E_IO, -ENOMEM, NULL, "out of memory");
	fs->dirfd = -1;
	pthread_mutex_init(&fs->hub.lock, NULL);
	fs->hub.kick_fd = -1;
	r = fb_mkdir_p(dir);
	if (r == 0 && !realpath(dir, real))
		r = -errno;
	if (r < 0) {
		lease_err_set(err, LEASE_E_UNREACHABLE, 0, NULL,
			      "cannot create lease directory %s: %s", dir,
			      lease_strerror(r));
		goto err_free;
	}
	fs->dir = strdup(real);
	/* The directory realpath() named, only if no component of it has
	 * become a symlink since: the store is never somewhere else. */
	fs->dirfd = lease_open_canonical_dir(real, O_RDONLY);
	if (!fs->dir || fs->dirfd < 0) {
		lease_err_set(err, LEASE_E_UNREACHABLE, 0, NULL,
			      "cannot open lease directory %s: %s%s", real,
			      fs->dirfd == -ELOOP ? "a component became a "
			      "symbolic link while it was opened: " : "",
			      strerror(!fs->dir ? ENOMEM : -fs->dirfd));
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
	fb_hub_stop(&fs->hub);
	close(fs->dirfd);
	free(fs->dir);
	free(fs);
	store->priv = NULL;
}

static const char *file_local_dir(const struct lease_store *store)
{
	return fs_of(store)->dir;
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
	fb_holder_clean(rec.holder, sizeof(rec.holder), store->opts.holder);
	r = lease_alloc(store, name, rec.epoch, sc, &l);
	if (r == 0)
		r = fb_file_lease_new(fs, l, &fl);
	if (r < 0)
		goto err_watch;
	/* The bell is bound (a revoke from now on is queued on it), but the
	 * hub judges the record only once it is ours: watched before, a
	 * sweep could read the previous holder's revoked record and lose
	 * the new grant at once. */
	r = fb_rec_write(fs, name, &rec, err);
	if (r < 0)
		goto err_free;
	r = fb_hub_add(fs, fl);
	if (r < 0)
		goto err_watch;
	l->priv = fl;
	pthread_mutex_lock(&fl->fd_lock);
	fl->lock_fd = lock_fd;
	fl->markers = markers;
	fl->nmarkers = sc->n;
	pthread_mutex_unlock(&fl->fd_lock);
	*out = l;
	return 0;
err_watch:
	r = lease_err_set(err, LEASE_E_IO, r, name, "cannot watch lease "
			  "'%s': %s", name, lease_strerror(r));
err_free:
	fb_file_lease_destroy(fs, fl);
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
		int fd = fb_open_lockfile(fs, name, true), r;

		if (fd < 0)
			return lease_err_set(err, LEASE_E_IO, fd, name,
					     "cannot open lock file for '%s' in "
					     "%s: %s", name, fs->dir,
					     lease_strerror(fd));
		r = fb_rec_lock(fs, name, fd, deadline);
		if (r < 0) {
			close(fd);
			return r == -ETIMEDOUT
				? lease_err_set(err, LEASE_E_TIMEOUT, 0, name,
						"record lock of '%s' stayed busy",
						name)
				: lease_err_set(err, LEASE_E_IO, r, name,
						"cannot lock record of '%s': %s",
						name, lease_strerror(r));
		}
		if (fb_lockfile_current(fs, name, fd))
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

	if (fb_rel_path(rel, sizeof(rel), name, ".lock") < 0 ||
	    fb_abs_path(fs, name, ".lock", path, sizeof(path)) < 0)
		return false;
	fd = lease_open_beneath(fs->dirfd, rel, O_RDONLY, 0);
	if (fd < 0)
		return false;
	if (fb_grant_is_held(fd, &held) < 0)
		held = false;
	if (held && rec &&
	    (lease_ofd_lock_wait(fd, path, F_RDLCK, 1, 1,
				 deadline > grace ? deadline : grace) < 0 ||
	     fb_rec_read(fs, name, rec, NULL, NULL) < 0))
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
		return fb_held_error(name, &rec, err);
	fd = lock_current(fs, name, deadline, err);
	if (fd < 0)
		return fd;
	r = fb_grant_trylock(fd);
	if (r < 0 && r != -EAGAIN) {
		r = lease_err_set(err, LEASE_E_IO, r, name,
				  "cannot lock '%s': %s", name, lease_strerror(r));
		goto out_close;
	}
	bool contended = r == -EAGAIN;
	r = fb_rec_read(fs, name, &rec, &exists, err);
	/* A name without a record may have been forgotten: its epochs are
	 * under the store's floor. */
	if (r == 0 && !exists)
		r = fb_floor_read(fs, &rec.epoch, err);
	if (r < 0)
		goto out_close;
	if (contended) {
		r = fb_held_error(name, &rec, err);
		goto out_close;
	}
	/* Announced (grant lock, markers), then checked: see the top. */
	r = fb_markers_take(fs, name, sc, &markers, err);
	if (r == 0)
		r = fb_scopes_refuse(fs, name, sc, err);
	if (r == 0)
		r = grant(store, name, sc, fd, markers, &rec, out, err);
	if (r < 0)
		goto out_close;
	fb_rec_unlock(fs, name, fd);
	return 0;
out_close:
	if (markers)
		fb_close_markers(markers, sc->n);
	close(fd); /* drops both byte locks */
	return r;
}

/* ---- release and revoke -------------------------------------------- */

/*
 * Whether a release at `epoch` clears the record: our own grant, or the
 * revoke that superseded it (epoch + 1, state revoked).  The release is the
 * revoke's acknowledgement, so the marker goes with it: the name is free
 * (at the revoke's epoch, so the next grant is higher still), for every
 * placement.  A later grant's record is never touched.
 */
static bool ours_to_clear(const struct rec *rec, uint64_t epoch)
{
	if (rec->state == LEASE_STATE_HELD)
		return rec->epoch == epoch;
	return rec->state == LEASE_STATE_REVOKED && epoch < UINT64_MAX &&
	       rec->epoch == epoch + 1;
}

static int file_release(struct lease *l, int64_t deadline)
{
	struct file_store *fs = fs_of(l->store);
	struct file_lease *fl = l->priv;
	struct rec rec;
	int fd, r;

	fb_hub_remove(fs, fl);
	fb_bell_unlink(fs, fl);
	fd = fb_open_lockfile(fs, l->name, false);
	if (fd < 0) {
		r = fd;
		goto out_drop;
	}
	r = fb_rec_lock(fs, l->name, fd, deadline);
	if (r < 0)
		goto out_close;
	r = fb_rec_read(fs, l->name, &rec, NULL, NULL);
	if (r < 0 || !ours_to_clear(&rec, l->epoch))
		goto out_close; /* superseded or unreadable: not ours to clear */
	rec.state = LEASE_STATE_FREE;
	r = fb_rec_write(fs, l->name, &rec, NULL);
out_close:
	fb_drop_grant(fl);
	close(fd);
	return r < 0 ? r : 0;
out_drop:
	fb_drop_grant(fl);
	return r;
}

static int unlink_files(struct file_store *fs, const char *name)
{
	static const char *const exts[] = { ".rec", ".bell", ".lock" };
	char rel[LEASE_NAME_MAX + 16];

	/* The bell left is a dead holder's. */
	for (size_t i = 0; i < sizeof(exts) / sizeof(exts[0]); i++) {
		int r = fb_rel_path(rel, sizeof(rel), name, exts[i]);

		if (r == 0)
			r = lease_unlink_beneath(fs->dirfd, rel, 0);
		if (r < 0 && r != -ENOENT)
			return r;
	}
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
	int fd = fb_open_lockfile(fs, l->name, false), r;

	if (fd < 0)
		return fd == -ENOENT ? 0 : fd;
	r = fb_rec_lock(fs, l->name, fd, deadline);
	if (r == 0)
		r = fb_grant_trylock(fd);
	if (r == 0)
		r = fb_rec_read(fs, l->name, &rec, &exists, NULL);
	if (r == 0 && exists && rec.epoch == l->epoch &&
	    rec.state == LEASE_STATE_FREE && fb_lockfile_current(fs, l->name, fd)) {
		r = fb_floor_raise(fs, rec.epoch, deadline);
		if (r == 0)
			r = unlink_files(fs, l->name);
	}
	close(fd);
	return r == -EAGAIN ? 0 : r; /* taken again meanwhile: keep it */
}

static void file_free_lease(struct lease *l)
{
	fb_file_lease_destroy(fs_of(l->store), l->priv);
	l->priv = NULL;
}

static int file_revoke(struct lease_store *store, const char *name,
		       int64_t deadline, uint64_t *epoch, struct lease_err *err)
{
	struct file_store *fs = fs_of(store);
	struct rec rec;
	bool held = false;
	int fd, r;

	fd = fb_open_lockfile(fs, name, false);
	if (fd == -ENOENT)
		return lease_err_set(err, LEASE_E_IO, -ENOENT, name,
				     "cannot revoke '%s': not held", name);
	if (fd < 0)
		return lease_err_set(err, LEASE_E_IO, fd, name,
				     "cannot open lock file of '%s': %s", name,
				     lease_strerror(fd));
	r = fb_rec_lock(fs, name, fd, deadline);
	if (r < 0) {
		r = lease_err_set(err, r == -ETIMEDOUT ? LEASE_E_TIMEOUT : LEASE_E_IO,
				  r, name, "cannot lock record of '%s': %s",
				  name, lease_strerror(r));
		goto out_close;
	}
	r = fb_grant_is_held(fd, &held);
	if (r < 0) {
		r = lease_err_set(err, LEASE_E_IO, r, name,
				  "cannot test lock of '%s': %s/%s.lock: %s",
				  name, fs->dir, name, lease_strerror(r));
		goto out_close;
	}
	if (held)
		r = fb_rec_read(fs, name, &rec, NULL, err);
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
	r = fb_rec_store(fs, name, &rec, true, err);
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
	    fb_abs_path(fs, name, ".lock", path, sizeof(path)) < 0 ||
	    lease_close_watch_open(&w, path, IN_CLOSE_WRITE | IN_DELETE_SELF) < 0)
		return;
	/* The scopes' grant locks, and the markers of grants within. */
	for (size_t i = 0; i < sc->n; i++)
		if (fb_abs_path(fs, sc->names[i], ".lock", path, sizeof(path)) == 0)
			lease_close_watch_add(&w, path, IN_CLOSE_WRITE);
	if (fb_marker_rel(rel, sizeof(rel), name, NULL) == 0 &&
	    snprintf(path, sizeof(path), "%s/%s", fs->dir, rel) < (int)sizeof(path))
		lease_close_watch_add(&w, path, IN_CLOSE_WRITE);
	busy = grant_busy(fs, name, NULL, deadline);
	for (size_t i = 0; !busy && i < sc->n; i++)
		busy = fb_name_granted(fs, sc->names[i], &rec);
	if (!busy)
		busy = fb_grants_within(fs, name, inner) > 0;
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
	int r = fb_grant_is_held(fd, &held);

	if (r == 0 && held)
		r = fb_rec_read(fs, name, &rec, NULL, NULL);
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
	r = fb_abs_path(fs, name, ".lock", path, sizeof(path));
	if (r == 0)
		r = lease_close_watch_open(&w, path, IN_CLOSE_WRITE);
	if (r == 0) {
		fd = fb_open_lockfile(fs, name, false);
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
				     name, lease_strerror(r));
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
	r = fb_rec_read(fs, name, &rec, NULL, err);
	if (r < 0)
		return r;
	fd = fb_open_lockfile(fs, name, false);
	if (fd >= 0) {
		r = fb_grant_is_held(fd, &held);
		close(fd);
	} else if (fd != -ENOENT) {
		r = fd;
	}
	if (r < 0)
		return lease_err_set(err, LEASE_E_IO, r, name,
				     "cannot test lock of '%s': %s/%s.lock: %s",
				     name, fs->dir, name, lease_strerror(r));
	info->within = fb_grants_within(fs, name, info->within_name);
	if (info->within) {
		struct rec in;

		if (fb_rec_read(fs, info->within_name, &in, NULL, NULL) == 0)
			info->within_epoch = in.epoch;
	}
	info->epoch = rec.epoch;
	/* Revoked means "not yet fenced": a revoked holder that released
	 * or died (its grant lock gone) leaves the name free. */
	if (!held)
		info->state = LEASE_STATE_FREE;
	else if (rec.state == LEASE_STATE_REVOKED)
		info->state = LEASE_STATE_REVOKED;
	else
		info->state = LEASE_STATE_HELD;
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
		int sub = lease_open_beneath(dfd, ent, O_RDONLY | O_DIRECTORY, 0);

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
