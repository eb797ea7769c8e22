/* SPDX-License-Identifier: MIT */
/*
 * The pgstore backend ("postgres://…", "postgresql://…"): the seed
 * harness's fleet store on PostgreSQL, read and written as the harness
 * does, so that a harness session and a leasefs mount contend for one
 * lease.  What its units share (conn.c: the connection, its queries and
 * notifications, which database it reaches; schema.c: identifiers and
 * the tables as found; holder.c: the wire calls of the renewal engine
 * (../renew.h); acquire.c: acquire and release; view.c: show, list,
 * revoke and its fence; pg.c: the store and its backend table).  Each
 * calls only units listed before it.  The design: README.md.
 *
 * The harness's table, which its migration runner makes (migration 0002,
 * recorded in SCHEMA.PREFIXschema_migrations) and leasefs never makes
 * (schema.c); SCHEMA and PREFIX default to "looprig" and "looprig_":
 *   SCHEMA.PREFIXleases (name text PRIMARY KEY, epoch bigint NOT NULL >= 0,
 *     holder bytea, expires_at timestamptz, revision bigint NOT NULL >= 0)
 *   holder and expires_at are NULL together; rows are never deleted and
 *   epochs never reset.  A name is held iff holder is not NULL and
 *   expires_at is later than the database's clock_timestamp().  A grant
 *   sets epoch + 1, a fresh 32-byte random holder, expires_at = database
 *   clock + TTL, revision + 1; a renewal moves expires_at, conditional on
 *   name, epoch, holder and not yet expired; a release clears holder and
 *   expires_at where name, epoch and holder match.  leasefs writes a row
 *   there only for a name it acquires, as the harness's acquire does.
 *
 * leasefs's own tables, in schema "_leasefs" (a name the harness cannot
 * take), shared by every store of the database; `store` is "SCHEMA.PREFIX":
 *   pgstore_names (store, name PK, epoch, holder, pid, description,
 *     revoked): one row per name leasefs acquired or nested a grant under,
 *     never deleted.  Every leasefs acquirer locks the rows of its name
 *     and its scopes first, which is what keeps nested grants apart.  The
 *     row is the record of a leasefs holder while epoch and holder match
 *     the harness's row: its loss channel (a revoker sets revoked and
 *     notifies; the holder keeps renewing until it has drained and
 *     released, so a successor, harness or mount, gets the name only
 *     after the holder acknowledged or its expiry passed on the
 *     database's clock).
 *   pgstore_within (store, scope, name PK, epoch, holder): grants that
 *     live within a scope (nested workspaces), valid while epoch and
 *     holder match the harness's row.  Only leasefs reads it: a harness
 *     acquirer of an enclosing root is not kept out.
 * Notifications on channel leasefs_pgstore: "revoke STORE NAME" and
 * "release STORE NAME".
 *
 * Lock order, everywhere: leasefs's rows (in name order), then the
 * harness's row.
 *
 * A database made anew (README.md, "A database made anew"): nothing is
 * granted while the harness's lease table is younger than max_ttl +
 * max_ttl/3 (its migration record's applied_at, on the server's clock),
 * and a reconnect to another database is loss of every grant.
 *
 * One connection per store, under `lock`; the holder thread waits on its
 * socket without the lock and takes it to read, renew or reconnect.
 */
#ifndef LEASEFS_PG_INT_H
#define LEASEFS_PG_INT_H

#include <libpq-fe.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "renew.h"

/* The harness's default LeaseTTL (options.go:19): the default max_ttl,
 * and a mount's TTL when it names none. */
#define PG_DEFAULT_TTL_MS 15000
/* What identifies the database a store's grants live in (pg_identity). */
#define PG_IDENT_MAX 96
#define PG_HOLDER_HEX 64
/* NAMEDATALEN - 1: PostgreSQL cuts a longer identifier (silently). */
#define PG_NAME_MAX 63
/* The harness's limits for Schema and TablePrefix (options.go:21, :30-31). */
#define PG_SCHEMA_MAX 63
#define PG_PREFIX_MAX 40
#define PG_OWN_SCHEMA "_leasefs"
#define PG_T_NAMES "\"_leasefs\".\"pgstore_names\""
#define PG_T_WITHIN "\"_leasefs\".\"pgstore_within\""
#define PG_CHANNEL "leasefs_pgstore"
/* Every query is bounded; this is the bound when the caller has none. */
#define PG_QUERY_MS 5000
/* The harness's migration that makes the lease table
 * (migrations/0002_leases.sql). */
#define PG_LEASES_MIGRATION 2
/* The harness's record of the lease table's making: the applied_at of
 * the first migration from PG_LEASES_MIGRATION on (a later migration does
 * not move it).  An SQL expression. */
#define PG_LEASES_MADE(versions) "(SELECT applied_at FROM " versions " WHERE " \
	"version >= 2 ORDER BY version LIMIT 1)"
_Static_assert(PG_LEASES_MIGRATION == 2, "PG_LEASES_MADE names version 2");

struct pg_lease;

struct pg_store {
	char *conninfo;          /* the URI as libpq takes it (ours stripped) */
	char *shown;             /* the URI for messages: no password */
	char schema[PG_SCHEMA_MAX + 1];
	char prefix[PG_PREFIX_MAX + 1];
	char key[PG_SCHEMA_MAX + PG_PREFIX_MAX + 2]; /* "schema.prefix" */
	char q_schema[PG_SCHEMA_MAX + 3];              /* "schema" */
	char t_main[2 * PG_NAME_MAX + 8];     /* "schema"."prefixleases" */
	char t_versions[2 * PG_NAME_MAX + 8]; /* ..."prefixschema_migrations" */
	size_t longest;          /* the longest identifier we name */
	int64_t ttl_ms;
	/* The longest TTL any holder of the store uses (URI max_ttl=, default
	 * the harness's LeaseTTL): nothing is granted while the harness's
	 * lease table is younger than max_ttl + max_ttl/3 (a holder from
	 * before it may still believe), and no mount's TTL is above it. */
	int64_t max_ttl_ms;
	/* lock protects conn, the renewer's grants and thread (renew.h),
	 * and events; changed is its condition. */
	pthread_mutex_t lock;
	pthread_cond_t changed;  /* a notification came, or a renewal ran */
	PGconn *conn;            /* NULL while down */
	int64_t next_connect;    /* back-off: no attempt before this */
	uint64_t events;         /* notifications seen, for waiters */
	/* The database as the store first saw it (the cluster's
	 * system_identifier and when the harness's lease table was made): a
	 * reconnect that finds another is loss of every grant; then `anew`
	 * until the tables are looked at (and ours made) again. */
	char ident[PG_IDENT_MAX];
	bool anew;
	struct lease_renewer renewer; /* renews, listens, reconnects */
};

struct pg_lease {
	struct lease_renewal rn; /* the engine's; rn.lease immutable */
	char holder[PG_HOLDER_HEX + 3]; /* "\x" + hex: bytea input; immutable */
};

static inline struct pg_lease *pg_lease_of(struct lease_renewal *g)
{
	return (struct pg_lease *)((char *)g - offsetof(struct pg_lease, rn));
}

static inline struct pg_store *pg_of(const struct lease_store *store)
{
	return store->priv;
}

/* conn.c */
/* Caller holds ps->lock.  One statement with text parameters, bounded by
 * `deadline` (a query past it is cancelled and the connection dropped):
 * 0 with *res (tuples or command ok), or -errno with err filled. */
int pg_query(struct pg_store *ps, int64_t deadline, const char *sql,
	     int nparams, const char *const *params, PGresult **res,
	     struct lease_err *err);
/* Caller holds ps->lock: BEGIN, ROLLBACK, COMMIT. */
int pg_cmd(struct pg_store *ps, int64_t deadline, const char *sql,
	   struct lease_err *err);
/* Caller holds ps->lock: read what came on the socket, and act on the
 * notifications in it. */
void pg_consume_locked(struct pg_store *ps);
/* Caller holds ps->lock: connected (and listening), or -errno. */
int pg_connect_locked(struct pg_store *ps, int64_t deadline,
		      struct lease_err *err);
/* Caller holds ps->lock: the database is not the one the store's grants
 * were made in (a cluster or lease table made anew): every grant is lost
 * at once (store failure; its row is not there), the tables are looked
 * at again before the next grant, and `now` (if not NULL) is the
 * database's identity from here on. */
void pg_database_changed_locked(struct pg_store *ps, const char *now);
/* The safe-until of a grant or renewal sent at `sent` (monotonic ns) that
 * the database says expires `left_ms` from its own now: the whole round
 * trip and a margin for clock rates taken off. */
int64_t pg_safe_until(const struct pg_store *ps, int64_t sent, int64_t left_ms);
/* Grants wait until the harness's lease table is this old (ms). */
int64_t pg_grace_ms(const struct pg_store *ps);
/* Parse a bigint column; 0 on NULL. */
int64_t pg_i64(const PGresult *res, int row, int col);
/* Caller holds ps->lock, connected: what identifies the database (the
 * cluster's system_identifier where this user may read it, and the time
 * the harness's lease table was made, recorded by its migration runner),
 * into buf; 0 or -errno. */
int pg_identity_locked(struct pg_store *ps, char *buf, size_t sz,
		       struct lease_err *err);
/* Caller holds ps->lock: wait for a notification or `until`. */
void pg_wait_event_locked(struct pg_store *ps, int64_t until);

/* schema.c */
/* `s` (schema or table_prefix, named `what`) by the harness's rule, at
 * most `max` bytes: 0 or LEASE_E_USAGE. */
int pg_ident_check(const char *what, const char *s, size_t max,
		   struct lease_err *err);
void pg_names_set(struct pg_store *ps, const char *schema, const char *prefix);
/* Caller holds ps->lock, connected: the harness's lease table is there as
 * its migrations made it (else LEASE_E_SETUP, nothing changed), and ours
 * are (made if missing). */
int pg_schema_open_locked(struct pg_store *ps, struct lease_err *err);

/* Caller holds ps->lock, connected, ps->anew: the tables looked at
 * again (ours made if missing) and the identity taken on; a database not
 * set up (yet) is LEASE_E_UNREACHABLE, which a waiting mount retries. */
int pg_schema_again_locked(struct pg_store *ps, struct lease_err *err);

/* Caller holds ps->lock: how old the harness's lease table is on the
 * database's clock (ms; its migration runner's record of making it). */
int pg_age_ms_locked(struct pg_store *ps, int64_t deadline, int64_t *age,
		     struct lease_err *err);

/* holder.c */
extern const struct lease_renew_ops pg_renew_ops;

/* acquire.c */
int pg_try_acquire(struct lease_store *store, const char *name,
		   const struct lease_scopes *sc, int64_t deadline,
		   struct lease **out, struct lease_err *err);
void pg_await_change(struct lease_store *store, const char *name,
		     const struct lease_scopes *sc, int64_t deadline);
int pg_release(struct lease *l, int64_t deadline);
void pg_free_lease(struct lease *l);

/* view.c */
int pg_show(struct lease_store *store, const char *name,
	    struct lease_info *info, struct lease_err *err);
int pg_list(struct lease_store *store, lease_list_cb cb, void *userdata,
	    struct lease_err *err);
int pg_revoke(struct lease_store *store, const char *name, int64_t deadline,
	      uint64_t *epoch, struct lease_err *err);
int pg_await_fence(struct lease_store *store, const char *name,
		   uint64_t epoch, int64_t deadline, enum lease_fence *out,
		   struct lease_err *err);

#endif
