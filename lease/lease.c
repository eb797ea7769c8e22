/* SPDX-License-Identifier: MIT */
/* Generic lease layer: errors, time, store dispatch, the lease object. */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"

/* ---- time --------------------------------------------------------- */

int64_t lease_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int64_t lease_deadline_ms(int64_t ms)
{
	return lease_now_ns() + ms * 1000000LL;
}

bool lease_deadline_passed(int64_t deadline)
{
	return lease_now_ns() >= deadline;
}

/* ---- stores ------------------------------------------------------- */

static const struct lease_backend *const builtin[] = {
	&lease_backend_file,
	&lease_backend_fsstore,
#ifdef LEASEFS_HAVE_ETCD
	&lease_backend_etcd,
	&lease_backend_etcds,
#endif
#ifdef LEASEFS_HAVE_PG
	&lease_backend_pg,
	&lease_backend_pgql,
#endif
#ifdef LEASEFS_HAVE_NATS
	&lease_backend_nats,
	&lease_backend_natstls,
#endif
};

/* added_lock protects added and nadded (backends added at run time). */
static pthread_mutex_t added_lock = PTHREAD_MUTEX_INITIALIZER;
static const struct lease_backend *added[4];
static size_t nadded;

int lease_backend_add(const struct lease_backend *be)
{
	int r = 0;

	pthread_mutex_lock(&added_lock);
	for (size_t i = 0; i < nadded && r == 0; i++)
		if (added[i] == be)
			r = 1;
	if (r == 0 && nadded == sizeof(added) / sizeof(added[0]))
		r = -ENOSPC;
	else if (r == 0)
		added[nadded++] = be;
	pthread_mutex_unlock(&added_lock);
	return r < 0 ? r : 0;
}

/* The i-th backend known, built in first; NULL past the last. */
static const struct lease_backend *backend_at(size_t i)
{
	const struct lease_backend *be = NULL;
	size_t nb = sizeof(builtin) / sizeof(builtin[0]);

	if (i < nb)
		return builtin[i];
	pthread_mutex_lock(&added_lock);
	if (i - nb < nadded)
		be = added[i - nb];
	pthread_mutex_unlock(&added_lock);
	return be;
}

static const struct lease_backend *backend_for(const char *uri,
					       const char **rest)
{
	const struct lease_backend *be;

	for (size_t i = 0; (be = backend_at(i)) != NULL; i++) {
		size_t n = strlen(be->scheme);

		if (strncmp(uri, be->scheme, n) != 0)
			continue;
		if (uri[n] == '\0') {
			*rest = "";
			return be;
		}
		if (uri[n] == ':') {
			*rest = uri + n + 1;
			return be;
		}
	}
	return NULL;
}

#ifdef LEASEFS_MODULE_DIR
/*
 * Backends kept in a loadable module, so that a process maps their
 * libraries only when it uses them.  The module is looked for beside the
 * executable (a build tree), then in LEASEFS_MODULE_DIR; it is loaded
 * once and never unloaded.
 */
static const struct {
	const char *scheme, *module, *symbol;
} modular[] = {
	{ "etcd", "leasefs-etcd.so", "lease_backend_etcd" },
	{ "etcds", "leasefs-etcd.so", "lease_backend_etcds" },
	{ "postgresql", "leasefs-pg.so", "lease_backend_pgql" },
	{ "postgres", "leasefs-pg.so", "lease_backend_pg" },
	{ "nats+tls", "leasefs-nats.so", "lease_backend_natstls" },
	{ "nats", "leasefs-nats.so", "lease_backend_nats" },
};
#define NMODULAR (sizeof(modular) / sizeof(modular[0]))

/* module_lock protects handles: each module is opened once, even when
 * stores are opened from several threads (by scheme index; schemes of one
 * module share its handle through dlopen's own count). */
static pthread_mutex_t module_lock = PTHREAD_MUTEX_INITIALIZER;
static void *handles[NMODULAR];

/* Caller holds module_lock. */
static void *module_open(size_t i, char *why, size_t whysz)
{
	const char *module = modular[i].module;
	char exe[PATH_MAX], path[PATH_MAX + 64];
	ssize_t n;
	char *slash;
	void *h = handles[i];

	if (h)
		return h;
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	if (n > 0) {
		exe[n] = '\0';
		slash = strrchr(exe, '/');
		if (slash) {
			*slash = '\0';
			snprintf(path, sizeof(path), "%s/%s", exe, module);
			if (access(path, F_OK) == 0)
				h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
		}
	}
	if (!h) {
		snprintf(path, sizeof(path), "%s/%s", LEASEFS_MODULE_DIR, module);
		h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	}
	if (!h)
		snprintf(why, whysz, "%s", dlerror());
	handles[i] = h;
	return h;
}

static const struct lease_backend *module_backend(const char *uri,
						  const char **rest,
						  struct lease_err *err,
						  int *r)
{
	char why[512] = "";

	*r = 0;
	for (size_t i = 0; i < NMODULAR; i++) {
		size_t n = strlen(modular[i].scheme);
		const struct lease_backend *be = NULL;
		void *h;

		if (strncmp(uri, modular[i].scheme, n) != 0 ||
		    (uri[n] != '\0' && uri[n] != ':'))
			continue;
		*rest = uri[n] ? uri + n + 1 : "";
		pthread_mutex_lock(&module_lock);
		h = module_open(i, why, sizeof(why));
		if (h)
			be = dlsym(h, modular[i].symbol);
		pthread_mutex_unlock(&module_lock);
		if (!be)
			*r = lease_err_set(err, LEASE_E_IO, -ENOENT, NULL,
					   "the %s: store needs the module %s, "
					   "which cannot be loaded: %s",
					   modular[i].scheme, modular[i].module,
					   h ? "symbol missing" : why);
		return be;
	}
	return NULL;
}
#endif

static char *dup_opt(const char *s)
{
	return s ? strdup(s) : NULL;
}

static void store_free(struct lease_store *st)
{
	if (!st)
		return;
	free(st->uri);
	free((char *)st->opts.ca_file);
	free((char *)st->opts.cert_file);
	free((char *)st->opts.key_file);
	free((char *)st->opts.holder);
	free(st);
}

const char *lease_uri_local_dir(const char *uri)
{
	const char *rest;

	const struct lease_backend *be = uri ? backend_for(uri, &rest) : NULL;

	if (be == &lease_backend_fsstore)
		return rest;
	if (be != &lease_backend_file)
		return NULL;
	return rest && *rest ? rest : LEASE_FILE_DEFAULT_DIR;
}

/* The password of the authority at `p` ("user:PASS@host"): its start
 * and end, or NULL. */
static const char *secret_at(const char *p, const char **end)
{
	const char *stop = p + strcspn(p, "/?#,"), *at = memchr(p, '@', (size_t)(stop - p));
	const char *colon = at ? memchr(p, ':', (size_t)(at - p)) : NULL;

	if (!colon)
		return NULL;
	*end = at;
	return colon + 1;
}

bool lease_uri_has_secret(const char *uri)
{
	const char *end;

	for (const char *p = uri; (p = strstr(p, "://")) != NULL; p += 3)
		if (secret_at(p + 3, &end))
			return true;
	return false;
}

void lease_uri_redact(const char *uri, char *out, size_t outsz)
{
	size_t n = 0;

	if (!outsz)
		return;
	while (*uri && n + 1 < outsz) {
		const char *end, *sec = strncmp(uri, "://", 3) == 0
					? secret_at(uri + 3, &end) : NULL;

		if (sec) {
			n += (size_t)snprintf(out + n, outsz - n, "%.*s***",
					      (int)(sec - uri), uri);
			uri = end;
			if (n >= outsz)
				n = outsz - 1;
			continue;
		}
		out[n++] = *uri++;
	}
	out[n] = '\0';
}

/* Append " scheme:" to `list` unless it is there already. */
static void add_scheme(char *list, size_t sz, const char *scheme)
{
	char item[40];
	size_t n = strlen(list);

	snprintf(item, sizeof(item), " %s:,", scheme);
	if (!strstr(list, item) && n < sz)
		snprintf(list + n, sz - n, "%s", item);
}

/* An unknown scheme, refused with every scheme this build opens. */
static int unknown_scheme(const char *uri, struct lease_err *err)
{
	const struct lease_backend *be;
	char list[256] = "";
	size_t n;

	for (size_t i = 0; (be = backend_at(i)) != NULL; i++)
		if (strcmp(be->scheme, "mem") != 0) /* tests only */
			add_scheme(list, sizeof(list), be->scheme);
#ifdef LEASEFS_MODULE_DIR
	for (size_t i = 0; i < NMODULAR; i++)
		add_scheme(list, sizeof(list), modular[i].scheme);
#endif
	n = strlen(list);
	if (n)
		list[n - 1] = '\0'; /* the last comma */
	return lease_err_set(err, LEASE_E_USAGE, 0, NULL, "unknown lease store "
			     "URI '%s' (the schemes are%s)", uri, list);
}

int lease_store_open(const char *uri, const struct lease_store_opts *opts,
		     struct lease_store **out, struct lease_err *err)
{
	const struct lease_backend *be;
	struct lease_store *st;
	const char *rest;
	int r;

	*out = NULL;
	if (!uri || !*uri)
		return lease_err_set(err, LEASE_E_USAGE, 0, NULL,
				     "empty lease store URI");
	be = backend_for(uri, &rest);
#ifdef LEASEFS_MODULE_DIR
	if (!be) {
		be = module_backend(uri, &rest, err, &r);
		if (r < 0)
			return r;
	}
#endif
	if (!be)
		return unknown_scheme(uri, err);
	st = calloc(1, sizeof(*st));
	if (!st)
		return lease_err_set(err, LEASE_E_IO, -ENOMEM, NULL, "out of memory");
	st->be = be;
	st->uri = strdup(uri);
	if (opts) {
		st->opts.ttl_ms = opts->ttl_ms;
		st->opts.ca_file = dup_opt(opts->ca_file);
		st->opts.cert_file = dup_opt(opts->cert_file);
		st->opts.key_file = dup_opt(opts->key_file);
		st->opts.holder = dup_opt(opts->holder);
		st->opts.on_reach = opts->on_reach;
		st->opts.reach_userdata = opts->reach_userdata;
	}
	if (!st->uri) {
		store_free(st);
		return lease_err_set(err, LEASE_E_IO, -ENOMEM, NULL, "out of memory");
	}
	r = be->open(st, rest, err);
	if (r < 0) {
		store_free(st);
		return r;
	}
	*out = st;
	return 0;
}

void lease_store_close(struct lease_store *store)
{
	if (!store)
		return;
	store->be->close(store);
	store_free(store);
}

const char *lease_store_local_dir(const struct lease_store *store)
{
	return store->be->local_dir ? store->be->local_dir(store) : NULL;
}

/* ---- lease objects ------------------------------------------------ */

static void lease_dispose_scopes(struct lease *l)
{
	for (size_t i = 0; i < l->nscopes; i++)
		free(l->scopes[i]);
	free(l->scopes);
	l->scopes = NULL;
	l->nscopes = 0;
}

/* Record the scopes in the lease, for the backend and its release. */
static int keep_scopes(struct lease *l, const struct lease_scopes *sc)
{
	if (!sc->n)
		return 0;
	l->scopes = calloc(sc->n, sizeof(*l->scopes));
	if (!l->scopes)
		return -ENOMEM;
	for (size_t i = 0; i < sc->n; i++) {
		l->scopes[i] = strdup(sc->names[i]);
		if (!l->scopes[i])
			return -ENOMEM;
		l->nscopes = i + 1;
	}
	return 0;
}

int lease_alloc(struct lease_store *store, const char *name, uint64_t epoch,
		const struct lease_scopes *sc, struct lease **out)
{
	struct lease *l = calloc(1, sizeof(*l));

	if (!l)
		return -ENOMEM;
	if (sc && keep_scopes(l, sc) < 0) {
		lease_dispose_scopes(l);
		free(l);
		return -ENOMEM;
	}
	l->loss_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (l->loss_fd < 0) {
		int r = -errno;

		free(l);
		return r;
	}
	pthread_mutex_init(&l->cb_lock, NULL);
	l->store = store;
	snprintf(l->name, sizeof(l->name), "%s", name);
	l->epoch = epoch;
	*out = l;
	return 0;
}

void lease_dispose(struct lease *l)
{
	if (!l)
		return;
	lease_dispose_scopes(l);
	close(l->loss_fd);
	pthread_mutex_destroy(&l->cb_lock);
	free(l);
}

/* Runs the callback at most once; caller holds cb_lock. */
static void fire_cb_locked(struct lease *l)
{
	enum lease_loss why = atomic_load(&l->loss);

	if (why == LEASE_LOSS_NONE || !l->cb || l->cb_fired)
		return;
	l->cb_fired = true;
	l->cb(l, why, l->cb_userdata);
}

bool lease_mark_lost(struct lease *l, enum lease_loss why)
{
	int expected = LEASE_LOSS_NONE;

	if (!atomic_compare_exchange_strong(&l->loss, &expected, (int)why))
		return false;
	/* An add of 1 fails only on overflow; the atomic flag is the truth. */
	(void)eventfd_write(l->loss_fd, 1);
	pthread_mutex_lock(&l->cb_lock);
	fire_cb_locked(l);
	pthread_mutex_unlock(&l->cb_lock);
	return true;
}

void lease_set_loss_cb(struct lease *l, lease_loss_cb cb, void *userdata)
{
	pthread_mutex_lock(&l->cb_lock);
	l->cb = cb;
	l->cb_userdata = userdata;
	fire_cb_locked(l);
	pthread_mutex_unlock(&l->cb_lock);
}

/* Each scope a valid name, none equal to `name` or to another. */
static int scopes_validate(const char *name, const struct lease_scopes *sc,
			   struct lease_err *err)
{
	for (size_t i = 0; i < sc->n; i++) {
		int r = lease_name_validate(sc->names[i], err);

		if (r < 0)
			return r;
		for (size_t j = 0; j <= i; j++)
			if (strcmp(sc->names[i], j < i ? sc->names[j] : name) == 0)
				return lease_err_set(err, LEASE_E_USAGE, 0, name,
						     "scope '%s' given twice or "
						     "equal to the name",
						     sc->names[i]);
	}
	return 0;
}

int lease_acquire_in(struct lease_store *store, const char *name,
		     const char *const *scopes, size_t nscopes,
		     int64_t deadline, struct lease **out,
		     struct lease_err *err)
{
	struct lease_scopes sc = { scopes, nscopes };
	struct lease_err local = { 0 };
	int r;

	/* The retry needs the error's kind even when the caller wants none. */
	if (!err)
		err = &local;
	*out = NULL;
	r = lease_name_validate(name, err);
	if (r == 0)
		r = scopes_validate(name, &sc, err);
	if (r < 0)
		return r;
	for (;;) {
		r = store->be->try_acquire(store, name, &sc, deadline, out, err);
		if (r != lease_errkind_errno(LEASE_E_HELD) ||
		    err->kind != LEASE_E_HELD || lease_deadline_passed(deadline))
			break;
		store->be->await_change(store, name, &sc, deadline);
	}
	return r;
}

int lease_acquire(struct lease_store *store, const char *name,
		  int64_t deadline, struct lease **out, struct lease_err *err)
{
	return lease_acquire_in(store, name, NULL, 0, deadline, out, err);
}

uint64_t lease_epoch(const struct lease *l) { return l->epoch; }
const char *lease_name(const struct lease *l) { return l->name; }
struct lease_store *lease_store_of(const struct lease *l) { return l->store; }
int lease_loss_fd(const struct lease *l) { return l->loss_fd; }

bool lease_is_lost(const struct lease *l)
{
	return atomic_load_explicit(&((struct lease *)l)->loss,
				    memory_order_acquire) != LEASE_LOSS_NONE;
}

enum lease_loss lease_loss_reason(const struct lease *l)
{
	return atomic_load(&((struct lease *)l)->loss);
}

int64_t lease_safe_until(const struct lease *l)
{
	return atomic_load_explicit(&((struct lease *)l)->safe_until,
				    memory_order_acquire);
}

void lease_store_reach(struct lease_store *st, bool answered)
{
	bool was = answered; /* a transition: unreachable was `answered` */
	int64_t now = lease_now_ns(), away = 0;

	/* Only the caller that flips the flag reports. */
	if (!atomic_compare_exchange_strong(&st->unreachable, &was, !answered))
		return;
	if (!answered)
		atomic_store(&st->unreachable_since, now);
	else
		away = (now - atomic_load(&st->unreachable_since)) / 1000000;
	if (st->opts.on_reach)
		st->opts.on_reach(answered, away, st->opts.reach_userdata);
}

int lease_release(struct lease *l, int64_t deadline)
{
	if (atomic_exchange(&l->released, true))
		return 0;
	lease_mark_lost(l, LEASE_LOSS_RELEASED);
	return l->store->be->release(l, deadline);
}

int lease_release_forget(struct lease *l, int64_t deadline)
{
	int r = lease_release(l, deadline);

	if (r == 0 && l->store->be->forget)
		r = l->store->be->forget(l, deadline);
	return r;
}

void lease_hold_fenced(struct lease *l)
{
	if (l && l->store->be->hold_fence && !atomic_load(&l->released))
		l->store->be->hold_fence(l);
}

void lease_free(struct lease *l)
{
	if (!l)
		return;
	lease_release(l, lease_deadline_ms(1000));
	if (l->store->be->free_lease)
		l->store->be->free_lease(l);
	lease_dispose(l);
}

/* ---- operator view ------------------------------------------------ */

int lease_list(struct lease_store *store, lease_list_cb cb, void *userdata,
	       struct lease_err *err)
{
	return store->be->list(store, cb, userdata, err);
}

int lease_show(struct lease_store *store, const char *name,
	       struct lease_info *info, struct lease_err *err)
{
	int r = lease_name_validate(name, err);

	if (r < 0)
		return r;
	return store->be->show(store, name, info, err);
}

int lease_revoke(struct lease_store *store, const char *name, int64_t deadline,
		 enum lease_fence *fence, struct lease_err *err)
{
	uint64_t epoch = 0;
	int r = lease_name_validate(name, err);

	if (r < 0)
		return r;
	r = store->be->revoke(store, name, deadline, &epoch, err);
	if (r < 0 || !fence)
		return r;
	return store->be->await_fence(store, name, epoch, deadline, fence, err);
}
