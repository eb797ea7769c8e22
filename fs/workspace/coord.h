/* SPDX-License-Identifier: MIT */
/*
 * Workspace coordinator: owns a session's leases and gates mutations.
 *
 * Lifecycle:  coord_open()  ->  [coord_enter()/coord_exit() around each
 * mutation, coord_healthy() anywhere]  ->  coord_shutdown()  ->  coord_free()
 *
 * Ordering contract (from the workspace-lease design):
 *  - open: session lease first, then (exclusive placement) the root lease;
 *    a failed root acquisition releases the session lease and leaves
 *    nothing behind.  A lease lost before open returns fails the attempt
 *    the same way: a coordinator is never handed out lost.
 *  - loss of either lease latches LOST: admission closes, healthy() fails
 *    from then on, and never recovers.  Once the admitted mutations have
 *    drained (coord_fence), every lease goes, the one not lost too: a
 *    latched loss never recovers, so the survivor could only keep
 *    successors out (fs/workspace/README.md).
 *  - shutdown: close admission, drain in-flight mutations, release the
 *    root lease exactly once, then the session lease, each with a fresh
 *    bounded deadline; never release while a mutation is in flight.
 *    Orderly shutdown is never reported as loss.
 *  - exclusive placement: the root lease lives within the root names of
 *    every directory above the root, so a root inside or above a held one
 *    is busy (lease_acquire_in()).
 */
#ifndef LEASEFS_COORD_H
#define LEASEFS_COORD_H

#include <stdbool.h>
#include <stdint.h>

#include "lease.h"
#include "placement.h"


enum coord_state {
	COORD_HELD,
	COORD_LOST,
	COORD_SHUTTING_DOWN,
	COORD_CLOSED,       /* shutdown finished */
};
const char *coord_state_str(enum coord_state st);

struct coord_config {
	enum placement_id placement;
	/* The canonical root (ws_canonical_root): what the caller checked
	 * is what is leased; the coordinator resolves nothing again. */
	const char *root;
	const char *session_id;  /* lowercase UUID; NULL = random */
	struct lease_store *store; /* borrowed; must outlive the coordinator */
	/* Absolute; 0 = one try.  Until it passes, open waits for a busy
	 * root and tries again after an attempt that failed for a reason
	 * that may pass: the store out of reach or out of time
	 * (LEASE_E_UNREACHABLE, LEASE_E_TIMEOUT) or a lease lost during the
	 * attempt (LEASE_E_LOST), unless by a revoke.  Every failed attempt
	 * gives back all it took before the next begins. */
	int64_t acquire_deadline;
	int64_t release_timeout_ms; /* per-release deadline; 0 = 5000 */
	/* Optional hook run after the root lease is held and before open
	 * returns (e.g. host-scoped identity lock).  Non-zero fails open with
	 * the session lease and root lease released.  It may run once per
	 * attempt. */
	int (*after_acquire)(void *userdata, const char *canonical_root,
			     struct lease_err *err);
	void *after_acquire_userdata;
	/* Optional: undo what after_acquire took, when an attempt it
	 * succeeded in fails after all (a lease lost meanwhile).  Called
	 * before the leases are given back. */
	void (*undo_acquire)(void *userdata);
	/* Optional: called at most once per open, from the opening thread,
	 * when it is about to wait (acquire_deadline not yet passed), with
	 * what it waits for: the busy root, the store, a lost lease. */
	void (*on_wait)(void *userdata, const struct lease_err *why);
	void *on_wait_userdata;
	/* Optional: what the coordinator has to say (a drain that timed
	 * out, a release that failed); the library itself never writes to
	 * stderr.  Called from the thread that noticed. */
	void (*log)(void *userdata, const char *msg);
	void *log_userdata;
	/* Optional: called once (from a backend thread) when loss latches;
	 * in shared placement, when a lease is lost (nothing latches). */
	void (*on_loss)(void *userdata, enum lease_loss why);
	void *on_loss_userdata;
};

struct coord;

/*
 * Open a session.  Busy root: LEASE_E_HELD with err->holder_epoch and
 * err->name = canonical root.  A lease directory equal to or inside the
 * workspace root is refused with LEASE_E_USAGE before any lease is taken.
 * A lease lost (or past its safe-until) before open would return:
 * LEASE_E_LOST naming it, everything taken given back; with a deadline
 * not yet passed, another attempt instead (see acquire_deadline).  On
 * success the coordinator is HELD and was healthy at the moment it
 * became so; a loss after that moment is an ordinary loss.
 */
int coord_open(const struct coord_config *cfg, struct coord **out,
	       struct lease_err *err);

/* Refuse (LEASE_E_USAGE) a lease directory equal to or inside the
 * canonical workspace root; a store without a directory passes. */
int coord_check_lease_dir(const char *root, const char *lease_dir,
			  struct lease_err *err);

/* What is known of the holder of lease `name`, which serves `path`
 * (NULL: unknown): " (pid P, mounted at M)", as the host lock says it
 * (the pid its store recorded, the leasefs mount of `path` this host
 * shows), either part left out when not known, "" when neither is.  For
 * every "workspace busy" message. */
void coord_holder_detail(struct lease_store *st, const char *name,
			 const char *path, char *out, size_t outsz);

/* 0 while held; -ENOLINK once lost (latched, also after safe-until passed);
 * -ESHUTDOWN once shutdown began.  Lock-free: atomic loads and at most one
 * vDSO clock read. */
int coord_healthy(struct coord *c);

/* Admission around a mutation.  enter() returns 0 (caller must exit()) or
 * the healthy() error, or -EROFS for a placement that never writes (an
 * observer), and then the caller must not exit(). */
int coord_enter(struct coord *c);
void coord_exit(struct coord *c);

/*
 * Orderly shutdown: close admission, drain, release the root lease, then
 * the session lease.  `drain_timeout_ms` bounds the wait for in-flight
 * mutations; if they do not drain in time nothing is released (a lease is
 * never given up while a mutation under it may still land), -ETIMEDOUT
 * is returned, and a later call tries again.  Concurrent calls join one
 * attempt; once the leases are released, calls return 0 at once.  Release
 * failures go to the config's log hook, not returned.
 */
int coord_shutdown(struct coord *c, int64_t drain_timeout_ms);
/*
 * After loss: wait at most `drain_timeout_ms` for the admitted mutations
 * to finish, then release every lease, root first, the one not lost too
 * (fenced placements: the loss is latched for good, so the survivor
 * gates nothing any more and would only keep successors out).  Shared
 * placement: the lost leases, at once (nothing is gated on them).  That
 * release is the fence acknowledgement a store waits for before it
 * grants the name to anyone else, so it must come only after nothing of
 * ours can still write.  0 once done (repeats are no-ops), -ETIMEDOUT
 * while mutations are still in flight (call again; meanwhile the lost
 * leases are held fenced, lease_hold_fenced(), and the survivor stays
 * held), -EINVAL while not lost.  Shutdown later releases only what is
 * left, so each lease is still released exactly once.
 */
int coord_fence(struct coord *c, int64_t drain_timeout_ms);

/*
 * First half of shutdown, for owners that must act between draining and
 * releasing (the daemon unmounts there): close admission and wait, at most
 * `drain_timeout_ms`, for in-flight mutations.  Idempotent; 0 or
 * -ETIMEDOUT.  Leases stay held until coord_shutdown().
 */
int coord_close_admission(struct coord *c, int64_t drain_timeout_ms);
void coord_free(struct coord *c);

enum coord_state coord_state(struct coord *c);
/* Readable (POLLIN) after every state change, until read; owned by the
 * coordinator.  Wait on it, then read coord_state(): a waiter never polls. */
int coord_state_fd(const struct coord *c);
/* Admitted mutations not yet finished. */
long coord_inflight(const struct coord *c);
/* The gating lease's safe-until (CLOCK_MONOTONIC ns; the earlier of root
 * and session for TTL stores), 0 when the store fences natively. */
int64_t coord_safe_until(const struct coord *c);
enum lease_loss coord_loss_reason(struct coord *c);
const struct placement *coord_placement(const struct coord *c);
const char *coord_root(const struct coord *c);       /* canonical, effective root */
const char *coord_session_id(const struct coord *c);
const char *coord_root_lease_name(const struct coord *c); /* "" if none */
uint64_t coord_root_epoch(const struct coord *c);    /* 0 if none */
const char *coord_session_lease_name(const struct coord *c);
uint64_t coord_session_epoch(const struct coord *c);

/*
 * Test hook (added after the contract was fixed): `fn` is called by the
 * teardown just before each lease release, with the lease name and the
 * fresh release deadline, in release order.  Set it before
 * coord_shutdown() begins; it is not synchronized.
 */
void coord_set_release_observer(struct coord *c,
				void (*fn)(void *ud, const char *lease_name,
					   int64_t deadline),
				void *ud);

#endif
