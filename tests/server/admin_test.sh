#!/usr/bin/env bash
# smarm-server with the admin listener and the test routes on: /metrics and
# /debug/* answer on the admin port only; /test/throw is a 500 with a
# request id while other routes keep answering.
set -euo pipefail
server="$1"
config="$2"
log="$(mktemp)"
trap 'kill -9 "$pid" 2>/dev/null || true; rm -f "$log"' EXIT
"$server" --config "$config" --http.host=127.0.0.1 --http.port=0 --admin.enabled=true \
  --admin.port=0 --http.test_routes=true >"$log" 2>&1 &
pid=$!
port="" admin=""
for _ in $(seq 1 100); do
  port="$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log" | head -1)"
  admin="$(sed -n 's/.*admin listener on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log" | head -1)"
  [ -n "$port" ] && [ -n "$admin" ] && break
  sleep 0.1
done
[ -n "$port" ] && [ -n "$admin" ] || { echo "server did not start:"; cat "$log"; exit 1; }

get() {  # get PORT PATH -> the whole response
  exec 3<>"/dev/tcp/127.0.0.1/$1"
  printf 'GET %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n' "$2" >&3
  tr -d '\r' <&3
  exec 3<&-
}
status() { get "$1" "$2" | head -1; }
[ "$(status "$port" /metrics)" = "HTTP/1.1 404 Not Found" ] || { echo "/metrics on the main port"; exit 1; }
[ "$(status "$port" /debug/actors)" = "HTTP/1.1 404 Not Found" ] || { echo "/debug on the main port"; exit 1; }
[ "$(status "$admin" /metrics)" = "HTTP/1.1 200 OK" ] || { echo "no /metrics on admin"; exit 1; }
[ "$(status "$admin" /debug/tree)" = "HTTP/1.1 200 OK" ] || { echo "no /debug/tree on admin"; exit 1; }
# 20 concurrent requests to other routes while the test route throws.
tmp="$(mktemp -d)"
for i in $(seq 1 20); do status "$port" /plaintext >"$tmp/$i" & done
thrown="$(get "$port" /test/throw)"
wait $(jobs -p | grep -v "^$pid$") 2>/dev/null || true
for i in $(seq 1 20); do
  [ "$(cat "$tmp/$i")" = "HTTP/1.1 200 OK" ] || { echo "concurrent request $i: $(cat "$tmp/$i")"; exit 1; }
done
rm -rf "$tmp"
echo "$thrown" | head -1 | grep -q "^HTTP/1.1 500" || { echo "test route: $thrown"; exit 1; }
echo "$thrown" | grep -q "request id: " || { echo "no request id: $thrown"; exit 1; }
[ "$(status "$port" /plaintext)" = "HTTP/1.1 200 OK" ] || { echo "plaintext after a 500"; exit 1; }
get "$admin" /metrics | grep -q 'smarm_http_requests_total{method="GET",route="/test/throw",status="500"} 1' ||
  { echo "the 500 is not in /metrics"; exit 1; }
grep -q "thrown on purpose" "$log" || { echo "the exception was not logged"; exit 1; }
kill -TERM "$pid"
wait "$pid"
echo ok
