/* SPDX-License-Identifier: MIT */
/*
 * The control socket of a mount: a unix socket per mount point under
 * LEASEFS_RUN_DIR/ctl (rundir.h), never inside the workspace: root's in
 * ctl/ itself, a user's in ctl/<uid>, which root makes and only that user
 * writes, so that nobody can take another's name.  A client finds the uid in the mount's user_id (the
 * kernel's record of who mounted it) and talks only to a server of that
 * uid (SO_PEERCRED): a socket another user put under the name is never
 * believed.  One request line per connection:
 *   status   one JSON object (status.h)
 *   metrics  the Prometheus text exposition
 *   watch    the status object at once, then one per change of state, as
 *            the coordinator's state fd fires; open until the daemon exits,
 *            so a watcher learns of the end by EOF
 *   umount   "ok", then open until the daemon has torn down, so a client
 *            can wait for the end by reading to EOF
 * to root and the mount's owner (SO_PEERCRED); anyone else gets "error:
 * permission denied" to every line and learns nothing of the mount.  The
 * sockets are 0666: who may talk is decided here.
 * The server is control.c (with the textfile, textfile.c); the client side
 * is client.c.
 */
#ifndef LEASEFS_CONTROL_H
#define LEASEFS_CONTROL_H

#include <stddef.h>

#include <sys/types.h>

#include "rundir.h"
#include "status.h"

#define CONTROL_DIR RUNDIR_CTL

/* Control socket path for a canonical mount point served by a daemon of
 * `uid` (as the host sees it): CONTROL_DIR/<hash>.sock for root's,
 * CONTROL_DIR/<uid>/<HMAC of the mount point under uid's key>.sock for a
 * user's (/proc/net/unix shows the names to everyone); `out` >= 108 bytes
 * (client.c: both sides name it so).  -EACCES: not root nor uid. */
int control_path(const char *mountpoint, uid_t uid, char *out, size_t outsz);

/* ---- server ----------------------------------------------------------- */

struct control;
struct daemon_info {
	struct status_source status; /* what status, watch and metrics show */
	const char *metrics_dir;     /* canonical; NULL: no textfile */
	/* Who may use the socket besides root: the owner, and members of
	 * owner_gid if owner_group. */
	uid_t owner_uid;
	gid_t owner_gid;
	bool owner_group;
	/* Called (from the control thread) on "umount". */
	void (*on_umount)(void *userdata);
	void *userdata;
};
/* Listen on control_path(info->status.mountpoint) and serve from a
 * thread. */
int control_start(const struct daemon_info *info, struct control **out);
void control_stop(struct control *ctl);

/* ---- client ----------------------------------------------------------- */

/* A connection to the socket at `path`: the fd, or -errno. */
int control_connect_path(const char *path);
/* Send `cmd` and read the whole reply, to the daemon's EOF: *out is
 * malloc'ed and NUL-terminated.  -ENOENT or -ECONNREFUSED when no daemon
 * serves the mount point, -EACCES when it refuses us (not the owner). */
int control_request(const char *mountpoint, const char *cmd, char **out);
/* Watch the mount's state: on_line gets each status line (without its
 * newline) as the daemon pushes it; a non-zero return stops the watch and
 * is returned.  0 once the daemon is gone (EOF). */
int control_watch(const char *mountpoint, int (*on_line)(const char *, void *),
		  void *ud);
/* Ask for umount and wait until the daemon closed its end (it exits
 * after teardown), at most timeout_ms.  -ECONNREFUSED too when the daemon
 * ended without answering (it was dying). */
int control_umount(const char *mountpoint, int timeout_ms);

#endif
