/* SPDX-License-Identifier: MIT */
/*
 * The fsstore backend: a leasefs holder's loss channel (the layout:
 * fsstore_int.h).  While it holds a grant, the holder has a datagram
 * socket bound at leasefs/holders/H.bell; a revoker sends "revoke EPOCH"
 * to it, and the store's one watcher thread marks the lease lost.  A bell
 * is one descriptor (no inotify instance, whose per-user limit is small),
 * and it works across pid and mount namespaces.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "fsstore_int.h"

#define HOLDERS "leasefs/holders"

/* sun_path holds 108 bytes: a bell is named through its directory's
 * descriptor, as "/proc/self/fd/N/BASE". */
static int bell_addr(struct sockaddr_un *sa, int dfd, const char *base)
{
	int n;

	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	n = snprintf(sa->sun_path, sizeof(sa->sun_path), "/proc/self/fd/%d%s%s",
		     dfd, base[0] ? "/" : "", base);
	return n < 0 || (size_t)n >= sizeof(sa->sun_path) ? -ENAMETOOLONG : 0;
}

/* An O_PATH fd of the socket `base` in dfd, never through a symlink:
 * the fd, -ENOTSOCK if it is something else, or -errno. */
static int bell_pin(int dfd, const char *base)
{
	struct stat st;
	int fd = openat(dfd, base, O_PATH | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode)) {
		close(fd);
		return -ENOTSOCK;
	}
	return fd;
}

/* Bound under a unique name, then renamed over a dead holder's bell. */
static int bell_bind(int dfd, const char *base)
{
	struct sockaddr_un sa;
	char tmp[FSS_HEX_LEN + 40];
	uint64_t rnd = (uint64_t)lease_now_ns();
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	int r;

	if (fd < 0)
		return -errno;
	if (getrandom(&rnd, sizeof(rnd), 0) < 0) {
		/* the clock's value will do */
	}
	snprintf(tmp, sizeof(tmp), ".%.16s.%016" PRIx64 ".bell", base, rnd);
	r = bell_addr(&sa, dfd, tmp);
	if (r == 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		r = -errno;
	if (r == 0 && renameat(dfd, tmp, dfd, base) < 0) {
		r = -errno;
		unlinkat(dfd, tmp, 0);
	}
	if (r < 0) {
		close(fd);
		return r;
	}
	return fd;
}

/* One datagram on fl's bell: a revoke of its epoch marks it lost. */
static void bell_take(struct fss_lease *fl)
{
	char buf[64];
	ssize_t n;

	while ((n = recv(fl->bell_fd, buf, sizeof(buf) - 1, 0)) > 0) {
		uint64_t e;

		buf[n] = '\0';
		if (sscanf(buf, "revoke %" SCNu64, &e) == 1 &&
		    e == fl->lease->epoch)
			lease_mark_lost(fl->lease, LEASE_LOSS_REVOKED);
	}
}

/* Caller holds fs->lock: the poll set, kick first; *cap grows. */
static nfds_t pollset_locked(struct fss_store *fs, struct pollfd **p,
			     size_t *cap)
{
	nfds_t n = 1;

	for (struct fss_lease *fl = fs->leases; fl; fl = fl->next)
		n++;
	if (n > *cap) {
		struct pollfd *q = realloc(*p, n * sizeof(*q));

		if (!q)
			return 1;
		*p = q;
		*cap = n;
	}
	(*p)[0] = (struct pollfd){ .fd = fs->worker.kick_fd, .events = POLLIN };
	n = 1;
	for (struct fss_lease *fl = fs->leases; fl; fl = fl->next)
		(*p)[n++] = (struct pollfd){ .fd = fl->bell_fd, .events = POLLIN };
	return n;
}

static void *watcher(void *arg)
{
	struct fss_store *fs = arg;
	struct pollfd *p = NULL;
	size_t cap = 0;

	for (;;) {
		eventfd_t v;
		nfds_t n;

		pthread_mutex_lock(&fs->lock);
		if (fs->worker.stopping) {
			pthread_mutex_unlock(&fs->lock);
			break;
		}
		n = pollset_locked(fs, &p, &cap);
		pthread_mutex_unlock(&fs->lock);
		if (poll(p, n, -1) < 0 && errno != EINTR)
			break;
		(void)eventfd_read(fs->worker.kick_fd, &v); /* EAGAIN: not kicked */
		pthread_mutex_lock(&fs->lock);
		/* The set may have changed since the poll: match by fd. */
		for (struct fss_lease *fl = fs->leases; fl; fl = fl->next)
			for (nfds_t i = 1; i < n; i++)
				if (p[i].fd == fl->bell_fd && p[i].revents)
					bell_take(fl);
		pthread_mutex_unlock(&fs->lock);
	}
	free(p);
	return NULL;
}

int fss_bell_open(struct fss_store *fs, struct fss_lease *fl)
{
	char base[FSS_HEX_LEN + 8];
	int dfd = fss_openat(fs, HOLDERS, O_PATH | O_DIRECTORY, 0), r;

	if (dfd < 0)
		return dfd;
	snprintf(base, sizeof(base), "%s.bell", fl->hex);
	fl->bell_fd = bell_bind(dfd, base);
	close(dfd);
	if (fl->bell_fd < 0)
		return fl->bell_fd;
	pthread_mutex_lock(&fs->lock);
	r = lease_worker_start_locked(&fs->worker, watcher, fs);
	if (r == 0) {
		fl->next = fs->leases;
		fs->leases = fl;
		lease_worker_kick(&fs->worker);
	}
	pthread_mutex_unlock(&fs->lock);
	return r;
}

void fss_bell_close(struct fss_store *fs, struct fss_lease *fl)
{
	char base[FSS_HEX_LEN + 8];
	int dfd;

	if (fl->bell_fd < 0)
		return;
	pthread_mutex_lock(&fs->lock);
	for (struct fss_lease **pp = &fs->leases; *pp; pp = &(*pp)->next) {
		if (*pp == fl) {
			*pp = fl->next;
			break;
		}
	}
	lease_worker_kick(&fs->worker);
	pthread_mutex_unlock(&fs->lock);
	snprintf(base, sizeof(base), "%s.bell", fl->hex);
	dfd = fss_openat(fs, HOLDERS, O_PATH | O_DIRECTORY, 0);
	if (dfd >= 0) {
		unlinkat(dfd, base, 0);
		close(dfd);
	}
	/* Closed after it left the set, under the lock the watcher polls
	 * by, so the watcher never polls a reused number as ours. */
	pthread_mutex_lock(&fs->lock);
	close(fl->bell_fd);
	fl->bell_fd = -1;
	pthread_mutex_unlock(&fs->lock);
}

int fss_bell_ring(struct fss_store *fs, const char *hex, uint64_t epoch)
{
	struct sockaddr_un sa;
	char base[FSS_HEX_LEN + 8], msg[48];
	int dfd = fss_openat(fs, HOLDERS, O_PATH | O_DIRECTORY, 0), fd, r;
	int len, bell;

	if (dfd < 0)
		return dfd;
	snprintf(base, sizeof(base), "%s.bell", hex);
	len = snprintf(msg, sizeof(msg), "revoke %" PRIu64, epoch);
	/* The socket itself, pinned: a symlink there (the store's owner can
	 * plant one) would send root's datagram anywhere. */
	bell = bell_pin(dfd, base);
	r = bell < 0 ? bell : bell_addr(&sa, bell, "");
	fd = r < 0 ? r : socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd >= 0) {
		r = sendto(fd, msg, (size_t)len, MSG_DONTWAIT,
			   (struct sockaddr *)&sa, sizeof(sa)) == len ? 0 : -errno;
		close(fd);
	} else if (r == 0) {
		r = -errno;
	}
	if (bell >= 0)
		close(bell);
	close(dfd);
	return r;
}

void fss_watcher_stop(struct fss_store *fs)
{
	lease_worker_stop(&fs->worker, &fs->lock);
}
