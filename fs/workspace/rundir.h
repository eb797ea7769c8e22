/* SPDX-License-Identifier: MIT */
/*
 * The host's run directory, LEASEFS_RUN_DIR: what every daemon on the host
 * shares, root's and users' alike.
 *
 *   LEASEFS_RUN_DIR          0755 root
 *     roots/    host lock files (hostlock.h)        1733 root
 *     holders/  who holds which host lock           1733 root
 *     ctl/      control sockets (control.h)         1733 root
 *
 * The parts are writable and searchable by everyone, listable by root
 * alone, and sticky: a daemon creates its own names, only their owner or
 * root removes one, and a user cannot enumerate what others hold.  Root
 * creates and repairs the layout (any root mount does; so does
 * systemd-tmpfiles from leasefs.conf at boot); a user daemon only checks
 * it, and is refused with a message saying how root creates it.
 */
#ifndef LEASEFS_RUNDIR_H
#define LEASEFS_RUNDIR_H

#include <stddef.h>

#include "roots.h"

#define RUNDIR_ROOTS LEASEFS_RUN_DIR "/roots"
#define RUNDIR_HOLDERS LEASEFS_RUN_DIR "/holders"
#define RUNDIR_CTL LEASEFS_RUN_DIR "/ctl"

/* Make sure the layout above exists (root: create or repair it; a user:
 * check it).  0, or -errno with `msg` saying what is wrong. */
int rundir_prepare(char *msg, size_t msgsz);

/*
 * Open the file `name` in the run directory part `dir` (one of the above),
 * for reading and writing, creating it if absent with mode 0666 (so that
 * every daemon may lock it): never through a symlink, never a FIFO or
 * device, and without O_CREAT on a name that exists (fs.protected_regular
 * refuses that for another user's file in a sticky directory).  The fd, or
 * -errno.
 */
int rundir_open_shared(const char *dir, const char *name);

#endif
