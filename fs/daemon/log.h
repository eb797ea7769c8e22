/* SPDX-License-Identifier: MIT */
/*
 * The daemon's log: one function behind five macros, syslog(3)'s levels,
 * a printf format (%m included), in the style of systemd's log_*():
 *
 *   log_error(fmt, ...), log_warning, log_notice, log_info, log_debug
 *   log_error_errno(r, fmt, ...) and the others: errno is |r| for %m, and
 *   the call returns -|r|, so that `return log_error_errno(r, ...);` works
 *
 * Where a message goes (README.md beside this file argues it):
 *   foreground (-f): stderr as "leasefs: MESSAGE"; under systemd, whose
 *     journal stream stderr then is ($JOURNAL_STREAM), the journal's
 *     native protocol instead, with fields;
 *   background: the journal's native protocol where its socket is, else
 *     the syslog socket /dev/log (ident "leasefs", facility daemon); and
 *     while stderr is still the caller's (until the mount serves), notices,
 *     warnings and errors there too.
 * A message for the journal or syslog starts with the mount point; the
 * journal also gets it, the root, the lease and its epoch as fields
 * (LEASEFS_MOUNTPOINT=, LEASEFS_ROOT=, LEASEFS_LEASE=, LEASEFS_EPOCH=).
 * Control characters in a message are written as '?': a path cannot forge
 * a line.  Nothing here blocks: a datagram the log daemon has no room for
 * is dropped.  Safe from any thread.  Callers log state changes, never a
 * request.
 */
#ifndef LEASEFS_LOG_H
#define LEASEFS_LOG_H

#include <stdbool.h>
#include <stdint.h>
#include <syslog.h>

/* "error", "warning", "notice", "info" or "debug": LOG_ERR..LOG_DEBUG,
 * else -EINVAL. */
int log_parse_level(const char *s);

/* Where messages go from now on, and the most verbose level written
 * (LOG_INFO unless told). */
void log_open(int level, bool foreground);
/* libfuse's messages through this log too (not with -d: its per-request
 * debug output stays libfuse's own, on stderr). */
void log_take_libfuse(void);
/* The mount's context, for every message from now on (NULL: none). */
void log_set_mount(const char *mountpoint, const char *root);
void log_set_lease(const char *lease, uint64_t epoch);
/* stderr is /dev/null from now on (the daemon serves). */
void log_detach_stderr(void);

int log_full(int level, int error, const char *file, int line,
	     const char *func, const char *fmt, ...)
	__attribute__((format(printf, 6, 7)));

#define log_at(level, error, ...) \
	log_full((level), (error), __FILE__, __LINE__, __func__, __VA_ARGS__)
#define log_error(...)   log_at(LOG_ERR, 0, __VA_ARGS__)
#define log_warning(...) log_at(LOG_WARNING, 0, __VA_ARGS__)
#define log_notice(...)  log_at(LOG_NOTICE, 0, __VA_ARGS__)
#define log_info(...)    log_at(LOG_INFO, 0, __VA_ARGS__)
#define log_debug(...)   log_at(LOG_DEBUG, 0, __VA_ARGS__)
#define log_error_errno(r, ...)   log_at(LOG_ERR, (r), __VA_ARGS__)
#define log_warning_errno(r, ...) log_at(LOG_WARNING, (r), __VA_ARGS__)

#endif
