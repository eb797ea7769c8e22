/* SPDX-License-Identifier: MIT */
/*
 * The daemon: its leases. The preflight refusals (a root inside or
 * above one held, the directories the daemon writes besides ROOT), the
 * store and the coordinator with its hook, waited for with --wait, the
 * host lock on the root.
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
#include <time.h>
#include <unistd.h>

#include "backoff.h"
#include "daemon_int.h"

/* The host lock on the served root, in the placement's mode; X carries our
 * lease and epoch, for a refused contender. */
static int lock_root(struct daemon *d, const char *root, const char *lease_name,
		     uint64_t epoch, struct lease_err *err)
{
	struct hostlock_spec spec = {
		.path = root,
		.mode = placement_get(d->opts->placement)->lock,
		.what = "workspace",
		.lease_name = lease_name,
		.epoch = epoch,
		.mountpoint = d->opts->mountpoint,
	};

	return hostlock_take(&spec, d->acquire_deadline, &d->root_lock, err);
}

/*
 * Exclusive placement: the root lease is held; now the host lock, with
 * our lease's epoch (the store's high-water mark, which is ours while we
 * hold the name).  Every store: one host has one exclusive writer per
 * tree, whatever store each mount uses.
 */
static int after_acquire(void *ud, const char *root, struct lease_err *err)
{
	struct daemon *d = ud;
	struct lease_info info = { 0 };
	char name[LEASE_NAME_MAX + 1];
	int r;

	if (!placement_get(d->opts->placement)->root_lease)
		return 0;
	r = ws_root_name(root, name, sizeof(name));
	if (r < 0)
		return r;
	if (lease_show(d->store, name, &info, NULL) < 0)
		info.epoch = 0;
	return lock_root(d, root, name, info.epoch, err);
}

static void log_line(void *ud, const char *msg)
{
	(void)ud;
	log_warning("%s", msg);
}

static void log_release(void *ud, const char *name, int64_t deadline)
{
	(void)ud;
	(void)deadline;
	log_info("releasing %s", name);
}

/*
 * (An observer writes nothing and keeps nobody out: it is not checked and
 * takes no host lock.)
 * Shared and session placements write into ROOT without a root lease, so
 * they must not start while another session holds ROOT exclusively: the
 * store's root lease is checked (across hosts, at this moment), and the
 * host lock is taken as S (ROOT, or ROOT/<session id>), which also keeps
 * an exclusive mount at, above or below it out on this host for as long
 * as this one lives.  Nothing is touched in ROOT before this.
 */
/* Refused if `path` (the served directory or one above it) has its root
 * lease held or revoked and not yet fenced, or, for the served directory,
 * if a workspace inside it is held. */
static int root_free(struct daemon *d, const char *served, const char *path,
		     struct lfs_err *err)
{
	struct lease_info info = { 0 }, inner = { 0 };
	struct lease_err le = { 0 };
	char name[LEASE_NAME_MAX + 1], who[PATH_MAX + 64];
	int r = ws_root_name(path, name, sizeof(name));

	if (r == 0)
		r = lease_show(d->store, name, &info, &le);
	if (r < 0)
		return lfs_err_from_lease(err, r, &le);
	if (info.state != LEASE_STATE_FREE)
		coord_holder_detail(d->store, name, path, who, sizeof(who));
	if (info.state != LEASE_STATE_FREE && strcmp(path, served) == 0)
		return lfs_fail(err, EXIT_BUSY, -EBUSY, "workspace busy: %s "
				"held at epoch %" PRIu64 "%s", served, info.epoch,
				who);
	if (info.state != LEASE_STATE_FREE)
		return lfs_fail(err, EXIT_BUSY, -EBUSY, "workspace busy: %s is "
				"inside workspace %s, held at epoch %" PRIu64 "%s",
				served, path, info.epoch, who);
	if (strcmp(path, served) == 0 && info.within &&
	    lease_show(d->store, info.within_name, &inner, NULL) == 0) {
		coord_holder_detail(d->store, info.within_name, NULL, who,
				    sizeof(who));
		return lfs_fail(err, EXIT_BUSY, -EBUSY, "workspace busy: %s "
				"contains workspace %s, held at epoch %" PRIu64
				" (lease %s)%s", served, inner.holder,
				info.within_epoch, info.within_name, who);
	}
	return 0;
}

static int share_root(struct daemon *d, struct lfs_err *err)
{
	const struct placement *pl = placement_get(d->opts->placement);
	const char *served = pl->own_dir ? d->session_root : d->opts->canon_root;
	char up[PATH_MAX];
	struct lease_err le = { 0 };
	int r;

	if (pl->root_lease || !pl->host_lock)
		return 0; /* exclusive: the coordinator; observer: nothing */
	r = root_free(d, served, served, err);
	snprintf(up, sizeof(up), "%s", served);
	while (r == 0 && ws_path_parent(up))
		r = root_free(d, served, up, err);
	if (r < 0)
		return r;
	r = lock_root(d, served, NULL, 0, &le);
	return lfs_err_from_lease(err, r, &le);
}

/* The session id (--session or a random one) and, for session placement,
 * the directory it serves. */
static int pick_session(struct daemon *d, struct lfs_err *err)
{
	const char *root = d->opts->canon_root;
	int r = 0;

	if (d->opts->session)
		snprintf(d->session_id, sizeof(d->session_id), "%s",
			 d->opts->session);
	else
		r = lease_uuid_random(d->session_id, sizeof(d->session_id));
	if (r < 0)
		return lfs_fail(err, EXIT_FAIL, r, "random session id: %s",
				strerror(-r));
	if (snprintf(d->session_root, sizeof(d->session_root), "%s/%s",
		     strcmp(root, "/") == 0 ? "" : root, d->session_id) >=
	    (int)sizeof(d->session_root))
		return lfs_fail(err, EXIT_USAGE, -ENAMETOOLONG, "workspace "
				"root %s: name too long", root);
	return 0;
}

/* IS host locks on the directories the daemon writes besides ROOT: the
 * metrics directory and a file store's, so that no exclusive mount at or
 * above them starts while this daemon may write there. */
static int lock_dirs(struct daemon *d, struct lfs_err *err)
{
	const char *store = lease_uri_local_dir(d->opts->leases);
	char canon[PATH_MAX];
	struct lease_err le = { 0 };
	struct hostlock_spec spec = { .mode = HOSTLOCK_IS,
				      .mountpoint = d->opts->mountpoint };
	int r = 0;

	if (d->opts->metrics_dir) {
		spec.path = d->opts->metrics_dir;
		spec.what = "metrics directory";
		r = hostlock_take(&spec, d->acquire_deadline, &d->dir_locks[0], &le);
	}
	if (r == 0 && store &&
	    (r = ws_canonical_root(store, canon, sizeof(canon))) < 0)
		return lfs_fail(err, EXIT_FAIL, r, "lease directory %s: %s",
				store, strerror(-r));
	if (r == 0 && store) {
		spec.path = canon;
		spec.what = "lease directory";
		r = hostlock_take(&spec, d->acquire_deadline, &d->dir_locks[1], &le);
	}
	return lfs_err_from_lease(err, r, &le);
}

/* ---- --wait ------------------------------------------------------------ */

/* Pauses between tries of the store or the shared root's check: nothing
 * tells when a store comes back, so it is tried again, backing off. */
#define WAIT_RETRY_MIN_MS 100
#define WAIT_RETRY_MAX_MS 1000

/*
 * What the mount waits for is said once, when it starts to wait, whatever
 * it is (the busy root, the store, a lease lost while opening), so that
 * whoever started it knows: "...; waiting up to N s".  The service
 * manager's start timeout is extended by the wait (with room for the rest
 * of the start).
 */
static void say_waiting(struct daemon *d, const char *why)
{
	char fixed[64];

	if (d->wait_said)
		return;
	d->wait_said = true;
	log_notice("%s; waiting up to %.0f s", why, d->opts->wait_s);
	snprintf(fixed, sizeof(fixed), "EXTEND_TIMEOUT_USEC=%llu\n",
		 (unsigned long long)((d->opts->wait_s + 30) * 1e6));
	notify_status(fixed, "waiting up to %.0f s: %s", d->opts->wait_s, why);
}

static void coord_waits(void *ud, const struct lease_err *why)
{
	say_waiting(ud, why->msg);
}

/* What after_acquire took (exclusive placement: the host lock) goes
 * before the coordinator gives a failed attempt's leases back.  Shared
 * and session placements took theirs before (share_root) and keep it. */
static void undo_after_acquire(void *ud)
{
	struct daemon *d = ud;

	if (placement_get(d->opts->placement)->root_lease)
		drop_hostlock(d);
}

/* With --wait and before its deadline, whether a step that failed with
 * r is tried again: the root busy, the store out of reach or of time.
 * If so, says so (once) and pauses first. */
static bool wait_again(struct daemon *d, int r, const char *why, int *pause_ms)
{
	if ((r != -EBUSY && r != -EHOSTUNREACH && r != -ETIMEDOUT) ||
	    d->opts->wait_s <= 0 || lease_deadline_passed(d->acquire_deadline))
		return false;
	say_waiting(d, why);
	ws_backoff(pause_ms, WAIT_RETRY_MAX_MS, d->acquire_deadline);
	return true;
}

/* `step`, tried again while wait_again() says so. */
static int with_wait(struct daemon *d,
		     int (*step)(struct daemon *, struct lfs_err *),
		     struct lfs_err *err)
{
	int pause_ms = WAIT_RETRY_MIN_MS;
	int r;

	while ((r = step(d, err)) < 0 && wait_again(d, r, err->msg, &pause_ms))
		;
	return r;
}

/* ---- the store and the coordinator -------------------------------------- */

/*
 * The store's reachability as its renewals find it (a store thread):
 * said once per transition, with the lease, root and epoch, once the mount
 * serves (before, the open's own waits and refusals say it); "again" only
 * after "unreachable" was said.
 */
static void store_reach(bool reachable, int64_t away_ms, void *ud)
{
	struct daemon *d = ud;
	const char *name;
	uint64_t epoch;

	if (!atomic_load(&d->serving))
		return;
	if (reachable && !atomic_exchange(&d->unreachable_said, false))
		return;
	gating_lease(d, &name, &epoch);
	if (!reachable) {
		atomic_store(&d->unreachable_said, true);
		log_warning("store %s unreachable: lease %s on %s at epoch %" PRIu64 " is held until the store answers again or its safe-until passes", d->leases_shown, name, coord_root(d->coord), epoch);
		return;
	}
	log_notice("store %s reachable again after %" PRId64 ".%01" PRId64 " s: lease %s on %s at epoch %" PRIu64, d->leases_shown, away_ms / 1000, away_ms % 1000 / 100, name, coord_root(d->coord), epoch);
}

/* The store --leases names (its failure names it). */
static int open_store(struct daemon *d, struct lfs_err *err)
{
	struct mount_opts *o = d->opts;
	struct lease_store_opts so = {
		.ttl_ms = (int64_t)(o->ttl_s * 1000),
		.ca_file = getenv("LEASEFS_ETCD_CA"),
		.cert_file = getenv("LEASEFS_ETCD_CERT"),
		.key_file = getenv("LEASEFS_ETCD_KEY"),
		.holder = d->holder,
		.on_reach = store_reach,
		.reach_userdata = d,
	};
	struct lease_err le = { 0 };

	return lfs_err_from_lease(err, lease_store_open(o->leases, &so,
							&d->store, &le), &le);
}

int open_coord(struct daemon *d, struct lfs_err *err)
{
	struct mount_opts *o = d->opts;
	struct coord_config cfg = {
		.placement = o->placement,
		.root = o->canon_root,
		.acquire_deadline = d->acquire_deadline,
		.after_acquire = after_acquire,
		.after_acquire_userdata = d,
		.undo_acquire = undo_after_acquire,
		.on_wait = o->wait_s > 0 ? coord_waits : NULL,
		.on_wait_userdata = d,
		.on_loss = daemon_on_loss,
		.on_loss_userdata = d,
		.log = log_line,
		.log_userdata = d,
	};
	struct lease_err le = { 0 };
	int r = pick_session(d, err);

	if (r == 0)
		r = lock_dirs(d, err);
	if (r < 0)
		return r;
	/* What a refused contender reads of us in the store. */
	snprintf(d->holder, sizeof(d->holder), "%s (session %s)",
		 placement_get(o->placement)->own_dir ? d->session_root :
		 o->canon_root,
		 d->session_id);
	cfg.session_id = d->session_id;
	lease_uri_redact(o->leases, d->leases_shown, sizeof(d->leases_shown));
	r = with_wait(d, open_store, err);
	if (r == 0)
		r = with_wait(d, share_root, err);
	if (r < 0)
		return r;
	cfg.store = d->store;
	r = lfs_err_from_lease(err, coord_open(&cfg, &d->coord, &le), &le);
	if (r < 0)
		return r;
	coord_set_release_observer(d->coord, log_release, d);
	return 0;
}
