/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "error.h"

/*
 * The host limit an errno stands for, and the knob that raises it, for an
 * operator who runs out of one (hundreds of mounts on a host).
 */
static const char *limit_hint(int code)
{
	switch (code) {
	case -EMFILE:
		return " (open files of the process: RLIMIT_NOFILE; raise it "
		       "with ulimit -n or LimitNOFILE=)";
	case -ENFILE:
		return " (open files of the host: fs.file-max)";
	case -EAGAIN:
		return " (threads: ulimit -u, kernel.threads-max, "
		       "kernel.pid_max, or the cgroup's pids.max)";
	case -ENOMEM:
		return " (memory: the cgroup's memory.max or the host's)";
	default:
		return "";
	}
}

static void add_hint(struct lfs_err *err, int code)
{
	size_t n = strlen(err->msg);

	snprintf(err->msg + n, sizeof(err->msg) - n, "%s", limit_hint(code));
}

int lfs_fail(struct lfs_err *err, int exit, int code, const char *fmt, ...)
{
	va_list ap;

	err->exit = exit;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	add_hint(err, code);
	return code;
}

/* The one place a lease error becomes an exit code. */
static int lease_kind_exit(enum lease_errkind kind, int code)
{
	switch (kind) {
	case LEASE_E_IO:
		/* hostd.c: no arbiter, where one is needed. */
		return code == -ENOLCK ? EXIT_NOARBITER : EXIT_FAIL;
	case LEASE_E_HELD:
		return EXIT_BUSY;
	case LEASE_E_USAGE:
	case LEASE_E_BADNAME:
		return EXIT_USAGE;
	case LEASE_E_SETUP:
		return EXIT_SETUP;
	default:
		return EXIT_FAIL;
	}
}

int lfs_err_from_lease(struct lfs_err *err, int r, const struct lease_err *le)
{
	if (r >= 0)
		return r;
	err->exit = lease_kind_exit(le->kind, le->code ? le->code : r);
	snprintf(err->msg, sizeof(err->msg), "%s",
		 le->msg[0] ? le->msg : strerror(-r));
	if (le->kind == LEASE_E_IO)
		add_hint(err, le->code ? le->code : r);
	return r;
}

int lfs_exit_code(int r, const struct lfs_err *err)
{
	return r < 0 ? err->exit : EXIT_OK;
}
