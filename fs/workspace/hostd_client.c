/* SPDX-License-Identifier: MIT */
/*
 * The host lock arbiter's client: a daemon that is not real root asks the
 * arbiter (hostd.c, protocol in hostd.h) for its host locks and tells it
 * when it let go.  Calls nothing in hostlock.c: what it is given goes
 * straight into the caller's struct hostlock.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "backoff.h"
#include "hostd.h"
#include "hostlock_int.h"

#define CLIENT_TIMEOUT_S (HOSTD_REQUEST_TIMEOUT_S + 5)

void hostd_set_timeouts(int fd, int seconds)
{
	struct timeval tv = { .tv_sec = seconds };

	(void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	(void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* Root as we see it: uid 0, or (in a user namespace that does not map
 * the host's root) the overflow uid. */
static bool peer_is_root(uid_t uid)
{
	unsigned long overflow = 65534;
	FILE *f = fopen("/proc/sys/kernel/overflowuid", "re");

	if (f) {
		if (fscanf(f, "%lu", &overflow) != 1)
			overflow = 65534;
		fclose(f);
	}
	return uid == 0 || (uid == (uid_t)overflow && geteuid() != uid);
}

/* A connection to the arbiter, served by root: the fd or -errno. */
int hostd_connect(int timeout_s)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct ucred cr;
	socklen_t len = sizeof(cr);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0), r;

	if (fd < 0)
		return -errno;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", RUNDIR_HOSTD);
	hostd_set_timeouts(fd, timeout_s);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0 ||
	    !peer_is_root(cr.uid)) {
		close(fd);
		return -EPERM;
	}
	return fd;
}

static int no_arbiter(const struct hostlock_spec *spec, int r, struct lease_err *err)
{
	return lease_err_set(err, LEASE_E_IO, -ENOLCK, spec->path,
			     "cannot take the host lock on %s: no host lock "
			     "arbiter answers on %s (%s); a mount by anyone but "
			     "root of the host (a user, or root in a user "
			     "namespace) takes its host locks from `leasefs "
			     "hostd`, which root runs (systemctl enable --now "
			     "leasefs-hostd.socket)", spec->path, RUNDIR_HOSTD,
			     r == -EPERM ? "the socket there is not root's"
					 : strerror(-r));
}

/* The locks passed to us: `fds` (the last is the record) into h. */
static int adopt(struct hostlock *h, const int *fds, size_t n)
{
	h->locks = calloc(n, sizeof(*h->locks));
	if (!h->locks)
		return -ENOMEM;
	for (size_t i = 0; i + 1 < n; i++)
		h->locks[h->n++] = (struct held){ .fd = fds[i], .byte = -1 };
	h->rec_fd = fds[n - 1];
	return 0;
}

/* The reply's text and fds; *nfds of them. */
static int recv_reply(int fd, char *text, size_t textsz, int *fds, size_t *nfds)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * 253)];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = text, .iov_len = textsz - 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf) };
	ssize_t n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);

	*nfds = 0;
	if (n <= 0)
		return n < 0 ? -errno : -ECONNRESET;
	text[n] = '\0';
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		size_t k;

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k && *nfds < HOSTD_MAX_FDS + 3; i++)
			memcpy(&fds[(*nfds)++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
	}
	return (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) ? -EPROTO : 0;
}

static void close_all(const int *fds, size_t n)
{
	for (size_t i = 0; i < n; i++)
		close(fds[i]);
}

/* What the arbiter answered, into h or err. */
static int take_reply(const struct hostlock_spec *spec, char *text,
		      const int *fds, size_t nfds, struct hostlock *h,
		      struct lease_err *err)
{
	char *msg = strchr(text, '\t');
	char *rest = msg ? strchr(msg + 1, '\t') : NULL;
	unsigned long long num = msg ? strtoull(msg + 1, NULL, 10) : 0;

	if (strncmp(text, "ok\t", 3) == 0 && rest && nfds == num && nfds > 0) {
		rundir_set_host_uid((uid_t)strtoul(rest + 1, NULL, 10));
		return adopt(h, fds, nfds);
	}
	close_all(fds, nfds);
	if (strncmp(text, "busy\t", 5) == 0 && rest) {
		int r = lease_err_set(err, LEASE_E_HELD, 0, spec->path, "%s", rest + 1);

		if (err)
			err->holder_epoch = num;
		return r;
	}
	if (strncmp(text, "error\t", 6) == 0 && rest)
		return lease_err_set(err, LEASE_E_IO, num ? -(int)num : -EIO,
				     spec->path, "%s", rest + 1);
	return lease_err_set(err, LEASE_E_IO, -EPROTO, spec->path, "cannot take "
			     "the host lock on %s: the arbiter on %s answered "
			     "what no arbiter says", spec->path, RUNDIR_HOSTD);
}

static int take_once(const struct hostlock_spec *spec, struct hostlock *h,
		     struct lease_err *err)
{
	char text[HOSTD_MSG_MAX];
	int fds[HOSTD_MAX_FDS + 3];
	size_t nfds = 0;
	int fd = hostd_connect(CLIENT_TIMEOUT_S), r;

	if (fd < 0)
		return no_arbiter(spec, fd, err);
	r = snprintf(text, sizeof(text), "take\t%d\t%" PRIu64 "\t%s\t%s\t%s",
		     (int)spec->mode, spec->epoch, spec->what,
		     spec->mountpoint ? spec->mountpoint : "-", spec->path);
	if (r >= (int)sizeof(text) || strpbrk(spec->path, "\t\n") ||
	    (spec->mountpoint && strpbrk(spec->mountpoint, "\t\n"))) {
		close(fd);
		return lease_err_set(err, LEASE_E_USAGE, -EINVAL, spec->path,
				     "cannot take the host lock on %s: a tab or "
				     "newline in a path, or a path too long",
				     spec->path);
	}
	/* A busy arbiter answers at once and closes without reading our
	 * request: the send may find it closed (EPIPE), and the first receive
	 * reports the unread request (ECONNRESET) before the answer, which is
	 * still there for the next. */
	r = send(fd, text, strlen(text), MSG_NOSIGNAL) < 0 ? -errno : 0;
	if (r == 0 || r == -EPIPE || r == -ECONNRESET)
		r = recv_reply(fd, text, sizeof(text), fds, &nfds);
	if (r == -ECONNRESET)
		r = recv_reply(fd, text, sizeof(text), fds, &nfds);
	close(fd);
	if (r < 0) {
		close_all(fds, nfds);
		return no_arbiter(spec, r, err);
	}
	return take_reply(spec, text, fds, nfds, h, err);
}

/* How long a caller waits out an arbiter busy with its person's other
 * requests (HOSTD_PER_PERSON), whatever its --wait. */
#define ARBITER_BUSY_WAIT_MS 15000

int hostd_take(const struct hostlock_spec *spec, int64_t deadline,
	       struct hostlock *h, struct lease_err *err)
{
	int64_t busy_until = lease_deadline_ms(ARBITER_BUSY_WAIT_MS);
	int pause_ms = 100, r;

	if (busy_until < deadline)
		busy_until = deadline;
	while (((r = take_once(spec, h, err)) == -EBUSY &&
		!lease_deadline_passed(deadline)) ||
	       (r == -EAGAIN && !lease_deadline_passed(busy_until)))
		ws_backoff(&pause_ms, 1000, r == -EBUSY ? deadline : busy_until);
	return r;
}

void hostd_released(void)
{
	int fd = hostd_connect(1);

	if (fd < 0)
		return;
	(void)send(fd, "released", 8, MSG_NOSIGNAL | MSG_DONTWAIT);
	close(fd);
}
