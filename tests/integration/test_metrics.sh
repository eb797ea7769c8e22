#!/usr/bin/env bash
# leasefs metrics and --metrics-dir: the Prometheus text exposition passes
# `promtool check metrics`, counts what was done, turns to held 0 / losses 1
# on loss with the refused mutations counted by operation; the textfile is
# rewritten before a watcher hears of the change, and removed at umount;
# two mounts' textfiles in one directory are read together.
. "$(dirname "$0")/lib.sh"

R=$T/root M=$T/mnt MD=$T/metrics
mkdir -p "$MD"
mount_ws "$R" "$M" --metrics-dir="$MD"
echo data > "$M/f"
cat "$M/f" >/dev/null
value() { # FILE METRIC [OP]: the sample's value
	awk -v m="$2" -v op="${3:-}" '$1 ~ "^"m"[{]" && (op == "" || index($1, "op=\"" op "\"")) { print $2 }' "$1"
}
"$LEASEFS" metrics "$M" >"$T/a.prom"
out=$(promtool check metrics <"$T/a.prom" 2>&1) || fail "promtool: $out"
[ "$(value "$T/a.prom" leasefs_lease_held)" = 1 ] || fail "held"
[ "$(value "$T/a.prom" leasefs_lease_epoch)" = "$(status_of "$M" epoch)" ] || fail "epoch"
[ "$(value "$T/a.prom" leasefs_requests_total create)" -ge 1 ] || fail "create not counted"
[ "$(value "$T/a.prom" leasefs_requests_total write_buf)" -ge 1 ] || fail "write not counted"
[ "$(value "$T/a.prom" leasefs_mutations_refused_total write_buf)" = 0 ] || fail "refused while held"
files=("$MD"/leasefs-*.prom)
[ ${#files[@]} -eq 1 ] && [ -f "${files[0]}" ] || fail "no textfile in $MD"
out=$(promtool check metrics <"${files[0]}" 2>&1) || fail "promtool textfile: $out"
ok "metrics pass promtool; held 1, requests counted; textfile ${files[0]##*/}"

# A file open for writing keeps the superblock writable after the loss
# (the kernel refuses the read-only remount while it is open), so the
# mutations below reach the gate instead of being refused by the kernel.
exec 7>>"$M/f"
coproc W { "$LEASEFS" watch "$M"; }
exec {wfd}<&"${W[0]}"   # kept: bash drops W once the watcher exits
read -r -t 10 line <&$wfd || fail "watcher said nothing"
"$LEASEFS" lease revoke "$(status_of "$M" lease)" >/dev/null
read -r -t 10 line <&$wfd || fail "no loss line"
[ "$(value "${files[0]}" leasefs_lease_held)" = 0 ] || fail "textfile not rewritten by the loss"
[ "$(value "${files[0]}" leasefs_lease_losses_total)" = 1 ] || fail "textfile losses"
expect_erofs bash -c "echo more >&7"
expect_erofs mkdir "$M/d"
"$LEASEFS" metrics "$M" >"$T/b.prom"
out=$(promtool check metrics <"$T/b.prom" 2>&1) || fail "promtool after loss: $out"
[ "$(value "$T/b.prom" leasefs_lease_held)" = 0 ] || fail "held after loss"
[ "$(value "$T/b.prom" leasefs_mutations_refused_total write_buf)" = 1 ] || fail "refused write not counted"
[ "$(value "$T/b.prom" leasefs_mutations_refused_total mkdir)" = 1 ] || fail "refused mkdir not counted"
ok "after loss: held 0, losses 1 in the textfile before the watcher heard; refused write and mkdir counted"
exec 7>&-
"$LEASEFS" umount "$M"
[ ! -e "${files[0]}" ] || fail "textfile left after umount"
ok "textfile removed at umount"

# A mount point spelled long enough that its label makes the exposition
# far bigger than any fixed reply buffer (64 KiB once cut it short): the
# whole of it arrives, and matches the daemon's own textfile.
long=$T; for i in 1 2 3 4 5 6 7 8 9 10 11 12; do long=$long/$(printf 'm%.0s' {1..240}); done
mkdir -p "$long"
mount_ws "$T/root2" "$long" --metrics-dir="$MD"
tf=("$MD"/leasefs-*.prom)
[ ${#tf[@]} -eq 1 ] || fail "no textfile for the long mount"
size=$(stat -c %s "${tf[0]}")
[ "$size" -gt 65536 ] || fail "textfile only $size bytes: the test proves nothing"
"$LEASEFS" metrics "$long" >"$T/c.prom"
got=$(stat -c %s "$T/c.prom")
[ "$(wc -l <"$T/c.prom")" = "$(wc -l <"${tf[0]}")" ] &&
	tail -n 1 "$T/c.prom" | grep -q '^leasefs_build_info{' ||
	fail "exposition cut short: $got bytes, the textfile has $size"
out=$(promtool check metrics <"$T/c.prom" 2>&1) || fail "promtool long: $out"
ok "a $got-byte exposition arrives whole (64 KiB cut it before)"
"$LEASEFS" umount "$long"

# Two mounts writing one textfile directory: node_exporter's textfile
# collector reads every file and gathers their families together; a
# series two files both have (same name and labels), or a family whose
# HELP or TYPE differ between files, fails every scrape.  The merge below
# does what the collector does; promtool then checks the whole.
mount_ws "$T/root3" "$T/m3" --metrics-dir="$MD"
mount_ws "$T/root4" "$T/m4" --metrics-dir="$MD"
tf=("$MD"/leasefs-*.prom)
[ ${#tf[@]} -eq 2 ] || fail "${#tf[@]} textfiles for two mounts"
python3 - "${tf[@]}" >"$T/merged.prom" <<-'PY' || fail "the textfiles do not merge: $(cat "$T/merged.prom")"
	import re, sys
	def die(msg):
	    print(msg)
	    sys.exit(1)
	families, order, seen = {}, [], set()
	for path in sys.argv[1:]:
	    for line in open(path):
	        m = re.match(r"# (HELP|TYPE) (\S+) (.*)", line)
	        if m:
	            kind, name, text = m.groups()
	            fam = families.setdefault(name, {"HELP": None, "TYPE": None, "samples": []})
	            if name not in order:
	                order.append(name)
	            if fam[kind] not in (None, text):
	                die(f"{name}: {kind} differs between files: {fam[kind]!r} and {text!r}")
	            fam[kind] = text
	            continue
	        series = line.rsplit(" ", 1)[0]
	        if series in seen:
	            die(f"{series}: in two files")
	        seen.add(series)
	        families[re.match(r"[^{ ]+", line).group(0)]["samples"].append(line)
	for name in order:
	    f = families[name]
	    print(f"# HELP {name} {f['HELP']}\n# TYPE {name} {f['TYPE']}")
	    print("".join(f["samples"]), end="")
	PY
out=$(promtool check metrics <"$T/merged.prom" 2>&1) || fail "promtool, the merged textfiles: $out"
[ "$(grep -c '^leasefs_build_info{' "$T/merged.prom")" -eq 2 ] || fail "build_info: $(grep build_info "$T/merged.prom")"
"$LEASEFS" umount "$T/m3"
"$LEASEFS" umount "$T/m4"
ok "two mounts' textfiles in one directory merge as node_exporter merges them (no series twice), and pass promtool"
echo PASS
