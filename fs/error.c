/* SPDX-License-Identifier: MIT */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "error.h"

int lfs_fail(struct lfs_err *err, int exit, int code, const char *fmt, ...)
{
	va_list ap;

	err->exit = exit;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	return code;
}

/* The one place a lease error kind becomes an exit code. */
static int lease_kind_exit(enum lease_errkind kind)
{
	switch (kind) {
	case LEASE_E_HELD:
		return EXIT_BUSY;
	case LEASE_E_USAGE:
	case LEASE_E_BADNAME:
		return EXIT_USAGE;
	default:
		return EXIT_FAIL;
	}
}

int lfs_err_from_lease(struct lfs_err *err, int r, const struct lease_err *le)
{
	if (r >= 0)
		return r;
	err->exit = lease_kind_exit(le->kind);
	snprintf(err->msg, sizeof(err->msg), "%s",
		 le->msg[0] ? le->msg : strerror(-r));
	return r;
}

int lfs_exit_code(int r, const struct lfs_err *err)
{
	return r < 0 ? err->exit : EXIT_OK;
}
