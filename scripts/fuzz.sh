#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (preset 'fuzz', build/fuzz) and
# runs the HTTP request fuzzer for a bounded time over a scratch copy of the
# seed corpus. Usage: scripts/fuzz.sh [seconds] (default 60).
# Exit status: non-zero when the build fails or the fuzzer finds a crash
# (the reproducer is left in build/fuzz/artifacts/).
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-60}"
jobs="$(nproc)"
cmake --preset fuzz >/dev/null
cmake --build build/fuzz -j "$jobs" --target smarm-http-fuzz
work="build/fuzz/corpus"
mkdir -p "$work" build/fuzz/artifacts
cp -n tests/fuzz/corpus/* "$work"/ 2>/dev/null || true
exec build/fuzz/tests/fuzz/smarm-http-fuzz "$work" -max_total_time="$secs" \
  -artifact_prefix=build/fuzz/artifacts/ -print_final_stats=1 -max_len=8192
