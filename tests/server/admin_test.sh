#!/usr/bin/env bash
# smarm-server's admin listener: on by default (loopback), /metrics and
# /debug/* answer on the admin port only; /test/throw is a 500 with a
# request id while other routes keep answering. With admin.token (from the
# environment) every admin request but the observer page needs the bearer
# token (401 otherwise),
# --print-config redacts it, and a bad one is refused without being echoed.
# With admin.enabled=false the read-only routes move to the main port.
set -euo pipefail
server="$1"
config="$2"
log="$(mktemp)"
pids=""
trap 'for p in $pids; do kill -9 "$p" 2>/dev/null || true; done; rm -f "$log"*' EXIT

start() {  # start LOGFILE ARGS... -> sets pid, port, admin ("" without one)
  local out="$1"
  shift
  "$server" --config "$config" --http.host=127.0.0.1 --http.port=0 --admin.port=0 "$@" \
    >"$out" 2>&1 &
  pid=$!
  pids="$pids $pid"
  port="" admin=""
  for _ in $(seq 1 100); do
    port="$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$out" | head -1)"
    admin="$(sed -n 's/.*admin listener on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$out" | head -1)"
    [ -n "$port" ] && break  # logged after the admin listener's line
    sleep 0.1
  done
  [ -n "$port" ] || { echo "server did not start:"; cat "$out"; exit 1; }
}

start "$log" --http.test_routes=true
[ -n "$admin" ] || { echo "no admin listener by default:"; cat "$log"; exit 1; }

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

# A bearer token from the environment.
token="s3cret-token-for-the-admin-port"
authget() {  # authget PORT PATH AUTHORIZATION -> the status line
  exec 3<>"/dev/tcp/127.0.0.1/$1"
  printf 'GET %s HTTP/1.1\r\nHost: t\r\nAuthorization: %s\r\nConnection: close\r\n\r\n' "$2" "$3" >&3
  head -1 <&3 | tr -d '\r'
  exec 3<&-
}
SMARM_ADMIN_TOKEN="$token" start "$log.token"
[ "$(status "$admin" /metrics)" = "HTTP/1.1 401 Unauthorized" ] || { echo "/metrics without the token"; exit 1; }
get "$admin" /metrics | grep -qi '^WWW-Authenticate: Bearer' || { echo "no Bearer challenge"; exit 1; }
[ "$(authget "$admin" /metrics "Bearer wrong-token-of-some-length")" = "HTTP/1.1 401 Unauthorized" ] ||
  { echo "/metrics with a wrong token"; exit 1; }
[ "$(authget "$admin" /debug/tree "Basic $token")" = "HTTP/1.1 401 Unauthorized" ] ||
  { echo "another scheme passed"; exit 1; }
[ "$(authget "$admin" /metrics "Bearer $token")" = "HTTP/1.1 200 OK" ] || { echo "/metrics with the token"; exit 1; }
[ "$(authget "$admin" /debug/tree "bearer $token")" = "HTTP/1.1 200 OK" ] || { echo "scheme is case-insensitive"; exit 1; }
[ "$(status "$port" /plaintext)" = "HTTP/1.1 200 OK" ] || { echo "the main port needs no token"; exit 1; }
# The observer page holds no data: served without the token; its data is not.
[ "$(status "$admin" /observer)" = "HTTP/1.1 200 OK" ] || { echo "/observer without the token"; exit 1; }
[ "$(status "$admin" /debug/actors)" = "HTTP/1.1 401 Unauthorized" ] || { echo "/debug/actors without the token"; exit 1; }
[ "$(status "$admin" /observer/x)" = "HTTP/1.1 401 Unauthorized" ] || { echo "only /observer is exempt"; exit 1; }
kill -TERM "$pid"
wait "$pid"
printed="$(SMARM_ADMIN_TOKEN="$token" "$server" --config "$config" --print-config)"
grep -q 'token: "<redacted>"' <<<"$printed" || { echo "print-config: $printed"; exit 1; }
! grep -q "$token" <<<"$printed" || { echo "print-config shows the token"; exit 1; }
set +e
bad="$(SMARM_ADMIN_TOKEN="short-secret" "$server" --config "$config" --check-config 2>&1)"
rc=$?
set -e
[ "$rc" = 2 ] || { echo "a short token: exit $rc"; exit 1; }
grep -q "admin.token (from SMARM_ADMIN_TOKEN) is not allowed: shorter than 16" <<<"$bad" ||
  { echo "short token message: $bad"; exit 1; }
! grep -q "short-secret" <<<"$bad" || { echo "the error echoes the token: $bad"; exit 1; }

# Admin off: the read-only routes on the main port.
start "$log.off" --admin.enabled=false
[ -z "$admin" ] || { echo "an admin listener with admin.enabled=false"; exit 1; }
[ "$(status "$port" /metrics)" = "HTTP/1.1 200 OK" ] || { echo "no /metrics on the main port"; exit 1; }
[ "$(status "$port" /debug/tree)" = "HTTP/1.1 200 OK" ] || { echo "no /debug/tree on the main port"; exit 1; }
kill -TERM "$pid"
wait "$pid"
echo ok
