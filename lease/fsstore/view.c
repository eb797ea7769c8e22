/* SPDX-License-Identifier: MIT */
/*
 * The fsstore backend: our records, show, list, revoke and its fence
 * (who holds a lock file: holders.c; the layout: fsstore_int.h).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsstore_int.h"

/* A revoke of a leasefs holder: its record says so, for every later
 * revoke and show. */
static int holder_mark_revoked(struct fss_store *fs, const char *hex)
{
	char rel[FSS_HEX_LEN + 32];
	int fd, r = 0;

	snprintf(rel, sizeof(rel), "leasefs/holders/%s.holder", hex);
	fd = fss_openat(fs, rel, O_WRONLY, 0);
	if (fd < 0)
		return fd;
	if (pwrite(fd, "revoked", 7, FSS_STATE_OFF) != 7)
		r = -errno;
	close(fd);
	return r;
}

unsigned fss_within(struct fss_store *fs, const char *name, char *first,
		    size_t firstsz, uint64_t *first_epoch)
{
	char hex[FSS_HEX_LEN + 1], rel[FSS_HEX_LEN + 32];
	unsigned n = 0;
	struct dirent *de;
	DIR *d;
	int dfd;

	fss_hex(name, hex);
	snprintf(rel, sizeof(rel), "leasefs/within/%s", hex);
	dfd = fss_openat(fs, rel, O_RDONLY | O_DIRECTORY, 0);
	if (dfd < 0 || !(d = fdopendir(dfd))) {
		if (dfd >= 0)
			close(dfd);
		return 0;
	}
	while ((de = readdir(d)) != NULL) {
		char buf[LEASE_NAME_MAX + 32], inner[LEASE_NAME_MAX + 1];
		unsigned long long e;
		int fd;
		ssize_t k;

		if (de->d_name[0] == '.')
			continue;
		fd = lease_open_beneath(dirfd(d), de->d_name, O_RDONLY, 0);
		if (fd < 0)
			continue; /* gone, or not a marker: not a grant */
		k = pread(fd, buf, sizeof(buf) - 1, 0);
		if (k > 0 && fss_record_live(fd)) {
			buf[k] = '\0';
			if (sscanf(buf, "%llu %512s", &e, inner) == 2 && n++ == 0) {
				snprintf(first, firstsz, "%s", inner);
				*first_epoch = e;
			}
		}
		close(fd);
	}
	closedir(d);
	return n;
}

/* ---- show and list -------------------------------------------------- */

/* fss_show() with what `v` saw of the holders (a walk shares one). */
static int show_in(struct fss_view *v, struct lease_store *store,
		   const char *name, struct lease_info *info,
		   struct lease_err *err)
{
	struct fss_store *fs = fss_of(store);
	char hex[FSS_HEX_LEN + 1];
	uint64_t he = 0;
	pid_t pid = 0, hpid = 0;
	bool revoked = false;
	int fd, r;

	memset(info, 0, sizeof(*info));
	snprintf(info->name, sizeof(info->name), "%s", name);
	info->within = fss_within(fs, name, info->within_name,
				  sizeof(info->within_name), &info->within_epoch);
	fd = fss_lock_open(fs, name, false);
	if (fd == -ENOENT)
		return 0;
	if (fd < 0)
		return lease_err_set(err, LEASE_E_IO, fd, name, "open lease '%s': "
				     "%s/leases/%s.lock: %s", name, fs->dir, name, lease_strerror(fd));
	r = fss_epoch_read(fs, fd, name, false, &info->epoch, err);
	if (r == 0 && fss_lock_held_in(v, fs, name, fd, info->epoch, &pid) > 0) {
		info->state = LEASE_STATE_HELD;
		info->holder_pid = pid;
		fss_hex(name, hex);
		if (fss_holder_read(fs, hex, &he, &hpid, &revoked, info->holder,
				    sizeof(info->holder)) && he == info->epoch) {
			if (revoked)
				info->state = LEASE_STATE_REVOKED;
		} else {
			snprintf(info->holder, sizeof(info->holder),
				 "not a leasefs mount (no loss channel)");
		}
	}
	close(fd);
	return r;
}

int fss_show(struct lease_store *store, const char *name,
	     struct lease_info *info, struct lease_err *err)
{
	struct fss_view v;
	int r;

	fss_view_init(&v);
	r = show_in(&v, store, name, info, err);
	fss_view_free(&v);
	return r;
}

struct walk {
	struct lease_store *store;
	lease_list_cb cb;
	void *ud;
	int stop;
	struct fss_view view; /* one look at the holders for the whole walk */
	int failed;           /* the first name that could not be read ... */
	struct lease_err *err; /* ... said here; the walk goes on */
};

/* Every NAME.lock below leases/PREFIX, depth first. */
static int walk_dir(struct walk *w, int dfd, char *prefix, size_t plen)
{
	DIR *d = fdopendir(dfd);
	struct dirent *de;

	if (!d) {
		close(dfd);
		return 0;
	}
	while (!w->stop && (de = readdir(d)) != NULL) {
		size_t n = strlen(de->d_name);

		if (de->d_name[0] == '.' || plen + n + 2 > LEASE_NAME_MAX + 8)
			continue;
		memcpy(prefix + plen, de->d_name, n + 1);
		if (de->d_type == DT_DIR) {
			int sub = lease_open_beneath(dirfd(d), de->d_name,
						     O_RDONLY | O_DIRECTORY, 0);

			prefix[plen + n] = '/';
			prefix[plen + n + 1] = '\0';
			if (sub >= 0)
				walk_dir(w, sub, prefix, plen + n + 1);
		} else if (n > 5 && strcmp(de->d_name + n - 5, ".lock") == 0) {
			struct lease_info info;

			prefix[plen + n - 5] = '\0';
			struct lease_err e = { 0 };
			int r;

			if (lease_name_validate(prefix, NULL) < 0)
				continue;
			r = show_in(&w->view, w->store, prefix, &info, &e);
			if (r == 0)
				w->stop = w->cb(&info, w->ud);
			else if (!w->failed && (w->failed = r) && w->err)
				*w->err = e;
		}
	}
	closedir(d);
	return w->stop;
}

int fss_list(struct lease_store *store, lease_list_cb cb, void *userdata,
	     struct lease_err *err)
{
	struct fss_store *fs = fss_of(store);
	struct walk w = { store, cb, userdata, 0, { 0 }, 0, err };
	char prefix[LEASE_NAME_MAX + 16] = "";
	int dfd = fss_openat(fs, "leases", O_RDONLY | O_DIRECTORY, 0), r;

	if (dfd < 0)
		return lease_err_set(err, LEASE_E_IO, dfd, NULL, "fsstore %s: "
				     "leases: %s", fs->dir, lease_strerror(dfd));
	fss_view_init(&w.view);
	r = walk_dir(&w, dfd, prefix, 0);
	fss_view_free(&w.view);
	return r ? r : w.failed;
}

/* ---- revoke --------------------------------------------------------- */

int fss_revoke(struct lease_store *store, const char *name, int64_t deadline,
	       uint64_t *epoch, struct lease_err *err)
{
	struct fss_store *fs = fss_of(store);
	char hex[FSS_HEX_LEN + 1];
	uint64_t he;
	pid_t pid, hpid;
	bool revoked;
	int fd = fss_lock_open(fs, name, false), r;

	(void)deadline;
	if (fd == -ENOENT)
		return lease_err_not_held(err, name);
	if (fd < 0)
		return lease_err_set(err, LEASE_E_IO, fd, name, "open lease '%s': "
				     "%s/leases/%s.lock: %s", name, fs->dir, name, lease_strerror(fd));
	r = fss_epoch_read(fs, fd, name, false, epoch, err);
	if (r == 0 && fss_lock_held(fs, name, fd, *epoch, &pid) <= 0)
		r = lease_err_not_held(err, name);
	close(fd);
	if (r < 0)
		return r;
	fss_hex(name, hex);
	if (!fss_holder_read(fs, hex, &he, &hpid, &revoked, NULL, 0) ||
	    he != *epoch)
		return 0; /* a harness holder: await_fence says it cannot be told */
	if (revoked)
		return lease_err_not_held(err, name); /* revoked already: nothing held */
	r = holder_mark_revoked(fs, hex);
	if (r == 0)
		r = fss_bell_ring(fs, hex, *epoch);
	if (r < 0)
		return lease_err_set(err, LEASE_E_IO, r, name, "revoke '%s' in "
				     "%s: cannot tell its holder: %s", name,
				     fs->dir, lease_strerror(r));
	return 0;
}

/* Fenced: the name's lock (`fd`, open on it) let go, or granted past
 * `epoch` since. */
static int fenced(struct fss_store *fs, const char *name, int fd,
		  uint64_t epoch, bool *yes, struct lease_err *err)
{
	uint64_t e = 0;
	pid_t pid;
	int r = fss_epoch_read(fs, fd, name, false, &e, err);

	*yes = false;
	if (r == 0 && e > epoch)
		*yes = true;
	else if (r == 0 && (r = fss_lock_held(fs, name, fd, e, &pid)) >= 0)
		*yes = r == 0;
	if (r < 0 && err && err->kind == LEASE_OK)
		r = lease_err_set(err, LEASE_E_IO, r, name, "who holds lease "
				  "'%s': %s", name, lease_strerror(r));
	return r < 0 ? r : 0;
}

/*
 * A holder's close is reported before the kernel drops the flock it
 * carried, so a wake may find the lock still there and no later event:
 * between events the fence is looked at again, backing off from
 * FENCE_LOOK_MIN_MS to FENCE_LOOK_MAX_MS.
 */
#define FENCE_LOOK_MIN_MS 1
#define FENCE_LOOK_MAX_MS 256

/* Until `deadline` or the next look, whichever is first. */
static void fence_wait(struct lease_close_watch *w, int *look_ms,
		       int64_t deadline)
{
	int64_t until = lease_deadline_ms(*look_ms);

	lease_close_watch_wait(w, until < deadline ? until : deadline);
	if (*look_ms < FENCE_LOOK_MAX_MS)
		*look_ms *= 2;
}

int fss_await_fence(struct lease_store *store, const char *name,
		    uint64_t epoch, int64_t deadline, enum lease_fence *out,
		    struct lease_err *err)
{
	struct fss_store *fs = fss_of(store);
	char hex[FSS_HEX_LEN + 1], rel[PATH_MAX], path[PATH_MAX * 2];
	struct lease_close_watch w;
	int look_ms = FENCE_LOOK_MIN_MS;
	uint64_t he;
	pid_t hpid;
	bool revoked, yes = false;
	/* Open for the whole wait: a close of our own would wake it. */
	int fd = fss_lock_open(fs, name, false), r;

	*out = fd == -ENOENT ? LEASE_FENCE_ACKED : LEASE_FENCE_PENDING;
	if (fd < 0)
		return fd == -ENOENT ? 0 : lease_err_set(err, LEASE_E_IO, fd, name,
					"open lease '%s': %s/leases/%s.lock: %s", name, fs->dir, name, lease_strerror(fd));
	fss_hex(name, hex);
	fss_lock_rel(rel, sizeof(rel), name);
	snprintf(path, sizeof(path), "%s/%s", fs->dir, rel);
	r = lease_close_watch_open(&w, path, IN_CLOSE);
	if (r < 0) {
		close(fd);
		return lease_err_set(err, LEASE_E_IO, r, name, "watch %s: %s",
				     path, lease_strerror(r));
	}
	for (;;) {
		/* The record first: it outlives the grant's lock, so a record
		 * gone and the lock still held is not a leasefs holder's. */
		bool leasefs = fss_holder_read(fs, hex, &he, &hpid, &revoked,
					       NULL, 0) && he == epoch;

		r = fenced(fs, name, fd, epoch, &yes, err);
		if (r < 0 || yes)
			break;
		if (!leasefs) {
			lease_err_untold(err, name, epoch,
					 "it releases or exits (fsstore has no TTL)");
			break;
		}
		if (lease_deadline_passed(deadline))
			break;
		fence_wait(&w, &look_ms, deadline);
	}
	lease_close_watch_close(&w);
	close(fd);
	if (r == 0 && yes)
		*out = LEASE_FENCE_ACKED;
	return r;
}
