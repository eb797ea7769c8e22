#!/usr/bin/env bash
# The store modules resolve their lease_* symbols against the daemon,
# which exports only lease/module.dynlist: every one a module needs must
# be there (else dlopen fails at mount time), and the daemon exports
# nothing besides what the list names.
# Usage: check-exports.sh EXE LIST MODULE...
set -euo pipefail
exe=$1 list=$2
shift 2
need=$(for m in "$@"; do nm -D --undefined-only "$m"; done | awk '$2 ~ /^lease_/ {print $2}' | sort -u)
exported=$(nm -D --defined-only "$exe" | awk '$2 ~ /^[TDBR]$/ && $3 !~ /@/ {print $3}' | sort -u)
have=$(grep '^lease_' <<<"$exported" || true)
listed=$(grep -o 'lease_[a-z_]*;' "$list" | tr -d ';' | sort -u)
missing=$(comm -23 <(echo "$need") <(echo "$have"))
[ -z "$missing" ] || { echo "FAIL: the module needs, the daemon does not export: $missing"; exit 1; }
extra=$(comm -13 <(echo "$listed") <(grep -v '^_' <<<"$exported"))
[ -z "$extra" ] || { echo "FAIL: the daemon exports what the list does not name: $extra"; exit 1; }
echo "ok: $(echo "$need" | wc -l) symbols the module needs, $(echo "$have" | wc -l) exported"
