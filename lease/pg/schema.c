/* SPDX-License-Identifier: MIT */
/*
 * The pgstore backend: the harness's identifiers, its schema as leasefs
 * finds it, and leasefs's own tables (the design: README.md).
 *
 * leasefs never makes the harness's schema or tables: their owner is the
 * harness's migration runner, which records each migration it applied and
 * fails on a table it did not make.  A store is opened only on a database
 * where that runner made the lease table; leasefs's own tables live in
 * the schema "_leasefs", a name the harness cannot take (its identifiers
 * start with a-z), so neither side can ever shadow the other.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg_int.h"

/* The longest suffix leasefs appends to the table prefix: the harness's
 * version table (migrations.go:52). */
#define LONGEST_SUFFIX "schema_migrations"

_Static_assert(PG_PREFIX_MAX + sizeof(LONGEST_SUFFIX) - 1 <= PG_NAME_MAX,
	       "a table name derived from the longest prefix would be cut");
_Static_assert(sizeof("leases") <= sizeof(LONGEST_SUFFIX),
	       "LONGEST_SUFFIX is not the longest");

/* ---- identifiers ----------------------------------------------------- */

/*
 * The harness's rule for Schema and TablePrefix (options.go:204-214,
 * validIdentifier): [a-z][a-z0-9_]*, at most `max` bytes.
 */
int pg_ident_check(const char *what, const char *s, size_t max,
		   struct lease_err *err)
{
	size_t n = strlen(s);

	if (n > max)
		return lease_err_set(err, LEASE_E_USAGE, 0, NULL, "pgstore: %s "
				     "'%.80s' is %zu bytes; the harness takes at "
				     "most %zu%s", what, s, n, max, max < PG_NAME_MAX
				     ? " (it keeps 23 of PostgreSQL's 63 for its "
				     "table names)" : " (PostgreSQL cuts longer "
				     "identifiers)");
	if (!(s[0] >= 'a' && s[0] <= 'z'))
		return lease_err_set(err, LEASE_E_USAGE, 0, NULL, "pgstore: %s "
				     "'%.80s' must start with a lowercase letter "
				     "a-z (the harness's rule)", what, s);
	for (size_t i = 1; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
			return lease_err_set(err, LEASE_E_USAGE, 0, NULL,
					     "pgstore: %s '%.80s' may hold only "
					     "a-z, 0-9 and _ (the harness's rule)",
					     what, s);
	return 0;
}

void pg_names_set(struct pg_store *ps, const char *schema, const char *prefix)
{
	snprintf(ps->schema, sizeof(ps->schema), "%s", schema);
	snprintf(ps->prefix, sizeof(ps->prefix), "%s", prefix);
	snprintf(ps->key, sizeof(ps->key), "%s.%s", schema, prefix);
	snprintf(ps->q_schema, sizeof(ps->q_schema), "\"%s\"", schema);
	snprintf(ps->t_main, sizeof(ps->t_main), "\"%s\".\"%sleases\"", schema,
		 prefix);
	snprintf(ps->t_versions, sizeof(ps->t_versions),
		 "\"%s\".\"%s" LONGEST_SUFFIX "\"", schema, prefix);
	/* The longest identifier leasefs names: derived, or its own. */
	ps->longest = strlen(prefix) + sizeof(LONGEST_SUFFIX) - 1;
	if (strlen(schema) > ps->longest)
		ps->longest = strlen(schema);
	if (sizeof(PG_CHANNEL) - 1 > ps->longest)
		ps->longest = sizeof(PG_CHANNEL) - 1;
}

/* ---- the harness's schema -------------------------------------------- */

/* What the database has: the catalogs, then the harness's record. */
struct found {
	bool schema, versions, leases, own_schema, own_tables;
	bool old_holders;        /* an older leasefs's table beside the harness's */
	int64_t version;         /* -1: no version table */
	int ident_max;           /* the server's max_identifier_length */
	char user[PG_NAME_MAX + 1];
};

/* Whether relation `name` is in schema `schema` (SQL expressions), from
 * the catalogs (which, unlike to_regclass(), need no privilege on the
 * schema). */
#define REL_IN(schema, name) "EXISTS (SELECT 1 FROM pg_class c JOIN " \
	"pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = " schema \
	" AND c.relname = " name ")"

static int probe(struct pg_store *ps, struct found *f, struct lease_err *err)
{
	const char *p[] = { ps->schema, ps->prefix };
	PGresult *res = NULL;
	int r;

	r = pg_query(ps, 0, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE "
		     "nspname = $1), " REL_IN("$1", "$2 || '" LONGEST_SUFFIX "'")
		     ", " REL_IN("$1", "$2 || 'leases'") ", "
		     REL_IN("$1", "$2 || 'leases_leasefs_holders'") ", EXISTS ("
		     "SELECT 1 FROM pg_namespace WHERE nspname = '" PG_OWN_SCHEMA
		     "'), " REL_IN("'" PG_OWN_SCHEMA "'", "'pgstore_names'") " AND "
		     REL_IN("'" PG_OWN_SCHEMA "'", "'pgstore_within'") ", "
		     "current_setting('max_identifier_length')::int, current_user",
		     2, p, &res, err);
	if (r < 0)
		return r;
	f->schema = PQgetvalue(res, 0, 0)[0] == 't';
	f->versions = PQgetvalue(res, 0, 1)[0] == 't';
	f->leases = PQgetvalue(res, 0, 2)[0] == 't';
	f->old_holders = PQgetvalue(res, 0, 3)[0] == 't';
	f->own_schema = PQgetvalue(res, 0, 4)[0] == 't';
	f->own_tables = PQgetvalue(res, 0, 5)[0] == 't';
	f->ident_max = (int)pg_i64(res, 0, 6);
	snprintf(f->user, sizeof(f->user), "%s", PQgetvalue(res, 0, 7));
	PQclear(res);
	f->version = -1;
	if (!f->versions)
		return 0;
	/* As the harness reads it (migrations.go:57). */
	{
		char sql[256];

		snprintf(sql, sizeof(sql), "SELECT coalesce(max(version), 0) FROM %s",
			 ps->t_versions);
		r = pg_query(ps, 0, sql, 0, NULL, &res, err);
		if (r == 0)
			f->version = pg_i64(res, 0, 0);
		PQclear(res);
	}
	return r;
}

/* "no schema S", "no S.Pschema_migrations", "S.Pschema_migrations records
 * version N": what the harness's record says. */
static const char *record_said(const struct pg_store *ps, const struct found *f,
			       char *buf, size_t sz)
{
	if (!f->schema)
		snprintf(buf, sz, "no schema %s", ps->q_schema);
	else if (!f->versions)
		snprintf(buf, sz, "no %s", ps->t_versions);
	else
		snprintf(buf, sz, "%s records version %" PRId64, ps->t_versions,
			 f->version);
	return buf;
}

static int not_set_up(struct pg_store *ps, const struct found *f,
		      struct lease_err *err)
{
	char said[256];

	record_said(ps, f, said, sizeof(said));
	if (f->version >= PG_LEASES_MIGRATION)
		return lease_err_set(err, LEASE_E_SETUP, 0, NULL, "pgstore %s: %s "
				     "but the harness's lease table %s is not "
				     "there (dropped?); leasefs will not make it "
				     "(a new table restarts every epoch at 1): "
				     "restore it from a backup", ps->shown, said,
				     ps->t_main);
	if (f->leases)
		return lease_err_set(err, LEASE_E_SETUP, 0, NULL, "pgstore %s: %s "
				     "is there but the harness's migrations did "
				     "not make it (%s; the lease table comes with "
				     "version %d)%s, and the harness cannot open "
				     "this database: stop every mount on it and "
				     "repair it as leasefs(8) says under "
				     "\"PostgreSQL stores\" (the epochs are kept)",
				     ps->shown, ps->t_main, said, PG_LEASES_MIGRATION,
				     f->old_holders ? ": an older leasefs made it"
				     : "");
	return lease_err_set(err, LEASE_E_SETUP, 0, NULL, "pgstore %s: the "
			     "harness's lease table %s is not there (%s), and "
			     "leasefs makes none of the harness's tables: set the "
			     "database up with the harness first (its pgstore.Open "
			     "with Migrations: MigrationApply; its default, "
			     "MigrationValidate, only checks)", ps->shown,
			     ps->t_main, said);
}

/* The columns leasefs reads and writes are there. */
static int columns_ok(struct pg_store *ps, struct lease_err *err)
{
	char sql[256];
	PGresult *res = NULL;
	int r;

	snprintf(sql, sizeof(sql), "SELECT name, epoch, holder, expires_at, "
		 "revision FROM %s LIMIT 0", ps->t_main);
	r = pg_query(ps, 0, sql, 0, NULL, &res, err);
	PQclear(res);
	if (r < 0 && err && err->kind == LEASE_E_IO) {
		char why[LEASE_MSG_MAX];

		snprintf(why, sizeof(why), "%s", err->msg);
		r = lease_err_set(err, LEASE_E_SETUP, 0, NULL, "%s (%s is not the "
				  "harness's lease table as leasefs knows it: "
				  "name, epoch, holder, expires_at, revision)",
				  why, ps->t_main);
	}
	return r;
}

/* ---- leasefs's own tables -------------------------------------------- */

/*
 * Made if missing, one maker at a time (the harness's way of serializing
 * its migrations, migrations.go:46, keyed by our schema).  Nothing is
 * made where it is there already, so that a user who may not create
 * schemas can use tables made for it.
 */
static int make_own(struct pg_store *ps, const struct found *f,
		    struct lease_err *err)
{
	static const char *const ddl[] = {
		"SELECT pg_advisory_xact_lock(hashtextextended('" PG_OWN_SCHEMA
		"', 0))",
		"CREATE SCHEMA IF NOT EXISTS \"" PG_OWN_SCHEMA "\"",
		"CREATE TABLE IF NOT EXISTS " PG_T_NAMES " (store text NOT NULL, "
		"name text NOT NULL, epoch bigint, holder bytea, pid integer, "
		"description text, revoked boolean NOT NULL DEFAULT false, "
		"PRIMARY KEY (store, name))",
		"CREATE TABLE IF NOT EXISTS " PG_T_WITHIN " (store text NOT NULL, "
		"scope text NOT NULL, name text NOT NULL, epoch bigint NOT NULL, "
		"holder bytea NOT NULL, PRIMARY KEY (store, scope, name))",
	};
	int r = pg_cmd(ps, 0, "BEGIN", err);

	for (size_t i = 0; r == 0 && i < sizeof(ddl) / sizeof(ddl[0]); i++)
		if (i != 1 || !f->own_schema)
			r = pg_cmd(ps, 0, ddl[i], err);
	if (r == 0)
		return pg_cmd(ps, 0, "COMMIT", err);
	if (ps->conn)
		pg_cmd(ps, 0, "ROLLBACK", NULL);
	if (err && err->kind == LEASE_E_IO) {
		char why[LEASE_MSG_MAX];

		snprintf(why, sizeof(why), "%s", err->msg);
		r = lease_err_set(err, LEASE_E_SETUP, 0, NULL, "%s: leasefs keeps "
				  "its records in schema \"" PG_OWN_SCHEMA "\"; "
				  "let its owner or a superuser run CREATE SCHEMA "
				  "\"" PG_OWN_SCHEMA "\" AUTHORIZATION \"%s\"",
				  why, f->user);
	}
	return r;
}

/*
 * Ours are owned by this user, a role it is a member of, or a superuser:
 * whoever owns them controls what a write to them runs (triggers, rules),
 * so tables another role made first, or a schema it owns, are refused.
 * Looked at before make_own() and after it: a schema another role made
 * meanwhile is seen.
 */
static int own_owned(struct pg_store *ps, const struct found *f,
		     struct lease_err *err)
{
	PGresult *res = NULL;
	int r;

	r = pg_query(ps, 0, "SELECT what, o.rolname FROM (SELECT 'schema \""
		     PG_OWN_SCHEMA "\"' AS what, nspowner AS owner FROM pg_namespace "
		     "WHERE nspname = '" PG_OWN_SCHEMA "' UNION ALL SELECT 'table "
		     PG_OWN_SCHEMA ".' || c.relname, c.relowner FROM pg_class c JOIN "
		     "pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = '"
		     PG_OWN_SCHEMA "' AND c.relname IN ('pgstore_names', "
		     "'pgstore_within')) x JOIN pg_roles o ON o.oid = x.owner WHERE "
		     "NOT o.rolsuper "
		     "AND NOT pg_has_role(x.owner, 'USAGE') LIMIT 1", 0, NULL, &res,
		     err);
	if (r == 0 && PQntuples(res) > 0)
		r = lease_err_set(err, LEASE_E_SETUP, 0, NULL, "pgstore %s: %s "
				  "belongs to role \"%s\", which user \"%s\" is "
				  "not a member of: leasefs writes only tables its "
				  "own roles control; let a superuser drop it, or "
				  "give it to this user", ps->shown,
				  PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1),
				  f->user);
	PQclear(res);
	return r;
}

int pg_schema_open_locked(struct pg_store *ps, struct lease_err *err)
{
	struct found f = { 0 };
	int r = probe(ps, &f, err);

	if (r < 0)
		return r;
	if (f.ident_max > 0 && ps->longest > (size_t)f.ident_max)
		return lease_err_set(err, LEASE_E_USAGE, 0, NULL, "pgstore %s: this "
				     "server cuts identifiers past %d bytes, and "
				     "schema or table_prefix make one of %zu: "
				     "choose shorter ones", ps->shown,
				     f.ident_max, ps->longest);
	if (f.version < PG_LEASES_MIGRATION || !f.leases)
		return not_set_up(ps, &f, err);
	r = columns_ok(ps, err);
	if (r == 0)
		r = own_owned(ps, &f, err);
	if (r == 0 && !f.own_tables) {
		r = make_own(ps, &f, err);
		if (r == 0)
			r = own_owned(ps, &f, err);
	}
	return r;
}

int pg_schema_again_locked(struct pg_store *ps, struct lease_err *err)
{
	char now[PG_IDENT_MAX];
	int r = pg_schema_open_locked(ps, err);

	if (r < 0 && err && err->kind == LEASE_E_SETUP)
		err->kind = LEASE_E_UNREACHABLE;
	if (r < 0)
		return r == lease_errkind_errno(LEASE_E_SETUP)
			? lease_errkind_errno(LEASE_E_UNREACHABLE) : r;
	r = pg_identity_locked(ps, now, sizeof(now), err);
	if (r < 0)
		return r;
	if (strcmp(now, ps->ident) != 0)
		pg_database_changed_locked(ps, now);
	ps->anew = false;
	return 0;
}

int pg_age_ms_locked(struct pg_store *ps, int64_t deadline, int64_t *age,
		     struct lease_err *err)
{
	char sql[512];
	PGresult *res = NULL;
	int r;

	snprintf(sql, sizeof(sql), "SELECT (extract(epoch FROM clock_timestamp() "
		 "- " PG_LEASES_MADE("%s") ") * 1000)::bigint", ps->t_versions);
	r = pg_query(ps, deadline, sql, 0, NULL, &res, err);
	if (r == 0)
		*age = PQgetisnull(res, 0, 0) ? 0 : pg_i64(res, 0, 0);
	PQclear(res);
	return r;
}
