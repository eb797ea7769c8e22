/* SPDX-License-Identifier: MIT */
/*
 * The daemon side of `leasefs mount`: the mount's life from the leases to
 * the orderly end (the units: daemon_int.h).
 *
 *   open:   session lease, root lease (coord), host lock, passthrough +
 *           gate + FUSE session, control socket, event thread
 *   serve:  FUSE workers; the event thread takes signals, umount requests
 *           and loss (acknowledge after the drain, drop caches, read-only)
 *   end:    close admission, drain, unmount, release root then session
 *
 * Errors travel as 0/-errno with a struct lfs_err (error.h) naming what
 * failed; the lease library's are converted where they come in.  Only the
 * coordinator's after_acquire hook speaks struct lease_err, its contract.
 */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <grp.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/sysinfo.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon_int.h"

static int start_services(struct daemon *d, struct lfs_err *err)
{
	struct daemon_info info = {
		.status = {
			.coord = d->coord,
			.gate = d->gate,
			.transport = d->transport,
			.backend = d->leases_shown,
			.mountpoint = d->opts->mountpoint,
		},
		.metrics_dir = d->opts->metrics_dir,
		.owner_uid = d->opts->owner_uid,
		.owner_gid = d->opts->owner_gid,
		.owner_group = d->opts->owner_group,
		.on_umount = daemon_on_umount,
		.userdata = d,
	};
	int r = control_start(&info, &d->ctl);

	if (r < 0)
		return lfs_fail(err, EXIT_FAIL, r,
				     "cannot open the control socket for %s: %s",
				     d->opts->mountpoint, strerror(-r));
	r = -pthread_create(&d->event_thread, NULL, event_thread, d);
	if (r < 0)
		return lfs_fail(err, EXIT_FAIL, r,
				     "cannot start the event thread: %s",
				     strerror(-r));
	d->event_thread_started = true;
	return 0;
}

/* Orderly end: stop serving, unmount, release root then session. */
static int teardown(struct daemon *d)
{
	int r = 0;

	if (d->event_thread_started) {
		daemon_on_umount(d); /* the event thread closes admission and exits */
		pthread_join(d->event_thread, NULL);
	}
	if (d->se)
		fuse_session_unmount(d->se);
	/* Unmounted: nothing new reaches the root through us.  What was
	 * admitted must land before anything is let go (a write stuck in the
	 * kernel keeps the leases, however long); then the host lock goes
	 * first, so a successor never sees it outlive the root lease. */
	while (d->coord &&
	       coord_close_admission(d->coord, DRAIN_TIMEOUT_MS) == -ETIMEDOUT)
		;
	drop_hostlock(d);
	if (d->coord)
		r = coord_shutdown(d->coord, DRAIN_TIMEOUT_MS);
	control_stop(d->ctl);
	if (d->se)
		fuse_session_destroy(d->se);
	transport_free(d->transport);
	gate_free(d->gate);
	lfs_free(d->fs);
	coord_free(d->coord);
	lease_store_close(d->store);
	for (size_t i = 0; i < sizeof(d->dir_locks) / sizeof(d->dir_locks[0]); i++)
		hostlock_free(d->dir_locks[i]);
	return r;
}

/* Tell the waiting parent how the mount went (one byte: the exit code). */
static void report(int *fd, int code)
{
	unsigned char b = (unsigned char)code;

	if (*fd < 0)
		return;
	if (write(*fd, &b, 1) != 1)
		log_error_errno(errno, "cannot report to the waiting parent: %m");
	close(*fd);
	*fd = -1;
}

/* The leases are held: every message from now on names them. */
static void log_leases(struct daemon *d)
{
	const char *name;
	uint64_t epoch;

	gating_lease(d, &name, &epoch);
	log_set_mount(d->opts->mountpoint, coord_root(d->coord));
	log_set_lease(name, epoch);
}

/* Serving: said once, to the log and to the service manager, which may
 * count the unit started (a daemon that forked is the main process now). */
static void say_serving(struct daemon *d)
{
	char fixed[64] = "READY=1\n";
	const char *name;
	uint64_t epoch;

	gating_lease(d, &name, &epoch);
	if (!d->opts->foreground)
		snprintf(fixed, sizeof(fixed), "READY=1\nMAINPID=%d\n", (int)getpid());
	log_info("serving %s: lease %s held at epoch %" PRIu64 " (%s placement, store %s)", coord_root(d->coord), name, epoch, coord_placement(d->coord)->name, d->leases_shown);
	notify_status(fixed, "held: lease %s at epoch %" PRIu64 ", serving %s", name, epoch, coord_root(d->coord));
}

/*
 * A lease lost between the coordinator's open and INIT (the store out of
 * reach past the TTL, a revoke, a takeover while the FUSE session was set
 * up): the mount must not be born lost.  Decided here, at one instant, as
 * coord_open() decides at its end: lost now fails the mount (the event
 * thread acknowledges the loss as for any loss, the refusal's teardown
 * releases whatever is left); lost after this is an ordinary loss of a
 * mount that served healthy.
 */
static bool refuse_born_lost(struct daemon *d)
{
	const char *name;
	uint64_t epoch;

	if (coord_healthy(d->coord) != -ENOLINK)
		return false;
	gating_lease(d, &name, &epoch);
	lfs_fail(&d->born_err, EXIT_FAIL, -ENOLINK, "lease %s on %s was lost "
		 "(%s) at epoch %" PRIu64 " before the mount served; every "
		 "lease is released, the mount is refused", name,
		 coord_root(d->coord), lease_loss_str(coord_loss_reason(d->coord)),
		 epoch);
	d->born_lost = true;
	daemon_stopping(d, "a lease was lost before the mount served");
	return true;
}

/* The kernel's INIT is answered (a FUSE worker): the waiting parent may
 * return. */
static void on_serving(void *ud)
{
	struct daemon *d = ud;

	if (refuse_born_lost(d))
		return;
	say_serving(d);
	atomic_store(&d->serving, true);
	report(&d->report_fd, EXIT_OK);
	if (!d->opts->foreground) {
		log_detach_stderr();
		detach_stdio();
	}
	/* What the start freed (store, host locks, mountinfo) goes back to
	 * the system: an idle daemon is one of a thousand. */
	malloc_trim(0);
}

/* The log and the service manager's socket, for the process that serves. */
static void start_log(const struct mount_opts *o)
{
	int r;

	log_open(o->log_level, o->foreground);
	if (!o->debug)
		log_take_libfuse();
	log_set_mount(o->mountpoint, o->canon_root);
	r = notify_open();
	if (r < 0)
		log_warning_errno(r, "ignoring $NOTIFY_SOCKET: %m");
}

/* A refusal at start, for the service manager (the log has it already). */
static void say_failed(int r, const struct lfs_err *err)
{
	char fixed[32];

	snprintf(fixed, sizeof(fixed), "ERRNO=%d\n", r < 0 ? -r : EIO);
	notify_status(fixed, "failed: %s", err->msg);
}

/* The orderly end is done; `r` is the teardown's result, returned. */
static int say_stopped(int r)
{
	if (r < 0)
		log_error_errno(r, "stopped; the leases were not all released: %m");
	else
		log_info("stopped: unmounted, the leases released");
	return r;
}

/*
 * Test builds only (-Dtests=true, which no package ships): sleep for the
 * milliseconds the environment variable `name` gives, to widen a window a
 * test must hit.  Anything else is a no-op.
 */
static void test_delay(const char *name)
{
#ifdef LEASEFS_TEST_HOOKS
	const char *v = getenv(name);
	long ms = v ? strtol(v, NULL, 10) : 0;

	if (ms > 0 && ms <= 60000)
		poll(NULL, 0, (int)ms);
#else
	(void)name;
#endif
}

static int run_daemon(struct mount_opts *o, int report_fd)
{
	struct daemon d = { .opts = o, .signal_fd = -1,
			    .event_fd = -1, .report_fd = -1 };
	struct lfs_err err = { 0 };
	int r, code;

	d.acquire_deadline = lease_deadline_ms((int64_t)(o->wait_s * 1000));
	start_log(o);
	r = process_setup(&err);
	if (r < 0)
		goto fail;
	r = block_signals(&d);
	if (r < 0) {
		lfs_fail(&err, EXIT_FAIL, r,
			      "cannot set up signal handling: %s", strerror(-r));
		goto fail;
	}
	r = open_coord(&d, &err);
	if (r < 0)
		goto fail;
	log_leases(&d);
	r = open_fs(&d, on_serving, &err);
	if (r < 0)
		goto fail;
	r = start_services(&d, &err);
	if (r < 0)
		goto fail;
	d.report_fd = report_fd;
	test_delay("LEASEFS_TEST_SERVE_DELAY_MS");
	r = transport_run(d.transport, 0);
	/* The loop has joined its workers: on_serving() ran, or never will. */
	report_fd = d.report_fd;
	if (d.born_lost) {
		err = d.born_err;
		r = -ENOLINK;
		goto fail;
	}
	if (report_fd >= 0) {
		/* Without a worker nothing answered INIT. */
		r = lfs_fail(&err, EXIT_FAIL, -EAGAIN, "cannot start serving "
			     "%s: no FUSE worker thread could start",
			     o->mountpoint);
		goto fail;
	}
	if (r < 0)
		log_error_errno(r, "session loop: %m");
	daemon_stopping(&d, r < 0 ? "the session loop failed" : "unmounted");
	code = say_stopped(teardown(&d)) == 0 && r == 0 ? EXIT_OK : EXIT_FAIL;
	goto close_fds;
fail:
	log_error("%s", err.msg);
	say_failed(r, &err);
	code = lfs_exit_code(r, &err);
	atomic_store(&d.stopping, true); /* a refusal, not a shutdown */
	teardown(&d);
	report(&report_fd, code);
close_fds:
	if (d.signal_fd >= 0)
		close(d.signal_fd);
	if (d.event_fd >= 0)
		close(d.event_fd);
	return code;
}

/* Background: the parent returns only once the child says it is serving
 * (or failed, with the child's exit code). */
static int daemonize_and_run(struct mount_opts *o)
{
	unsigned char code = EXIT_FAIL;
	int p[2];
	pid_t pid;

	if (pipe2(p, O_CLOEXEC) < 0) {
		log_error_errno(errno, "pipe: %m");
		return EXIT_FAIL;
	}
	pid = fork();
	if (pid < 0) {
		log_error_errno(errno, "fork: %m");
		return EXIT_FAIL;
	}
	if (pid == 0) {
		close(p[0]);
		setsid();
		return run_daemon(o, p[1]);
	}
	close(p[1]);
	if (read(p[0], &code, 1) != 1)
		code = EXIT_FAIL; /* the daemon died before reporting */
	close(p[0]);
	return code;
}

int daemon_mount(struct mount_opts *o)
{
	return o->foreground ? run_daemon(o, -1) : daemonize_and_run(o);
}
