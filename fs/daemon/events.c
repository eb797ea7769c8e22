/* SPDX-License-Identifier: MIT */
/*
 * The daemon: its event thread. Signals, umount requests and lease
 * loss, handled off the FUSE threads: after a loss, the acknowledgement
 * once the drain is done, the caches dropped, the read-only remount.
 * (The whole: daemon.c; shared internals: daemon_int.h.)
 */
#include <errno.h>
#include <fcntl.h>
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
#include <sys/stat.h>
#include <unistd.h>

#include "daemon_int.h"

void daemon_on_loss(void *ud, enum lease_loss why)
{
	struct daemon *d = ud;

	/* An unfenced placement never turns read-only; it only acknowledges. */
	if (placement_get(d->opts->placement)->fenced) {
		atomic_store(&d->lost, true);
	} else {
		log_warning("a lease was lost (%s); %s placement: the mount stays %s", lease_loss_str(why), placement_get(d->opts->placement)->name, placement_get(d->opts->placement)->writes ? "writable" : "read-only");
		atomic_store(&d->fence_due, true);
	}
	/* An eventfd add of 1 fails only on overflow: readable anyway. */
	(void)eventfd_write(d->event_fd, 1);
}

void daemon_stopping(struct daemon *d, const char *why)
{
	if (!atomic_exchange(&d->stopping, true)) {
		log_info("shutting down (%s)", why);
		notify_status("STOPPING=1\n", "shutting down (%s): draining, unmounting, releasing the leases", why);
	}
	(void)eventfd_write(d->event_fd, 1);
}

void daemon_on_umount(void *ud)
{
	daemon_stopping(ud, "leasefs umount");
}

/*
 * Stop serving: close admission and drain, then unmount and end the FUSE
 * loop (a copy of the mount in another mount namespace, a container's,
 * keeps the connection alive after our unmount: the loop is ended all the
 * same, and the daemon's exit ends the connection there).  Never touches
 * the mount point through the filesystem itself: its workers may be gone.
 */
static void begin_stop(struct daemon *d)
{
	coord_close_admission(d->coord, DRAIN_TIMEOUT_MS);
	fuse_session_exit(d->se);
	fuse_session_unmount(d->se);
	transport_stop(d->transport);
}

/* What the event thread still owes a loss. */
struct loss_work {
	bool seen;
	bool fence_waits;   /* said that in-flight mutations hold the fence */
	bool fenced;        /* drained and released: successors may come */
	bool caches_dropped;
	bool ro_done;
	int ro_tries;
	int64_t ro_next;    /* CLOCK_MONOTONIC ns of the next remount try */
};

static void loss_begin(struct daemon *d)
{
	const char *why = lease_loss_str(coord_loss_reason(d->coord)), *name;
	uint64_t epoch;

	gating_lease(d, &name, &epoch);
	log_warning("lease %s on %s lost (%s) at epoch %" PRIu64 "; the mount is read-only now", name, coord_root(d->coord), why, epoch);
	notify_status("", "lost (%s) at epoch %" PRIu64 ": read-only; acknowledging the loss once the mutations in flight are done", why, epoch);
}

/* The loss is acknowledged to the store: a successor may take the name. */
static void loss_fenced(struct daemon *d)
{
	const char *why = lease_loss_str(coord_loss_reason(d->coord)), *name;
	uint64_t epoch;

	gating_lease(d, &name, &epoch);
	log_info("loss of lease %s (epoch %" PRIu64 ") acknowledged to the store", name, epoch);
	notify_status("", "lost (%s) at epoch %" PRIu64 ": read-only; the loss is acknowledged", why, epoch);
}

/*
 * After loss: make the superblock read-only, so statfs says so everywhere.
 * The kernel answers EBUSY while a file is open for writing; retry, backing
 * off to RO_RETRY_MAX_MS, for as long as the daemon runs.  Returns the
 * poll timeout for the next try, or -1 when there is nothing left to do.
 */
static int remount_step(struct daemon *d, int *tries)
{
	int r;

	/* Only root may reconfigure a superblock; a user's mount is read-only
	 * by its gate alone, which refuses every mutation already. */
	if (geteuid() != 0) {
		log_info("read-only by the gate alone (only root may remount a superblock read-only)");
		return -1;
	}
	r = session_remount_readonly(d->opts->mountpoint);

	if (r == 0 && *tries == 0)
		log_info("remounted read-only");
	if (r == 0 && *tries > 0)
		log_info("remounted read-only once the files open for writing closed (%d tries)", *tries + 1);
	if (r == 0)
		return -1;
	if (r != -EBUSY) {
		log_error_errno(r, "cannot remount read-only: %m; the gate still refuses every mutation");
		return -1;
	}
	if (*tries == 0)
		log_notice("files are open for writing; the read-only remount waits for them to close");
	++*tries;
	return *tries >= 5 ? RO_RETRY_MAX_MS : RO_RETRY_MIN_MS << *tries;
}

/*
 * One round of work after loss, in order of urgency: acknowledge the loss
 * to the store once in-flight mutations drained (a successor waits for
 * it), drop the caches that assumed we own the root, make the superblock
 * read-only.  Returns the poll timeout for the next round (-1: done).
 */
static int loss_step(struct daemon *d, struct loss_work *w)
{
	int64_t now, next_ms;

	if (!w->seen) {
		w->seen = true;
		lfs_stop_atime(d->fs); /* before any acknowledgement */
		loss_begin(d);
	}
	if (!w->fenced) {
		w->fenced = coord_fence(d->coord, FENCE_STEP_MS) != -ETIMEDOUT;
		if (w->fenced)
			drop_hostlock(d);
		if (w->fenced)
			loss_fenced(d);
		else if (!w->fence_waits)
			log_notice("%ld mutation(s) in flight: the loss is acknowledged once they are done", coord_inflight(d->coord));
		w->fence_waits = true;
	}
	/* Dropping a file's pages waits for the page locks of writes in
	 * flight: only once they drained, so that this thread keeps holding
	 * the fence (coord_fence) for as long as one is stuck. */
	if (w->fenced && !w->caches_dropped) {
		lfs_after_loss(d->fs, d->se);
		w->caches_dropped = true;
	}
	now = lease_now_ns();
	if (!w->ro_done && now >= w->ro_next) {
		int wait = remount_step(d, &w->ro_tries);

		w->ro_done = wait < 0;
		w->ro_next = now + (int64_t)wait * 1000000;
	}
	if (!w->fenced)
		return 0; /* coord_fence itself waited FENCE_STEP_MS */
	if (w->ro_done)
		return -1;
	next_ms = (w->ro_next - now) / 1000000;
	return next_ms > 0 ? (int)next_ms : 0;
}

/* Shared placement: a lost lease gates nothing; its loss is acknowledged
 * at once. */
static void shared_loss_step(struct daemon *d)
{
	int r = coord_fence(d->coord, 0);

	if (r < 0)
		log_error_errno(r, "cannot acknowledge the loss to the store: %m");
	else
		log_info("loss acknowledged to the store");
	notify_status("", "a lease was lost; %s placement: the mount stays %s",
		      placement_get(d->opts->placement)->name,
		      placement_get(d->opts->placement)->writes ? "writable"
								: "read-only");
}

/* Signals, umount requests and loss, handled off the FUSE threads. */
void *event_thread(void *p)
{
	struct daemon *d = p;
	struct pollfd pfd[2] = {
		{ .fd = d->signal_fd, .events = POLLIN },
		{ .fd = d->event_fd, .events = POLLIN },
	};
	struct loss_work lw = { 0 };
	int timeout = -1;

	for (;;) {
		int r = poll(pfd, 2, timeout);

		if (r < 0 && errno != EINTR)
			break;
		if (pfd[0].revents & POLLIN) {
			struct signalfd_siginfo si;
			char sig[16];

			if (read(d->signal_fd, &si, sizeof(si)) > 0) {
				snprintf(sig, sizeof(sig), "SIG%s", sigabbrev_np((int)si.ssi_signo));
				daemon_stopping(d, sig);
			}
		}
		if (pfd[1].revents & POLLIN) {
			eventfd_t v;

			if (eventfd_read(d->event_fd, &v) < 0)
				continue;
		}
		if (atomic_load(&d->stopping)) {
			begin_stop(d);
			break;
		}
		if (atomic_load(&d->lost))
			timeout = loss_step(d, &lw);
		else if (atomic_exchange(&d->fence_due, false))
			shared_loss_step(d);
	}
	return NULL;
}

int block_signals(struct daemon *d)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	/* A shell starts background jobs with SIGINT ignored, and an ignored
	 * signal never reaches a signalfd: SIGINT and SIGTERM always mean
	 * orderly shutdown.  (SIGHUP keeps its disposition, for nohup.) */
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	/* A client that hangs up must never kill the daemon. */
	signal(SIGPIPE, SIG_IGN);
	if (pthread_sigmask(SIG_BLOCK, &set, NULL) != 0)
		return -EINVAL;
	d->signal_fd = signalfd(-1, &set, SFD_CLOEXEC);
	d->event_fd = eventfd(0, EFD_CLOEXEC);
	return d->signal_fd < 0 || d->event_fd < 0 ? -errno : 0;
}
