/* SPDX-License-Identifier: MIT */
/*
 * The file backend: the watcher thread and the leases it watches.
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

/* Every held record is looked at this often for changes made by hand
 * (bell.c: a ring that cannot be delivered costs only time). */
#define RECHECK_MS 1000

/* ---- watcher -------------------------------------------------------- */

void fb_close_markers(int *fds, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	free(fds);
}

void fb_drop_grant(struct file_lease *fl)
{
	pthread_mutex_lock(&fl->fd_lock);
	if (fl->lock_fd >= 0) {
		close(fl->lock_fd);
		fl->lock_fd = -1;
	}
	fb_close_markers(fl->markers, fl->nmarkers);
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
	int r = fb_rec_read(fs_of(l->store), l->name, &rec, &exists, &err);

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

	if (fb_rel_path(rel, sizeof(rel), name, ".rec") == 0 &&
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
	/* An add that fails leaves the counter nonzero: the thread wakes. */
	if (h->running)
		(void)eventfd_write(h->kick_fd, 1);
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
	eventfd_t v;

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
		(void)eventfd_read(h->kick_fd, &v); /* EAGAIN: not kicked */
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
int fb_hub_add(struct file_store *fs, struct file_lease *fl)
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
void fb_hub_remove(struct file_store *fs, struct file_lease *fl)
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
void fb_hub_stop(struct hub *h)
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
void fb_bell_unlink(struct file_store *fs, struct file_lease *fl)
{
	char rel[LEASE_NAME_MAX + 16];

	if (!fl->bell_linked)
		return;
	if (fb_rel_path(rel, sizeof(rel), fl->lease->name, ".bell") == 0)
		lease_unlink_beneath(fs->dirfd, rel, 0);
	fl->bell_linked = false;
}

void fb_file_lease_destroy(struct file_store *fs, struct file_lease *fl)
{
	if (!fl)
		return;
	fb_hub_remove(fs, fl);
	fb_bell_unlink(fs, fl); /* still linked: the grant failed */
	if (fl->lock_fd >= 0)
		close(fl->lock_fd);
	fb_close_markers(fl->markers, fl->nmarkers);
	if (fl->bell_fd >= 0)
		close(fl->bell_fd);
	pthread_mutex_destroy(&fl->fd_lock);
	free(fl);
}

/* A lease's watch state with its bell bound.  The caller holds NAME's
 * grant lock. */
int fb_file_lease_new(struct file_store *fs, struct lease *l,
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
						  : fb_open_parent(fs->dirfd, l->name);
	if (pfd >= 0) {
		fl->bell_fd = fb_bell_bind(pfd, bell);
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
