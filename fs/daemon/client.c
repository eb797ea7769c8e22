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

/* HMAC-SHA256 (RFC 2104) of msg under a 32-byte key, in hex. */
static int hmac_hex(const unsigned char key[32], const char *msg, char out[65])
{
	size_t n = strlen(msg);
	unsigned char *buf = malloc(64 + (n > 32 ? n : 32)), inner[32], md[32];

	if (!buf)
		return -ENOMEM;
	for (int i = 0; i < 64; i++)
		buf[i] = (unsigned char)((i < 32 ? key[i] : 0) ^ 0x36);
	memcpy(buf + 64, msg, n);
	lease_sha256(buf, 64 + n, inner);
	for (int i = 0; i < 64; i++)
		buf[i] = (unsigned char)((i < 32 ? key[i] : 0) ^ 0x5c);
	memcpy(buf + 64, inner, 32);
	lease_sha256(buf, 64 + 32, md);
	free(buf);
	for (int i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
	return 0;
}

/* Root's sockets are named by the mount point's hash (its mounts are
 * root's to show); a user's by an HMAC under the user's key, which only
 * that user and root can read (rundir_ctl_key()). */
int control_path(const char *mountpoint, uid_t uid, char *out, size_t outsz)
{
	char name[96], hex[65], dir[24] = "";
	unsigned char key[32];
	int r = ws_root_name(mountpoint, name, sizeof(name));

	if (r == 0 && uid != 0) {
		r = rundir_ctl_key(uid, uid == rundir_host_uid(), key);
		if (r == 0)
			r = hmac_hex(key, mountpoint, hex);
		snprintf(dir, sizeof(dir), "/%u", (unsigned)uid);
	} else if (r == 0) {
		/* name is "workspace-roots/<hex>": the hash names the socket. */
		snprintf(hex, sizeof(hex), "%s", strchr(name, '/') + 1);
	}
	if (r < 0)
		return r;
	if ((size_t)snprintf(out, outsz, CONTROL_DIR "%s/%s.sock", dir, hex) >= outsz)
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

/* The user_id the kernel recorded for the topmost leasefs mount at
 * `mountpoint` (who mounted it), or -ENOENT. */
static int mount_user_id(const char *mountpoint, uid_t *out)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char *line = NULL, *uid;
	size_t cap = 0;
	int r = -ENOENT;

	if (!f)
		return -errno;
	while (getline(&line, &cap, f) > 0) {
		char point[4096], type[64];
		char *sep = strstr(line, " - ");

		if (!sep || sscanf(line, "%*s %*s %*s %*s %4095s", point) != 1 ||
		    sscanf(sep + 3, "%63s", type) != 1)
			continue;
		ws_mountinfo_unescape(point);
		if (strcmp(point, mountpoint) != 0 || strcmp(type, "fuse.leasefs") != 0)
			continue;
		uid = strstr(sep, ",user_id=");
		if (uid) {
			*out = (uid_t)strtoul(uid + 9, NULL, 10);
			r = 0;
		}
	}
	free(line);
	fclose(f);
	return r;
}

/* A connection to the socket named for host uid `named`, served by `uid`
 * as our user namespace sees it (a socket someone else bound under the
 * name is refused). */
static int connect_as(const char *mountpoint, uid_t named, uid_t uid)
{
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	struct ucred cr;
	socklen_t len = sizeof(cr);
	int fd, r = control_path(mountpoint, named, path, sizeof(path));

	if (r < 0)
		return r;
	fd = control_connect_path(path);
	if (fd < 0)
		return fd;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0 || cr.uid != uid) {
		close(fd);
		return -ECONNREFUSED;
	}
	return fd;
}

/* `uid`'s daemon, uid as the host sees it (outward: as we see it). */
static int connect_uid(const char *mountpoint, uid_t uid, bool outward)
{
	uid_t other;
	int r = rundir_uid_map(uid, outward, &other);

	if (r < 0)
		return r;
	return outward ? connect_as(mountpoint, other, uid)
		       : connect_as(mountpoint, uid, other);
}

static bool not_found(int fd)
{
	return fd == -ENOENT || fd == -ECONNREFUSED;
}

/*
 * The mount's daemon: the uid that mounted it, else (no mount there, or
 * a daemon still starting) ours, then root's.  The kernel shows the
 * mount's uid as the user namespace the mount was made in sees it: the
 * host's, or (made in ours) ours; both are asked, the socket's peer
 * checked either way.
 */
static int connect_ctl(const char *mountpoint)
{
	uid_t who;
	int fd;

	if (mount_user_id(mountpoint, &who) == 0) {
		uid_t out;

		fd = connect_uid(mountpoint, who, false);
		if (not_found(fd) && rundir_uid_map(who, true, &out) == 0 && out != who)
			fd = connect_as(mountpoint, out, who);
		return fd;
	}
	fd = geteuid() != 0 ? connect_uid(mountpoint, geteuid(), true) : -ENOENT;
	return not_found(fd) ? connect_uid(mountpoint, 0, true) : fd;
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
