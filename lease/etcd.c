/* SPDX-License-Identifier: MIT */
/* etcd backend (placeholder until implemented). */
#include <errno.h>
#include "backend.h"
static int ph_open(struct lease_store *s, const char *r, struct lease_err *e)
{ (void)s; (void)r; return lease_err_set(e, LEASE_E_IO, -ENOSYS, NULL, "etcd backend not built yet"); }
static void ph_close(struct lease_store *s) { (void)s; }
const struct lease_backend lease_backend_etcd = { .scheme = "etcd", .open = ph_open, .close = ph_close };
const struct lease_backend lease_backend_etcds = { .scheme = "etcds", .open = ph_open, .close = ph_close };
