/* SPDX-License-Identifier: MIT */
/*
 * The lease library's error type and its names: struct lease_err, the
 * kinds and their errnos, and the loss and state strings.  No other unit
 * of the library is needed to use them.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "lease.h"

int lease_errkind_errno(enum lease_errkind kind)
{
	switch (kind) {
	case LEASE_OK: return 0;
	case LEASE_E_HELD: return -EBUSY;
	case LEASE_E_BADNAME: return -EINVAL;
	case LEASE_E_UNREACHABLE: return -EHOSTUNREACH;
	case LEASE_E_TIMEOUT: return -ETIMEDOUT;
	case LEASE_E_CORRUPT: return -EUCLEAN;
	case LEASE_E_LOST: return -ENOLINK;
	case LEASE_E_SHUTDOWN: return -ESHUTDOWN;
	case LEASE_E_USAGE: return -EINVAL;
	case LEASE_E_IO: return -EIO;
	case LEASE_E_SETUP: return -ENOMEDIUM;
	}
	return -EIO;
}

const char *lease_errkind_str(enum lease_errkind kind)
{
	static const char *const s[] = {
		[LEASE_OK] = "ok",
		[LEASE_E_HELD] = "held",
		[LEASE_E_BADNAME] = "bad-name",
		[LEASE_E_UNREACHABLE] = "unreachable",
		[LEASE_E_TIMEOUT] = "timeout",
		[LEASE_E_CORRUPT] = "corrupt",
		[LEASE_E_LOST] = "lost",
		[LEASE_E_SHUTDOWN] = "shutdown",
		[LEASE_E_USAGE] = "usage",
		[LEASE_E_IO] = "io",
		[LEASE_E_SETUP] = "setup",
	};
	if ((unsigned)kind < sizeof(s) / sizeof(s[0]) && s[kind])
		return s[kind];
	return "unknown";
}

int lease_err_set(struct lease_err *err, enum lease_errkind kind, int code,
		  const char *name, const char *fmt, ...)
{
	int rc = kind == LEASE_E_IO && code < 0 ? code : lease_errkind_errno(kind);
	va_list ap;

	if (!err)
		return rc;
	err->kind = kind;
	err->code = rc;
	snprintf(err->name, sizeof(err->name), "%s", name ? name : "");
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	return rc;
}

const char *lease_loss_str(enum lease_loss why)
{
	switch (why) {
	case LEASE_LOSS_NONE: return "none";
	case LEASE_LOSS_RELEASED: return "released";
	case LEASE_LOSS_EXPIRED: return "expired";
	case LEASE_LOSS_REVOKED: return "revoked";
	case LEASE_LOSS_TAKEOVER: return "takeover";
	case LEASE_LOSS_STORE: return "store-failure";
	}
	return "unknown";
}

const char *lease_state_str(enum lease_state st)
{
	switch (st) {
	case LEASE_STATE_FREE: return "free";
	case LEASE_STATE_HELD: return "held";
	case LEASE_STATE_REVOKED: return "revoked";
	}
	return "unknown";
}

int lease_err_not_held(struct lease_err *err, const char *name)
{
	return lease_err_set(err, LEASE_E_IO, -ENOENT, name,
			     "lease '%s' is not held", name);
}

int lease_err_untold(struct lease_err *err, const char *name, uint64_t epoch,
		     const char *until)
{
	return lease_err_set(err, LEASE_OK, 0, name, "its holder (epoch %" PRIu64
			     ") is a session that is not a leasefs mount (a "
			     "harness session): it has no loss channel and was "
			     "not told; the name stays its until %s", epoch, until);
}
