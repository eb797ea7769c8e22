/* SPDX-License-Identifier: MIT */
/*
 * Control socket: a unix socket per mount point under
 * LEASEFS_RUN_DIR/ctl, never inside the workspace.  One request line per
 * connection: "status" -> one JSON object; "umount" -> "ok", then the
 * connection stays open until the daemon has torn down, so a client can
 * wait for the end by reading to EOF.
 */
#include <errno.h>
#include <inttypes.h>
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

#include "daemon.h"

#define CTL_DIR LEASEFS_RUN_DIR "/ctl"
#define MAX_WAITERS 16

struct control {
	struct daemon_info info;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int listen_fd;
	int stop_fd;
	pthread_t thread;
	/* Owned by the control thread alone until it is joined. */
	int waiters[MAX_WAITERS];
	int nwaiters;
};

int control_path(const char *mountpoint, char *out, size_t outsz)
{
	char name[96];
	int r = lease_root_name(mountpoint, name, sizeof(name));

	if (r < 0)
		return r;
	/* name is "workspace-roots/<hex>": the hash names the socket. */
	if ((size_t)snprintf(out, outsz, CTL_DIR "/%s.sock",
			     strchr(name, '/') + 1) >= outsz)
		return -ENAMETOOLONG;
	return 0;
}

/* Append s to buf as a JSON string. */
static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
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

static void write_status(const struct daemon_info *in, FILE *f)
{
	struct coord *c = in->coord;
	bool has_root = coord_root_epoch(c) != 0;

	fputs("{\"root\":", f);
	json_str(f, coord_root(c));
	fputs(",\"placement\":", f);
	json_str(f, coord_placement_str(coord_placement(c)));
	fputs(",\"session\":", f);
	json_str(f, coord_session_id(c));
	fputs(",\"lease\":", f);
	json_str(f, has_root ? coord_root_lease_name(c)
			     : coord_session_lease_name(c));
	fprintf(f, ",\"epoch\":%" PRIu64 ",\"state\":",
		has_root ? coord_root_epoch(c) : coord_session_epoch(c));
	json_str(f, public_state(coord_state(c)));
	fputs(",\"backend\":", f);
	json_str(f, in->backend);
	fprintf(f, ",\"pid\":%d}\n", (int)getpid());
}

static void reply(int fd, const char *s)
{
	size_t n = strlen(s);

	while (n > 0) {
		ssize_t w = write(fd, s, n);

		if (w <= 0)
			return;
		s += w;
		n -= (size_t)w;
	}
}

/* Serve one connection; true if the fd was kept (umount waiter). */
static bool serve(struct control *ctl, int fd)
{
	struct timeval tv = { .tv_sec = 2 };
	char line[64] = { 0 };
	char *buf = NULL;
	size_t len = 0;
	ssize_t n;
	FILE *f;

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	n = read(fd, line, sizeof(line) - 1);
	if (n <= 0)
		return false;
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

static void *control_thread(void *p)
{
	struct control *ctl = p;
	struct pollfd pfd[2] = {
		{ .fd = ctl->listen_fd, .events = POLLIN },
		{ .fd = ctl->stop_fd, .events = POLLIN },
	};

	for (;;) {
		if (poll(pfd, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (pfd[1].revents)
			break;
		if (pfd[0].revents & POLLIN) {
			int fd = accept4(ctl->listen_fd, NULL, NULL, SOCK_CLOEXEC);

			if (fd >= 0 && !serve(ctl, fd))
				close(fd);
		}
	}
	return NULL;
}

static int listen_on(struct control *ctl)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd;

	if ((mkdir(LEASEFS_RUN_DIR, 0700) < 0 && errno != EEXIST) ||
	    (mkdir(CTL_DIR, 0700) < 0 && errno != EEXIST))
		return -errno;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", ctl->path);
	unlink(ctl->path); /* a crashed daemon's socket */
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    chmod(ctl->path, 0600) < 0 || listen(fd, 8) < 0) {
		int r = -errno;

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
	ctl->stop_fd = eventfd(0, EFD_CLOEXEC);
	r = ctl->stop_fd < 0 ? -errno
			     : control_path(info->mountpoint, ctl->path,
					    sizeof(ctl->path));
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
	free(ctl);
	return r;
}

void control_stop(struct control *ctl)
{
	uint64_t one = 1;

	if (!ctl)
		return;
	if (write(ctl->stop_fd, &one, sizeof(one)) < 0)
		perror("leasefs: control: stop");
	pthread_join(ctl->thread, NULL);
	unlink(ctl->path);
	close(ctl->listen_fd);
	close(ctl->stop_fd);
	/* The umount waiters stay open on purpose: the kernel closes them
	 * when the daemon exits, which is the moment their clients wait for. */
	free(ctl);
}

static int connect_ctl(const char *mountpoint)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, r;

	r = control_path(mountpoint, sa.sun_path, sizeof(sa.sun_path));
	if (r < 0)
		return r;
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

	if (write(fd, line, (size_t)len) != len) {
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
