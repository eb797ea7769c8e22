/* SPDX-License-Identifier: MIT */
/*
 * Internals of the daemon, shared by its units and nothing else:
 *   daemon.c   the mount's life: open in order, serve, the orderly end
 *   setup.c    the process: descriptor limits, umask, groups, stdio
 *   leases.c   preflight refusals, the coordinator, the host lock on ROOT
 *   mount.c    the FUSE layers composed and mounted
 *   events.c   the event thread: signals, umount requests, loss
 *   held.c     the gating lease and the root's host lock, asked or let go
 *   log.c      the log: stderr, the journal or syslog (log.h)
 *   notify.c   the service manager's notification socket (notify.h)
 * The CLI sees daemon.h; the control socket is control.h.  Calls go one
 * way: daemon.c to the others, leases.c to events.c, all of them to
 * held.c and the leaves (log, notify, setup); a unit below is handed a
 * callback rather than calling up.
 */
#ifndef LEASEFS_DAEMON_INT_H
#define LEASEFS_DAEMON_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "daemon.h"
#include "fs.h"
#include "gate.h"
#include "hostlock.h"
#include "log.h"
#include "notify.h"
#include "roots.h"
#include "session.h"
#include "transport.h"

/* Descriptors a daemon keeps for itself, outside the passthrough's
 * budget: control clients, watchers and umount waiters (up to 115), the
 * lease store's (leases, bells, records, connections), eventfds, the FUSE
 * device, and per FUSE thread (workers, io_uring queues) its splice and
 * peek pipes.  A lower open files limit than FD_SPARE more is refused
 * before anything is taken. */
#define FD_RESERVE_BASE 256
#define FD_RESERVE_PER_THREAD 6
#define FD_SPARE 256
/* FUSE_HANDLE_KILLPRIV_V2 when the kernel offers it (README: measured). */
#define KILLPRIV_V2_DEFAULT true
/* FUSE over io_uring when the kernel has it enabled (README: measured). */
#define IO_URING_DEFAULT true
/* FUSE passthrough of read-only opens of large files (README: measured;
 * fs/fuse/iomode.c: what never passes through). */
#define PASSTHROUGH_DEFAULT true
/* Write-only opens past the page cache (README: measured). */
#define DIRECT_WRITES_DEFAULT true
#define DRAIN_TIMEOUT_MS 10000
#define FENCE_STEP_MS 200
#define RO_RETRY_MIN_MS 50
#define RO_RETRY_MAX_MS 2000

/* Written once before threads start, then read-only, except `stopping`. */
struct daemon {
	struct mount_opts *opts;
	struct lease_store *store;
	struct coord *coord;
	struct lfs *fs;
	struct gate *gate;
	struct lfs_session sess;  /* the session's userdata */
	struct fuse_session *se;
	struct transport *transport;
	struct control *ctl;
	int64_t acquire_deadline; /* --wait, absolute; bounds the host lock too */
	bool wait_said;          /* --wait: what it waits for was said */
	/* The host lock on the root: the event thread frees it once the loss
	 * is acknowledged, the teardown after joining it. */
	struct hostlock *root_lock;
	/* Host locks on the directories the daemon writes outside ROOT (the
	 * metrics directory, a file store): until the daemon exits. */
	struct hostlock *dir_locks[2];
	char session_id[37];      /* --session, else a random one */
	char session_root[PATH_MAX]; /* session placement: ROOT/<session id> */
	char holder[PATH_MAX + 64];  /* the store's holder description */
	char leases_shown[1024];     /* --leases, its password redacted */
	int event_fd;            /* umount requests and loss, for the event thread */
	/* To the waiting parent, until on_serving() (a FUSE worker) reports;
	 * the main thread reads it only after the workers are joined. */
	int report_fd;
	int signal_fd;
	pthread_t event_thread;
	bool event_thread_started;
	atomic_bool stopping;
	atomic_bool lost;
	atomic_bool fence_due;   /* shared placement: a lease to acknowledge */
	/* Set by on_serving() (a FUSE worker) when a lease was found lost at
	 * INIT, with the refusal in born_err; read by the main thread only
	 * after the workers are joined. */
	bool born_lost;
	struct lfs_err born_err;
	/* Set once on_serving() said the mount serves; the store's
	 * reachability is logged from then on (store_reach()). */
	atomic_bool serving;
	atomic_bool unreachable_said; /* "store unreachable" logged, not yet "again" */
};


/* held.c */
/* The lease that gates the mount (the root's, else the session's). */
void gating_lease(struct daemon *d, const char **name, uint64_t *epoch);
/* Fenced: the root's host lock goes (its next owner on this host may
 * come). */
void drop_hostlock(struct daemon *d);

/* setup.c */
/* Stdin, stdout and stderr onto /dev/null (a daemon that serves). */
void detach_stdio(void);
/* The daemon process as the passthrough needs it. */
int process_setup(struct lfs_err *err);

/* leases.c: the session, its leases and host locks, in order. */
int open_coord(struct daemon *d, struct lfs_err *err);

/* mount.c */
/* What the daemon keeps of RLIMIT_NOFILE for itself. */
long fd_reserve(void);
/* Passthrough, gate, FUSE session, mount, transport; `serving` is called
 * with d (on a FUSE worker) once the kernel's INIT is answered. */
int open_fs(struct daemon *d, void (*serving)(void *ud), struct lfs_err *err);

/* events.c */
/* SIGTERM, SIGINT, SIGHUP into d->signal_fd; SIGPIPE ignored. */
int block_signals(struct daemon *d);
/* The coordinator's loss callback, and the control socket's umount. */
void daemon_on_loss(void *ud, enum lease_loss why);
void daemon_on_umount(void *ud);
/* Shutdown begins, for `why`: said once (log, STOPPING=1) by the first
 * caller, and the event thread told. */
void daemon_stopping(struct daemon *d, const char *why);
void *event_thread(void *p);

#endif
