/* SPDX-License-Identifier: MIT */
/* The daemon of one mount: what the CLI hands it (daemon.c runs it). */
#ifndef LEASEFS_DAEMON_H
#define LEASEFS_DAEMON_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "control.h"
#include "coord.h"
#include "error.h"
#include "mount_opts.h"
#include "session.h"

/* Run the mount: in the foreground, or as a daemon whose parent returns
 * once it serves (or failed).  Returns the exit code. */
int daemon_mount(struct mount_opts *o);

#endif
