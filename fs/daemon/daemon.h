/* SPDX-License-Identifier: MIT */
/* The daemon: its entry (daemon.c), host-scoped root lock (hostlock.c) and
 * control socket (control.c). */
#ifndef LEASEFS_DAEMON_H
#define LEASEFS_DAEMON_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "coord.h"
#include "error.h"
#include "session.h"


/* `leasefs mount` as parsed and checked by the CLI. */
struct mount_opts {
	enum placement_id placement;
	const char *leases;
	const char *session;
	double wait_s;
	double ttl_s;
	char *fuse_opts;     /* comma-joined -o options for libfuse, each allowed */
	struct mount_attrs attrs;
	unsigned max_read;   /* -o max_read=N, 0 if not given */
	long files_per_user; /* --files-per-user, 0: the default */
	const char *metrics_dir; /* --metrics-dir */
	bool foreground;
	bool debug;
	const char *root;
	const char *mnt_arg;   /* MOUNTPOINT as given */
	char mountpoint[PATH_MAX];
	char canon_root[PATH_MAX];
	char metrics_canon[PATH_MAX]; /* --metrics-dir, symlinks resolved */
};

/* Run the mount: in the foreground, or as a daemon whose parent returns
 * once it serves (or failed).  Returns the exit code. */
int daemon_mount(struct mount_opts *o);

/* Control socket path for a canonical mount point; `out` >= 108 bytes. */
int control_path(const char *mountpoint, char *out, size_t outsz);

struct control;
struct gate;
struct daemon_info {
	struct coord *coord;
	struct gate *gate;        /* request counters */
	const struct transport *transport; /* negotiated FUSE features */
	const char *metrics_dir;  /* canonical; NULL: no textfile */
	const char *backend;      /* store URI */
	const char *mountpoint;
	/* Called (from the control thread) on "umount". */
	void (*on_umount)(void *userdata);
	void *userdata;
};
/* Listen on control_path(info->mountpoint) and serve from a thread. */
int control_start(const struct daemon_info *info, struct control **out);
void control_stop(struct control *ctl);

/* The Prometheus text exposition of a mount's metrics, malloc'ed. */
char *control_metrics_text(const struct daemon_info *info);

/* Client side: send `cmd`, read the whole reply into buf.  -ENOENT or
 * -ECONNREFUSED when no daemon serves the mount point. */
int control_request(const char *mountpoint, const char *cmd, char *buf,
		    size_t bufsz);
/* Now, as RFC 3339 UTC with milliseconds (the watch lines' "time"); buf
 * of 64 bytes. */
void control_time_now(char *buf, size_t sz);

/* Client side: watch the mount's state.  on_line gets each status line
 * (without its newline) as the daemon pushes it; a non-zero return stops
 * the watch and is returned.  0 once the daemon is gone (EOF), -ENOENT or
 * -ECONNREFUSED when no daemon serves the mount point. */
int control_watch(const char *mountpoint, int (*on_line)(const char *, void *),
		  void *ud);
/* Client side: ask for umount and wait until the daemon closed its end
 * (it exits after teardown), at most timeout_ms. */
int control_umount(const char *mountpoint, int timeout_ms);

#endif
