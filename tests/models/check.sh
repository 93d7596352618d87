#!/usr/bin/env bash
# check.sh MODEL.pml ok|fail [-DNAME ...]
# Runs spin's exhaustive safety check (assertions + invalid end states) on a
# model. `ok`: must verify with no errors. `fail`: the deliberately broken
# variant must be rejected (errors > 0), or the model proves nothing.
set -euo pipefail
model="$1"; expect="$2"; shift 2
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp "$here"/*.pml "$work"/
cd "$work"
spin -a "$@" "$model" >/dev/null
gcc -O2 -DSAFETY -DNOREDUCE -o pan pan.c 2>/dev/null
out="$(./pan -m100000 2>&1)"
errors="$(echo "$out" | sed -n 's/.*errors: \([0-9]*\).*/\1/p' | head -n1)"
echo "$model $* : errors=$errors (expected $expect)"
if [ "$expect" = ok ]; then
  [ "$errors" = 0 ] || { echo "$out"; exit 1; }
else
  [ -n "$errors" ] && [ "$errors" != 0 ] || { echo "$out"; echo "broken variant was NOT rejected"; exit 1; }
  # show the counterexample trail's length, for the log
  spin -t "$@" "$model" 2>/dev/null | tail -n 3 || true
fi
