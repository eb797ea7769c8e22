/* SPDX-License-Identifier: MIT */
/* Names (placeholder until implemented). */
#include <errno.h>
#include "lease.h"
int lease_name_validate(const char *name, struct lease_err *err) { (void)name; (void)err; return -ENOSYS; }
