#!/bin/sh
# The compat-end test: fails when the installed libfuse has what makes a
# piece of compat/ unnecessary.  Arguments: the installed version, then
# one "piece|release|present-or-absent" per piece (compat/meson.build
# probes them).  Usage: compat-end.sh VERSION PIECE...
version=$1
shift
due=0
for p in "$@"; do
  piece=${p%%|*}
  rest=${p#*|}
  release=${rest%%|*}
  found=${rest#*|}
  if [ "$found" = present ]; then
    echo "DUE  $piece: libfuse $version has it (since $release); delete it from compat/"
    due=$((due + 1))
  else
    echo "KEEP $piece: until libfuse $release (installed: $version)"
  fi
done
# Not probed (no libfuse release has it yet; see README.md): the write
# and open requests' kill-suid/sgid flags, and so the worker loop itself.
echo "KEEP per-request kill-suid/sgid flags of write and open, and the worker loop: no libfuse release hands them to the filesystem yet (checked up to 3.18.2)"
[ "$due" -eq 0 ]
