/* SPDX-License-Identifier: MIT */
/*
 * Waiting for an OFD lock without polling.  OFD locks have no timed wait,
 * and F_OFD_SETLKW cannot be bounded without signals.  So every holder
 * lets go in a way inotify sees: by closing a descriptor of the file that
 * was opened for writing (or, for a read lock, for reading), or with
 * lease_ofd_unlock_notify() (unlock, then open and close the file for
 * writing).  Each raises IN_CLOSE_WRITE or IN_CLOSE_NOWRITE, and a waiter
 * makes one more try per event.  The watch is in place before each
 * try, so a release between a failed try and the wait is never missed.
 * A waiter that cannot get an inotify instance polls instead.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "lease.h"

static int try_lock(int fd, short type, off_t start, off_t len)
{
	struct flock fl = { .l_type = type, .l_whence = SEEK_SET,
			    .l_start = start, .l_len = len };

	if (fcntl(fd, F_OFD_SETLK, &fl) == 0)
		return 0;
	return errno == EACCES ? -EAGAIN : -errno;
}

/* Backoff bounds of the fallback poll (no inotify instance to be had). */
#define POLL_MIN_MS 1
#define POLL_MAX_MS 64

int lease_close_watch_open(struct lease_close_watch *w, const char *path,
			   uint32_t mask)
{
	w->backoff_ms = POLL_MIN_MS;
	w->ino = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
	if (w->ino < 0)
		/* Out of instances (fs.inotify.max_user_instances counts per
		 * user) or of memory: every wait is followed by a check, so
		 * a poll is slower, never wrong. */
		return errno == EMFILE || errno == ENFILE || errno == ENOMEM
			? 0 : -errno;
	if (inotify_add_watch(w->ino, path, mask) < 0) {
		int r = errno == ENOSPC ? 0 : -errno; /* out of watches: poll */

		close(w->ino);
		w->ino = -1;
		return r;
	}
	return 0;
}

int lease_close_watch_add(struct lease_close_watch *w, const char *path,
			  uint32_t mask)
{
	if (w->ino < 0 || inotify_add_watch(w->ino, path, mask) >= 0)
		return 0;
	if (errno == ENOENT)
		return 0; /* nothing there: nothing to wait for */
	/* Out of watches: poll from now on, never wrong. */
	close(w->ino);
	w->ino = -1;
	return 0;
}

int lease_close_watch_wait(struct lease_close_watch *w, int64_t deadline)
{
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	struct pollfd p = { .fd = w->ino, .events = POLLIN };
	int64_t left = deadline - lease_now_ns();
	int ms;

	if (left <= 0)
		return -EAGAIN;
	ms = (int)(left / 1000000 + 1);
	if (w->ino < 0) {
		if (ms > w->backoff_ms)
			ms = w->backoff_ms;
		if (w->backoff_ms < POLL_MAX_MS)
			w->backoff_ms *= 2;
	}
	if (poll(w->ino < 0 ? NULL : &p, w->ino < 0 ? 0 : 1, ms) < 0 &&
	    errno != EINTR)
		return -errno;
	if (w->ino >= 0)
		while (read(w->ino, buf, sizeof(buf)) > 0)
			;
	return 0;
}

void lease_close_watch_close(struct lease_close_watch *w)
{
	if (w->ino >= 0)
		close(w->ino);
	w->ino = -1;
}

int lease_ofd_lock_wait(int fd, const char *path, short type, off_t start,
			off_t len, int64_t deadline)
{
	struct lease_close_watch w;
	int r = try_lock(fd, type, start, len);

	if (r != -EAGAIN || lease_deadline_passed(deadline))
		return r;
	/* Read locks are held through read-only descriptors: their closes
	 * count too. */
	r = lease_close_watch_open(&w, path, IN_CLOSE_WRITE | IN_CLOSE_NOWRITE |
				   IN_DELETE_SELF);
	if (r < 0)
		return r;
	/* Watch first, then try: a release after the try wakes the wait. */
	while ((r = try_lock(fd, type, start, len)) == -EAGAIN) {
		r = lease_close_watch_wait(&w, deadline);
		if (r < 0)
			break;
	}
	lease_close_watch_close(&w);
	return r;
}

void lease_ofd_unlock_notify(int fd, const char *path, off_t start, off_t len)
{
	struct flock fl = { .l_type = F_UNLCK, .l_whence = SEEK_SET,
			    .l_start = start, .l_len = len };
	int w;

	(void)fcntl(fd, F_OFD_SETLK, &fl); /* cannot fail on a lock we hold */
	w = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (w >= 0)
		close(w);
}
