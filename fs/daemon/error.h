/* SPDX-License-Identifier: MIT */
/*
 * The daemon's and the CLI's error: what failed, in words, and the exit
 * code it stands for.  Functions return 0 or -errno and fill a struct
 * lfs_err on failure; the lease library's errors are turned into one in a
 * single place (lfs_err_from_lease), which is also where their kinds
 * become exit codes.
 */
#ifndef LEASEFS_ERROR_H
#define LEASEFS_ERROR_H

#include "lease.h"

/* Exit codes. */
enum {
	EXIT_OK = 0,
	EXIT_FAIL = 1,
	EXIT_UNFENCED = 3,  /* revoked, but the holder was not fenced in time */
	EXIT_GONE = 4,      /* watch: the mount went away (umount, daemon killed) */
	EXIT_USAGE = 64,
	EXIT_UNAVAILABLE = 69, /* no /dev/fuse or fusermount3 (sysexits EX_UNAVAILABLE) */
	EXIT_DENIED = 77,   /* not root, nor the mount's owner (sysexits EX_NOPERM) */
	EXIT_BUSY = 75,
	EXIT_NOARBITER = 76, /* not root of the host, and no host lock arbiter */
	EXIT_SETUP = 78,    /* the store is not set up by its owner (sysexits EX_CONFIG) */
};

struct lfs_err {
	int exit;                /* the exit code this error stands for */
	char msg[LEASE_MSG_MAX]; /* names what was wrong */
};

/* Fill `err` (printf-style) and return `code` (a negative errno). */
int lfs_fail(struct lfs_err *err, int exit, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* The lease library's error `le` (returned as r) as ours; returns r. */
int lfs_err_from_lease(struct lfs_err *err, int r, const struct lease_err *le);
/* The exit code for a result r with err filled when r < 0. */
int lfs_exit_code(int r, const struct lfs_err *err);

#endif
