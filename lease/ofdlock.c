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

/* Sleep until path is closed by a writer, or the deadline. */
static int wait_close(int ino, int64_t deadline)
{
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	struct pollfd p = { .fd = ino, .events = POLLIN };
	int64_t left = deadline - lease_now_ns();

	if (left <= 0)
		return -EAGAIN;
	if (poll(&p, 1, (int)(left / 1000000 + 1)) < 0 && errno != EINTR)
		return -errno;
	while (read(ino, buf, sizeof(buf)) > 0)
		;
	return 0;
}

int lease_ofd_lock_wait(int fd, const char *path, short type, off_t start,
			off_t len, int64_t deadline)
{
	int ino, r = try_lock(fd, type, start, len);

	if (r != -EAGAIN || lease_deadline_passed(deadline))
		return r;
	ino = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
	if (ino < 0)
		return -errno;
	/* Read locks are held through read-only descriptors: their closes
	 * count too. */
	if (inotify_add_watch(ino, path, IN_CLOSE_WRITE | IN_CLOSE_NOWRITE |
			      IN_DELETE_SELF) < 0) {
		r = -errno;
		goto out;
	}
	/* Watch first, then try: a release after the try wakes the wait. */
	while ((r = try_lock(fd, type, start, len)) == -EAGAIN) {
		r = wait_close(ino, deadline);
		if (r < 0)
			break;
	}
out:
	close(ino);
	return r;
}

void lease_ofd_unlock_notify(int fd, const char *path, off_t start, off_t len)
{
	struct flock fl = { .l_type = F_UNLCK, .l_whence = SEEK_SET,
			    .l_start = start, .l_len = len };
	int w;

	(void)fcntl(fd, F_OFD_SETLK, &fl); /* cannot fail on a lock we hold */
	w = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
	if (w >= 0)
		close(w);
}
