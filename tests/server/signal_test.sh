#!/usr/bin/env bash
# smarm-server end to end: start on a free port, answer /readyz,
# /plaintext, the kv routes and the workers pool over a raw socket (bash /dev/tcp), stop on SIGTERM with exit
# status 0 within the drain deadline.
set -euo pipefail
server="$1"
config="$2"
log="$(mktemp)"
trap 'kill -9 "$pid" 2>/dev/null || true; rm -f "$log"' EXIT
"$server" --config "$config" --http.host=127.0.0.1 --http.port=0 --admin.port=0 --http.drain_timeout=5s \
  >"$log" 2>&1 &
pid=$!
port=""
for _ in $(seq 1 100); do
  port="$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log" | head -1)"
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { echo "server did not start:"; cat "$log"; exit 1; }

get() {  # get PATH -> prints the status line
  exec 3<>"/dev/tcp/127.0.0.1/$port"
  printf 'GET %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n' "$1" >&3
  head -1 <&3 | tr -d '\r'
  exec 3<&-
}
ready=""
for _ in $(seq 1 100); do  # the services come up beside the listener
  [ "$(get /readyz)" = "HTTP/1.1 200 OK" ] && { ready=1; break; }
  sleep 0.1
done
[ -n "$ready" ] || { echo "readyz never 200"; exit 1; }
[ "$(get /plaintext)" = "HTTP/1.1 200 OK" ] || { echo "plaintext not 200"; exit 1; }
[ "$(get /missing)" = "HTTP/1.1 404 Not Found" ] || { echo "missing not 404"; exit 1; }
exec 3<>"/dev/tcp/127.0.0.1/$port"
printf 'PUT /kv/greeting HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello' >&3
put_status="$(head -1 <&3 | tr -d '\r')"
exec 3<&-
[ "$put_status" = "HTTP/1.1 201 Created" ] || { echo "kv PUT: $put_status"; exit 1; }
[ "$(get /kv/greeting)" = "HTTP/1.1 200 OK" ] || { echo "kv GET not 200"; exit 1; }
# /metrics is the admin listener's (admin_test.sh), not the main port's.
[ "$(get /metrics)" = "HTTP/1.1 404 Not Found" ] || { echo "metrics on the main port"; exit 1; }
exec 3<>"/dev/tcp/127.0.0.1/$port"
printf 'POST /work/sha256 HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc' >&3
digest="$(tr -d '\r' <&3 | tail -1)"
exec 3<&-
[ "$digest" = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" ] ||
  { echo "sha256: $digest"; exit 1; }

kill -TERM "$pid"
for _ in $(seq 1 150); do
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$pid" 2>/dev/null; then echo "still running 15 s after SIGTERM"; exit 1; fi
wait "$pid"
status=$?
grep -q "draining" "$log" || { echo "no drain logged:"; cat "$log"; exit 1; }
echo "ok (exit $status)"
exit "$status"
