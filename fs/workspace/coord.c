/* SPDX-License-Identifier: MIT */
/*
 * Workspace coordinator: latches the loss of its leases, gates mutations
 * with an in-flight count, and tears down in order (coord_open.c opens
 * it; the shared state: coord_int.h).
 */
#include <stdarg.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <time.h>

#include "coord_int.h"
#include "roots.h"

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
 * once loss latched or shutdown began (or while opening), so on_loss runs
 * at most once and never for an orderly shutdown.
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

/* While opening, a loss is noted in the word (the attempt then fails):
 * true if the coordinator is still opening. */
static bool note_while_opening(struct coord *c, enum lease_loss why)
{
	unsigned w = WORD(COORD_OPENING, LEASE_LOSS_NONE);

	if (atomic_compare_exchange_strong(&c->word, &w, WORD(COORD_OPENING, why)))
		return true;
	return WORD_STATE(w) == COORD_OPENING;
}

void coord_on_lease_loss(struct lease *lease, enum lease_loss why,
			 void *userdata)
{
	struct coord *c = userdata;

	(void)lease;
	if (why == LEASE_LOSS_RELEASED || note_while_opening(c, why))
		return;
	if (c->pl->fenced) {
		latch_lost(c, why);
		return;
	}
	/* An unfenced placement is gated by no lease: admission stays open, but
	 * the owner still has to acknowledge the loss (coord_fence). */
	if (c->on_loss)
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
	return -ENOLINK; /* COORD_OPENING: never handed out */
}

enum lease_loss coord_lease_gone(const struct lease *l, int64_t *now)
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
	why = coord_lease_gone(c->root_lease, &now);
	if (why == LEASE_LOSS_NONE)
		why = coord_lease_gone(c->session_lease, &now);
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

	if (!c->pl->writes)
		return -EROFS; /* an observer admits no mutation, ever */
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
void coord_release_one(struct coord *c, struct lease *l)
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
		coord_release_one(c, l);
}

static bool lease_lost_now(const struct lease *l)
{
	int64_t now = 0;

	return l && coord_lease_gone(l, &now) != LEASE_LOSS_NONE;
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

/* Shared placement: nothing is gated on its lease, so the lost one goes
 * at once, and only that (it is its only one). */
static void fence_unfenced(struct coord *c)
{
	if (lease_lost_now(c->root_lease))
		release_once(c, c->root_lease, &c->root_released);
	if (lease_lost_now(c->session_lease))
		release_once(c, c->session_lease, &c->session_released);
}

int coord_fence(struct coord *c, int64_t drain_timeout_ms)
{
	if (!c->pl->fenced) {
		fence_unfenced(c);
		return 0;
	}
	if (WORD_STATE(atomic_load(&c->word)) != COORD_LOST)
		return -EINVAL;
	if (wait_drained(c, drain_timeout_ms) < 0) {
		hold_lost(c);
		return -ETIMEDOUT;
	}
	/* Drained, and lost for good: both go, in the shutdown's order. */
	release_once(c, c->root_lease, &c->root_released);
	release_once(c, c->session_lease, &c->session_released);
	return 0;
}

/* A session directory this coordinator made goes again if nothing was
 * put in it (rmdir refuses a non-empty one), unless the lease was lost:
 * then the directory may already be a successor's. */
void coord_remove_own_dir(struct coord *c)
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
	coord_remove_own_dir(c);
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
