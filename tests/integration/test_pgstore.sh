#!/usr/bin/env bash
# A harness session and leasefs mounts share one pgstore lease (a private
# PostgreSQL), whichever reaches the database first, with one epoch
# sequence.  The harness is played by pgstore_peer.py, which follows its Go
# source (options, migration runner, leaser).  Each section has a database
# of its own; PG_IT_SECTIONS picks some (default: all, in this order):
#   empty-first   leasefs reaches an empty database first: refused, nothing
#                 made; the harness's apply and validate then succeed
#   harness-first the harness sets the database up, then mounts and peers
#                 contend both ways; restart, cut connection, revoke, kill -9
#   nesting       nested mounts on two hosts exclude each other; the
#                 harness's table gets no rows for the directories above
#   older         a database an older leasefs set up: refused, repaired as
#                 leasefs(8) says, epochs kept
#   identifiers   schema and table_prefix: leasefs refuses what the harness
#                 refuses; the longest the harness takes work end to end
#   owners        another database role's "_leasefs" is refused, not used
#   wipe          PostgreSQL restarted without its data: a holder turns
#                 read-only at its reconnect, long before its safe-until; a
#                 mount on host B waiting across it is granted only after
#                 the new lease table's grace, after the old holder's last
#                 record; max_ttl= and a TTL above it refused (runs last:
#                 it loses every other section's database)
# bound: 90
if [ -z "${LEASEFS_PG_URI:-}" ]; then
	exec "$(dirname "$0")/../pg-harness.sh" bash "$0" "$@"
fi
export IT_TIMEOUT=${IT_TIMEOUT:-420}
. "$(dirname "$0")/lib.sh"
# Debian's python3 has python3-psycopg2 (another python3 may be first in PATH).
PY=/usr/bin/python3
"$PY" -c 'import psycopg2' 2>/dev/null || fail "python3-psycopg2 is not installed (scripts/setup installs it)"

R=$T/root M=$T/mnt
PEER=$HERE/pgstore_peer.py
TTL=3
mkdir -p "$R" "$M"
NAME=$(python3 "$HERE/fsstore_peer.py" "$R" --root-name)
BASE=${LEASEFS_PG_URI%/*}
SECTIONS=${PG_IT_SECTIONS:-empty-first harness-first nesting older identifiers owners wipe}
# leasefs's parameter for the wipe section (PG_IT_PARAMS='' runs it against
# a leasefs that knows no max_ttl): no holder there uses a TTL above 3 s,
# so a lease table made anew is granted from after 4 s.
P=${PG_IT_PARAMS-&max_ttl=$TTL}

psql_in() { "$PG_BIN/psql" -X -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PG_PORT" -U leasefs "$1" -c "$2"; }
# use_db DB: a new, empty database, the store of both sides (STORE; the
# harness takes plaintext only with sslmode=disable on loopback).
use_db() {
	psql_in postgres "CREATE DATABASE $1" >/dev/null
	DB=$1 STORE="$BASE/$1?sslmode=disable"
	export LEASEFS_LEASES=$STORE
}
q() { psql_in "$DB" "$1"; }
# age_db: the harness's record says its tables were made an hour ago (a
# database set up long before): leasefs grants in it at once, where it
# waits out max_ttl and a third after a lease table is made (the wipe
# section runs that grace).
age_db() {
	q "DO \$\$DECLARE t record; BEGIN FOR t IN SELECT schemaname, tablename FROM pg_tables
	   WHERE tablename LIKE '%schema_migrations' LOOP EXECUTE format('UPDATE %I.%I SET
	   applied_at = applied_at - interval ''1 hour''', t.schemaname, t.tablename); END LOOP;
	   END\$\$" >/dev/null
}
peer() { "$PY" "$PEER" "$@"; }
start_peer() { peer_start "$PY" "$PEER" "$STORE" "$NAME" "$1" "${2:-$TTL}"; } # MODE [TTL]
peer_try() { peer "$STORE" "$NAME" try; }
# expect RC WANT CMD...: CMD (a command or a function here) exits RC and
# prints WANT (a glob); OUT is set.  Bounded by the test's own timeout.
expect() {
	local want_rc=$1 want=$2 rc=0; shift 2
	OUT=$("$@" 2>&1) || rc=$?
	[ $rc -eq "$want_rc" ] || fail "exit $rc, want $want_rc: $* ($OUT)"
	# shellcheck disable=SC2053
	[[ $OUT == $want ]] || fail "'$*' said '$OUT', want '$want'"
}
# The harness's table holds rows only for names that were acquired (the
# root, sessions/...), none left at epoch 0 by refusals or by nesting.
harness_rows_ok() {
	local stray
	stray=$(q "SELECT string_agg(name || ' at ' || epoch, ', ') FROM looprig.looprig_leases
	           WHERE epoch = 0 OR (name <> '$NAME' AND name NOT LIKE 'sessions/%' AND
	                               name <> '${1:-$NAME}')")
	[ -z "$stray" ] || fail "rows in the harness's table that nobody acquired: $stray"
}
section() { [[ " $SECTIONS " == *" $1 "* ]]; }

# ---- leasefs first on an empty database --------------------------------
if section empty-first; then
	use_db lfirst
	MOUNTS+=("$M")
	expect 78 '*"looprig"."looprig_leases" is not there (no schema "looprig")*MigrationApply*' \
		"$LEASEFS" mount --ttl=$TTL "$R" "$M"
	findmnt -rn "$M" >/dev/null && fail "something mounted"
	expect 78 '*"looprig"."looprig_leases" is not there*' "$LEASEFS" lease list
	expect 78 '*is not there*' "$LEASEFS" lease show "$NAME"
	[ "$(q "SELECT count(*) FROM pg_namespace WHERE nspname IN ('looprig', '_leasefs')")" = 0 ] ||
		fail "leasefs made a schema: $(q "SELECT string_agg(nspname, ' ') FROM pg_namespace")"
	ok "leasefs first on an empty database: mount and lease exit 78 naming the harness's table and MigrationApply; nothing made"

	expect 1 'pgstore: database schema version 0, want 3' peer "$STORE" migrate
	expect 0 'migrated 3' peer --migrations=apply "$STORE" migrate
	age_db
	expect 0 'valid 3' peer "$STORE" migrate
	ok "then the harness: validate refuses the empty database as before, apply migrates to 3, validate passes"

	harness_contend
	[ "$(q "SELECT epoch FROM looprig.looprig_leases WHERE name = '$NAME'")" = "$me" ] ||
		fail "the harness's table does not say epoch $me"
	expect 0 'valid 3' peer "$STORE" migrate
	harness_rows_ok
	"$LEASEFS" umount "$M"
	ok "both contend with one epoch sequence (peer $pe, mount $me); validate passes beside the mount"
fi

# ---- the harness first ---------------------------------------------------
if section harness-first; then
	use_db hfirst
	expect 0 'migrated 3' peer --migrations=apply "$STORE" migrate
	age_db
	mount_ws "$R" "$M" --ttl=$TTL
	me=$(status_of "$M" epoch)
	[ "$me" -eq 1 ] || fail "first mount at epoch $me"
	expect 0 "busy $me" peer_try
	harness_rows_ok
	expect 0 'valid 3' peer "$STORE" migrate
	"$LEASEFS" umount "$M"
	ok "the harness set the database up: the mount takes epoch 1, the peer is refused with it; validate passes"

	# 1.-2. A peer holding the root keeps the mount out; then the reverse.
	harness_contend
	[ "$me" -eq 3 ] || fail "epochs went 1, $pe, $me"
	ok "the sequence goes on: peer $pe, mount $me"

	# 3. The database restarts under the mount, and then its connection
	#    is cut: each time it reconnects and renews (the row's revision
	#    moves on) and keeps the lease.
	revision() { q "SELECT revision FROM looprig.looprig_leases WHERE name = '$NAME'"; }
	renewed_since() { [ "$(revision)" -gt "$1" ] 2>/dev/null; }
	runuser -u "$PG_RUN" -- "$PG_BIN/pg_ctl" -D "$PG_DATA" -m fast -w restart >/dev/null
	r0=$(revision)
	wait_until $((TTL * 2)) renewed_since "$r0" || fail "no renewal after the restart"
	q "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'leasefs'" >/dev/null
	r0=$(revision)
	wait_until $((TTL * 2)) renewed_since "$r0" || fail "no renewal after the connection was cut"
	[ "$(status_of "$M" state)" = held ] || fail "the mount lost its lease: $(status_of "$M" state)"
	echo still > "$M/r" || fail "write after the restart"
	ok "database restart and a cut connection: the mount reconnects, renews and keeps epoch $me"

	# 4.-7. Revoke and kill -9 of either side (lib.sh).
	RECORD=row harness_expiry_battery

	# 8. Epochs only go up, and rows stay: the name at the last epoch, free.
	[ "$(q "SELECT epoch, holder IS NULL FROM looprig.looprig_leases WHERE name = '$NAME'")" = "$((me + 1))|t" ] ||
		fail "the table ends as $(q "SELECT epoch, holder IS NULL FROM looprig.looprig_leases WHERE name = '$NAME'")"
	harness_rows_ok
	ok "the row stays at epoch $((me + 1)), free; no row in the harness's table but what was acquired"
fi

# ---- nesting among mounts, across hosts --------------------------------
if section nesting; then
	use_db nest
	expect 0 'migrated 3' peer --migrations=apply "$STORE" migrate
	age_db
	IN=$R/in MB=$T/mb
	mkdir -p "$IN" "$MB"
	IN_NAME=$(python3 "$HERE/fsstore_peer.py" "$IN" --root-name)
	start_host_b
	mount_ws "$R" "$M" --ttl=$TTL
	expect 75 "*$IN is inside workspace $R, held at epoch 1*" on_b "$LEASEFS" mount --ttl=$TTL "$IN" "$MB"
	harness_rows_ok
	"$LEASEFS" umount "$M"
	on_b timeout 30 "$LEASEFS" mount --ttl=$TTL "$IN" "$MB" || fail "host B cannot mount $IN once $R is free"
	PIDS+=("$(on_b "$LEASEFS" status "$MB" --json | json_get pid)")
	expect 75 "*$R contains workspace $IN*" "$LEASEFS" mount --ttl=$TTL "$R" "$M"
	[ "$(q "SELECT count(*) FROM _leasefs.pgstore_within WHERE store = 'looprig.looprig_' AND scope = '$NAME' AND name = '$IN_NAME'")" = 1 ] ||
		fail "no record of $IN within $R in leasefs's own table"
	harness_rows_ok "$IN_NAME"
	expect 0 'valid 3' peer "$STORE" migrate
	on_b timeout 15 "$LEASEFS" umount "$MB"
	mount_ws "$R" "$M" --ttl=$TTL
	"$LEASEFS" umount "$M"
	ok "nested mounts on two hosts exclude each other both ways; the nesting is kept in _leasefs, the harness's table has only acquired names"
fi

# ---- a database an older leasefs set up ----------------------------------
if section older; then
	use_db older
	# What leasefs made before it left the harness's schema to the harness:
	# the lease table without the harness's record, its own tables beside
	# it, and epoch-0 rows for the directories above a root.
	q "CREATE SCHEMA looprig;
	   CREATE TABLE looprig.looprig_leases (name text PRIMARY KEY, epoch bigint NOT NULL
	     CHECK (epoch >= 0), holder bytea, expires_at timestamptz, revision bigint NOT NULL
	     CHECK (revision >= 0), CHECK ((holder IS NULL) = (expires_at IS NULL)));
	   CREATE TABLE looprig.looprig_leases_leasefs_holders (name text PRIMARY KEY, epoch bigint
	     NOT NULL, holder bytea NOT NULL, pid integer, description text, revoked boolean NOT NULL
	     DEFAULT false);
	   CREATE TABLE looprig.looprig_leases_leasefs_within (scope text NOT NULL, name text NOT NULL,
	     epoch bigint NOT NULL, holder bytea NOT NULL, PRIMARY KEY (scope, name));
	   INSERT INTO looprig.looprig_leases VALUES ('$NAME', 7, NULL, NULL, 9),
	     ('workspace-roots/0000', 0, NULL, NULL, 0)" >/dev/null
	expect 78 "*\"looprig\".\"looprig_leases\" is there but the harness's migrations did not make it (no \"looprig\".\"looprig_schema_migrations\"*an older leasefs made it*PostgreSQL stores*" \
		"$LEASEFS" mount --ttl=$TTL "$R" "$M"
	[ "$(q "SELECT epoch FROM looprig.looprig_leases WHERE name = '$NAME'")" = 7 ] || fail "the refusal changed the epoch"
	expect 1 'pgstore: schema migration failed*relation "looprig_leases" already exists' peer --migrations=apply "$STORE" migrate
	ok "a database an older leasefs set up: refused (78) pointing at the repair, nothing changed; the harness cannot migrate it"

	# The repair, as leasefs(8) writes it (its two SQL blocks).
	sql_block() {
		awk -v n="$1" '/^\.SS PostgreSQL stores/ {s = 1} s && /^\.nf/ {b++; next}
			s && /^\.fi/ {if (b == n) exit; next} s && b == n {print}' "$TOP/fs/leasefs.8"
	}
	[ -n "$(sql_block 1)" ] && [ -n "$(sql_block 2)" ] || fail "no repair in fs/leasefs.8"
	q "$(sql_block 1)" >/dev/null
	expect 0 'migrated 3' peer --migrations=apply "$STORE" migrate
	age_db
	q "$(sql_block 2)" >/dev/null
	expect 0 'valid 3' peer "$STORE" migrate
	mount_ws "$R" "$M" --ttl=$TTL
	[ "$(status_of "$M" epoch)" -eq 8 ] || fail "after the repair the mount got epoch $(status_of "$M" epoch), want 8"
	harness_rows_ok
	[ "$(q "SELECT count(*) FROM pg_tables WHERE schemaname = 'looprig' AND tablename LIKE '%leasefs%'")" = 0 ] ||
		fail "the older leasefs's tables are still in the harness's schema"
	"$LEASEFS" umount "$M"
	ok "repaired as leasefs(8) says: the harness migrates and validates, the mount goes on at epoch 8"
fi

# ---- identifiers ---------------------------------------------------------
if section identifiers; then
	use_db ids
	# verdict KIND VALUE: leasefs's and the harness's verdict on schema or
	# table_prefix VALUE, "accepted" or "refused" each.
	verdict() {
		local key=$1 opt=$2 v=$3 rc=0 mine theirs
		"$LEASEFS" lease list --leases="$STORE&$key=$v" >/dev/null 2>&1 || rc=$?
		mine=accepted; [ $rc -ne 64 ] || mine=refused
		rc=0; peer "--$opt=$v" "$STORE" options >/dev/null || rc=$?
		theirs=accepted; [ $rc -ne 2 ] || theirs=refused
		echo "$mine $theirs"
	}
	a40=$(printf 'p%.0s' $(seq 40)) a41=$(printf 'p%.0s' $(seq 41)) a48=$(printf 'p%.0s' $(seq 48))
	s63=$(printf 's%.0s' $(seq 63)) s64=$(printf 's%.0s' $(seq 64))
	while read -r key opt v want; do
		got=$(verdict "$key" "$opt" "$v")
		[ "$got" = "$want $want" ] || fail "$key=$v: leasefs and the harness say '$got', want both $want"
	done <<-EOF
	table_prefix prefix $a40 accepted
	table_prefix prefix $a41 refused
	table_prefix prefix $a48 refused
	table_prefix prefix _looprig_ refused
	table_prefix prefix 9a refused
	table_prefix prefix Looprig_ refused
	table_prefix prefix a-b refused
	schema schema $s63 accepted
	schema schema $s64 refused
	schema schema _looprig refused
	schema schema a.b refused
	EOF
	expect 64 "*table_prefix '$a48' is 48 bytes; the harness takes at most 40*" "$LEASEFS" lease list --leases="$STORE&table_prefix=$a48"
	expect 64 "*table_prefix '_x' must start with a lowercase letter*" "$LEASEFS" lease list --leases="$STORE&table_prefix=_x"
	expect 64 "*schema given twice*" "$LEASEFS" lease list --leases="$STORE&schema=a&schema=b"
	ok "leasefs takes the schema and table prefixes the harness takes, and refuses (64) what it refuses: 41 and 48 bytes, a leading _ or digit, capitals"

	# The longest the harness takes, end to end: its tables and ours, none cut.
	expect 0 'migrated 3' peer --migrations=apply --schema="$s63" --prefix="$a40" "$STORE" migrate
	age_db
	mount_ws "$R" "$M" --ttl=$TTL --leases="$STORE&schema=$s63&table_prefix=$a40"
	expect 0 "busy 1" peer --schema="$s63" --prefix="$a40" "$STORE" "$NAME" try
	[ "$(q "SELECT epoch FROM \"$s63\".\"${a40}leases\" WHERE name = '$NAME'")" = 1 ] ||
		fail "the mount's grant is not in \"$s63\".\"${a40}leases\""
	[ "$(q "SELECT count(*) FROM _leasefs.pgstore_names WHERE store = '$s63.$a40' AND name = '$NAME'")" = 1 ] ||
		fail "no record of the mount under store $s63.$a40"
	"$LEASEFS" umount "$M"
	ok "a 63-byte schema and a 40-byte prefix: mount and harness share \"$s63\".\"${a40}leases\""
fi
# ---- leasefs's own schema, made by another role ---------------------------
if section owners; then
	use_db owners
	expect 0 'migrated 3' peer --migrations=apply "$STORE" migrate
	age_db
	q "CREATE ROLE mallory LOGIN; CREATE ROLE bob LOGIN;
	   GRANT CREATE ON DATABASE owners TO mallory, bob;
	   GRANT USAGE ON SCHEMA looprig TO mallory, bob;
	   GRANT ALL ON ALL TABLES IN SCHEMA looprig TO mallory, bob" >/dev/null
	psql_mallory() { "$PG_BIN/psql" -X -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PG_PORT" -U mallory owners -c "$1"; }
	psql_mallory 'CREATE SCHEMA "_leasefs"; GRANT ALL ON SCHEMA "_leasefs" TO PUBLIC' >/dev/null
	BOB="${BASE/leasefs@/bob@}/owners?sslmode=disable"
	expect 78 '*schema "_leasefs" belongs to role "mallory", which user "bob" is not a member of*' \
		"$LEASEFS" lease list --leases="$BOB"
	[ "$(q "SELECT count(*) FROM pg_tables WHERE schemaname = '_leasefs'")" = 0 ] ||
		fail "leasefs made tables in another role's schema"
	psql_mallory 'DROP SCHEMA "_leasefs"' >/dev/null
	# A schema open to all, where another role made one of our tables first
	# (with whatever triggers it likes): refused too.
	q 'CREATE SCHEMA "_leasefs"; GRANT ALL ON SCHEMA "_leasefs" TO PUBLIC' >/dev/null
	psql_mallory 'CREATE TABLE "_leasefs"."pgstore_names" (store text, name text)' >/dev/null
	expect 78 '*table _leasefs.pgstore_names belongs to role "mallory", which user "bob" is not a member of*' \
		"$LEASEFS" lease list --leases="$BOB"
	psql_mallory 'DROP TABLE "_leasefs"."pgstore_names"' >/dev/null
	expect 0 'store: *' "$LEASEFS" lease list --leases="$BOB"
	[ "$(q "SELECT string_agg(tablename || ' ' || tableowner, ', ' ORDER BY tablename) FROM pg_tables WHERE schemaname = '_leasefs'")" = \
	  "pgstore_names bob, pgstore_within bob" ] || fail "leasefs's tables are not bob's"
	ok "a _leasefs schema or table another role owns is refused (78) and left alone; in a superuser's schema the user makes its own"
fi
# ---- PostgreSQL restarted without its data -------------------------------
if section wipe; then
	DB=postgres STORE="$BASE/postgres?sslmode=disable"
	export LEASEFS_LEASES="$STORE$P"
	now_ms() { date +%s%3N; }
	as_pg() { runuser -u "$PG_RUN" -- "$@"; }
	# pg_wipe: stop the server, put a data directory made beforehand by
	# initdb (so the new server is up within a renewal or two, as a
	# container restarted without its volume would be) in place of its
	# own, start it on its port and apply the harness's migrations (as an
	# operator, or a harness Open with MigrationApply, would).
	pg_wipe() {
		as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -m immediate -w -t 10 stop >/dev/null ||
			fail "PostgreSQL did not stop"
		rm -rf "$PG_DATA"
		mv "$PG_SOCKDIR/spare" "$PG_DATA"
		as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -l "$PG_SOCKDIR/server.log" -w -t 30 \
			-o "-c listen_addresses=127.0.0.1 -p $PG_PORT -k $PG_SOCKDIR -c fsync=off" \
			start >/dev/null || fail "PostgreSQL did not start again"
		expect 0 'migrated 3' peer --migrations=apply "$STORE" migrate
	}
	# A writer of fsync-acknowledged records through mount MNT (records.py).
	spare() {
		as_pg "$PG_BIN/initdb" -D "$PG_SOCKDIR/spare" -U leasefs -A trust --no-sync >"$T/initdb.log" 2>&1 ||
			fail "initdb: $(tail -n 5 "$T/initdb.log")"
	}
	# 1. The holder learns of the new database when it reconnects, long
	#    before its safe-until: at TTL 12 s, renewed every 4 s, that is at
	#    least 6.8 s after the server stops.
	expect 0 'migrated 3' peer --migrations=apply "$STORE" migrate
	age_db
	spare
	mount_ws "$R" "$M" --ttl=12 --leases="$STORE${P:+&max_ttl=12}"
	[ "$(status_of "$M" state)" = held ] || fail "the mount does not hold"
	t0=$(now_ms)
	pg_wipe
	wait_until 5 bash -c "[ \"\$('$LEASEFS' status '$M' --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"state\"])')\" != held ]" ||
		fail "the holder (TTL 12 s) still says held 5 s after the server was made anew: it did not notice the new database"
	echo "   the holder turned $(status_of "$M" state) $(($(now_ms) - t0)) ms after the server was stopped"
	"$LEASEFS" umount "$M" 2>/dev/null || true
	ok "wipe: a holder that reconnects to a database made anew turns read-only at once, before its safe-until"

	# 2. A successor waiting across the wipe is granted only after the old
	#    holder turned read-only, and its records come after the holder's.
	spare
	start_host_b
	MB=$T/mnt-b
	mkdir -p "$MB"
	: >"$R/log"
	# The lease table is new (1.): the first mount waits out its grace.
	mount_ws "$R" "$M" --ttl=$TTL --wait=20
	e=$(status_of "$M" epoch)
	writer_start "$M" old "$e"
	wait_until 10 bash -c "[ \$(wc -l < '$T/ack.old') -gt 20 ]" || fail "the holder does not write"
	# Host B waits for the root across the wipe.
	MOUNTS+=("$MB")
	on_b timeout 60 "$LEASEFS" mount --ttl=$TTL --wait=30 "$R" "$MB" >"$T/mount-b.out" 2>&1 &
	BPID=$!
	wait_until 10 grep -q 'waiting up to' "$T/mount-b.out" || fail "host B is not waiting: $(cat "$T/mount-b.out")"
	pg_wipe
	tmigrated=$(now_ms)
	wait "$BPID" || fail "no successor after the wipe: $(cat "$T/mount-b.out")"
	tsucc=$(now_ms)
	PIDS+=("$(on_b "$LEASEFS" status "$MB" --json | json_get pid)")
	handover "$M" "$MB" "$R"
	eb=$HANDOVER_EPOCH sa=$HANDOVER_OLD
	echo "   the successor (epoch $eb) was granted $((tsucc - tmigrated)) ms after the migrations; the old holder ($sa): $(cat "$T/writer.old")"
	sed "s/^/   B: /" "$T/mount-b.out"
	on_b timeout 15 "$LEASEFS" umount "$MB"
	"$LEASEFS" umount "$M" 2>/dev/null || true
	ok "wipe: the old holder turned read-only; the successor on host B waited out the new table's grace and wrote after its last record"
	if [ -n "$P" ]; then
		expect 64 "*a TTL of 5 s is longer than the store's max_ttl of 3 s*" "$LEASEFS" mount --ttl=5 "$R" "$M"
		findmnt -rn "$M" >/dev/null && fail "mounted with a TTL above max_ttl"
		for bad in max_ttl=0 max_ttl=abc max_ttl=; do
			expect 64 "*bad $bad (expected seconds*" "$LEASEFS" lease list --leases="$STORE&$bad"
		done
		expect 64 '*max_ttl given twice*' "$LEASEFS" lease list --leases="$STORE&max_ttl=3&max_ttl=4"
		ok "max_ttl: a TTL above it is refused (64), as is a bad or repeated max_ttl="
	fi
fi
echo PASS
