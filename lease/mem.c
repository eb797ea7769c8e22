/* SPDX-License-Identifier: MIT */
/* Mem backend (placeholder until implemented). */
#include <errno.h>
#include "backend.h"
static int ph_open(struct lease_store *s, const char *r, struct lease_err *e)
{ (void)s; (void)r; return lease_err_set(e, LEASE_E_IO, -ENOSYS, NULL, "mem backend not built yet"); }
static void ph_close(struct lease_store *s) { (void)s; }
const struct lease_backend lease_backend_mem = { .scheme = "mem", .open = ph_open, .close = ph_close };
int lease_mem_force_loss(struct lease_store *store, const char *name, enum lease_loss why)
{ (void)store; (void)name; (void)why; return -ENOSYS; }
