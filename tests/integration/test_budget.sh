#!/usr/bin/env bash
# Open-file budgets are per person (issue 33, finding 3): a uid inside a
# subordinate range (/etc/subuid) counts as its range's owner, and uid 0
# keeps a reserve no other caller can take.  The ranges come from a
# private copy (LEASEFS_SUBUID_FILE, read by the daemon and the arbiter for
# tests only): owners by name and by number, with malformed lines among
# them.  The daemon runs at `ulimit -n 1024` (its budget: 248 open files,
# 82 of them uid 0's reserve, 41 per person).  The host lock arbiter's
# slots are per person too (section 4).  Users are created here, removed
# at exit.
# bound: 120
. "$(dirname "$0")/lib.sh"

UA=lfs-bud-a UB=lfs-bud-b
for u in $UA $UB; do
	userdel "$u" >/dev/null 2>&1 || true
	useradd --system --no-create-home --shell /usr/sbin/nologin "$u"
	at_exit "userdel $u"
done
chmod 755 "$T"
cat > "$T/subuid" <<SUB
# a comment, then malformed lines the daemon must skip
garbage
$UA:notanumber:65536
$UA:300000
:310000:10
$UA:300000:65536
$(id -u "$UB"):400000:65536
5000:500000:65536
5001:510000:65536
5002:520000:65536
root:600000:65536
SUB
export LEASEFS_SUBUID_FILE=$T/subuid

cat > "$T/opener.py" <<'PY'
import errno, os, sys
fds = []
try:
    while len(fds) < int(sys.argv[2]):
        fds.append(os.open(sys.argv[1], os.O_RDONLY))
    print(len(fds), "none", flush=True)
except OSError as e:
    print(len(fds), errno.errorcode[e.errno], flush=True)
sys.stdin.readline()
PY

R=$T/root M=$T/mnt
mkdir -p "$R"; echo data > "$R/f"; chmod 755 "$R"; chmod 644 "$R/f"
(ulimit -n 1024 && mount_ws "$R" "$M")
DAEMON_PID=$(status_of "$M" pid); PIDS+=("$DAEMON_PID"); MOUNTS+=("$M")

# open_as UID MAX: a process of UID (no name needed) opens $M/f up to MAX
# times and holds them; sets GOT (count) and WHY (errno name or none).
# Its stdin is kept in HOLD_FDS, its pid in PIDS.
HOLD_FDS=()
open_as() {
	local uid=$1 max=$2 in out
	in=$(mktemp -u "$T/in.XXXX"); out=$(mktemp -u "$T/out.XXXX")
	mkfifo "$in" "$out"
	setpriv --reuid="$uid" --regid="$uid" --clear-groups \
		/usr/bin/python3 -u "$T/opener.py" "$M/f" "$max" <"$in" >"$out" &
	PIDS+=("$!"); disown "$!"
	exec {fd}>"$in"; HOLD_FDS+=("$fd")
	read -r GOT WHY <"$out" || fail "opener as uid $uid said nothing"
}

# 1. Eight subordinate uids of UA, each opening up to 100 files: together
#    they get UA's budget, then EMFILE; nobody else gets ENFILE.
total=0
for i in 0 1 2 3 4 5 6 7; do
	open_as $((300000 + i)) 100
	total=$((total + GOT))
	echo "   uid $((300000 + i)) ($UA's): $GOT, then $WHY"
	[ "$WHY" = EMFILE ] || fail "uid $((300000 + i)) of $UA: $WHY after $GOT (want EMFILE: the person's budget)"
done
[ "$total" -ge 20 ] && [ "$total" -le 64 ] || fail "$UA's subordinate uids together opened $total (want one person's budget)"
open_as "$(id -u "$UB")" 30
[ "$GOT" -eq 30 ] || fail "$UB opened $GOT, then $WHY, while $UA's subordinate uids held $total"
open_as 0 30
[ "$GOT" -eq 30 ] || fail "root opened $GOT, then $WHY, while $UA's subordinate uids held $total"
ok "eight subordinate uids of $UA held $total files (one budget), then EMFILE; $UB and root still opened 30 each"

# 2. A subordinate uid of UB (numeric owner) shares UB's budget: it gets
#    only what UB's 30 left.
open_as 400007 100
[ "$WHY" = EMFILE ] && [ $((GOT + 30)) -le 64 ] || fail "uid 400007 ($UB's) opened $GOT beside $UB's 30, then $WHY"
ok "a subordinate uid of $UB (numeric owner) got $GOT beside $UB's 30, then EMFILE"

# 3. Every other person at its budget: callers other than uid 0 run into
#    the reserve (ENFILE), and root's requests still open.  The last asks
#    from a range root owns: those uids are a person of their own, never
#    root, and get none of root's reserve.
for sub in 500007 510007 520007 600007; do
	open_as $sub 100
	echo "   uid $sub: $GOT, then $WHY"
done
[ "$WHY" = ENFILE ] && [ "$GOT" -eq 0 ] || fail "uid 600007 (root's range) got $GOT, then $WHY (want ENFILE: only root's reserve left)"
open_as 0 5
[ "$GOT" -eq 5 ] || fail "root opened $GOT, then $WHY, with every user at budget (the reserve)"
[ "$(cat "$M/f")" = data ] || fail "root cannot read with every user at budget"
timeout 5 "$LEASEFS" status "$M" >/dev/null || fail "status does not answer"
[ "$(status_of "$M" state)" = held ] || fail "lease not held"
ok "every person at budget: the next gets ENFILE, root still opens (reserve), status answers, lease held"

for fd in "${HOLD_FDS[@]}"; do exec {fd}>&-; done

# 4. The host lock arbiter serves at most 8 requests of one person at once
#    (and 64 in all): eight subordinate uids of UA, each asking 8 times at
#    once and saying nothing, get 8 slots together, not 8 each (which
#    filled all 64), and UB is still served beside them.  The arbiter runs
#    again with the ranges and a test build's longer wait for a silent
#    request (held slots stay held while the test looks).
kill "$HOSTD_PID"; wait_pid_gone "$HOSTD_PID" 10 || fail "the arbiter did not exit"
rm -f /run/leasefs/hostd.sock
LEASEFS_TEST_HOSTD_REQUEST_WAIT_S=50 start_hostd
mkdir -p "$T/ubws"; chown "$UB:" "$T/ubws"
cat > "$T/slots.py" <<'PY'
import os, select, socket, sys
SOCK = "/run/leasefs/hostd.sock"
def become(uid):
    os.setgroups([]); os.setresgid(uid, uid, uid); os.setresuid(uid, uid, uid)
# Each filler uid connects PER times and says nothing; once told, it
# counts the connections the arbiter refused (a reply waiting) and those
# it holds a worker for (silent), and writes "refused held".
fillers = []
for uid in map(int, sys.argv[1].split(",")):
    go_r, go_w = os.pipe(); out_r, out_w = os.pipe()
    if os.fork() == 0:
        try:
            become(uid)
            socks = []
            for _ in range(int(sys.argv[2])):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                s.connect(SOCK)
                socks.append(s)
            os.write(out_w, b"connected\n")
            os.read(go_r, 1)
            refused = sum(1 for s in socks if select.select([s], [], [], 0)[0]
                          and s.recv(8192).startswith(b"error\t11\t"))
            os.write(out_w, b"%d %d\n" % (refused, len(socks) - refused))
            os.read(go_r, 1)
        finally:
            os._exit(0)
    fillers.append((go_w, os.fdopen(out_r)))
for _, out in fillers:
    assert out.readline() == "connected\n"
# The other person's request, after every filler connection: the arbiter
# takes connections in order and refuses at once, so by its answer every
# filler connection has a worker or a refusal.
r, w = os.pipe()
if os.fork() == 0:
    m = b"nothing"
    try:
        become(int(sys.argv[3]))
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.settimeout(20)
        s.connect(SOCK)
        s.send(("take\t0\t7\tworkspace\t-\t" + sys.argv[4]).encode())
        try:
            m, fds, _, _ = socket.recv_fds(s, 8192, 64)
        except ConnectionResetError:  # refused unread: the reply still waits
            m, fds, _, _ = socket.recv_fds(s, 8192, 64)
    finally:
        os.write(w, m.split(b"\n")[0] + b"\n")
        os._exit(0)
other = os.fdopen(r).readline().strip()
refused = held = 0
for go, out in fillers:
    os.write(go, b"x")
    a, b = map(int, out.readline().split())
    refused += a; held += b
print("held %d refused %d other %s" % (held, refused, other.split("\t")[0]), flush=True)
print(other, file=sys.stderr)
sys.stdin.readline()  # the slots stay held until told
for go, _ in fillers:
    os.write(go, b"x")
PY
subs=$(seq -s, 300000 300007)
coproc SLOTS { exec python3 "$T/slots.py" "$subs" 8 "$(id -u "$UB")" "$T/ubws" 2>"$T/slots.err"; }
PIDS+=("$SLOTS_PID")
exec {slots_in}>&"${SLOTS[1]}"
read -r -t 60 out <&"${SLOTS[0]}" || fail "the slot filler: $(cat "$T/slots.err")"
echo "   arbiter: $out"
read -r _ held _ refused _ other <<<"$out"
[ "$held" -eq 8 ] && [ "$refused" -eq 56 ] ||
	fail "eight subordinate uids of $UA held $held arbiter slots at once ($refused refused; want 8, one person's)"
[ "$other" = ok ] || fail "$UB's request beside them: $(cat "$T/slots.err")"
ok "eight subordinate uids of $UA, 8 requests each, held 8 arbiter slots together ($refused refused); $UB was served beside them"

# 5. A mount of that person's meanwhile is told the arbiter is busy (it
#    waits that out, up to 15 s, then exits 1 saying so); it is not told
#    that no arbiter answers (76), which is what reading the refusal as a
#    reset connection said.
mkdir -p "$T/uaws" "$T/uam" "$T/uast"; chown "$UA:" "$T/uaws" "$T/uam" "$T/uast"
rc=0; out=$(setpriv --reuid="$UA" --regid="$(id -g "$UA")" --clear-groups \
	"$LEASEFS" mount --leases="file:$T/uast" "$T/uaws" "$T/uam" 2>&1) || rc=$?
MOUNTS+=("$T/uam")
[ $rc -eq 1 ] && grep -q "arbiter is busy" <<<"$out" ||
	fail "$UA's mount with its person's arbiter slots full: exit $rc ($out)"
echo x >&"$slots_in"
wait "$SLOTS_PID" 2>/dev/null || true
ok "$UA's own mount meanwhile waited out the busy arbiter and said so (exit 1)"
