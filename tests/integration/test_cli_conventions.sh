#!/usr/bin/env bash
# The command line's conventions (util-linux's): --version, --help on every
# command before anything else is parsed (exit 0, stdout), a usage error
# prints that command's short usage (stderr, exit 64) and getopt's
# complaints as "leasefs mount:"; one source for the options: leasefs(8)'s
# OPTIONS and MOUNT OPTIONS list exactly what `leasefs mount --help` prints
# from the parser's table.  The messages: a missing path "does not exist",
# every store scheme in the unknown-URI message, busy names the holder's pid
# and mount point, a served mount point exits 75, a stale mount says how to
# clear it, `lease show|revoke` take a root or a mount point (the mount's
# own store) and name the store they asked, a relative file: store is made
# absolute.
. "$(dirname "$0")/lib.sh"

R=$T/root M=$T/mnt
mkdir -p "$R" "$M" "$T/m2" "$T/m3"
MOUNTS+=("$M" "$T/m2" "$T/m3")

# run CMD...: RC, OUT (stdout) and ERR (stderr) of CMD.
run() {
	RC=0
	OUT=$(timeout 30 "$@" 2>"$T/err") || RC=$?
	ERR=$(cat "$T/err")
}
want() { # RC what
	[ "$RC" -eq "$1" ] || fail "$2: exit $RC, want $1 (out: $OUT; err: $ERR)"
}

# --- --version, help --------------------------------------------------------
for v in --version version; do
	run "$LEASEFS" $v
	want 0 "leasefs $v"
	grep -qE '^leasefs [0-9]+\.[0-9]+\.[0-9]+$' <<<"$OUT" || fail "leasefs $v: $OUT"
done
for h in --help -h help; do
	run "$LEASEFS" $h
	want 0 "leasefs $h"
	[ -z "$ERR" ] || fail "leasefs $h wrote to stderr: $ERR"
	for c in mount status watch metrics umount "lease list" "lease show" "lease revoke" version; do
		grep -qF "leasefs $c" <<<"$OUT" || fail "leasefs $h does not list $c"
	done
done
ok "--version, version, --help, -h, help: exit 0 on stdout ($(head -n1 <<<"$OUT"))"

# --- --help on every command, before anything else --------------------------
mount_ws "$R" "$M"
for cmd in mount status watch metrics umount lease "lease show" "lease revoke" "lease list" version help; do
	for args in "--help" "$M --help" "-h" "--bogus --help"; do
		run "$LEASEFS" $cmd $args
		want 0 "leasefs $cmd $args"
		[ -z "$ERR" ] || fail "leasefs $cmd $args wrote to stderr: $ERR"
		grep -q "^usage: leasefs ${cmd%% *} " <<<"$OUT" ||
			grep -q "^usage: leasefs ${cmd%% *}$" <<<"$OUT" ||
			fail "leasefs $cmd $args: not its usage: $OUT"
	done
done
findmnt -rn "$M" >/dev/null || fail "'umount $M --help' unmounted $M"
[ "$(status_of "$M" state)" = held ] || fail "a --help changed the mount"
run "$LEASEFS" help mount
want 0 "leasefs help mount"
grep -q -- '--placement=' <<<"$OUT" || fail "help mount: $OUT"
ok "every command's --help (-h, anywhere) prints its usage, exit 0; umount --help unmounted nothing"

# --- usage errors: the command's short usage, exit 64 -----------------------
check_usage() { # CMD-WORD PREFIX-LINE-REGEX CMD...
	local cmd=$1 re=$2; shift 2
	run "$@"
	want 64 "$*"
	[ -z "$OUT" ] || fail "$*: usage error on stdout: $OUT"
	grep -q "^usage: leasefs $cmd" <<<"$ERR" || fail "$*: no short usage of $cmd: $ERR"
	grep -qE "$re" <<<"$ERR" || fail "$*: message: $ERR"
	local n; n=$(grep -c 'leasefs' <<<"$ERR")
	[ "$n" -le 5 ] || fail "$*: $n lines of usage, not $cmd's short one: $ERR"
	grep -q "^usage: leasefs mount" <<<"$ERR" && [ "$cmd" != mount ] &&
		fail "$*: mount's usage for $cmd: $ERR"
	true
}
check_usage mount "^leasefs mount: unrecognized option '--bogus'" "$LEASEFS" mount --bogus "$R" "$T/m2"
grep -q '^mount:' <<<"$ERR" && fail "getopt's message reads like mount(8): $ERR"
check_usage mount "^leasefs mount: option '--ttl' requires a value" "$LEASEFS" mount "$R" "$T/m2" --ttl
check_usage mount "^leasefs mount: invalid option -- 'x'" "$LEASEFS" mount -x "$R" "$T/m2"
check_usage mount "^leasefs mount: ROOT and MOUNTPOINT are needed" "$LEASEFS" mount "$R"
check_usage mount "^leasefs mount: bad --placement 'nope' \(expected exclusive, session, shared or observer\)" \
	"$LEASEFS" mount --placement=nope "$R" "$T/m2"
check_usage status "^leasefs status: MOUNTPOINT is needed" "$LEASEFS" status
check_usage status "^leasefs status: unrecognized option '--bogus'" "$LEASEFS" status --bogus "$M"
check_usage watch "^leasefs watch: unexpected operand" "$LEASEFS" watch "$M" "$M"
check_usage metrics "^leasefs metrics: MOUNTPOINT is needed" "$LEASEFS" metrics
check_usage umount "^leasefs umount: unrecognized option '--now'" "$LEASEFS" umount --now "$M"
check_usage lease "^leasefs lease: unknown lease command 'frob'" "$LEASEFS" lease frob
check_usage lease "^leasefs lease: revoke needs" "$LEASEFS" lease revoke
check_usage lease "^leasefs lease: bad --timeout 'x'" "$LEASEFS" lease revoke --timeout=x foo
check_usage version "^leasefs version: unexpected argument" "$LEASEFS" version extra
run "$LEASEFS" frobnicate
want 64 "an unknown command"
grep -q "^leasefs: unknown command 'frobnicate'" <<<"$ERR" || fail "unknown command: $ERR"
findmnt -rn "$M" >/dev/null || fail "a usage error unmounted $M"
ok "usage errors: 'leasefs CMD: what', CMD's short usage on stderr, exit 64"

# --- one source: leasefs(8) lists exactly the table's options ---------------
"$LEASEFS" mount --help >"$T/help"
python3 - "$T/help" "$TOP/fs/leasefs.8" <<'EOF' || fail "leasefs(8) and the option table differ"
import re, sys
help_text = open(sys.argv[1]).read()
man = open(sys.argv[2]).read()

def section(name):
    m = re.search(r'^\.SH ' + re.escape(name) + r'\n(.*?)(?=^\.S[HS] )', man, re.M | re.S)
    return m.group(1)

# --help: the options (the lines beginning "  -"), and the -o words.
opts, keys = set(), set()
for line in help_text.splitlines():
    m = re.match(r'^  (-[a-zA-Z](?:, --[a-z-]+)?|--[a-z-]+)(=?)', line)
    if not m:
        continue
    for o in m.group(1).split(', '):
        opts.add(o)
    if m.group(2):
        keys.add(m.group(1)[2:])
words = re.search(r'Mount options \(-o\).*?:\n(.*?)\n\n', help_text, re.S).group(1).split()

# leasefs(8) OPTIONS: the line after each .TP.
man_opts = set()
for head in re.findall(r'^\.TP\n(.*)$', section('OPTIONS'), re.M):
    head = head.replace('\\-', '-')
    man_opts |= set(re.findall(r'(?<![\w-])(--[a-z-]+|-[a-zA-Z])(?![\w-])', head))
man_keys = {k.replace('\\-', '-').replace('_', '-')
            for k in re.findall(r'^\.BI ([a-z_\\-]+)=', section('MOUNT OPTIONS'), re.M)}
o_para = re.search(r'^\.BI \\-o .*?(?=^\.TP)', section('OPTIONS'), re.M | re.S).group(0)

bad = []
if opts != man_opts:
    bad.append('OPTIONS: not in leasefs(8): %s; not in the table: %s'
               % (sorted(opts - man_opts), sorted(man_opts - opts)))
if keys != man_keys:
    bad.append('MOUNT OPTIONS: not in leasefs(8): %s; not in the table: %s'
               % (sorted(keys - man_keys), sorted(man_keys - keys)))
for w in words:
    w = w.split('=')[0].rstrip('*')
    if not re.search(r'(?<![\w-])' + re.escape(w.replace('-', '\\-')), o_para):
        bad.append('-o %s is not in leasefs(8)' % w)
for b in bad:
    print(b, file=sys.stderr)
print('options %d, keys %d, -o words %d' % (len(opts), len(keys), len(words)))
sys.exit(1 if bad else 0)
EOF
ok "leasefs(8) OPTIONS, MOUNT OPTIONS and -o match mount --help, printed from the parser's table"

# --- messages -----------------------------------------------------------------
run "$LEASEFS" mount "$T/no-such-root" "$T/m2"
want 64 "a missing root"
grep -q "workspace root $T/no-such-root does not exist" <<<"$ERR" || fail "missing root: $ERR"
run "$LEASEFS" mount "$R" "$T/no-such-mnt"
want 64 "a missing mount point"
grep -q "mount point $T/no-such-mnt does not exist" <<<"$ERR" || fail "missing mount point: $ERR"
run "$LEASEFS" status "$T/no-such-mnt"
want 1 "status of a missing path"
grep -q "$T/no-such-mnt does not exist" <<<"$ERR" || fail "status, missing: $ERR"
run "$LEASEFS" mount --leases=bogus:x "$R" "$T/m2"
want 64 "an unknown store URI"
for s in file: fsstore: etcd: etcds: postgresql: postgres: nats: nats+tls:; do
	grep -qF " $s" <<<"$ERR" || fail "the unknown-URI message lacks $s: $ERR"
done
ok "missing paths 'do not exist'; the unknown-URI message names all 8 schemes"

# Busy: the holder's pid and mount point.
pid=$(status_of "$M" pid)
run "$LEASEFS" mount "$R" "$T/m2"
want 75 "a busy root"
grep -q "workspace busy: $R held at epoch [0-9]* (pid $pid, mounted at $M)" <<<"$ERR" ||
	fail "busy message: $ERR"
BUSY_MSG=$ERR
mkdir -p "$R/sub"
run "$LEASEFS" mount "$R/sub" "$T/m2"
want 75 "a root inside a held one"
grep -q "(pid $pid, mounted at $M)" <<<"$ERR" || fail "busy (inside): $ERR"
run "$LEASEFS" mount --placement=shared "$R" "$T/m2"
want 75 "a shared mount of a held root"
grep -q "(pid $pid, mounted at $M)" <<<"$ERR" || fail "busy (shared): $ERR"
# The mount point already served: busy, 75, naming its daemon.
mkdir -p "$T/other"
run "$LEASEFS" mount "$T/other" "$M"
want 75 "a mount point in use"
grep -q "mount point $M is busy: a leasefs daemon serves it (pid $pid, root $R)" <<<"$ERR" ||
	fail "mount point in use: $ERR"
ok "busy: pid $pid and $M named (root, inside, shared); a served mount point exits 75"

# --- lease show|revoke by root and by mount point; the store named -----------
# The mount uses a store that is not the default one.
S2=$T/leases2
mkdir -p "$T/r2"
MOUNTS+=("$T/m3")
(cd "$T" && timeout 30 "$LEASEFS" mount --leases=file:leases2 "$T/r2" "$T/m3")
PIDS+=("$(status_of "$T/m3" pid)")
[ "$(status_of "$T/m3" backend)" = "file:$S2" ] ||
	fail "a relative file: store was kept relative: $(status_of "$T/m3" backend)"
run "$LEASEFS" lease show "$T/m3"
want 0 "lease show MOUNTPOINT"
grep -q '^state: *held' <<<"$OUT" || fail "show by mount point did not ask the mount's store: $OUT"
grep -qx "store: file:$S2" <<<"$OUT" || fail "show names no store: $OUT"
run "$LEASEFS" lease show "$T/r2"
want 0 "lease show ROOT (the default store)"
grep -q '^state: *free' <<<"$OUT" || fail "show ROOT in the default store: $OUT"
grep -qx "store: $LEASEFS_LEASES" <<<"$OUT" || fail "show ROOT names no store: $OUT"
run "$LEASEFS" lease show "$T/r2" --leases="file:$S2"
grep -q '^state: *held' <<<"$OUT" || fail "show ROOT --leases: $OUT"
(cd "$T" && "$LEASEFS" lease show "$T/r2" --leases=file:leases2) | grep -qx "store: file:$S2" ||
	fail "lease show kept a relative store relative"
run "$LEASEFS" lease show "$R"
grep -q '^state: *held' <<<"$OUT" || fail "show ROOT: $OUT"
ok "lease show: a mount point asks the mount's own store, a root its root lease; the store named"

run "$LEASEFS" lease revoke "$T/m3"
want 0 "lease revoke MOUNTPOINT"
grep -q "^revoked workspace-roots/[0-9a-f]* in file:$S2: the holder acknowledged" <<<"$OUT" ||
	fail "revoke by mount point: $OUT"
REVOKE_MSG=$OUT
expect_erofs touch "$T/m3/x"
"$LEASEFS" umount "$T/m3"
ok "lease revoke MOUNTPOINT revoked the mount's lease in its own store"

# --- a stale mount --------------------------------------------------------------
kill -9 "$pid"
wait_pid_gone "$pid" 10 || fail "daemon $pid did not die"
for c in status watch metrics; do
	run "$LEASEFS" $c "$M"
	want 1 "$c of a stale mount"
	grep -q "$M is a stale leasefs mount: its daemon is gone; clear it with 'umount -l $M' (root) or 'fusermount3 -uz $M'" <<<"$ERR" ||
		fail "$c, stale: $ERR"
done
STALE_MSG=$ERR
run "$LEASEFS" lease show "$M"
want 1 "lease show of a stale mount"
grep -q "stale leasefs mount" <<<"$ERR" || fail "lease show, stale: $ERR"
run "$LEASEFS" umount "$M"
want 0 "umount of a stale mount"
findmnt -rn "$M" >/dev/null && fail "umount left the stale mount"
ok "a stale mount says so and how to clear it; umount clears it"

printf '%s\n' "--- transcripts" "\$ leasefs mount $R $T/m2" "$BUSY_MSG" \
	"\$ leasefs lease revoke $T/m3" "$REVOKE_MSG" "\$ leasefs metrics $M" "$STALE_MSG"
echo PASS
