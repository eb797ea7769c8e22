#!/usr/bin/env python3
"""The harness's pgstore, played with psycopg2: its Open (options, then the
migration runner), its leaser's acquire, renewal and release, following
the Go source of looprig/pgstore statement by statement.  Each operation
cites its file and line: migrations.go, migrations/*.sql and pgstore.go
as of schema version 3 (commit 7ad3605); internal/lease/lease.go,
options.go and internal/postgres/postgres.go as of commit 9a759c6, the
leaser's; names.go of looprig/storage for the name grammar.

  pgstore_peer.py [OPTIONS] URI migrate
      Open's migration runner alone, in --migrations' mode:
      "migrated V" / "valid V" / "disabled", or the harness's error
      (exit 1)
  pgstore_peer.py [OPTIONS] URI options
      the options as Open resolves them: "ok SCHEMA PREFIX", or the
      harness's OptionsError (exit 2)
  pgstore_peer.py [OPTIONS] URI NAME try|hold|wait [TTL_S]
      Open (options, migrations in --migrations' mode), then acquire:
      try   one attempt: "granted E" (then releases) or "busy E"
      hold  "granted E" or "busy E" (exit 1); renews until stdin closes
            or says "release"; "lost" (exit 2) when the lease is lost
      wait  tries every 50 ms until granted (the test's loop: the
            harness's Acquire refuses at once), then as hold; with
            WRITE_PROBE set, first tries to create that file: "probe:
            OK" or "probe: ERRNO"
  A failure of Open or of an operation prints the harness's error and
  exits 1 (the PostgreSQL error the harness redacts on stderr).

OPTIONS, the harness's Options fields (options.go:48-67), empty = default:
  --schema=S --prefix=P          Schema, TablePrefix
  --migrations=validate|apply|disabled
                                 Migrations (default validate, the zero
                                 value, options.go:40)
  --ttl=S --renew=S              LeaseTTL, LeaseRenewInterval (default 15
                                 and 5; a TTL_S argument alone sets the
                                 TTL and a renewal of a third of it)
The URI is a libpq URI; the harness takes plaintext only on a loopback host
with sslmode=disable (AllowInsecureLocalhostOnly, options.go:185-193).
"""
import errno
import ipaddress
import os
import select
import sys
import threading
import time

import psycopg2
import psycopg2.extensions

# options.go:14-31, the harness's defaults and limits.
DEFAULT_SCHEMA = "looprig"                         # options.go:15
DEFAULT_PREFIX = "looprig_"                        # options.go:16
DEFAULT_STATEMENT_TIMEOUT = 30.0                   # options.go:17
DEFAULT_LOCK_TIMEOUT = 5.0                         # options.go:18
DEFAULT_LEASE_TTL = 15.0                           # options.go:19
DEFAULT_RENEW_INTERVAL = 5.0                       # options.go:20
MAX_POSTGRES_IDENTIFIER_BYTES = 63                 # options.go:21
MAX_TABLE_SUFFIX_BYTES = 23                        # options.go:30
MAX_TABLE_PREFIX_BYTES = (MAX_POSTGRES_IDENTIFIER_BYTES
                          - MAX_TABLE_SUFFIX_BYTES)  # options.go:31
CURRENT_SCHEMA_VERSION = 3                         # migrations.go:19
HOLDER_TOKEN_BYTES = 32                            # lease.go:19
AUTHORITATIVE_READ_TIMEOUT = 5.0                   # postgres.go:36
MAX_INT64 = 2 ** 63 - 1

# The embedded migrations (migrations.go:21, migrations/*.sql), their
# tokens replaced as migrations.go:88-103 does.
MIGRATIONS = {
    # migrations/0001_ledger_kv.sql
    1: """CREATE TABLE {{schema}}.{{ledger_scopes}} (
    name text PRIMARY KEY,
    tip bigint NOT NULL CHECK (tip >= 0)
);

CREATE TABLE {{schema}}.{{ledger_records}} (
    name text NOT NULL REFERENCES {{schema}}.{{ledger_scopes}}(name) ON DELETE CASCADE,
    seq bigint NOT NULL CHECK (seq > 0),
    payload bytea NOT NULL,
    PRIMARY KEY (name, seq)
);

CREATE TABLE {{schema}}.{{kv}} (
    key text PRIMARY KEY,
    revision bigint NOT NULL CHECK (revision > 0),
    value bytea NOT NULL
);
""",
    # migrations/0002_leases.sql: a plain CREATE TABLE, no IF NOT EXISTS.
    2: """CREATE TABLE {{schema}}.{{leases}} (
    name text PRIMARY KEY,
    epoch bigint NOT NULL CHECK (epoch >= 0),
    holder bytea,
    expires_at timestamptz,
    revision bigint NOT NULL CHECK (revision >= 0),
    CHECK ((holder IS NULL) = (expires_at IS NULL))
);
""",
    # migrations/0003_ordered_index.sql
    3: """CREATE TABLE {{schema}}.{{ordered_scopes}} (
    namespace text COLLATE "C" NOT NULL,
    ordering_scope text COLLATE "C" NOT NULL,
    next_order numeric(20, 0) NOT NULL CHECK (next_order >= 0 AND next_order <= 18446744073709551615),
    PRIMARY KEY (namespace, ordering_scope)
);

CREATE TABLE {{schema}}.{{ordered_records}} (
    namespace text COLLATE "C" NOT NULL,
    ordering_scope text COLLATE "C" NOT NULL,
    stable_key text COLLATE "C" NOT NULL,
    ranking_scope text COLLATE "C" NOT NULL,
    revision numeric(20, 0) NOT NULL CHECK (revision > 0 AND revision <= 18446744073709551615),
    order_id numeric(20, 0) NOT NULL CHECK (order_id > 0 AND order_id <= 18446744073709551615),
    value bytea NOT NULL CHECK (octet_length(value) <= 1048576),
    value_is_nil boolean NOT NULL,
    ranked boolean NOT NULL,
    rank_value bigint NOT NULL,
    due_state smallint NOT NULL,
    due_at bigint NOT NULL,
    deleted boolean NOT NULL DEFAULT false,
    PRIMARY KEY (namespace, ordering_scope, stable_key),
    CHECK ((due_state = 0 AND due_at = 0) OR due_state = 1),
    CHECK (NOT deleted OR (NOT ranked AND due_state = 0 AND due_at = 0))
);

CREATE INDEX {{ordered_order_idx}}
    ON {{schema}}.{{ordered_records}} (namespace, ordering_scope, order_id, stable_key);

CREATE INDEX {{ordered_rank_idx}}
    ON {{schema}}.{{ordered_records}} (namespace, ranking_scope, rank_value DESC, stable_key DESC, ordering_scope DESC)
    WHERE ranked AND NOT deleted;

CREATE INDEX {{ordered_due_idx}}
    ON {{schema}}.{{ordered_records}} (namespace, due_state, due_at, stable_key, ordering_scope)
    WHERE due_state = 1 AND NOT deleted;
""",
}


class HarnessError(Exception):
    """An error as the harness returns it; `cause` is what it redacts."""

    def __init__(self, text, cause=None):
        super().__init__(text)
        self.cause = cause


# ---- options.go ---------------------------------------------------------

def invalid_option(field, reason):
    # options.go:77-78 (OptionsError.Error)
    return HarnessError('pgstore: invalid option "%s": %s' % (field, reason))


def valid_identifier(value, max_bytes):
    # options.go:204-214
    raw = value.encode()
    if not raw or len(raw) > max_bytes or not (ord("a") <= raw[0] <= ord("z")):
        return False
    return all(ord("a") <= c <= ord("z") or ord("0") <= c <= ord("9") or c == ord("_")
               for c in raw[1:])


def resolve_timeout(field, requested, fallback):
    # options.go:216-227 (resolveTimeout)
    if requested < 0:
        raise invalid_option(field, "must be positive or zero for the default")
    if requested == 0:
        return fallback
    if requested < 0.001:
        raise invalid_option(field, "must be at least one millisecond")
    return requested


def is_loopback(host):
    # options.go:195-201 (isLoopbackHost)
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def resolve(o):
    """options.go:93-171 (Options.resolve), for the fields a peer has."""
    dsn = psycopg2.extensions.parse_dsn(o["dsn"])           # options.go:97
    # options.go:185-193 (validateTLS) with AllowInsecureLocalhostOnly: a
    # plaintext DSN only with sslmode=disable on a loopback host.
    if not (dsn.get("sslmode") in ("verify-ca", "verify-full") or
            (dsn.get("sslmode") == "disable" and is_loopback(dsn.get("host", "")))):
        raise invalid_option("DSN", "must require verified TLS; plaintext is allowed"
                             " only for an explicitly enabled loopback test database")
    schema = o["schema"] or DEFAULT_SCHEMA                  # options.go:120-123
    if not valid_identifier(schema, MAX_POSTGRES_IDENTIFIER_BYTES):  # options.go:124
        raise invalid_option("Schema", "must be a lowercase PostgreSQL identifier"
                             " of at most 63 bytes")
    prefix = o["prefix"] or DEFAULT_PREFIX                  # options.go:127-130
    if not valid_identifier(prefix, MAX_TABLE_PREFIX_BYTES):  # options.go:131
        raise invalid_option("TablePrefix", "must be a lowercase identifier prefix of"
                             " at most %d bytes, leaving room for the longest table"
                             " suffix within PostgreSQL's 63-byte identifier limit"
                             % MAX_TABLE_PREFIX_BYTES)
    ttl = resolve_timeout("LeaseTTL", o["ttl"], DEFAULT_LEASE_TTL)       # options.go:146
    renew = resolve_timeout("LeaseRenewInterval", o["renew"],
                            DEFAULT_RENEW_INTERVAL)                      # options.go:150
    if renew >= ttl:                                                     # options.go:154
        raise invalid_option("LeaseRenewInterval", "must be shorter than LeaseTTL")
    return {"schema": schema, "prefix": prefix, "ttl": ttl, "renew": renew,
            "statement_timeout": DEFAULT_STATEMENT_TIMEOUT,
            "lock_timeout": DEFAULT_LOCK_TIMEOUT, "migrations": o["migrations"]}


# ---- internal/postgres/postgres.go ---------------------------------------

def quote_identifier(identifier):
    # postgres.go:18-20
    return '"' + identifier.replace('"', '""') + '"'


def qualified(schema, table):
    # postgres.go:24-26
    return quote_identifier(schema) + "." + quote_identifier(table)


def set_local_timeouts(cur, statement_timeout, lock_timeout):
    # postgres.go:41-43
    cur.execute("SELECT set_config('statement_timeout', %s, true),"
                " set_config('lock_timeout', %s, true)",
                (str(int(statement_timeout * 1000)), str(int(lock_timeout * 1000))))


def rollback(conn):
    """A deferred tx.Rollback: nothing after a commit, errors ignored."""
    try:
        conn.rollback()
    except psycopg2.Error:
        pass


def redacted(operation):
    # postgres.go (RedactedError): "pgstore: %s failed"
    return "pgstore: %s failed" % operation


# ---- migrations.go ------------------------------------------------------

def migrate(conn, r):
    """migrations.go:24-116; returns the version it leaves."""
    mode = r["migrations"]
    if mode == "disabled":                                   # migrations.go:25-27
        return None
    schema, prefix = r["schema"], r["prefix"]
    cur = conn.cursor()                                      # migrations.go:28 (BeginTx)
    try:
        set_local_timeouts(cur, r["statement_timeout"], r["lock_timeout"])  # :33
        cur.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                    (schema,))                               # migrations.go:46
        cur.execute("CREATE SCHEMA IF NOT EXISTS " + quote_identifier(schema))  # :49
        version_table = qualified(schema, prefix + "schema_migrations")  # :52
        cur.execute("CREATE TABLE IF NOT EXISTS " + version_table +
                    " (version bigint PRIMARY KEY, applied_at timestamptz"
                    " NOT NULL DEFAULT now())")              # migrations.go:53
        cur.execute("SELECT COALESCE(MAX(version), 0) FROM " + version_table)  # :57
        version = cur.fetchone()[0]
        if version > CURRENT_SCHEMA_VERSION:                 # migrations.go:60-62
            raise HarnessError("pgstore: database schema is newer than this pgstore build")
        if mode == "validate":                               # migrations.go:63-68
            if version != CURRENT_SCHEMA_VERSION:
                raise HarnessError("pgstore: database schema version %d, want %d"
                                   % (version, CURRENT_SCHEMA_VERSION))
            conn.commit()                                    # migrations.go:67, :118-123
            return version
        for n in sorted(MIGRATIONS):                         # migrations.go:70-75
            if n <= version:                                 # migrations.go:78-80
                continue
            if n != version + 1:                             # migrations.go:81-83
                raise HarnessError("pgstore: embedded migrations are not monotonic")
            replacements = {                                 # migrations.go:88-99
                "{{schema}}": quote_identifier(schema),
                "{{ledger_scopes}}": quote_identifier(prefix + "ledger_scopes"),
                "{{ledger_records}}": quote_identifier(prefix + "ledger_records"),
                "{{kv}}": quote_identifier(prefix + "kv"),
                "{{leases}}": quote_identifier(prefix + "leases"),
                "{{ordered_scopes}}": quote_identifier(prefix + "ordered_scopes"),
                "{{ordered_records}}": quote_identifier(prefix + "ordered_records"),
                "{{ordered_order_idx}}": quote_identifier(prefix + "ordered_order_idx"),
                "{{ordered_rank_idx}}": quote_identifier(prefix + "ordered_rank_idx"),
                "{{ordered_due_idx}}": quote_identifier(prefix + "ordered_due_idx"),
            }
            statement = MIGRATIONS[n]                        # migrations.go:100-103
            for token, identifier in replacements.items():
                statement = statement.replace(token, identifier)
            cur.execute(statement)                           # migrations.go:104
            cur.execute("INSERT INTO " + version_table + " (version) VALUES (%s)",
                        (n,))                                # migrations.go:107
            version = n                                      # migrations.go:110
        if version != CURRENT_SCHEMA_VERSION:                # migrations.go:112-114
            raise HarnessError("pgstore: embedded migrations did not reach current version")
        conn.commit()                                        # migrations.go:115, :118-123
        return version
    except psycopg2.Error as e:                              # migrations.go:125-130
        raise HarnessError(redacted("schema migration"), e)
    finally:
        rollback(conn)                                       # migrations.go:32 (deferred)


# ---- internal/lease/lease.go -------------------------------------------

def validate_name(name):
    # looprig/storage names.go:28-49: '/'-joined segments [a-z0-9][a-z0-9_.-]*,
    # at most 512 bytes.
    raw = name.encode()
    if not raw or len(raw) > 512:
        raise HarnessError("storage: invalid name %r" % name)
    start = b"abcdefghijklmnopqrstuvwxyz0123456789"
    for seg in raw.split(b"/"):
        if not seg or seg[0] not in start or any(c not in start + b"_.-" for c in seg):
            raise HarnessError("storage: invalid name %r" % name)


def conservative_remaining(proof_started, expires_at, database_now):
    # lease.go:344-346
    return (expires_at - database_now).total_seconds() - (time.monotonic() - proof_started)


class Lease:
    def __init__(self, store, name, epoch, holder, remaining):
        # lease.go:147-156 (newLease)
        self.store, self.name, self.epoch, self.holder = store, name, epoch, holder
        self.safe_until = time.monotonic() + remaining


class Store:
    def __init__(self, conn, r):
        # lease.go:39-55 (New), called by pgstore.go:55
        self.conn, self.r = conn, r
        self.table = qualified(r["schema"], r["prefix"] + "leases")  # lease.go table()

    def _begin(self):
        cur = self.conn.cursor()                             # BeginTx
        set_local_timeouts(cur, self.r["statement_timeout"], self.r["lock_timeout"])
        return cur

    def _bounded(self, until, fn, *args):
        """A statement under a context deadline (lease.go:306, :310): the
        query is cancelled when `until` passes."""
        timer = threading.Timer(max(until - time.monotonic(), 0), self.conn.cancel)
        timer.start()
        try:
            return fn(*args)
        finally:
            timer.cancel()

    def acquire(self, name):
        """lease.go:97-145 (Acquire): a Lease, or ("busy", epoch)."""
        validate_name(name)                                  # lease.go:101
        holder = os.urandom(HOLDER_TOKEN_BYTES)              # lease.go:104-107
        try:
            return self._acquire_tx(name, holder)
        except psycopg2.Error as e:
            raise HarnessError(redacted("lease acquire"), e)
        finally:
            rollback(self.conn)                              # lease.go:113 (deferred)

    def _acquire_tx(self, name, holder):
        cur = self._begin()                                  # lease.go:109-116
        cur.execute("INSERT INTO " + self.table + " (name, epoch, revision)"
                    " VALUES (%s, 0, 0) ON CONFLICT (name) DO NOTHING",
                    (name,))                                 # lease.go:117
        cur.execute("SELECT epoch, holder, expires_at, clock_timestamp() FROM "
                    + self.table + " WHERE name = %s FOR UPDATE", (name,))  # :124
        epoch, current_holder, expires_at, database_now = cur.fetchone()
        if epoch < 0:                                        # lease.go:127-129
            raise HarnessError(redacted("lease epoch invalid"))
        if current_holder is not None and expires_at is not None and \
                expires_at > database_now:                   # lease.go:130-132
            return ("busy", epoch)
        if epoch == MAX_INT64:                               # lease.go:133-135
            raise HarnessError(redacted("lease epoch exhausted"))
        epoch += 1                                           # lease.go:136
        proof_started = time.monotonic()                     # lease.go:137
        cur.execute("UPDATE " + self.table + " SET epoch = %s, holder = %s,"
                    " expires_at = clock_timestamp() + %s::bigint * interval"
                    " '1 millisecond', revision = revision + 1 WHERE name = %s"
                    " RETURNING expires_at, clock_timestamp()",
                    (epoch, psycopg2.Binary(holder), int(self.r["ttl"] * 1000),
                     name))                                  # lease.go:138
        expires_at, database_now = cur.fetchone()
        try:
            self.conn.commit()                               # lease.go:141
        except psycopg2.Error:
            return self.resolve_acquire(name, epoch, holder)  # lease.go:142
        return Lease(self, name, epoch, holder,
                     conservative_remaining(proof_started, expires_at, database_now))  # :144

    def _read(self, name):
        cur = self.conn.cursor()
        cur.execute("SELECT epoch, holder, expires_at, clock_timestamp() FROM "
                    + self.table + " WHERE name = %s", (name,))
        row = cur.fetchone()
        self.conn.rollback()
        return row

    def resolve_acquire(self, name, epoch, holder):
        # lease.go:158-178
        rollback(self.conn)
        proof_started = time.monotonic()
        row = self._bounded(time.monotonic() + AUTHORITATIVE_READ_TIMEOUT, self._read, name)
        if row is None:
            raise HarnessError(redacted("lease acquire outcome resolution"))
        stored_epoch, stored_holder, expires_at, database_now = row
        if stored_epoch == epoch and bytes(stored_holder or b"") == holder and \
                expires_at is not None and expires_at > database_now:
            return Lease(self, name, epoch, holder,
                         conservative_remaining(proof_started, expires_at, database_now))
        if stored_holder is not None and expires_at is not None and expires_at > database_now:
            return ("busy", stored_epoch)
        raise HarnessError(redacted("lease acquire outcome resolution"))

    def renew_row(self, lease):
        """lease.go:61-80 (renewRow): the time left, or None (no row)."""
        try:
            cur = self._begin()                              # lease.go:62-69
            proof_started = time.monotonic()                 # lease.go:71
            cur.execute("UPDATE " + self.table + " SET expires_at = clock_timestamp()"
                        " + %s::bigint * interval '1 millisecond', revision ="
                        " revision + 1 WHERE name = %s AND epoch = %s AND holder = %s"
                        " AND expires_at > clock_timestamp() RETURNING expires_at,"
                        " clock_timestamp()",
                        (int(self.r["ttl"] * 1000), lease.name, lease.epoch,
                         psycopg2.Binary(lease.holder)))     # lease.go:72
            row = cur.fetchone()
            if row is None:                                  # lease.go:73-75 (ErrNoRows)
                self.conn.rollback()
                return None
            self.conn.commit()                               # lease.go:76
            return conservative_remaining(proof_started, row[0], row[1])  # lease.go:79
        except psycopg2.Error:
            rollback(self.conn)
            return None

    def observe(self, lease):
        """lease.go:329-342: the time left, or None (lost)."""
        proof_started = time.monotonic()
        try:
            row = self._read(lease.name)                     # lease.go:335
        except psycopg2.Error:
            rollback(self.conn)
            return None
        if row is None:
            return None
        epoch, holder, expires_at, database_now = row
        if epoch != lease.epoch or bytes(holder or b"") != lease.holder or \
                expires_at is None or not expires_at > database_now:  # lease.go:338
            return None
        return conservative_remaining(proof_started, expires_at, database_now)  # :341

    def release_row(self, lease):
        """lease.go:82-95 (releaseRow)."""
        cur = self._begin()                                  # lease.go:83-90
        cur.execute("UPDATE " + self.table + " SET holder = NULL, expires_at = NULL,"
                    " revision = revision + 1 WHERE name = %s AND epoch = %s AND"
                    " holder = %s", (lease.name, lease.epoch,
                                     psycopg2.Binary(lease.holder)))  # lease.go:91
        self.conn.commit()                                   # lease.go:94

    def release(self, lease):
        """lease.go:207-242 (Release): renewals stop, then the row."""
        try:
            self.release_row(lease)                          # lease.go:229
        except psycopg2.Error:
            rollback(self.conn)
            self.resolve_release(lease)                      # lease.go:234

    def resolve_release(self, lease):
        # lease.go:244-262
        row = self._bounded(time.monotonic() + AUTHORITATIVE_READ_TIMEOUT, self._read,
                            lease.name)
        if row is None:
            return
        epoch, holder, expires_at, database_now = row
        if epoch != lease.epoch or bytes(holder or b"") != lease.holder or \
                expires_at is None or not expires_at > database_now:
            return
        raise HarnessError(redacted("lease release outcome resolution"))


# ---- the session (the test's side) --------------------------------------

def hold(store, lease):
    """The leaser's renew loop (lease.go:272-327) beside the session's
    release (stdin closing, or "release"): "lost" and 2 when it is lost."""
    while True:
        remaining = lease.safe_until - time.monotonic()      # lease.go:282
        if remaining <= 0:                                   # lease.go:283-286
            print("lost", flush=True)
            return 2
        wait = min(store.r["renew"], remaining)              # lease.go:287-288
        r, _, _ = select.select([sys.stdin], [], [], wait)
        if r:                                                # Release (lease.go:207)
            line = sys.stdin.readline()
            if line == "" or line.strip() == "release":
                store.release(lease)
                return 0
            continue
        if wait < store.r["renew"]:                          # lease.go:299-302 (expiry)
            print("lost", flush=True)
            return 2
        left = store._bounded(lease.safe_until, store.renew_row, lease)  # lease.go:306-308
        if left is None:                                     # lease.go:309-318
            left = store._bounded(lease.safe_until, store.observe, lease)
            if left is None:
                print("lost", flush=True)
                return 2
        if left <= 0:                                        # lease.go:319-322
            print("lost", flush=True)
            return 2
        lease.safe_until = time.monotonic() + left           # lease.go:323-325


def probe():
    path = os.environ.get("WRITE_PROBE")
    if not path:
        return
    try:
        with open(path, "w") as f:
            f.write("peer\n")
        print("probe: OK", flush=True)
    except OSError as e:
        print("probe: %s" % errno.errorcode.get(e.errno, e.errno), flush=True)


def parse(argv):
    o = {"schema": "", "prefix": "", "migrations": "validate", "ttl": 0.0, "renew": 0.0}
    pos = []
    for a in argv:
        key, eq, val = a.partition("=")
        if a.startswith("--") and eq and key[2:] in o:
            o[key[2:]] = float(val) if key[2:] in ("ttl", "renew") else val
        else:
            pos.append(a)
    if o["migrations"] not in ("validate", "apply", "disabled"):
        raise SystemExit("--migrations: validate, apply or disabled")
    if len(pos) == 4 and not o["ttl"]:
        o["ttl"] = float(pos[3])
        o["renew"] = o["renew"] or o["ttl"] / 3
    if len(pos) < 2:
        raise SystemExit(__doc__)
    o["dsn"] = pos[0]
    return o, pos[1:]


def main():
    o, args = parse(sys.argv[1:])
    try:
        r = resolve(o)                                       # pgstore.go:38
    except HarnessError as e:
        print(e, flush=True)
        return 2
    if args == ["options"]:
        print("ok %s %s" % (r["schema"], r["prefix"]), flush=True)
        return 0
    conn = psycopg2.connect(o["dsn"])                        # pgstore.go:45
    try:
        version = migrate(conn, r)                           # pgstore.go:51
        if args == ["migrate"]:
            verb = "valid" if r["migrations"] == "validate" else "migrated"
            print("disabled" if version is None else "%s %d" % (verb, version), flush=True)
            return 0
        store = Store(conn, r)                               # pgstore.go:55
        name, mode = args[0], args[1]
        got = store.acquire(name)
        while isinstance(got, tuple) and mode == "wait":
            time.sleep(0.05)
            got = store.acquire(name)
    except HarnessError as e:
        print(e, flush=True)
        if e.cause is not None:
            print("cause: %s" % str(e.cause).strip(), file=sys.stderr, flush=True)
        return 1
    if isinstance(got, tuple):
        print("busy %d" % got[1], flush=True)
        return 1 if mode == "hold" else 0
    print("granted %d" % got.epoch, flush=True)
    if mode == "try":
        store.release(got)
        return 0
    probe()
    return hold(store, got)


sys.exit(main())
