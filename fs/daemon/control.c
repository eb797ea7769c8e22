/* SPDX-License-Identifier: MIT */
/*
 * The control socket's server (protocol: control.h).
 *
 * One thread serves up to MAX_CLIENTS connections at once, each bounded by
 * CLIENT_TIMEOUT_MS to send its line; a slow or silent client delays no
 * other, and a client that hangs up never raises SIGPIPE (MSG_NOSIGNAL).
 * Everything in struct control past `info` is the control thread's alone
 * until it is joined: no lock.
 */
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "control.h"
#include "coord.h"
#include "roots.h"
#include "textfile.h"

#define MAX_WAITERS 16
#define MAX_WATCHERS 64
#define MAX_CLIENTS 32
#define CLIENT_TIMEOUT_MS 2000

struct control {
	struct daemon_info info;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int listen_fd;
	int stop_fd;
	pthread_t thread;
	struct textfile textfile;
	int waiters[MAX_WAITERS];
	int nwaiters;
	int watchers[MAX_WATCHERS];  /* -1: free slot */
	const char *last_state;      /* the state last pushed to watchers */
	struct client {
		int fd;            /* -1: free slot */
		int64_t deadline;  /* to send the request line */
		size_t len;
		char line[64];
		bool allowed;      /* root or the owner (SO_PEERCRED) */
	} clients[MAX_CLIENTS];
};

static void reply(int fd, const char *s)
{
	size_t n = s ? strlen(s) : 0;

	while (n > 0) {
		ssize_t w = send(fd, s, n, MSG_NOSIGNAL);

		if (w <= 0)
			return;
		s += w;
		n -= (size_t)w;
	}
}

/* The status now, as a status reply (false) or a watch line (true). */
static char *status_now(const struct control *ctl, bool watch_line)
{
	struct status st;

	status_take(&ctl->info.status, &st);
	return status_json(&st, watch_line);
}

/* ---- watchers --------------------------------------------------------- */

static void watcher_close(struct control *ctl, int i)
{
	close(ctl->watchers[i]);
	ctl->watchers[i] = -1;
}

/* Push the state to every watcher if it changed since the last push; a
 * watcher that cannot take it (gone, or not reading) is dropped. */
static void watchers_push(struct control *ctl)
{
	const char *st = status_state_name(ctl->info.status.coord);
	char *line;

	if (ctl->last_state == st)
		return;
	ctl->last_state = st;
	/* The textfile first: a watcher that sees the change finds it there. */
	textfile_write(&ctl->textfile, &ctl->info.status);
	line = status_now(ctl, true);
	for (int i = 0; line && i < MAX_WATCHERS; i++) {
		size_t n = strlen(line);

		if (ctl->watchers[i] >= 0 &&
		    send(ctl->watchers[i], line, n, MSG_NOSIGNAL | MSG_DONTWAIT) !=
		    (ssize_t)n)
			watcher_close(ctl, i);
	}
	free(line);
}

/* ---- commands --------------------------------------------------------- */

/* Each answers one request on fd; true if it kept the fd. */
static bool serve_status(struct control *ctl, int fd)
{
	char *line = status_now(ctl, false);

	reply(fd, line);
	free(line);
	return false;
}

static bool serve_metrics(struct control *ctl, int fd)
{
	struct status st;
	char *text;

	status_take(&ctl->info.status, &st);
	text = status_prometheus(&st);
	reply(fd, text);
	free(text);
	return false;
}

/* A new watcher gets the state now; refused if there is no room. */
static bool serve_watch(struct control *ctl, int fd)
{
	char *line = status_now(ctl, true);

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

/* Past MAX_WAITERS a caller is answered but not kept: it returns before
 * the daemon's end (bounded table, no realloc). */
static bool serve_umount(struct control *ctl, int fd)
{
	bool keep = ctl->nwaiters < MAX_WAITERS;

	reply(fd, "ok\n");
	if (keep)
		ctl->waiters[ctl->nwaiters++] = fd;
	ctl->info.on_umount(ctl->info.userdata);
	return keep;
}

static const struct command {
	const char *name;
	bool (*serve)(struct control *ctl, int fd);
} commands[] = {
	{ "status", serve_status },
	{ "metrics", serve_metrics },
	{ "watch", serve_watch },
	{ "umount", serve_umount },
};

/* Answer one request line; true if the fd was kept. */
static bool serve(struct control *ctl, int fd, char *line)
{
	line[strcspn(line, "\r\n")] = '\0';
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (strcmp(line, commands[i].name) == 0)
			return commands[i].serve(ctl, fd);
	reply(fd, "error: unknown command\n");
	return false;
}

/* ---- clients ---------------------------------------------------------- */

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
	if (!c->allowed)
		reply(c->fd, "error: permission denied\n");
	else if (serve(ctl, c->fd, c->line))
		c->fd = -1; /* kept: a watcher or an umount waiter */
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

/* Whether the process `pid` has `gid` among its supplementary groups. */
static bool in_group(pid_t pid, gid_t gid)
{
	char path[32], line[4096];
	bool yes = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	while (f && !yes && fgets(line, sizeof(line), f)) {
		char *p = line + 7, *end;

		if (strncmp(line, "Groups:", 7) != 0)
			continue;
		for (;;) {
			unsigned long g = strtoul(p, &end, 10);

			if (end == p)
				break;
			yes = yes || (gid_t)g == gid;
			p = end;
		}
	}
	if (f)
		fclose(f);
	return yes;
}

/* Root, the owner, or (with a group) one of its members. */
static bool peer_allowed(const struct control *ctl, int fd)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0)
		return false;
	if (cr.uid == 0 || cr.uid == ctl->info.owner_uid)
		return true;
	return ctl->info.owner_group &&
	       (cr.gid == ctl->info.owner_gid || in_group(cr.pid, ctl->info.owner_gid));
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
	c->allowed = peer_allowed(ctl, fd);
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

/* ---- the thread ------------------------------------------------------- */

/* Until the next client deadline or periodic textfile write. */
static int poll_timeout(struct control *ctl)
{
	int t = clients_expire(ctl), f = textfile_timeout_ms(&ctl->textfile);

	if (f < 0)
		return t;
	return t < 0 || f < t ? f : t;
}

/* The coordinator's state moved: take the event, tell the watchers. */
static void state_event(struct control *ctl, int fd)
{
	eventfd_t v;

	if (eventfd_read(fd, &v) < 0 && errno != EAGAIN)
		return;
	watchers_push(ctl);
}

/* The poll set: listener, stop, state, then clients, then watchers. */
#define PFD_CLIENTS 3
#define PFD_WATCHERS (PFD_CLIENTS + MAX_CLIENTS)
#define PFD_COUNT (PFD_WATCHERS + MAX_WATCHERS)

static void fill_pollset(struct control *ctl, struct pollfd *pfd)
{
	pfd[0] = (struct pollfd){ .fd = ctl->listen_fd, .events = POLLIN };
	pfd[1] = (struct pollfd){ .fd = ctl->stop_fd, .events = POLLIN };
	pfd[2] = (struct pollfd){ .fd = coord_state_fd(ctl->info.status.coord),
				  .events = POLLIN };
	for (int i = 0; i < MAX_CLIENTS; i++)
		pfd[PFD_CLIENTS + i] = (struct pollfd){
			.fd = ctl->clients[i].fd, .events = POLLIN };
	for (int i = 0; i < MAX_WATCHERS; i++)
		pfd[PFD_WATCHERS + i] = (struct pollfd){
			.fd = ctl->watchers[i], .events = POLLIN };
}

static void handle_events(struct control *ctl, const struct pollfd *pfd)
{
	if (textfile_due(&ctl->textfile))
		textfile_write(&ctl->textfile, &ctl->info.status);
	if (pfd[2].revents & POLLIN)
		state_event(ctl, pfd[2].fd);
	/* A watcher only ever reads: anything readable on its socket is its
	 * hang-up (or a protocol breach); either way it is done. */
	for (int i = 0; i < MAX_WATCHERS; i++)
		if (ctl->watchers[i] >= 0 && pfd[PFD_WATCHERS + i].revents)
			watcher_close(ctl, i);
	for (int i = 0; i < MAX_CLIENTS; i++)
		if (ctl->clients[i].fd >= 0 && pfd[PFD_CLIENTS + i].revents)
			client_read(ctl, &ctl->clients[i]);
	if (pfd[0].revents & POLLIN)
		client_accept(ctl);
}

static void *control_thread(void *p)
{
	struct control *ctl = p;
	struct pollfd pfd[PFD_COUNT];

	textfile_write(&ctl->textfile, &ctl->info.status);
	for (;;) {
		int timeout = poll_timeout(ctl);

		fill_pollset(ctl, pfd);
		if (poll(pfd, PFD_COUNT, timeout) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (pfd[1].revents)
			break;
		handle_events(ctl, pfd);
	}
	for (int i = 0; i < MAX_CLIENTS; i++)
		if (ctl->clients[i].fd >= 0)
			client_close(&ctl->clients[i]);
	return NULL;
}

/* ---- the socket ------------------------------------------------------- */

/* Whether a daemon answers on the socket at path. */
static bool socket_live(const char *path)
{
	int fd = control_connect_path(path);

	if (fd < 0)
		return false;
	close(fd);
	return true;
}

/*
 * Listen on ctl->path, in a directory only our uid (or root) writes
 * (rundir.h): bound under a name of our own and renamed into place once
 * listening, so that the name always answers (a sweep removes only names
 * nobody answers on) and what a killed daemon of ours left is replaced.
 * A live daemon of ours at the name is never taken over.
 */
static int listen_on(struct control *ctl)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char msg[512];
	int fd, r = rundir_prepare(msg, sizeof(msg));

	if (r < 0)
		return r;
	if (socket_live(ctl->path))
		return -EADDRINUSE;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%.*s.%d",
		 (int)(strlen(ctl->path) - strlen(".sock")), ctl->path, (int)getpid());
	unlink(sa.sun_path);
	/* Everyone may connect: who may talk is decided per connection
	 * (peer_allowed()). */
	r = bind(fd, (const struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    chmod(sa.sun_path, 0666) < 0 || listen(fd, 64) < 0 ||
	    rename(sa.sun_path, ctl->path) < 0 ? -errno : 0;
	if (r < 0) {
		unlink(sa.sun_path);
		close(fd);
		return r;
	}
	ctl->listen_fd = fd;
	return 0;
}

/* The textfile is named by the mount point's hash. */
static int open_textfile(struct control *ctl)
{
	char name[96];
	int r = ws_root_name(ctl->info.status.mountpoint, name, sizeof(name));

	if (r < 0)
		return r;
	return textfile_open(&ctl->textfile, ctl->info.metrics_dir,
			     strchr(name, '/') + 1);
}

static struct control *control_alloc(const struct daemon_info *info)
{
	struct control *ctl = calloc(1, sizeof(*ctl));

	if (!ctl)
		return NULL;
	ctl->info = *info;
	ctl->listen_fd = -1;
	ctl->textfile.dirfd = -1;
	for (int i = 0; i < MAX_CLIENTS; i++)
		ctl->clients[i].fd = -1;
	for (int i = 0; i < MAX_WATCHERS; i++)
		ctl->watchers[i] = -1;
	ctl->last_state = status_state_name(info->status.coord);
	ctl->stop_fd = eventfd(0, EFD_CLOEXEC);
	return ctl;
}

int control_start(const struct daemon_info *info, struct control **out)
{
	struct control *ctl = control_alloc(info);
	int r;

	if (!ctl)
		return -ENOMEM;
	r = ctl->stop_fd < 0 ? -errno
			     : control_path(info->status.mountpoint, rundir_host_uid(),
					    ctl->path, sizeof(ctl->path));
	if (r == 0)
		r = open_textfile(ctl);
	if (r == 0)
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
	if (ctl->textfile.dirfd >= 0)
		close(ctl->textfile.dirfd);
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
	textfile_close(&ctl->textfile);
	close(ctl->listen_fd);
	close(ctl->stop_fd);
	/* The umount waiters and the watchers stay open on purpose: the
	 * kernel closes them when the daemon exits, which is the moment
	 * their clients wait for. */
	free(ctl);
}
