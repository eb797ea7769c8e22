/* SPDX-License-Identifier: MIT */
/* The control socket's client side (protocol: control.h). */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "control.h"
#include "roots.h"

#define REQUEST_TIMEOUT_MS 5000
#define DENIED "error: permission denied"
/* A reply past this is no daemon's: refused rather than read on. */
#define REPLY_MAX (16u << 20)

int control_path(const char *mountpoint, char *out, size_t outsz)
{
	char name[96];
	int r = ws_root_name(mountpoint, name, sizeof(name));

	if (r < 0)
		return r;
	/* name is "workspace-roots/<hex>": the hash names the socket. */
	if ((size_t)snprintf(out, outsz, CONTROL_DIR "/%s.sock",
			     strchr(name, '/') + 1) >= outsz)
		return -ENAMETOOLONG;
	return 0;
}

int control_connect_path(const char *path)
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

	return r < 0 ? r : control_connect_path(path);
}

/* Room for `more` bytes after `len` (and a NUL): 0 or -ENOMEM/-EMSGSIZE. */
static int reserve(char **buf, size_t *cap, size_t len, size_t more)
{
	size_t want = *cap ? *cap : 4096;
	char *p;

	while (want < len + more + 1)
		want *= 2;
	if (want == *cap)
		return 0;
	if (want > REPLY_MAX)
		return -EMSGSIZE;
	p = realloc(*buf, want);
	if (!p)
		return -ENOMEM;
	*buf = p;
	*cap = want;
	return 0;
}

/* Read to EOF (a reset is the daemon's end too) within timeout_ms of
 * each read: the whole reply, malloc'ed, or -errno. */
static int read_all(int fd, char **out, int timeout_ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	size_t len = 0, cap = 0;
	char *buf = NULL;
	int r;

	for (;;) {
		ssize_t n;

		r = reserve(&buf, &cap, len, 4096);
		if (r < 0)
			goto fail;
		r = poll(&p, 1, timeout_ms);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			r = r == 0 ? -ETIMEDOUT : -errno;
			goto fail;
		}
		n = read(fd, buf + len, cap - 1 - len);
		if (n < 0 && errno == ECONNRESET)
			n = 0;
		if (n < 0) {
			r = -errno;
			goto fail;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	buf[len] = '\0';
	*out = buf;
	return 0;
fail:
	free(buf);
	return r;
}

static int send_cmd(const char *mountpoint, const char *cmd, char **out,
		    int timeout_ms)
{
	char line[64];
	int len = snprintf(line, sizeof(line), "%s\n", cmd);
	int fd, r;

	if (len >= (int)sizeof(line))
		return -EINVAL;
	fd = connect_ctl(mountpoint);
	if (fd < 0)
		return fd;
	if (send(fd, line, (size_t)len, MSG_NOSIGNAL) != len)
		r = -errno;
	else
		r = read_all(fd, out, timeout_ms);
	close(fd);
	return r;
}

static bool denied(const char *reply)
{
	return reply && strncmp(reply, DENIED, strlen(DENIED)) == 0;
}

int control_request(const char *mountpoint, const char *cmd, char **out)
{
	int r;

	*out = NULL;
	r = send_cmd(mountpoint, cmd, out, REQUEST_TIMEOUT_MS);
	if (r == 0 && denied(*out)) {
		free(*out);
		*out = NULL;
		r = -EACCES;
	}
	return r;
}

int control_umount(const char *mountpoint, int timeout_ms)
{
	char *reply = NULL;
	int r = send_cmd(mountpoint, "umount", &reply, timeout_ms);

	/* The end without "ok": a daemon that died as we asked (its socket
	 * lived on while its last threads exited) serves nobody. */
	if (r == 0 && denied(reply))
		r = -EACCES;
	else if (r == 0 && strncmp(reply, "ok\n", 3) != 0)
		r = -ECONNREFUSED;
	free(reply);
	return r;
}

/* Hand each complete line of buf[0..*len) to on_line, keeping the rest;
 * on_line's non-zero return. */
static int take_lines(char *buf, size_t *len,
		      int (*on_line)(const char *, void *), void *ud)
{
	char *nl;
	int r;

	while ((nl = memchr(buf, '\n', *len)) != NULL) {
		*nl = '\0';
		r = on_line(buf, ud);
		*len -= (size_t)(nl + 1 - buf);
		memmove(buf, nl + 1, *len);
		if (r)
			return r;
	}
	return 0;
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
		ssize_t n = recv(fd, buf + len, sizeof(buf) - len, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno != ECONNRESET) {
			r = -errno;
			break;
		}
		if (n <= 0)
			break; /* the daemon is gone */
		len += (size_t)n;
		if (len >= strlen(DENIED) && memcmp(buf, DENIED, strlen(DENIED)) == 0) {
			r = -EACCES;
			break;
		}
		r = take_lines(buf, &len, on_line, ud);
		if (r)
			break;
		if (len == sizeof(buf))
			len = 0; /* a line longer than any status: drop it */
	}
out:
	close(fd);
	return r;
}
