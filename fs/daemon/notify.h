/* SPDX-License-Identifier: MIT */
/*
 * The service manager's notification socket: sd_notify(3)'s protocol
 * without libsystemd.  One datagram of newline-separated assignments
 * (READY=1, STATUS=..., STOPPING=1, MAINPID=...) to $NOTIFY_SOCKET, a path
 * or an abstract name ("@name").  Without $NOTIFY_SOCKET every call does
 * nothing.  Safe from any thread once notify_open() returned.
 */
#ifndef LEASEFS_NOTIFY_H
#define LEASEFS_NOTIFY_H

/* Take $NOTIFY_SOCKET (out of the environment, so that nothing the daemon
 * starts, fusermount3, sends to it): 0, also without one; -EINVAL for an
 * address that is neither absolute nor abstract; -errno. */
int notify_open(void);
/* One datagram: `fixed`, assignments the caller wrote, each ending in a
 * newline ("READY=1\n"; may be ""), then STATUS= the formatted text with
 * control characters as '?' (a path in it cannot add an assignment).
 * 0, or -errno (the manager is gone or not reading: it waits at most
 * NOTIFY_TIMEOUT_MS).  A no-op without a socket. */
int notify_status(const char *fixed, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define NOTIFY_TIMEOUT_MS 1000

#endif
