/* SPDX-License-Identifier: MIT */
/*
 * Workspace coordinator: opening it.  The session id and lease names, the
 * root lease's scopes, the leases in order (session, then root within its
 * scopes), the placement's own directory and the after-acquire hook; a
 * failure at any step, a lease lost before the end included, gives back
 * what was taken; attempts until the deadline (contract: coord.h; why:
 * README.md).
 */
#include <sys/stat.h>
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

#include "backoff.h"
#include "coord_int.h"
#include "roots.h"

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
	coord_release_one(c, *l);
	lease_free(*l);
	*l = NULL;
}

void coord_holder_detail(struct lease_store *st, const char *name,
			 const char *path, char *out, size_t outsz)
{
	struct lease_info info = { 0 };
	char mnt[PATH_MAX];
	bool pid = lease_show(st, name, &info, NULL) == 0 && info.holder_pid > 0;
	bool mounted = path && ws_leasefs_mount(path, NULL, mnt, sizeof(mnt)) == 0;
	size_t n = 0;

	out[0] = '\0';
	if (pid)
		n = (size_t)snprintf(out, outsz, " (pid %d", (int)info.holder_pid);
	if (mounted && n < outsz)
		n += (size_t)snprintf(out + n, outsz - n, "%smounted at %s",
				      pid ? ", " : " (", mnt);
	if ((pid || mounted) && n < outsz)
		snprintf(out + n, outsz - n, ")");
}

/* A workspace held inside ours refused it: named by what its holder told
 * the store (the daemon says its root there, "ROOT (session UUID)"), else
 * by its lease. */
static int inner_busy(struct coord *c, const char *who, uint64_t epoch,
		      struct lease_err *err)
{
	struct lease_info info = { 0 };
	char path[sizeof(info.holder)], detail[PATH_MAX + 64];

	if (lease_show(c->store, who, &info, NULL) == 0 && info.holder[0]) {
		snprintf(path, sizeof(path), "%s", info.holder);
		if (strstr(path, " (session "))
			*strstr(path, " (session ") = '\0';
		coord_holder_detail(c->store, who, path, detail, sizeof(detail));
		return lease_err_set(err, LEASE_E_HELD, 0, c->root,
				     "workspace busy: %s contains workspace %s, "
				     "held at epoch %llu%s", c->root, info.holder,
				     (unsigned long long)epoch, detail);
	}
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
	char who[LEASE_NAME_MAX + 1], detail[PATH_MAX + 64];
	int r = lease_acquire_in(c->store, c->root_name, c->scope_names,
				 c->nscopes, deadline, &c->root_lease, err);

	if (r >= 0 || err->kind != LEASE_E_HELD)
		return r;
	epoch = err->holder_epoch;
	snprintf(who, sizeof(who), "%s", err->name);
	if (strcmp(who, c->root_name) == 0) {
		coord_holder_detail(c->store, who, c->root, detail, sizeof(detail));
		r = lease_err_set(err, LEASE_E_HELD, 0, c->root,
				  "workspace busy: %s held at epoch %llu%s", c->root,
				  (unsigned long long)epoch, detail);
	} else {
		r = inner_busy(c, who, epoch, err);
	}
	for (size_t i = 0; i < c->nscopes; i++) {
		if (strcmp(who, c->scopes[i]) != 0)
			continue;
		coord_holder_detail(c->store, who, c->scope_paths[i], detail,
				    sizeof(detail));
		r = lease_err_set(err, LEASE_E_HELD, 0, c->root,
				  "workspace busy: %s is inside workspace %s, "
				  "held at epoch %llu%s", c->root,
				  c->scope_paths[i], (unsigned long long)epoch,
				  detail);
	}
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

/* ---- one attempt ----------------------------------------------------- */

/*
 * 0 while every lease taken so far is still held: not lost (its callback
 * may not have run yet) and not past its safe-until.  Else LEASE_E_LOST
 * naming the first one gone and what the attempt was doing (`during`),
 * and *why says how it went.
 */
static int still_held(struct coord *c, const char *during,
		      enum lease_loss *why, struct lease_err *err)
{
	struct lease *const taken[] = { c->session_lease, c->root_lease };
	int64_t now = 0;

	for (size_t i = 0; i < sizeof(taken) / sizeof(taken[0]); i++) {
		enum lease_loss w = coord_lease_gone(taken[i], &now);

		if (w == LEASE_LOSS_NONE)
			continue;
		*why = w;
		return lease_err_set(err, LEASE_E_LOST, 0, c->root,
				     "coordinator: the %s lease %s was lost "
				     "(%s) %s; every lease taken is given back",
				     i == 0 ? "session" : "root",
				     lease_name(taken[i]), lease_loss_str(w),
				     during);
	}
	return 0;
}

/* The moment the coordinator becomes HELD: only if no loss was noted
 * (coord_on_lease_loss) up to it.  A loss after it is an ordinary one. */
static int become_held(struct coord *c, enum lease_loss *why,
		       struct lease_err *err)
{
	unsigned w = WORD(COORD_OPENING, LEASE_LOSS_NONE);
	int r = still_held(c, "as the session opened", why, err);

	if (r < 0 || atomic_compare_exchange_strong(&c->word, &w,
				WORD(COORD_HELD, LEASE_LOSS_NONE)))
		return r;
	/* Noted by a callback: the lease itself says which one. */
	r = still_held(c, "as the session opened", why, err);
	if (r < 0)
		return r;
	*why = WORD_LOSS(w);
	return lease_err_set(err, LEASE_E_LOST, 0, c->root, "coordinator: a "
			     "lease of %s was lost (%s) as the session opened; "
			     "every lease taken is given back", c->root,
			     lease_loss_str(*why));
}

/* The root lease, its loss noted from now on; and the session lease
 * still held after the wait for it. */
static int take_root_checked(struct coord *c, int64_t deadline,
			     enum lease_loss *why, struct lease_err *err)
{
	int r = take_root(c, deadline, err);

	if (r < 0)
		return r;
	lease_set_loss_cb(c->root_lease, coord_on_lease_loss, c);
	return still_held(c, "while the root lease was awaited", why, err);
}

static int make_own_dir(struct coord *c, struct lease_err *err)
{
	bool made = false;
	int r = placement_make_dir(c->root, &made, err);

	c->made_session_dir = c->made_session_dir || made;
	return r;
}

/*
 * One attempt, `deadline` bounding each acquisition: leases in order,
 * each one's loss noted from its grant on, then the placement directory
 * and the hook; a lease lost before the end fails it.  A failed attempt
 * gives back all it took (the hook's through undo_acquire), and *why
 * says how a lease was lost, if one was.
 */
static int attempt(struct coord *c, const struct coord_config *cfg,
		   int64_t deadline, enum lease_loss *why,
		   struct lease_err *err)
{
	bool hooked = false;
	int r;

	atomic_store(&c->word, WORD(COORD_OPENING, LEASE_LOSS_NONE));
	r = lease_acquire(c->store, c->session_name, deadline,
			  &c->session_lease, err);
	if (r < 0)
		return r;
	lease_set_loss_cb(c->session_lease, coord_on_lease_loss, c);
	if (c->pl->root_lease)
		r = take_root_checked(c, deadline, why, err);
	if (r == 0 && c->pl->own_dir)
		r = make_own_dir(c, err);
	if (r == 0 && cfg->after_acquire) {
		r = run_hook(c, cfg, err);
		hooked = r == 0;
		if (r == 0)
			r = still_held(c, "during the after-acquire check", why,
				       err);
	}
	if (r == 0)
		r = become_held(c, why, err);
	if (r == 0)
		return 0;
	if (hooked && cfg->undo_acquire)
		cfg->undo_acquire(cfg->after_acquire_userdata);
	/* A directory made under a lease since lost may be a successor's. */
	if (*why == LEASE_LOSS_NONE)
		coord_remove_own_dir(c);
	release_quietly(c, &c->root_lease);
	release_quietly(c, &c->session_lease);
	return r;
}

/* ---- attempts until the deadline ------------------------------------- */

/* Pauses between attempts after the store failed or a lease was lost:
 * nothing tells when a store comes back, so it is tried again, backing
 * off (a busy root is waited for on the store's own events instead). */
#define RETRY_MIN_MS 100
#define RETRY_MAX_MS 1000

/* Whether another attempt may end otherwise: the root may be let go, the
 * store may come back, a lease lost meanwhile may be taken again (but
 * not one revoked: that is an operator's word to let go). */
static bool worth_retrying(const struct lease_err *err, enum lease_loss why)
{
	switch (err->kind) {
	case LEASE_E_HELD:
	case LEASE_E_UNREACHABLE:
	case LEASE_E_TIMEOUT:
		return true;
	case LEASE_E_LOST:
		return why != LEASE_LOSS_REVOKED;
	default:
		return false;
	}
}

/*
 * Attempts until one succeeds, one fails for good, or the deadline
 * passes.  The first is a single try, so that the owner hears what it
 * waits for (on_wait) before the wait begins.
 */
static int take_leases(struct coord *c, const struct coord_config *cfg,
		       struct lease_err *err)
{
	int64_t deadline = 0;
	int pause_ms = RETRY_MIN_MS;
	bool said = false;

	for (;;) {
		enum lease_loss why = LEASE_LOSS_NONE;
		int r = attempt(c, cfg, deadline, &why, err);

		if (r == 0 || !worth_retrying(err, why) ||
		    lease_deadline_passed(cfg->acquire_deadline))
			return r;
		if (!said && cfg->on_wait)
			cfg->on_wait(cfg->on_wait_userdata, err);
		said = true;
		/* Busy after the one try: the next attempt waits on events. */
		if (err->kind != LEASE_E_HELD || deadline != 0)
			ws_backoff(&pause_ms, RETRY_MAX_MS, cfg->acquire_deadline);
		deadline = cfg->acquire_deadline;
	}
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
	atomic_init(&c->word, WORD(COORD_OPENING, LEASE_LOSS_NONE));
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
