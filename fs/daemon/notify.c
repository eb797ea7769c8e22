/* SPDX-License-Identifier: MIT */
/* The service manager's notification socket (contract: notify.h). */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "notify.h"

/* Written once by notify_open(), before any thread that sends starts. */
static int notify_fd = -1;
static struct sockaddr_un notify_addr;
static socklen_t notify_len;

/* $NOTIFY_SOCKET as an address: "/path" or "@abstract". */
static int parse_addr(const char *s)
{
	size_t n = strlen(s);

	if ((s[0] != '/' && s[0] != '@') || n < 2 ||
	    n >= sizeof(notify_addr.sun_path))
		return -EINVAL;
	memset(&notify_addr, 0, sizeof(notify_addr));
	notify_addr.sun_family = AF_UNIX;
	memcpy(notify_addr.sun_path, s, n);
	if (s[0] == '@')
		notify_addr.sun_path[0] = '\0';
	/* An abstract name is exactly its bytes; a path ends at its NUL. */
	notify_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n +
				 (s[0] == '/'));
	return 0;
}

int notify_open(void)
{
	const char *e = getenv("NOTIFY_SOCKET");
	struct timeval tv = { .tv_sec = NOTIFY_TIMEOUT_MS / 1000,
			      .tv_usec = NOTIFY_TIMEOUT_MS % 1000 * 1000 };
	int r = e ? parse_addr(e) : 0;

	unsetenv("NOTIFY_SOCKET");
	if (!e || r < 0)
		return r;
	notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (notify_fd < 0)
		return -errno;
	/* Bounded: a manager that does not read never stalls the daemon. */
	(void)setsockopt(notify_fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	return 0;
}

int notify_status(const char *fixed, const char *fmt, ...)
{
	char *status = NULL, *msg = NULL;
	va_list ap;
	ssize_t n;
	int len;

	if (notify_fd < 0)
		return 0;
	va_start(ap, fmt);
	len = vasprintf(&status, fmt, ap);
	va_end(ap);
	if (len < 0)
		return -ENOMEM;
	for (char *p = status; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?';
	len = asprintf(&msg, "%sSTATUS=%s", fixed, status);
	free(status);
	if (len < 0)
		return -ENOMEM;
	n = sendto(notify_fd, msg, (size_t)len, MSG_NOSIGNAL,
		   (struct sockaddr *)&notify_addr, notify_len);
	free(msg);
	return n < 0 ? -errno : 0;
}
