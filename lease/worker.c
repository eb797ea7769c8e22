/* SPDX-License-Identifier: MIT */
/* A store's one thread: start, kick, wait, stop (contract: backend.h). */
#include <errno.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "backend.h"

int lease_worker_start_locked(struct lease_worker *w, void *(*fn)(void *),
			      void *arg)
{
	int r;

	if (w->running)
		return 0;
	w->kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (w->kick_fd < 0)
		return -errno;
	w->stopping = false;
	r = -pthread_create(&w->thr, NULL, fn, arg);
	if (r < 0) {
		close(w->kick_fd);
		w->kick_fd = -1;
		return r;
	}
	w->running = true;
	return 0;
}

void lease_worker_kick(struct lease_worker *w)
{
	/* An add that fails leaves the counter nonzero: the thread wakes.
	 * kick_fd is set before the thread runs and cleared after it is
	 * joined. */
	if (w->kick_fd >= 0)
		(void)eventfd_write(w->kick_fd, 1);
}

short lease_worker_wait(struct lease_worker *w, int fd, int timeout_ms)
{
	struct pollfd p[2] = {
		{ .fd = w->kick_fd, .events = POLLIN },
		{ .fd = fd, .events = POLLIN },
	};
	eventfd_t v;

	poll(p, fd >= 0 ? 2 : 1, timeout_ms);
	(void)eventfd_read(w->kick_fd, &v); /* EAGAIN: not kicked */
	return fd >= 0 ? p[1].revents : 0;
}

void lease_worker_stop(struct lease_worker *w, pthread_mutex_t *lock)
{
	pthread_mutex_lock(lock);
	if (!w->running) {
		pthread_mutex_unlock(lock);
		return;
	}
	w->stopping = true;
	lease_worker_kick(w);
	pthread_mutex_unlock(lock);
	pthread_join(w->thr, NULL);
	close(w->kick_fd);
	w->kick_fd = -1;
	w->running = false;
}
