#!/usr/bin/env bash
# Builds a libFuzzer target with clang (preset 'fuzz', build/fuzz) and runs
# it for a bounded time over a scratch copy of its seed corpus.
# Usage: scripts/fuzz.sh [seconds] [http|ws|h2] (default 60 http)
#   http: the HTTP request path (smarm-http-fuzz, tests/fuzz/corpus)
#   ws:   the WebSocket frame path (smarm-ws-fuzz, tests/fuzz/ws_corpus)
#   h2:   the HTTP/2 path (smarm-h2-fuzz, tests/fuzz/h2_corpus)
# Exit status: non-zero when the build fails or the fuzzer finds a crash
# (the reproducer is left in build/fuzz/artifacts/).
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-60}"
which="${2:-http}"
case "$which" in
  http) target=smarm-http-fuzz seeds=tests/fuzz/corpus ;;
  ws) target=smarm-ws-fuzz seeds=tests/fuzz/ws_corpus ;;
  h2) target=smarm-h2-fuzz seeds=tests/fuzz/h2_corpus ;;
  *) echo "fuzz.sh: unknown target \"$which\" (http, ws or h2)" >&2; exit 2 ;;
esac
jobs="$(nproc)"
cmake --preset fuzz >/dev/null
cmake --build build/fuzz -j "$jobs" --target "$target"
work="build/fuzz/corpus-$which"
mkdir -p "$work" build/fuzz/artifacts
cp -n "$seeds"/* "$work"/ 2>/dev/null || true
exec "build/fuzz/tests/fuzz/$target" "$work" -max_total_time="$secs" \
  -artifact_prefix="build/fuzz/artifacts/$which-" -print_final_stats=1 -max_len=8192
