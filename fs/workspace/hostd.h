/* SPDX-License-Identifier: MIT */
/*
 * `leasefs hostd`: the host lock arbiter (README.md: why, and the threat
 * model).  Real root's daemons take their host locks themselves; everyone
 * else's ask the arbiter on RUNDIR_HOSTD (a SOCK_SEQPACKET socket).  It
 * runs as real root, started by systemd on the first connection
 * (leasefs-hostd.socket) or by hand, and for each caller (SO_PEERCRED,
 * SO_PEERPIDFD):
 *   - checks, with the caller's credentials and in the caller's mount
 *     namespace, that the caller may write the directory it asks to lock
 *     (and owns it if it is sticky): nobody locks what it could not mount;
 *   - plans the locks from the mounts that walk resolved on (their lines
 *     of the caller's /proc/PID/mountinfo), writes the
 *     caller's holder record, takes the locks in the root-only run
 *     directory, and passes the read-locked, read-only fds back
 *     (SCM_RIGHTS): the locks live exactly as long as the caller keeps
 *     them, whether or not the arbiter still runs;
 *   - makes ctl/<uid>, where the caller's control sockets go.
 * Each request is served by a process of its own, bounded in time; a
 * person (a uid and its subordinate uids, persons.h) has at most
 * HOSTD_PER_PERSON of them at once.  Released locks and what
 * killed daemons left are swept (rundir_sweep()) at start, after a caller
 * says it let go, and every HOSTD_SWEEP_S while it runs.
 *
 * Protocol, one request and one reply per connection:
 *   take\t<mode>\t<epoch>\t<what>\t<mountpoint>\t<path>
 *       ok\t<fds>\t<uid>      with the fds: the locks, then the record
 *       busy\t<epoch>\t<message>
 *       error\t<errno>\t<message>
 *   released                  (no reply)
 */
#ifndef LEASEFS_HOSTD_H
#define LEASEFS_HOSTD_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#define HOSTD_PER_PERSON 8
/* A message's text at most; fds with one (SCM_RIGHTS carries at most
 * 253, SCM_MAX_FD). */
#define HOSTD_MSG_MAX (2 * PATH_MAX + 512)
#define HOSTD_MAX_FDS 250
#define HOSTD_WORKERS 64
#define HOSTD_REQUEST_TIMEOUT_S 10
/* A sweep at least this often while it runs (what killed daemons left). */
#define HOSTD_SWEEP_S 60

struct hostd_opts {
	int idle_exit_s;   /* exit when idle this long; 0: never (by hand) */
	const char *subuid_path; /* the subordinate ranges (/etc/subuid) */
};

/*
 * Serve until idle (socket activation: the socket systemd passes;
 * otherwise RUNDIR_HOSTD, bound here).  0 once done (or another arbiter
 * already serves), -EPERM if not real root, else -errno; msg says why.
 */
int hostd_run(const struct hostd_opts *o, char *msg, size_t msgsz);

#endif
