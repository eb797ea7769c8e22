/* SPDX-License-Identifier: MIT */
/*
 * Workspace coordinator: takes the session lease and (exclusive placement)
 * the root lease, latches their loss, gates mutations with an in-flight
 * count, and tears down in order.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>
#include <time.h>

#include "coord.h"
#include "roots.h"

#define DEFAULT_RELEASE_TIMEOUT_MS 5000

/*
 * The state word packs the coordinator state (low byte) and the latched
 * loss reason (next byte), so that HELD -> LOST and the reason latch in
 * one compare-and-swap.
 */
#define WORD(st, why) ((unsigned)(st) | ((unsigned)(why) << 8))
#define WORD_STATE(w) ((enum coord_state)((w) & 0xffu))
#define WORD_LOSS(w) ((enum lease_loss)((w) >> 8))

typedef void (*coord_release_observer)(void *ud, const char *lease_name,
				       int64_t deadline);

struct coord {
	/* Fixed by coord_open(); read-only afterwards. */
	const struct placement *pl;  /* what its placement means */
	struct lease_store *store;
	struct lease *root_lease;    /* NULL unless exclusive */
	struct lease *session_lease;
	/* Claimed (exchange to true) by whoever releases the lease. */
	atomic_bool root_released;
	atomic_bool session_released;
	int64_t release_timeout_ms;
	void (*on_loss)(void *userdata, enum lease_loss why);
	void *on_loss_userdata;
	void (*log)(void *userdata, const char *msg);
	void *log_userdata;
	char root[PATH_MAX];
	bool made_session_dir;       /* its own directory was made by it */
	char session_id[37];
	char root_name[LEASE_NAME_MAX + 1];
	char session_name[LEASE_NAME_MAX + 1];
	/* Exclusive, while coord_open() acquires: the root names of the
	 * directories above the root, the scopes its lease lives within,
	 * and those directories. */
	char (*scopes)[LEASE_NAME_MAX + 1];
	const char **scope_names;    /* scopes[i], as lease_acquire_in takes them */
	char (*scope_paths)[PATH_MAX];
	size_t nscopes;

	/* Set before coord_shutdown() starts; read only by the teardown. */
	coord_release_observer observer;
	void *observer_ud;

	_Atomic unsigned word; /* WORD(state, loss reason) */
	int state_fd;          /* eventfd, written on every state change */
	_Atomic long inflight; /* admitted mutations not yet exited */

	/*
	 * lock protects shutdown_running, shutdown_done and shutdown_result,
	 * and is the mutex of both condition variables.  It is never taken
	 * on the healthy()/enter() fast path.
	 *  drained: signalled when inflight reaches 0 after admission closed
	 *           (CLOCK_MONOTONIC, the drain wait is timed);
	 *  done:    broadcast when a teardown attempt has ended.
	 */
	pthread_mutex_t lock;
	pthread_cond_t drained;
	pthread_cond_t done;
	bool shutdown_running;   /* an attempt is under way */
	bool shutdown_done;      /* the leases are released: final */
	int shutdown_result;     /* of the last attempt */
};

/* ---- small tables --------------------------------------------------- */

const char *coord_state_str(enum coord_state st)
{
	switch (st) {
	case COORD_HELD: return "held";
	case COORD_LOST: return "lost";
	case COORD_SHUTTING_DOWN: return "shutting-down";
	case COORD_CLOSED: return "closed";
	}
	return "unknown";
}

/* To the owner's log hook, if any. */
static void say(const struct coord *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void say(const struct coord *c, const char *fmt, ...)
{
	char msg[LEASE_MSG_MAX];
	va_list ap;

	if (!c->log)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	c->log(c->log_userdata, msg);
}

/* ---- loss latch ------------------------------------------------------ */

/* Make the state fd readable: the state has moved on. */
static void state_changed(struct coord *c)
{
	/* An eventfd add of 1 fails only on overflow: readable anyway. */
	(void)eventfd_write(c->state_fd, 1);
}

/*
 * Latch loss: HELD -> LOST with `why`, then tell the owner.  Does nothing
 * once loss latched or shutdown began, so on_loss runs at most once and
 * never for an orderly shutdown.
 */
static void latch_lost(struct coord *c, enum lease_loss why)
{
	unsigned expected = WORD(COORD_HELD, LEASE_LOSS_NONE);

	if (why == LEASE_LOSS_NONE || why == LEASE_LOSS_RELEASED)
		return;
	if (!atomic_compare_exchange_strong(&c->word, &expected,
					    WORD(COORD_LOST, why)))
		return;
	state_changed(c);
	if (c->on_loss)
		c->on_loss(c->on_loss_userdata, why);
}

static void on_lease_loss(struct lease *lease, enum lease_loss why,
			  void *userdata)
{
	struct coord *c = userdata;

	(void)lease;
	if (c->pl->fenced) {
		latch_lost(c, why);
		return;
	}
	/* An unfenced placement is gated by no lease: admission stays open, but
	 * the owner still has to acknowledge the loss (coord_fence). */
	if (why != LEASE_LOSS_RELEASED && c->on_loss)
		c->on_loss(c->on_loss_userdata, why);
}

/* Move to `st`, keeping the latched loss reason. */
static void set_state(struct coord *c, enum coord_state st)
{
	unsigned w = atomic_load(&c->word);

	while (!atomic_compare_exchange_weak(&c->word, &w,
					     WORD(st, WORD_LOSS(w))))
		;
	state_changed(c);
}

/* ---- health and admission ------------------------------------------- */

static int state_errno(enum coord_state st)
{
	switch (st) {
	case COORD_HELD: return 0;
	case COORD_LOST: return -ENOLINK;
	case COORD_SHUTTING_DOWN:
	case COORD_CLOSED: return -ESHUTDOWN;
	}
	return -ENOLINK;
}

/*
 * Check one gating lease: lost already (the callback may not have run
 * yet), or its safe-until passed.  `now` is read at most once per call of
 * coord_healthy(), lazily.
 */
static enum lease_loss lease_gone(const struct lease *l, int64_t *now)
{
	int64_t until;

	if (!l)
		return LEASE_LOSS_NONE;
	if (lease_is_lost(l))
		return lease_loss_reason(l);
	until = lease_safe_until(l);
	if (until == 0)
		return LEASE_LOSS_NONE;
	if (*now == 0)
		*now = lease_now_ns();
	return *now >= until ? LEASE_LOSS_EXPIRED : LEASE_LOSS_NONE;
}

int coord_healthy(struct coord *c)
{
	unsigned w = atomic_load_explicit(&c->word, memory_order_acquire);
	enum lease_loss why;
	int64_t now = 0;

	if (WORD_STATE(w) != COORD_HELD)
		return state_errno(WORD_STATE(w));
	if (!c->pl->fenced)
		return 0;
	why = lease_gone(c->root_lease, &now);
	if (why == LEASE_LOSS_NONE)
		why = lease_gone(c->session_lease, &now);
	if (why == LEASE_LOSS_NONE || why == LEASE_LOSS_RELEASED)
		return 0;
	latch_lost(c, why);
	return state_errno(WORD_STATE(atomic_load(&c->word)));
}

/* Wake the drainer if admission is closed and nothing is in flight. */
static void wake_drainer(struct coord *c)
{
	pthread_mutex_lock(&c->lock);
	pthread_cond_signal(&c->drained);
	pthread_mutex_unlock(&c->lock);
}

static void leave(struct coord *c)
{
	if (atomic_fetch_sub(&c->inflight, 1) == 1 &&
	    WORD_STATE(atomic_load(&c->word)) != COORD_HELD)
		wake_drainer(c);
}

int coord_enter(struct coord *c)
{
	int r;

	atomic_fetch_add(&c->inflight, 1);
	r = coord_healthy(c);
	if (r < 0)
		leave(c);
	return r;
}

void coord_exit(struct coord *c)
{
	leave(c);
}

/* ---- shutdown -------------------------------------------------------- */

static struct timespec ns_to_ts(int64_t ns)
{
	struct timespec ts = { ns / 1000000000LL, ns % 1000000000LL };

	return ts;
}

/* Wait until nothing is in flight, at most `ms`.  0 or -ETIMEDOUT. */
static int wait_drained(struct coord *c, int64_t ms)
{
	int64_t deadline = lease_deadline_ms(ms > 0 ? ms : 0);
	int r = 0;

	pthread_mutex_lock(&c->lock);
	while (atomic_load(&c->inflight) > 0) {
		struct timespec ts = ns_to_ts(deadline);

		if (lease_deadline_passed(deadline)) {
			r = -ETIMEDOUT;
			break;
		}
		pthread_cond_timedwait(&c->drained, &c->lock, &ts);
	}
	pthread_mutex_unlock(&c->lock);
	return r;
}

static void hold_lost(struct coord *c);

static int drain(struct coord *c, int64_t ms)
{
	int r = wait_drained(c, ms);

	if (r < 0) {
		hold_lost(c);
		say(c, "coordinator: %ld mutation(s) still in flight after "
		    "%lld ms; the leases stay held until they finish",
		    atomic_load(&c->inflight), (long long)ms);
	}
	return r;
}

/* Release one lease with a fresh deadline; failures are only logged. */
static void release_one(struct coord *c, struct lease *l)
{
	int64_t deadline;
	int r;

	if (!l)
		return;
	deadline = lease_deadline_ms(c->release_timeout_ms);
	if (c->observer)
		c->observer(c->observer_ud, lease_name(l), deadline);
	/* A session's name is never granted again: its records go too. */
	r = l == c->session_lease ? lease_release_forget(l, deadline)
				  : lease_release(l, deadline);
	if (r < 0)
		say(c, "coordinator: releasing lease %s (epoch %llu) failed: "
		    "%s; the store's own expiry is the backstop", lease_name(l),
		    (unsigned long long)lease_epoch(l), strerror(-r));
}

/* HELD or LOST -> SHUTTING_DOWN; later states are left alone. */
static void close_admission(struct coord *c)
{
	unsigned w = atomic_load(&c->word);

	while (WORD_STATE(w) == COORD_HELD || WORD_STATE(w) == COORD_LOST) {
		if (atomic_compare_exchange_weak(&c->word, &w,
				WORD(COORD_SHUTTING_DOWN, WORD_LOSS(w)))) {
			state_changed(c);
			break;
		}
	}
}

int coord_close_admission(struct coord *c, int64_t drain_timeout_ms)
{
	close_admission(c);
	return drain(c, drain_timeout_ms);
}

/* Release `l` unless someone already did (flag claims it). */
static void release_once(struct coord *c, struct lease *l, atomic_bool *flag)
{
	if (l && !atomic_exchange(flag, true))
		release_one(c, l);
}

static bool lease_lost_now(const struct lease *l)
{
	int64_t now = 0;

	return l && lease_gone(l, &now) != LEASE_LOSS_NONE;
}

/* Mutations admitted before a loss are still in flight: keep the lost
 * leases' successors out for longer (lease_hold_fenced()). */
static void hold_lost(struct coord *c)
{
	if (lease_lost_now(c->root_lease))
		lease_hold_fenced(c->root_lease);
	if (lease_lost_now(c->session_lease))
		lease_hold_fenced(c->session_lease);
}

int coord_fence(struct coord *c, int64_t drain_timeout_ms)
{
	if (c->pl->fenced) {
		if (WORD_STATE(atomic_load(&c->word)) != COORD_LOST)
			return -EINVAL;
		if (wait_drained(c, drain_timeout_ms) < 0) {
			hold_lost(c);
			return -ETIMEDOUT;
		}
	}
	if (lease_lost_now(c->root_lease))
		release_once(c, c->root_lease, &c->root_released);
	if (lease_lost_now(c->session_lease))
		release_once(c, c->session_lease, &c->session_released);
	return 0;
}

/* A session directory this coordinator made goes again if nothing was
 * put in it (rmdir refuses a non-empty one), unless the lease was lost:
 * then the directory may already be a successor's. */
static void remove_empty_session_dir(struct coord *c)
{
	if (c->made_session_dir &&
	    WORD_LOSS(atomic_load(&c->word)) == LEASE_LOSS_NONE)
		rmdir(c->root);
}

/* One attempt: close admission, drain, and only once nothing of ours can
 * still write, release root then session. */
static int teardown(struct coord *c, int64_t drain_timeout_ms)
{
	int r = coord_close_admission(c, drain_timeout_ms);

	if (r < 0)
		return r;
	release_once(c, c->root_lease, &c->root_released);
	release_once(c, c->session_lease, &c->session_released);
	remove_empty_session_dir(c);
	set_state(c, COORD_CLOSED);
	return 0;
}

/*
 * Returns 0 once the leases are released, or -ETIMEDOUT when in-flight
 * mutations did not drain in time: then nothing is released (a later call
 * tries again).  Concurrent calls join one attempt and share its result.
 */
int coord_shutdown(struct coord *c, int64_t drain_timeout_ms)
{
	int r;

	pthread_mutex_lock(&c->lock);
	if (c->shutdown_running || c->shutdown_done) {
		while (c->shutdown_running)
			pthread_cond_wait(&c->done, &c->lock);
		r = c->shutdown_result;
		pthread_mutex_unlock(&c->lock);
		return r;
	}
	c->shutdown_running = true;
	pthread_mutex_unlock(&c->lock);

	r = teardown(c, drain_timeout_ms);

	pthread_mutex_lock(&c->lock);
	c->shutdown_result = r;
	c->shutdown_done = r == 0;
	c->shutdown_running = false;
	pthread_cond_broadcast(&c->done);
	pthread_mutex_unlock(&c->lock);
	return r;
}

void coord_set_release_observer(struct coord *c,
				void (*fn)(void *ud, const char *lease_name,
					   int64_t deadline),
				void *ud)
{
	c->observer = fn;
	c->observer_ud = ud;
}

/* ---- open ------------------------------------------------------------ */

static int sync_init(struct coord *c)
{
	pthread_condattr_t attr;
	int r;

	r = -pthread_condattr_init(&attr);
	if (r < 0)
		return r;
	r = -pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	if (r < 0)
		goto out_attr;
	r = -pthread_cond_init(&c->drained, &attr);
	if (r < 0)
		goto out_attr;
	r = -pthread_cond_init(&c->done, NULL);
	if (r < 0)
		goto out_drained;
	r = -pthread_mutex_init(&c->lock, NULL);
	if (r < 0)
		goto out_done;
	c->state_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->state_fd < 0) {
		r = -errno;
		pthread_mutex_destroy(&c->lock);
		goto out_done;
	}
	pthread_condattr_destroy(&attr);
	return 0;
out_done:
	pthread_cond_destroy(&c->done);
out_drained:
	pthread_cond_destroy(&c->drained);
out_attr:
	pthread_condattr_destroy(&attr);
	return r;
}

static void sync_destroy(struct coord *c)
{
	close(c->state_fd);
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->done);
	pthread_cond_destroy(&c->drained);
}

static int check_config(const struct coord_config *cfg, struct lease_err *err)
{
	if (!cfg || !cfg->store)
		return lease_err_set(err, LEASE_E_USAGE, 0, NULL,
				     "coordinator: no lease store given");
	if (!cfg->root || !*cfg->root)
		return lease_err_set(err, LEASE_E_USAGE, 0, NULL,
				     "coordinator: no workspace root given");
	if (!ws_path_clean(cfg->root))
		return lease_err_set(err, LEASE_E_USAGE, 0, NULL,
				     "coordinator: workspace root '%s' is not "
				     "canonical", cfg->root);
	if (!placement_get(cfg->placement))
		return lease_err_set(err, LEASE_E_USAGE, 0, NULL,
				     "coordinator: unknown placement %d",
				     (int)cfg->placement);
	if (cfg->session_id && !lease_uuid_valid(cfg->session_id))
		return lease_err_set(err, LEASE_E_USAGE, 0, NULL,
				     "coordinator: session id '%s' is not a "
				     "lowercase UUID", cfg->session_id);
	if (cfg->release_timeout_ms < 0)
		return lease_err_set(err, LEASE_E_USAGE, 0, NULL,
				     "coordinator: negative release timeout");
	return 0;
}

static int canon_err(struct lease_err *err, int r, const char *what,
		     const char *path)
{
	enum lease_errkind kind = r == -EINVAL || r == -ENAMETOOLONG ?
				  LEASE_E_USAGE : LEASE_E_IO;

	return lease_err_set(err, kind, r, NULL, "coordinator: cannot "
			     "canonicalize %s '%s': %s", what, path,
			     strerror(-r));
}

/* The scopes of the root lease: the root names of every directory above
 * the canonical root, nearest first. */
static int resolve_scopes(struct coord *c)
{
	char path[PATH_MAX];
	size_t n = 0;

	snprintf(path, sizeof(path), "%s", c->root);
	while (ws_path_parent(path))
		n++;
	c->scopes = calloc(n ? n : 1, sizeof(*c->scopes));
	c->scope_names = calloc(n ? n : 1, sizeof(*c->scope_names));
	c->scope_paths = calloc(n ? n : 1, sizeof(*c->scope_paths));
	if (!c->scopes || !c->scope_names || !c->scope_paths)
		return -ENOMEM;
	snprintf(path, sizeof(path), "%s", c->root);
	for (c->nscopes = 0; ws_path_parent(path); c->nscopes++) {
		snprintf(c->scope_paths[c->nscopes], PATH_MAX, "%s", path);
		if (ws_root_name(path, c->scopes[c->nscopes],
				    sizeof(c->scopes[0])) < 0)
			return -EINVAL;
		c->scope_names[c->nscopes] = c->scopes[c->nscopes];
	}
	return 0;
}

static void free_scopes(struct coord *c)
{
	free(c->scopes);
	free(c->scope_names);
	free(c->scope_paths);
}

/* Session id, lease names and the canonical effective root. */
static int resolve_names(struct coord *c, const struct coord_config *cfg,
			 struct lease_err *err)
{
	int r;

	if (cfg->session_id)
		snprintf(c->session_id, sizeof(c->session_id), "%s",
			 cfg->session_id);
	else if ((r = lease_uuid_random(c->session_id,
					sizeof(c->session_id))) < 0)
		return lease_err_set(err, LEASE_E_IO, r, NULL, "coordinator: "
				     "random session id: %s", strerror(-r));
	r = ws_session_name(c->session_id, c->session_name,
			       sizeof(c->session_name));
	if (r < 0)
		return lease_err_set(err, LEASE_E_USAGE, 0, NULL,
				     "coordinator: bad session id");
	/* Its own directory is ROOT/<uuid>: canonical as ROOT is. */
	if (!c->pl->own_dir)
		r = snprintf(c->root, sizeof(c->root), "%s", cfg->root);
	else
		r = snprintf(c->root, sizeof(c->root), "%s/%s",
			     strcmp(cfg->root, "/") == 0 ? "" : cfg->root,
			     c->session_id);
	if (r >= (int)sizeof(c->root))
		return lease_err_set(err, LEASE_E_USAGE, 0, NULL, "coordinator: "
				     "workspace root '%s' too long", cfg->root);
	if (!c->pl->root_lease)
		return 0;
	r = ws_root_name(c->root, c->root_name, sizeof(c->root_name));
	if (r == 0)
		r = resolve_scopes(c);
	if (r < 0)
		return lease_err_set(err, LEASE_E_IO, r, NULL, "coordinator: "
				     "root lease name: %s", strerror(-r));
	return 0;
}

int coord_check_lease_dir(const char *root, const char *dir,
			  struct lease_err *err)
{
	char canon[PATH_MAX];
	int r;

	if (!dir)
		return 0;
	r = ws_canonical_root(dir, canon, sizeof(canon));
	if (r < 0)
		return canon_err(err, r, "lease directory", dir);
	if (!ws_path_within(canon, root))
		return 0;
	return lease_err_set(err, LEASE_E_USAGE, 0, root,
			     "lease directory %s is %s the workspace root %s; "
			     "put the leases outside the workspace", canon,
			     strcmp(canon, root) == 0 ? "equal to" : "inside",
			     root);
}

static void release_quietly(struct coord *c, struct lease **l)
{
	if (!*l)
		return;
	release_one(c, *l);
	lease_free(*l);
	*l = NULL;
}

/* A workspace held inside ours refused it: named by what its holder told
 * the store (the daemon says its root there), else by its lease. */
static int inner_busy(struct coord *c, const char *who, uint64_t epoch,
		      struct lease_err *err)
{
	struct lease_info info = { 0 };

	if (lease_show(c->store, who, &info, NULL) == 0 && info.holder[0])
		return lease_err_set(err, LEASE_E_HELD, 0, c->root,
				     "workspace busy: %s contains workspace %s, "
				     "held at epoch %llu", c->root, info.holder,
				     (unsigned long long)epoch);
	return lease_err_set(err, LEASE_E_HELD, 0, c->root, "workspace busy: %s "
			     "contains a workspace held at epoch %llu (lease %s)",
			     c->root, (unsigned long long)epoch, who);
}

/* Root lease within its scopes; contention becomes the busy error naming
 * the canonical root and what holds it: the root itself, a directory above
 * it, or a workspace inside it. */
static int take_root(struct coord *c, int64_t deadline, struct lease_err *err)
{
	uint64_t epoch;
	char who[LEASE_NAME_MAX + 1];
	int r = lease_acquire_in(c->store, c->root_name, c->scope_names,
				 c->nscopes, deadline, &c->root_lease, err);

	if (r >= 0 || err->kind != LEASE_E_HELD)
		return r;
	epoch = err->holder_epoch;
	snprintf(who, sizeof(who), "%s", err->name);
	if (strcmp(who, c->root_name) == 0)
		r = lease_err_set(err, LEASE_E_HELD, 0, c->root,
				  "workspace busy: %s held at epoch %llu", c->root,
				  (unsigned long long)epoch);
	else
		r = inner_busy(c, who, epoch, err);
	for (size_t i = 0; i < c->nscopes; i++)
		if (strcmp(who, c->scopes[i]) == 0)
			r = lease_err_set(err, LEASE_E_HELD, 0, c->root,
					  "workspace busy: %s is inside workspace "
					  "%s, held at epoch %llu", c->root,
					  c->scope_paths[i],
					  (unsigned long long)epoch);
	err->holder_epoch = epoch;
	return r;
}

/* The after-acquire hook; a failure it did not describe gets a message. */
static int run_hook(const struct coord *c, const struct coord_config *cfg,
		    struct lease_err *err)
{
	int r;

	err->kind = LEASE_OK;
	r = cfg->after_acquire(cfg->after_acquire_userdata, c->root, err);
	if (r == 0)
		return 0;
	if (r > 0)
		r = -r;
	if (err->kind == LEASE_OK)
		r = lease_err_set(err, LEASE_E_IO, r, c->root, "coordinator: "
				  "after-acquire check on %s failed: %s",
				  c->root, strerror(-r));
	return r;
}

/* Leases in order, then the placement directory and the hook. */
static int take_leases(struct coord *c, const struct coord_config *cfg,
		       struct lease_err *err)
{
	int r;

	r = lease_acquire(c->store, c->session_name, cfg->acquire_deadline,
			  &c->session_lease, err);
	if (r < 0)
		return r;
	if (c->pl->root_lease) {
		r = take_root(c, cfg->acquire_deadline, err);
		if (r < 0)
			goto out_session;
	}
	if (c->pl->own_dir) {
		r = placement_make_dir(c->root, &c->made_session_dir, err);
		if (r < 0)
			goto out_session;
	}
	if (cfg->after_acquire) {
		r = run_hook(c, cfg, err);
		if (r < 0)
			goto out_root;
	}
	return 0;
out_root:
	remove_empty_session_dir(c);
	release_quietly(c, &c->root_lease);
out_session:
	release_quietly(c, &c->session_lease);
	return r;
}

int coord_open(const struct coord_config *cfg, struct coord **out,
	       struct lease_err *err)
{
	struct lease_err local = { 0 };
	struct coord *c;
	int r;

	if (!err)
		err = &local;
	*out = NULL;
	r = check_config(cfg, err);
	if (r < 0)
		return r;
	c = calloc(1, sizeof(*c));
	if (!c)
		return lease_err_set(err, LEASE_E_IO, -ENOMEM, NULL,
				     "out of memory");
	r = sync_init(c);
	if (r < 0) {
		free(c);
		return lease_err_set(err, LEASE_E_IO, r, NULL,
				     "coordinator: %s", strerror(-r));
	}
	c->pl = placement_get(cfg->placement);
	c->store = cfg->store;
	c->release_timeout_ms = cfg->release_timeout_ms ?
				cfg->release_timeout_ms :
				DEFAULT_RELEASE_TIMEOUT_MS;
	c->on_loss = cfg->on_loss;
	c->on_loss_userdata = cfg->on_loss_userdata;
	c->log = cfg->log;
	c->log_userdata = cfg->log_userdata;
	atomic_init(&c->word, WORD(COORD_HELD, LEASE_LOSS_NONE));
	atomic_init(&c->inflight, 0);

	r = resolve_names(c, cfg, err);
	if (r < 0)
		goto out_free;
	r = coord_check_lease_dir(c->root, lease_store_local_dir(c->store), err);
	if (r < 0)
		goto out_free;
	r = take_leases(c, cfg, err);
	/* The scopes are the acquisition's alone (the lease keeps its own). */
	free_scopes(c);
	c->scopes = NULL;
	c->scope_names = NULL;
	c->scope_paths = NULL;
	if (r < 0)
		goto out_free;
	if (c->root_lease)
		lease_set_loss_cb(c->root_lease, on_lease_loss, c);
	lease_set_loss_cb(c->session_lease, on_lease_loss, c);
	*out = c;
	return 0;
out_free:
	sync_destroy(c);
	free_scopes(c);
	free(c);
	return r;
}

/* With mutations still in flight the leases are not released but left
 * to their store's own end (the process's exit, the TTL): a coordinator
 * freed then leaks them on purpose. */
void coord_free(struct coord *c)
{
	if (!c)
		return;
	if (coord_shutdown(c, 0) == 0) {
		lease_free(c->root_lease);
		lease_free(c->session_lease);
		sync_destroy(c);
	}
	free_scopes(c);
	free(c);
}

/* ---- accessors -------------------------------------------------------- */

enum coord_state coord_state(struct coord *c)
{
	return WORD_STATE(atomic_load(&c->word));
}

enum lease_loss coord_loss_reason(struct coord *c)
{
	return WORD_LOSS(atomic_load(&c->word));
}

int coord_state_fd(const struct coord *c)
{
	return c->state_fd;
}

long coord_inflight(const struct coord *c)
{
	return atomic_load(&((struct coord *)c)->inflight);
}

int64_t coord_safe_until(const struct coord *c)
{
	int64_t r = c->root_lease ? lease_safe_until(c->root_lease) : 0;
	int64_t s = c->session_lease ? lease_safe_until(c->session_lease) : 0;

	if (!r || (s && s < r))
		return s;
	return r;
}

const struct placement *coord_placement(const struct coord *c)
{
	return c->pl;
}

const char *coord_root(const struct coord *c)
{
	return c->root;
}

const char *coord_session_id(const struct coord *c)
{
	return c->session_id;
}

const char *coord_root_lease_name(const struct coord *c)
{
	return c->root_name;
}

uint64_t coord_root_epoch(const struct coord *c)
{
	return c->root_lease ? lease_epoch(c->root_lease) : 0;
}

const char *coord_session_lease_name(const struct coord *c)
{
	return c->session_name;
}

uint64_t coord_session_epoch(const struct coord *c)
{
	return c->session_lease ? lease_epoch(c->session_lease) : 0;
}
