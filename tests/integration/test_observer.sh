#!/usr/bin/env bash
# Observer placement: a read-only view of a workspace that takes no root
# lease and no host lock, so a writer mounts (and remounts) the same root
# while it lives; read-only in the kernel (ro) and at the gate (unit test:
# test_coord's test_observer_placement); never writes ROOT; shows a writer's changes within
# its 1 s entry and attribute timeouts.
. "$(dirname "$0")/lib.sh"

R=$T/root W=$T/writer O=$T/observer O2=$T/observer2
mkdir -p "$R/d" "$W" "$O" "$O2"
echo one > "$R/f"

# --- alongside a writer: neither keeps the other out ---------------------
mount_ws "$R" "$W"
mount_ws "$R" "$O" --placement=observer
[ "$(status_of "$O" placement)" = observer ] || fail "status placement: $(status_of "$O" placement)"
root_lease=$(status_of "$W" lease)
[ "$(status_of "$O" lease)" != "$root_lease" ] || fail "the observer names the root lease"
case ",$(findmnt -n -o OPTIONS "$O")," in *,ro,*) ;; *) fail "observer not ro: $(findmnt -n -o OPTIONS "$O")" ;; esac
ok "observer mounted beside an exclusive writer, read-only, its own session lease only"

# --- nothing it does writes -----------------------------------------------
# Access times too: f was never read, so relatime would update its atime
# on the first read.
snap() { find "$R" -printf '%p %s %A@ %T@ %C@ %m\n' | sort; }
snap >/dev/null # find reads the directories itself: their atimes settle
before=$(snap)
expect_erofs touch "$O/new"
expect_erofs sh -c "echo x > '$O/f'"
expect_erofs sh -c "echo x >> '$O/f'"
expect_erofs truncate -s 0 "$O/f"
expect_erofs mkdir "$O/nd"
expect_erofs rm "$O/f"
expect_erofs rmdir "$O/d"
expect_erofs mv "$O/f" "$O/g"
expect_erofs chmod 600 "$O/f"
expect_erofs ln -s f "$O/l"
expect_erofs ln "$O/f" "$O/h"
expect_erofs setfattr -n user.x -v 1 "$O/f"
[ "$(cat "$O/f")" = one ] || fail "observer does not read ROOT"
ls -la "$O" "$O/d" >/dev/null; stat "$O/d" >/dev/null
[ "$(snap)" = "$before" ] || fail "the observer changed ROOT: $(diff <(echo "$before") <(snap))"
ok "every mutation through the observer is EROFS; reads and all: ROOT unchanged, atimes too"

# (The gate's own refusal, whatever the kernel's flags: tests/test_coord.c
# test_observer_placement; coord_enter() is what the gate admits through.)

# --- the writer is unaffected, and the observer sees its changes -----------
echo "second, longer version" > "$W/f"
echo born > "$W/d/new"
# Bound: the observer's entry and attribute timeouts (1 s) plus room for a
# loaded machine; measured.
t0=$(date +%s%N)
wait_until 5 grep -qx "second, longer version" "$O/f" || fail "the writer's change never showed: $(cat "$O/f")"
wait_until 5 test -e "$O/d/new" || fail "the writer's new file never showed"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[ "$ms" -le 2500 ] || fail "the observer showed the writer's change after $ms ms (stated: 1 s)"
rm "$W/d/new"
t0=$(date +%s%N)
wait_until 5 test ! -e "$O/d/new" || fail "the writer's removal never showed"
ms2=$(( ($(date +%s%N) - t0) / 1000000 ))
[ "$ms2" -le 2500 ] || fail "the removal showed after $ms2 ms"
ok "the writer writes; the observer shows a change in $ms ms, a removal in $ms2 ms"

# --- a writer comes and goes while the observer stays -----------------------
e1=$(status_of "$W" epoch)
"$LEASEFS" umount "$W"
has_line '^state: *free' "$LEASEFS" lease show "$R" || fail "root lease held with only the observer: $("$LEASEFS" lease show "$R")"
mount_ws "$R" "$W"
e2=$(status_of "$W" epoch)
[ "$e2" -gt "$e1" ] || fail "writer remount epoch $e2 not above $e1"
echo three > "$W/f"
wait_until 5 grep -qx three "$O/f" || fail "the new writer's change never showed"
ok "an exclusive mount of the root while the observer lives: epoch $e1 -> $e2"

# --- an observer while the root is held, in mount(8)'s form too -------------
MOUNTS+=("$O2")
timeout 30 "$LEASEFS" "$R" "$O2" -o "placement=observer,leases=$LEASEFS_LEASES" ||
	fail "-o placement=observer did not mount"
PIDS+=("$(status_of "$O2" pid)")
[ "$(status_of "$O2" placement)" = observer ] || fail "-o placement=observer: $(status_of "$O2" placement)"
# -o rw cannot make it writable.
"$LEASEFS" umount "$O2"
timeout 30 "$LEASEFS" mount --placement=observer -o rw "$R" "$O2"
PIDS+=("$(status_of "$O2" pid)")
expect_erofs touch "$O2/x"
"$LEASEFS" umount "$O2"
ok "-o placement=observer mounts; -o rw leaves it read-only"

"$LEASEFS" umount "$O"
"$LEASEFS" umount "$W"
echo PASS
