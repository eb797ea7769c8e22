/* SPDX-License-Identifier: MIT */
/* The host lock arbiter (contract in hostd.h; its client: hostd_client.c). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/openat2.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <grp.h>
#include <time.h>
#include <unistd.h>

#include "hostd.h"
#include "hostlock_int.h"
#include "persons.h"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

/* What the access check found, from its child: 0 or -errno, and the
 * mount each directory of the path resolved on (hostlock_resolve()). */
struct verdict {
	int r;
	int n;
	int ids[HOSTLOCK_MAX_DEPTH];
};
/* The arbiter's exit status for a worker that served "released". */
#define WORKER_RELEASED 42

/* ---- the arbiter: one request ------------------------------------------- */

/* Who asks: from the kernel, at connect time. */
struct caller {
	struct ucred cr;
	int pidfd;
	int conn;
};

static void say(int fd, const int *fds, size_t nfds, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void say(int fd, const int *fds, size_t nfds, const char *fmt, ...)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * HOSTD_MAX_FDS)];
		struct cmsghdr align;
	} ctl;
	char text[HOSTD_MSG_MAX];
	struct iovec iov = { .iov_base = text };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	iov.iov_len = strlen(text);
	if (nfds) {
		struct cmsghdr *c;

		memset(&ctl, 0, sizeof(ctl));
		mh.msg_control = ctl.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	}
	(void)sendmsg(fd, &mh, MSG_NOSIGNAL);
}

/* The caller's supplementary groups, from /proc/PID/status. */
static int caller_groups(pid_t pid, gid_t *groups, int max)
{
	char path[32], line[4096];
	int n = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		char *p = line + 7, *end;

		if (strncmp(line, "Groups:", 7) != 0)
			continue;
		for (unsigned long g; n < max; p = end) {
			g = strtoul(p, &end, 10);
			if (end == p)
				break;
			groups[n++] = (gid_t)g;
		}
	}
	fclose(f);
	return n;
}

/* As the caller (its ids and groups): that `path`, resolved from its root
 * without a symlink, is a directory it may read, write and search, and
 * that it owns it if it is sticky.  A directory not made yet (a session's,
 * the metrics or a file store's) is asked of its nearest existing
 * ancestor: that the caller may write and search it, where it will make
 * it.  0 or -errno.  Run in a child of its own (it changes credentials). */
static int may_write_as(const struct caller *c, int rootfd, const char *path)
{
	struct open_how how = { .flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
				.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS |
					   RESOLVE_NO_MAGICLINKS };
	gid_t groups[NGROUPS_MAX];
	int n = caller_groups(c->cr.pid, groups, NGROUPS_MAX), fd;
	char at[PATH_MAX];
	struct stat st;
	bool exact;

	if (n < 0)
		return n;
	if (setgroups((size_t)n, groups) < 0 ||
	    setresgid(c->cr.gid, c->cr.gid, c->cr.gid) < 0 ||
	    setresuid(c->cr.uid, c->cr.uid, c->cr.uid) < 0)
		return -errno;
	snprintf(at, sizeof(at), "%s", path);
	while ((fd = (int)syscall(SYS_openat2, rootfd, at[1] ? at + 1 : ".",
				  &how, sizeof(how))) < 0 &&
	       errno == ENOENT && ws_path_parent(at))
		;
	if (fd < 0)
		return -errno;
	exact = strcmp(at, path) == 0;
	if (syscall(SYS_faccessat2, fd, "", (exact ? R_OK : 0) | W_OK | X_OK,
		    AT_EMPTY_PATH | AT_EACCESS) < 0)
		return -errno;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (exact && (st.st_mode & S_ISVTX) && st.st_uid != c->cr.uid)
		return -EACCES;
	return 0;
}

/* The verdict on `path` for the caller: the access check (uid 0 may lock
 * what it names, as real root does), then the mounts its directories
 * resolved on from the caller's root, in the caller's credentials. */
static int verdict_as(const struct caller *c, int rootfd, const char *path,
		      struct verdict *v)
{
	int r = c->cr.uid ? may_write_as(c, rootfd, path) : 0;

	if (r < 0)
		return r;
	v->n = hostlock_resolve(rootfd, path, v->ids);
	return v->n < 0 ? v->n : 0;
}

/* Read all of a verdict from its child by `deadline_ms` (of waiting):
 * false if it did not come whole. */
static bool read_verdict(int fd, struct verdict *v, int deadline_ms)
{
	char *p = (char *)v;
	size_t got = 0;

	while (got < sizeof(*v)) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		ssize_t k;

		if (poll(&pfd, 1, deadline_ms) != 1)
			return false;
		k = read(fd, p + got, sizeof(*v) - got);
		if (k <= 0)
			return false;
		got += (size_t)k;
	}
	return true;
}

/* verdict_as() in a child, waited for at most 5 s (a path on a
 * filesystem that does not answer is refused, not waited on). */
static int may_lock(const struct caller *c, const char *path, struct verdict *v)
{
	char root[32];
	int p[2], rootfd, r = -ETIMEDOUT;
	pid_t pid;

	snprintf(root, sizeof(root), "/proc/%d/root", (int)c->cr.pid);
	rootfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (rootfd < 0)
		return -errno;
	if (pipe2(p, O_CLOEXEC) < 0) {
		close(rootfd);
		return -errno;
	}
	pid = fork();
	if (pid == 0) {
		v->r = verdict_as(c, rootfd, path, v);
		(void)!write(p[1], v, sizeof(*v));
		_exit(0);
	}
	close(p[1]);
	close(rootfd);
	if (pid > 0) {
		r = read_verdict(p[0], v, 5000) ? v->r : -ETIMEDOUT;
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	} else {
		r = -errno;
	}
	close(p[0]);
	return r;
}

/* "take\t<mode>\t<epoch>\t<what>\t<mountpoint>\t<path>" into spec (its
 * strings point into line).  0 or -EINVAL. */
static int parse_take(char *line, struct hostlock_spec *spec)
{
	char *f[6], *save = NULL;
	int n = 0;

	for (char *t = strtok_r(line, "\t", &save); t && n < 6;
	     t = strtok_r(NULL, "\t", &save))
		f[n++] = t;
	if (n != 6 || strcmp(f[0], "take") != 0 || strlen(f[1]) != 1 ||
	    f[1][0] < '0' || f[1][0] > '0' + HOSTLOCK_IS)
		return -EINVAL;
	spec->mode = (enum hostlock_mode)(f[1][0] - '0');
	spec->epoch = strtoull(f[2], NULL, 10);
	spec->what = f[3];
	spec->mountpoint = f[4];
	spec->path = f[5];
	if (strlen(spec->what) > 63 || !ws_path_clean(spec->path) ||
	    (strcmp(spec->mountpoint, "-") && !ws_path_clean(spec->mountpoint)))
		return -EINVAL;
	return 0;
}

/* The caller is still the process it was at connect (its pid not
 * reused): asked after everything read of /proc/PID. */
static bool caller_alive(const struct caller *c)
{
	return syscall(SYS_pidfd_send_signal, c->pidfd, 0, NULL, 0) == 0;
}

static void serve_take(const struct caller *c, char *line)
{
	struct hostlock_spec spec = { 0 };
	struct lease_err err = { 0 };
	char mountinfo[48];
	struct hostlock_who who = { .uid = c->cr.uid, .pid = c->cr.pid,
				    .mountinfo = mountinfo };
	struct hostlock *h;
	static struct verdict v; /* a worker serves one request */
	int fds[HOSTD_MAX_FDS + 1];
	size_t n;
	int r = parse_take(line, &spec);

	if (r < 0) {
		say(c->conn, NULL, 0, "error\t%d\ta request no leasefs daemon makes", EINVAL);
		return;
	}
	if ((r = may_lock(c, spec.path, &v)) < 0) {
		say(c->conn, NULL, 0, "error\t%d\tcannot take the host lock on "
		    "%s: %s (uid %u may lock only a directory it may read, "
		    "write and search, and owns if it is sticky)", -r, spec.path,
		    strerror(-r), (unsigned)c->cr.uid);
		return;
	}
	who.mnt_ids = v.ids;
	who.n_mnt_ids = (size_t)v.n;
	r = c->cr.uid ? rundir_ctl_dir(c->cr.uid) : 0;
	if (r < 0) {
		say(c->conn, NULL, 0, "error\t%d\tcannot make %s/%u: %s", -r,
		    RUNDIR_CTL, (unsigned)c->cr.uid, strerror(-r));
		return;
	}
	snprintf(mountinfo, sizeof(mountinfo), "/proc/%d/mountinfo", (int)c->cr.pid);
	h = hostlock_new();
	r = h ? hostlock_take_local(h, &spec, &who, 0, &err)
	      : lease_err_set(&err, LEASE_E_IO, -ENOMEM, spec.path, "out of memory");
	if (r == 0 && !caller_alive(c))
		r = lease_err_set(&err, LEASE_E_IO, -ESRCH, spec.path, "gone");
	n = r == 0 ? hostlock_fds(h, fds, HOSTD_MAX_FDS + 1) : 0;
	if (r == 0 && n > HOSTD_MAX_FDS)
		r = lease_err_set(&err, LEASE_E_IO, -E2BIG, spec.path, "cannot "
				  "take the host lock on %s: more than %d locks",
				  spec.path, HOSTD_MAX_FDS - 1);
	if (r == 0)
		say(c->conn, fds, n, "ok\t%zu\t%u", n, (unsigned)c->cr.uid);
	else if (err.kind == LEASE_E_HELD)
		say(c->conn, NULL, 0, "busy\t%" PRIu64 "\t%s", err.holder_epoch, err.msg);
	else
		say(c->conn, NULL, 0, "error\t%d\t%s", -r, err.msg);
	/* Sent: the caller's copies hold the locks now.  Refused: what we
	 * made (the record) is collected. */
	if (r == 0)
		hostlock_forget(h);
	else
		hostlock_free(h);
}

/* How long a worker waits for its connection's request, in seconds. */
static int request_wait_s(void)
{
#ifdef LEASEFS_TEST_HOOKS
	/* A test build keeps a slot this long for a caller that says nothing
	 * (test_budget.sh fills a person's slots that way). */
	const char *v = getenv("LEASEFS_TEST_HOSTD_REQUEST_WAIT_S");
	long s = v ? strtol(v, NULL, 10) : 0;

	if (s > 0 && s <= 60)
		return (int)s;
#endif
	return 2;
}

/* A worker: one connection's request.  Exits. */
static void worker(struct caller *c)
{
	char line[HOSTD_MSG_MAX];
	int wait_s = request_wait_s();
	ssize_t n;

	signal(SIGALRM, SIG_DFL);
	alarm((unsigned)(HOSTD_REQUEST_TIMEOUT_S - 2 + wait_s));
	hostd_set_timeouts(c->conn, wait_s);
	n = recv(c->conn, line, sizeof(line) - 1, 0);
	if (n <= 0)
		_exit(1);
	line[n] = '\0';
	if (strcmp(line, "released") == 0)
		_exit(WORKER_RELEASED);
	serve_take(c, line);
	_exit(0);
}

/* ---- the arbiter: the loop ------------------------------------------------ */

/* The requests being served, each by the person who asked (persons.h:
 * a uid and its subordinate uids are one), and the table that says who
 * that is, read again at each sweep. */
struct workers {
	pid_t pid[HOSTD_WORKERS];
	uint64_t person[HOSTD_WORKERS];
	int n;
	bool sweep_due;
	const char *subuid_path;
	struct ws_persons persons;
};

static int per_person(const struct workers *w, uint64_t person)
{
	int k = 0;

	for (int i = 0; i < w->n; i++)
		k += w->person[i] == person;
	return k;
}

/* Reap the workers done; a "released" one makes a sweep due. */
static void reap(struct workers *w)
{
	int status;
	pid_t pid;

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		for (int i = 0; i < w->n; i++) {
			if (w->pid[i] != pid)
				continue;
			w->pid[i] = w->pid[w->n - 1];
			w->person[i] = w->person[w->n - 1];
			w->n--;
			break;
		}
		if (WIFEXITED(status) && WEXITSTATUS(status) == WORKER_RELEASED)
			w->sweep_due = true;
	}
}

static void serve_conn(struct workers *w, int conn)
{
	struct caller c = { .conn = conn, .pidfd = -1 };
	socklen_t len = sizeof(c.cr);
	uint64_t person;
	pid_t pid;

	if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &c.cr, &len) < 0)
		return;
	len = sizeof(c.pidfd);
	if (getsockopt(conn, SOL_SOCKET, SO_PEERPIDFD, &c.pidfd, &len) < 0)
		c.pidfd = (int)syscall(SYS_pidfd_open, c.cr.pid, 0);
	if (c.pidfd < 0)
		return;
	person = ws_person_of(&w->persons, c.cr.uid);
	if (w->n >= HOSTD_WORKERS || per_person(w, person) >= HOSTD_PER_PERSON) {
		say(conn, NULL, 0, "error\t%d\tthe host lock arbiter is busy "
		    "with %d requests of uid %u and the uids counted with it "
		    "(its subordinate uids, or their owner's)", EAGAIN,
		    per_person(w, person), (unsigned)c.cr.uid);
		close(c.pidfd);
		return;
	}
	pid = fork();
	if (pid == 0)
		worker(&c);
	if (pid > 0) {
		w->pid[w->n] = pid;
		w->person[w->n++] = person;
	}
	close(c.pidfd);
}

/* The subordinate ranges as the file says now (a missing or unreadable
 * file: every uid its own person, as before it was read). */
static void load_persons(struct workers *w)
{
	ws_persons_free(&w->persons);
	(void)ws_persons_load(&w->persons, w->subuid_path);
}

/* A socket systemd passed (LISTEN_FDS), else -1. */
static int activated_fd(void)
{
	const char *pid = getenv("LISTEN_PID"), *fds = getenv("LISTEN_FDS");

	if (!pid || !fds || atoi(pid) != getpid() || atoi(fds) != 1)
		return -1;
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
	(void)fcntl(3, F_SETFD, FD_CLOEXEC);
	return 3;
}

/* Bind RUNDIR_HOSTD: under a name of our own, listening, then renamed into
 * place, so that the name always answers.  -EEXIST if an arbiter already
 * does. */
static int bind_listen(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = hostd_connect(2), r;

	if (fd >= 0) {
		close(fd);
		return -EEXIST;
	}
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s.%d", RUNDIR_HOSTD, (int)getpid());
	unlink(sa.sun_path);
	r = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    chmod(sa.sun_path, 0666) < 0 || listen(fd, 128) < 0 ||
	    rename(sa.sun_path, RUNDIR_HOSTD) < 0 ? -errno : 0;
	if (r < 0) {
		unlink(sa.sun_path);
		close(fd);
		return r;
	}
	return fd;
}

static int open_listener(bool *activated, char *msg, size_t msgsz)
{
	int fd = activated_fd();

	*activated = fd >= 0;
	if (fd < 0)
		fd = bind_listen();
	if (fd == -EEXIST)
		snprintf(msg, msgsz, "an arbiter already serves %s", RUNDIR_HOSTD);
	else if (fd < 0)
		snprintf(msg, msgsz, "cannot listen on %s: %s", RUNDIR_HOSTD,
			 strerror(-fd));
	return fd;
}

int hostd_run(const struct hostd_opts *o, char *msg, size_t msgsz)
{
	struct workers w = { .sweep_due = true, .subuid_path = o->subuid_path };
	int64_t idle_since = lease_now_ns(), swept = 0;
	bool activated;
	int lfd, r;

	if (!rundir_real_root()) {
		snprintf(msg, msgsz, "the host lock arbiter runs as root of the "
			 "host (euid 0 in the initial user namespace) only");
		return -EPERM;
	}
	r = rundir_prepare(msg, msgsz);
	if (r < 0)
		return r;
	signal(SIGPIPE, SIG_IGN);
	lfd = open_listener(&activated, msg, msgsz);
	if (lfd < 0)
		return lfd == -EEXIST ? 0 : lfd;
	for (;;) {
		struct pollfd pfd = { .fd = lfd, .events = POLLIN };
		int timeout = w.n || w.sweep_due ? 200 : 1000;
		int conn;

		/* At most one sweep a second, however often callers let go. */
		if ((w.sweep_due && lease_now_ns() - swept > 1000000000LL) ||
		    lease_now_ns() - swept > HOSTD_SWEEP_S * 1000000000LL) {
			w.sweep_due = false;
			(void)rundir_sweep();
			load_persons(&w);
			swept = lease_now_ns();
		}
		if (poll(&pfd, 1, timeout) < 0 && errno != EINTR)
			break;
		reap(&w);
		if (pfd.revents & POLLIN) {
			conn = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
			if (conn >= 0) {
				serve_conn(&w, conn);
				close(conn);
			}
			idle_since = lease_now_ns();
		}
		if (w.n)
			idle_since = lease_now_ns();
		if (o->idle_exit_s > 0 && !w.sweep_due &&
		    lease_now_ns() - idle_since > (int64_t)o->idle_exit_s * 1000000000LL)
			break;
	}
	if (!activated)
		close(lfd); /* the name stays: the next arbiter replaces it */
	ws_persons_free(&w.persons);
	return 0;
}
