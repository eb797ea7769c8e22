/* SPDX-License-Identifier: MIT */
/*
 * Control socket: a unix socket per mount point under
 * LEASEFS_RUN_DIR/ctl (0700, root's), never inside the workspace.  One
 * request line per connection: "status" -> one JSON object; "umount" ->
 * "ok", then the connection stays open until the daemon has torn down, so a
 * client can wait for the end by reading to EOF.
 *
 * "watch" -> the status object at once, then one object per change of
 * state (each with "time"; a loss also with "reason"), pushed as the
 * coordinator's state fd fires; the connection stays open until the
 * daemon exits, so a watcher learns of the end by EOF.
 *
 * One thread serves up to MAX_CLIENTS connections at once, each bounded by
 * CLIENT_TIMEOUT_MS to send its line; a slow or silent client delays no
 * other, and a client that hangs up never raises SIGPIPE (MSG_NOSIGNAL).
 */
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/openat2.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "daemon.h"
#include "roots.h"
#include "transport.h"
#include "gate.h"

#define CTL_DIR LEASEFS_RUN_DIR "/ctl"
#define MAX_WAITERS 16
#define MAX_WATCHERS 64
/* The metrics textfile is rewritten on every state change and this often. */
#define METRICS_PERIOD_MS 15000
#define MAX_CLIENTS 32
#define CLIENT_TIMEOUT_MS 2000

struct control {
	struct daemon_info info;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int listen_fd;
	int stop_fd;
	/* The metrics directory, opened once without following a symlink
	 * (-1: none); written only relative to it. */
	int metrics_dirfd;
	pthread_t thread;
	/* Owned by the control thread alone until it is joined. */
	int waiters[MAX_WAITERS];
	int nwaiters;
	int watchers[MAX_WATCHERS];  /* -1: free slot */
	int64_t metrics_next;        /* next periodic textfile write */
	const char *last_state;      /* the state last pushed to watchers */
	struct client {
		int fd;            /* -1: free slot */
		int64_t deadline;  /* to send the request line */
		size_t len;
		char line[64];
	} clients[MAX_CLIENTS];
};

int control_path(const char *mountpoint, char *out, size_t outsz)
{
	char name[96];
	int r = ws_root_name(mountpoint, name, sizeof(name));

	if (r < 0)
		return r;
	/* name is "workspace-roots/<hex>": the hash names the socket. */
	if ((size_t)snprintf(out, outsz, CTL_DIR "/%s.sock",
			     strchr(name, '/') + 1) >= outsz)
		return -ENAMETOOLONG;
	return 0;
}

static const char *public_state(enum coord_state st)
{
	switch (st) {
	case COORD_HELD: return "held";
	case COORD_LOST: return "lost";
	case COORD_SHUTTING_DOWN:
	case COORD_CLOSED: return "shutting-down";
	}
	return "unknown";
}

static void add_str(json_object *o, const char *key, const char *val)
{
	json_object_object_add(o, key, json_object_new_string(val));
}

static void reply(int fd, const char *s)
{
	size_t n = strlen(s);

	while (n > 0) {
		ssize_t w = send(fd, s, n, MSG_NOSIGNAL);

		if (w <= 0)
			return;
		s += w;
		n -= (size_t)w;
	}
}

void control_time_now(char *buf, size_t sz)
{
	struct timespec ts;
	struct tm tm;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	snprintf(buf, sz, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ",
		 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
		 tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
}

static void add_time(json_object *o)
{
	char buf[64];

	control_time_now(buf, sizeof(buf));
	add_str(o, "time", buf);
}

/* What INIT settled with the kernel: which features are active. */
static json_object *fuse_features(const struct transport *t)
{
	struct transport_state st;
	json_object *o = json_object_new_object();

	transport_state(t, &st);
	add_str(o, "transport", st.io_uring ? "io-uring" : "dev-fuse");
	json_object_object_add(o, "kernel_minor",
			       json_object_new_int((int)st.kernel_minor));
	json_object_object_add(o, "io_uring", json_object_new_boolean(st.io_uring));
	json_object_object_add(o, "io_uring_offered",
			       json_object_new_boolean(st.io_uring_offered));
	if (st.io_uring_queues) {
		json_object_object_add(o, "io_uring_queues",
				       json_object_new_int((int)st.io_uring_queues));
		json_object_object_add(o, "io_uring_requests",
				       json_object_new_int64((int64_t)st.io_uring_requests));
	}
	if (st.io_uring_error)
		add_str(o, "io_uring_error", strerror(-st.io_uring_error));
	json_object_object_add(o, "killpriv_v2",
			       json_object_new_boolean(st.killpriv_v2));
	json_object_object_add(o, "tmpfile", json_object_new_boolean(st.tmpfile));
	return o;
}

/* The status object: the keys of `leasefs status --json`; a watcher's
 * lines also carry the time and, once lost, the reason. */
static void write_status_ext(const struct daemon_info *in, FILE *f,
			     bool for_watch)
{
	struct coord *c = in->coord;
	bool has_root = coord_root_epoch(c) != 0;
	json_object *o = json_object_new_object();

	add_str(o, "root", coord_root(c));
	add_str(o, "placement", coord_placement(c)->name);
	add_str(o, "session", coord_session_id(c));
	add_str(o, "lease", has_root ? coord_root_lease_name(c)
				     : coord_session_lease_name(c));
	json_object_object_add(o, "epoch", json_object_new_uint64(
		has_root ? coord_root_epoch(c) : coord_session_epoch(c)));
	add_str(o, "state", public_state(coord_state(c)));
	add_str(o, "backend", in->backend);
	json_object_object_add(o, "pid", json_object_new_int(getpid()));
	if (!for_watch && in->transport)
		json_object_object_add(o, "fuse", fuse_features(in->transport));
	if (for_watch) {
		add_time(o);
		if (coord_loss_reason(c) != LEASE_LOSS_NONE)
			add_str(o, "reason", lease_loss_str(coord_loss_reason(c)));
	}
	fprintf(f, "%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(o);
}

static void write_status(const struct daemon_info *in, FILE *f)
{
	write_status_ext(in, f, false);
}

/* A Prometheus label value: backslash, double quote and newline escaped. */
static void label_value(FILE *f, const char *s)
{
	for (; *s; s++) {
		if (*s == '\\' || *s == '"')
			fputc('\\', f);
		if (*s == '\n')
			fputs("\\n", f);
		else
			fputc(*s, f);
	}
}

static void metric_head(FILE *f, const char *name, const char *type,
			const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* name{mountpoint="...",extra} */
static void metric_labels(FILE *f, const char *name,
			  const struct daemon_info *in, const char *extra)
{
	fprintf(f, "%s{mountpoint=\"", name);
	label_value(f, in->mountpoint);
	fprintf(f, "\"%s%s}", extra ? "," : "", extra ? extra : "");
}

static void metric_lease(const struct daemon_info *in, FILE *f)
{
	struct coord *c = in->coord;
	bool lost = coord_loss_reason(c) != LEASE_LOSS_NONE;
	uint64_t epoch = coord_root_epoch(c) ? coord_root_epoch(c)
					     : coord_session_epoch(c);
	int64_t until = coord_safe_until(c);

	metric_head(f, "leasefs_lease_held", "gauge",
		    "1 while the mount holds its lease, 0 once it is lost.");
	metric_labels(f, "leasefs_lease_held", in, NULL);
	fprintf(f, " %d\n", !lost && coord_state(c) == COORD_HELD);
	metric_head(f, "leasefs_lease_epoch", "gauge",
		    "Epoch of the mount's gating lease (root, else session).");
	metric_labels(f, "leasefs_lease_epoch", in, NULL);
	fprintf(f, " %" PRIu64 "\n", epoch);
	metric_head(f, "leasefs_lease_losses_total", "counter",
		    "Leases this mount lost (revoked, expired, taken over).");
	metric_labels(f, "leasefs_lease_losses_total", in, NULL);
	fprintf(f, " %d\n", lost);
	if (until) {
		struct timespec rt;
		int64_t now = lease_now_ns();

		clock_gettime(CLOCK_REALTIME, &rt);
		metric_head(f, "leasefs_lease_valid_until_seconds", "gauge",
			    "Unix time until which a TTL lease is known valid "
			    "(its safe-until).");
		metric_labels(f, "leasefs_lease_valid_until_seconds", in, NULL);
		fprintf(f, " %.3f\n", (double)rt.tv_sec + rt.tv_nsec / 1e9 +
			(double)(until - now) / 1e9);
	}
}

static void metric_ops(const struct daemon_info *in, FILE *f)
{
	char lbl[64];

	metric_head(f, "leasefs_requests_total", "counter",
		    "FUSE requests, by operation.");
	for (size_t i = 0; i < gate_nops(); i++) {
		snprintf(lbl, sizeof(lbl), "op=\"%s\"", gate_op_name(i));
		metric_labels(f, "leasefs_requests_total", in, lbl);
		fprintf(f, " %" PRIu64 "\n", gate_requests(in->gate, i));
	}
	metric_head(f, "leasefs_mutations_refused_total", "counter",
		    "Mutations answered EROFS after loss, by operation.");
	for (size_t i = 0; i < gate_nops(); i++) {
		if (!gate_op_mutating(i))
			continue;
		snprintf(lbl, sizeof(lbl), "op=\"%s\"", gate_op_name(i));
		metric_labels(f, "leasefs_mutations_refused_total", in, lbl);
		fprintf(f, " %" PRIu64 "\n", gate_refused(in->gate, i));
	}
	metric_head(f, "leasefs_mutations_in_flight", "gauge",
		    "Mutations admitted and not yet finished.");
	metric_labels(f, "leasefs_mutations_in_flight", in, NULL);
	fprintf(f, " %ld\n", coord_inflight(in->coord));
}

char *control_metrics_text(const struct daemon_info *in)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		return NULL;
	metric_lease(in, f);
	metric_ops(in, f);
	metric_head(f, "leasefs_build_info", "gauge", "The leasefs build.");
	fprintf(f, "leasefs_build_info{version=\"%s\"} 1\n", LEASEFS_VERSION);
	fclose(f);
	return buf;
}

/* The textfile for node_exporter: DIR/leasefs-<hash of mount point>.prom,
 * written whole (temp file, rename); `out` is relative to the directory. */
static int metrics_name(const struct control *ctl, char *out, size_t sz,
			const char *sfx)
{
	const char *hash = strrchr(ctl->path, '/') + 1; /* <hash>.sock */

	return snprintf(out, sz, "leasefs-%.*s.prom%s", 64, hash, sfx) < (int)sz
		? 0 : -ENAMETOOLONG;
}

/* The metrics directory, opened as its canonical path without following
 * any symlink: the directory the host lock covers. */
static int open_metrics_dir(const char *dir)
{
	struct open_how how = {
		.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
		.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
	};
	long fd = syscall(SYS_openat2, AT_FDCWD, dir, &how, sizeof(how));

	return fd < 0 ? -errno : (int)fd;
}

/* Whether the directory we hold is still where its host lock says: one
 * moved elsewhere (into a workspace, say) is not written any more. */
static bool metrics_dir_in_place(const struct control *ctl)
{
	char link[PATH_MAX + 1], proc[32];
	ssize_t n;

	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", ctl->metrics_dirfd);
	n = readlink(proc, link, sizeof(link) - 1);
	if (n < 0)
		return false;
	link[n] = '\0';
	return strcmp(link, ctl->info.metrics_dir) == 0;
}

static void metrics_write(struct control *ctl)
{
	char tmp[NAME_MAX + 1], dst[NAME_MAX + 1], *text;
	int dfd = ctl->metrics_dirfd, fd;

	if (dfd < 0 || metrics_name(ctl, tmp, sizeof(tmp), ".tmp") ||
	    metrics_name(ctl, dst, sizeof(dst), "") || !metrics_dir_in_place(ctl))
		return;
	text = control_metrics_text(&ctl->info);
	/* A fresh file of our own, whatever another user left at that name
	 * (the directory may be shared): never opened through a link. */
	unlinkat(dfd, tmp, 0);
	fd = text ? openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC |
			   O_NOFOLLOW, 0644) : -1;
	if (fd >= 0) {
		bool ok = write(fd, text, strlen(text)) == (ssize_t)strlen(text);

		if (close(fd) == 0 && ok)
			renameat(dfd, tmp, dfd, dst);
		else
			unlinkat(dfd, tmp, 0);
	}
	free(text);
	ctl->metrics_next = lease_deadline_ms(METRICS_PERIOD_MS);
}

/* The status line as a malloc'ed string. */
static char *status_line(const struct daemon_info *in, bool for_watch)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		return NULL;
	write_status_ext(in, f, for_watch);
	fclose(f);
	return buf;
}

static void watcher_close(struct control *ctl, int i)
{
	close(ctl->watchers[i]);
	ctl->watchers[i] = -1;
}

/* Push the state to every watcher if it changed since the last push; a
 * watcher that cannot take it (gone, or not reading) is dropped. */
static void watchers_push(struct control *ctl)
{
	const char *st = public_state(coord_state(ctl->info.coord));
	char *line;

	if (ctl->last_state == st)
		return;
	ctl->last_state = st;
	/* The textfile first: a watcher that sees the change finds it there. */
	metrics_write(ctl);
	line = status_line(&ctl->info, true);
	for (int i = 0; line && i < MAX_WATCHERS; i++) {
		size_t n = strlen(line);

		if (ctl->watchers[i] >= 0 &&
		    send(ctl->watchers[i], line, n, MSG_NOSIGNAL | MSG_DONTWAIT) !=
		    (ssize_t)n)
			watcher_close(ctl, i);
	}
	free(line);
}

/* A new watcher gets the state now; false if there is no room. */
static bool watcher_add(struct control *ctl, int fd)
{
	char *line = status_line(&ctl->info, true);

	for (int i = 0; line && i < MAX_WATCHERS; i++) {
		if (ctl->watchers[i] >= 0)
			continue;
		reply(fd, line);
		free(line);
		ctl->watchers[i] = fd;
		return true;
	}
	free(line);
	reply(fd, "error: too many watchers\n");
	return false;
}


/* Answer one request line; true if the fd was kept (umount waiter). */
static bool serve(struct control *ctl, int fd, char *line)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f;

	line[strcspn(line, "\r\n")] = '\0';
	if (strcmp(line, "status") == 0) {
		f = open_memstream(&buf, &len);
		if (!f)
			return false;
		write_status(&ctl->info, f);
		fclose(f);
		reply(fd, buf);
		free(buf);
		return false;
	}
	if (strcmp(line, "watch") == 0)
		return watcher_add(ctl, fd);
	if (strcmp(line, "metrics") == 0) {
		buf = control_metrics_text(&ctl->info);
		if (buf)
			reply(fd, buf);
		free(buf);
		return false;
	}
	if (strcmp(line, "umount") == 0) {
		/* Past MAX_WAITERS a caller is answered but not kept: it
		 * returns before the daemon's end (bounded table, no realloc). */
		bool keep = ctl->nwaiters < MAX_WAITERS;

		reply(fd, "ok\n");
		if (keep)
			ctl->waiters[ctl->nwaiters++] = fd;
		ctl->info.on_umount(ctl->info.userdata);
		return keep;
	}
	reply(fd, "error: unknown command\n");
	return false;
}

static void client_close(struct client *c)
{
	close(c->fd);
	c->fd = -1;
}

/* Read what the client sent; serve it once the line is complete. */
static void client_read(struct control *ctl, struct client *c)
{
	ssize_t n = recv(c->fd, c->line + c->len, sizeof(c->line) - 1 - c->len,
			 MSG_DONTWAIT);

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		client_close(c);
		return;
	}
	c->len += (size_t)n;
	c->line[c->len] = '\0';
	if (!strchr(c->line, '\n') && c->len < sizeof(c->line) - 1)
		return;
	if (serve(ctl, c->fd, c->line))
		c->fd = -1; /* kept as an umount waiter */
	else
		client_close(c);
}

/* A free slot for a new connection: the oldest client gives way if none. */
static struct client *client_slot(struct control *ctl)
{
	struct client *oldest = &ctl->clients[0];

	for (int i = 0; i < MAX_CLIENTS; i++) {
		if (ctl->clients[i].fd < 0)
			return &ctl->clients[i];
		if (ctl->clients[i].deadline < oldest->deadline)
			oldest = &ctl->clients[i];
	}
	client_close(oldest);
	return oldest;
}

static void client_accept(struct control *ctl)
{
	int fd = accept4(ctl->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	struct client *c;

	if (fd < 0)
		return;
	c = client_slot(ctl);
	c->fd = fd;
	c->len = 0;
	c->deadline = lease_deadline_ms(CLIENT_TIMEOUT_MS);
}

/* Close clients past their deadline; the poll timeout to the next one. */
static int clients_expire(struct control *ctl)
{
	int64_t now = lease_now_ns(), next = -1;

	for (int i = 0; i < MAX_CLIENTS; i++) {
		struct client *c = &ctl->clients[i];

		if (c->fd < 0)
			continue;
		if (c->deadline <= now)
			client_close(c);
		else if (next < 0 || c->deadline < next)
			next = c->deadline;
	}
	return next < 0 ? -1 : (int)((next - now) / 1000000 + 1);
}

/* Until the next client deadline or periodic textfile write. */
static int poll_timeout(struct control *ctl)
{
	int t = clients_expire(ctl);
	int64_t left;

	if (ctl->metrics_dirfd < 0)
		return t;
	left = (ctl->metrics_next - lease_now_ns()) / 1000000 + 1;
	if (left < 0)
		left = 0;
	return t < 0 || left < t ? (int)left : t;
}

/* The coordinator's state moved: take the event, tell the watchers. */
static void state_event(struct control *ctl, int fd)
{
	eventfd_t v;

	if (eventfd_read(fd, &v) < 0 && errno != EAGAIN)
		return;
	watchers_push(ctl);
}

/* A watcher only ever reads: anything readable on its socket is its
 * hang-up (or a protocol breach); either way it is done. */
static void watcher_event(struct control *ctl, int i)
{
	watcher_close(ctl, i);
}

static void *control_thread(void *p)
{
	struct control *ctl = p;
	struct pollfd pfd[3 + MAX_CLIENTS + MAX_WATCHERS];
	const int W = 3 + MAX_CLIENTS;

	metrics_write(ctl);
	for (;;) {
		int timeout = poll_timeout(ctl), n = 3;

		pfd[0] = (struct pollfd){ .fd = ctl->listen_fd, .events = POLLIN };
		pfd[1] = (struct pollfd){ .fd = ctl->stop_fd, .events = POLLIN };
		pfd[2] = (struct pollfd){ .fd = coord_state_fd(ctl->info.coord),
					  .events = POLLIN };
		for (int i = 0; i < MAX_CLIENTS; i++)
			pfd[n++] = (struct pollfd){ .fd = ctl->clients[i].fd,
						    .events = POLLIN };
		for (int i = 0; i < MAX_WATCHERS; i++)
			pfd[n++] = (struct pollfd){ .fd = ctl->watchers[i],
						    .events = POLLIN };
		if (poll(pfd, (nfds_t)n, timeout) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (pfd[1].revents)
			break;
		if (ctl->metrics_dirfd >= 0 && lease_deadline_passed(ctl->metrics_next))
			metrics_write(ctl);
		if (pfd[2].revents & POLLIN)
			state_event(ctl, pfd[2].fd);
		for (int i = 0; i < MAX_WATCHERS; i++)
			if (ctl->watchers[i] >= 0 && pfd[W + i].revents)
				watcher_event(ctl, i);
		for (int i = 0; i < MAX_CLIENTS; i++)
			if (ctl->clients[i].fd >= 0 && pfd[3 + i].revents)
				client_read(ctl, &ctl->clients[i]);
		if (pfd[0].revents & POLLIN)
			client_accept(ctl);
	}
	for (int i = 0; i < MAX_CLIENTS; i++)
		if (ctl->clients[i].fd >= 0)
			client_close(&ctl->clients[i]);
	return NULL;
}

static int connect_path(const char *path);

/* Whether a daemon answers on the socket at path. */
static bool socket_live(const char *path)
{
	int fd = connect_path(path);

	if (fd < 0)
		return false;
	close(fd);
	return true;
}

/* Bind to sa's path; a socket there that no daemon answers is a crashed
 * daemon's and is replaced, a live one is never taken over. */
static int bind_socket(int fd, const struct sockaddr_un *sa)
{
	if (bind(fd, (const struct sockaddr *)sa, sizeof(*sa)) == 0)
		return 0;
	if (errno != EADDRINUSE)
		return -errno;
	if (socket_live(sa->sun_path))
		return -EADDRINUSE;
	unlink(sa->sun_path);
	return bind(fd, (const struct sockaddr *)sa, sizeof(*sa)) == 0 ? 0 : -errno;
}

static int listen_on(struct control *ctl)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, r;

	if ((mkdir(LEASEFS_RUN_DIR, 0700) < 0 && errno != EEXIST) ||
	    (mkdir(CTL_DIR, 0700) < 0 && errno != EEXIST))
		return -errno;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", ctl->path);
	r = bind_socket(fd, &sa);
	if (r < 0 || chmod(ctl->path, 0600) < 0 || listen(fd, 64) < 0) {
		if (r == 0)
			r = -errno;
		close(fd);
		return r;
	}
	ctl->listen_fd = fd;
	return 0;
}

int control_start(const struct daemon_info *info, struct control **out)
{
	struct control *ctl = calloc(1, sizeof(*ctl));
	int r;

	if (!ctl)
		return -ENOMEM;
	ctl->info = *info;
	ctl->listen_fd = -1;
	for (int i = 0; i < MAX_CLIENTS; i++)
		ctl->clients[i].fd = -1;
	for (int i = 0; i < MAX_WATCHERS; i++)
		ctl->watchers[i] = -1;
	ctl->last_state = public_state(coord_state(info->coord));
	ctl->metrics_dirfd = -1;
	ctl->stop_fd = eventfd(0, EFD_CLOEXEC);
	r = ctl->stop_fd < 0 ? -errno
			     : control_path(info->mountpoint, ctl->path,
					    sizeof(ctl->path));
	if (r == 0 && info->metrics_dir)
		r = ctl->metrics_dirfd = open_metrics_dir(info->metrics_dir);
	if (r < 0)
		goto fail;
	r = listen_on(ctl);
	if (r < 0)
		goto fail;
	r = -pthread_create(&ctl->thread, NULL, control_thread, ctl);
	if (r < 0)
		goto fail_unlink;
	*out = ctl;
	return 0;
fail_unlink:
	unlink(ctl->path);
fail:
	if (ctl->listen_fd >= 0)
		close(ctl->listen_fd);
	if (ctl->stop_fd >= 0)
		close(ctl->stop_fd);
	if (ctl->metrics_dirfd >= 0)
		close(ctl->metrics_dirfd);
	free(ctl);
	return r;
}

void control_stop(struct control *ctl)
{
	if (!ctl)
		return;
	(void)eventfd_write(ctl->stop_fd, 1);
	pthread_join(ctl->thread, NULL);
	unlink(ctl->path);
	if (ctl->metrics_dirfd >= 0) {
		char p[NAME_MAX + 1];

		/* A mount that is gone reports nothing. */
		if (metrics_name(ctl, p, sizeof(p), "") == 0 &&
		    metrics_dir_in_place(ctl))
			unlinkat(ctl->metrics_dirfd, p, 0);
		close(ctl->metrics_dirfd);
	}
	close(ctl->listen_fd);
	close(ctl->stop_fd);
	/* The umount waiters and the watchers stay open on purpose: the
	 * kernel closes them when the daemon exits, which is the moment
	 * their clients wait for. */
	free(ctl);
}

static int connect_path(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, r;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	return fd;
}

static int connect_ctl(const char *mountpoint)
{
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int r = control_path(mountpoint, path, sizeof(path));

	return r < 0 ? r : connect_path(path);
}

/* Read until EOF or timeout; bytes read or -errno. */
static ssize_t read_all(int fd, char *buf, size_t bufsz, int timeout_ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	size_t len = 0;

	for (;;) {
		int r = poll(&p, 1, timeout_ms);
		ssize_t n;

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r == 0 ? -ETIMEDOUT : -errno;
		n = read(fd, buf + len, bufsz - 1 - len);
		if (n < 0 && errno == ECONNRESET)
			n = 0; /* the daemon is gone: that is the end */
		if (n < 0)
			return -errno;
		if (n == 0 || len + (size_t)n >= bufsz - 1) {
			len += (size_t)(n > 0 ? n : 0);
			buf[len] = '\0';
			return (ssize_t)len;
		}
		len += (size_t)n;
	}
}

static int send_cmd(const char *mountpoint, const char *cmd, char *buf,
		    size_t bufsz, int timeout_ms)
{
	int fd = connect_ctl(mountpoint);
	ssize_t n;

	if (fd < 0)
		return fd;
	char line[64];
	int len = snprintf(line, sizeof(line), "%s\n", cmd);

	if (send(fd, line, (size_t)len, MSG_NOSIGNAL) != len) {
		n = -errno;
		goto out;
	}
	n = read_all(fd, buf, bufsz, timeout_ms);
out:
	close(fd);
	return n < 0 ? (int)n : 0;
}

int control_request(const char *mountpoint, const char *cmd, char *buf,
		    size_t bufsz)
{
	return send_cmd(mountpoint, cmd, buf, bufsz, 5000);
}

int control_umount(const char *mountpoint, int timeout_ms)
{
	char buf[64];

	return send_cmd(mountpoint, "umount", buf, sizeof(buf), timeout_ms);
}

int control_watch(const char *mountpoint, int (*on_line)(const char *, void *),
		  void *ud)
{
	char buf[8192];
	size_t len = 0;
	int fd = connect_ctl(mountpoint), r = 0;

	if (fd < 0)
		return fd;
	if (send(fd, "watch\n", 6, MSG_NOSIGNAL) != 6) {
		r = -errno;
		goto out;
	}
	for (;;) {
		ssize_t n = recv(fd, buf + len, sizeof(buf) - 1 - len, 0);
		char *nl;

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno != ECONNRESET) {
			r = -errno;
			break;
		}
		if (n <= 0)
			break; /* the daemon is gone */
		len += (size_t)n;
		buf[len] = '\0';
		while ((nl = strchr(buf, '\n')) != NULL) {
			*nl = '\0';
			r = on_line(buf, ud);
			len -= (size_t)(nl + 1 - buf);
			memmove(buf, nl + 1, len + 1);
			if (r)
				goto out;
		}
		if (len == sizeof(buf) - 1)
			len = 0; /* a line longer than any status: drop it */
	}
out:
	close(fd);
	return r;
}
