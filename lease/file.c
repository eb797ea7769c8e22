/* SPDX-License-Identifier: MIT */
/* File backend (placeholder until implemented). */
#include <errno.h>
#include "backend.h"
static int ph_open(struct lease_store *s, const char *r, struct lease_err *e)
{ (void)s; (void)r; return lease_err_set(e, LEASE_E_IO, -ENOSYS, NULL, "file backend not built yet"); }
static void ph_close(struct lease_store *s) { (void)s; }
const struct lease_backend lease_backend_file = { .scheme = "file", .open = ph_open, .close = ph_close };
