#!/usr/bin/env bash
# Builds (and with `test`, runs and probes) the smarm-server container image.
#
#   scripts/image.sh build   -> image smarm:latest from docker/Dockerfile
#   scripts/image.sh test    -> build, run it with host networking on a free
#                               port, probe /healthz, /readyz, /plaintext and
#                               /metrics, check HEALTHCHECK's command and the
#                               non-root user, stop it with SIGTERM
#
# Engine: docker when `docker info` answers, else podman (buildah underneath)
# with vfs storage and chroot isolation, which work without a daemon or
# overlay support. No image registry is reachable here, so when
# debian:bookworm is missing it is made locally: mmdebstrap --variant=minbase
# bookworm, imported and tagged debian:bookworm.
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-build}"
image="${SMARM_IMAGE:-smarm:latest}"

if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
  engine=(docker)
  build=(docker build)
  run=(docker run)
else
  command -v podman >/dev/null 2>&1 || { echo "image.sh: neither a docker engine nor podman"; exit 1; }
  engine=(podman --storage-driver vfs)
  # docker format: OCI image configs have no HEALTHCHECK (podman drops it).
  build=("${engine[@]}" build --format docker --isolation chroot --network host)
  # runc with explicit ulimits works in this sandbox (crun and the default
  # rlimits do not).
  run=("${engine[@]}" run --runtime runc --ulimit nofile=1024:1024 --ulimit nproc=1000:1000)
fi

if ! "${engine[@]}" image exists debian:bookworm 2>/dev/null &&
   ! "${engine[@]}" image inspect debian:bookworm >/dev/null 2>&1; then
  echo "image.sh: making debian:bookworm with mmdebstrap (no registry here)"
  command -v mmdebstrap >/dev/null 2>&1 || { echo "image.sh: mmdebstrap is not installed"; exit 1; }
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  mmdebstrap --quiet --variant=minbase bookworm "$tmp/rootfs.tar" http://deb.debian.org/debian
  "${engine[@]}" import "$tmp/rootfs.tar" debian:bookworm >/dev/null
fi

echo "image.sh: building $image with ${build[*]}"
"${build[@]}" -t "$image" -f docker/Dockerfile .

[ "$mode" = "test" ] || exit 0

port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
aport="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
name="smarm-image-test-$$"
cleanup() { "${engine[@]}" rm -f "$name" >/dev/null 2>&1 || true; }
trap cleanup EXIT
"${run[@]}" -d --name "$name" --network host -e SMARM_HTTP_PORT="$port" -e SMARM_ADMIN_PORT="$aport" "$image" >/dev/null

get() {  # get PATH [PORT] -> the whole response
  exec 3<>"/dev/tcp/127.0.0.1/${2:-$port}" || return 1
  printf 'GET %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n' "$1" >&3
  tr -d '\r' <&3
  exec 3<&-
}
ok=""
for _ in $(seq 1 100); do
  if [ "$(get /readyz 2>/dev/null | head -1)" = "HTTP/1.1 200 OK" ]; then ok=1; break; fi
  sleep 0.2
done
[ -n "$ok" ] || { echo "image.sh: the container never became ready"; "${engine[@]}" logs "$name"; exit 1; }
[ "$(get /healthz | head -1)" = "HTTP/1.1 200 OK" ] || { echo "image.sh: /healthz"; exit 1; }
[ "$(get /plaintext | tail -1)" = "Hello, World!" ] || { echo "image.sh: /plaintext"; exit 1; }
get /metrics | head -1 | grep -q ' 404 ' || { echo "image.sh: /metrics on the public port"; exit 1; }
get /metrics "$aport" | grep -q '^smarm_http_requests_total{' || { echo "image.sh: /metrics lacks the HTTP family"; exit 1; }
get /metrics "$aport" | grep -q '^# HELP process_resident_memory_bytes' || { echo "image.sh: /metrics lacks process families"; exit 1; }
user="$("${engine[@]}" exec "$name" id -u)"
[ "$user" = "10001" ] || { echo "image.sh: runs as uid $user, not 10001"; exit 1; }
# The HEALTHCHECK command itself, run inside the container.
# docker keeps it under .Config, podman's image inspect at the top.
hc="$("${engine[@]}" image inspect --format '{{json .Config.Healthcheck}}' "$image" 2>/dev/null ||
      "${engine[@]}" image inspect --format '{{json .Healthcheck}}' "$image")"
echo "$hc" | grep -q healthz || { echo "image.sh: no HEALTHCHECK on /healthz: $hc"; exit 1; }
if [ "${engine[0]}" = podman ]; then
  # podman runs the image's own HEALTHCHECK on demand (its timers need
  # systemd, absent here: the "unable to get systemd connection" lines).
  "${engine[@]}" healthcheck run "$name" || { echo "image.sh: HEALTHCHECK reports unhealthy"; exit 1; }
fi
"${engine[@]}" exec "$name" /bin/bash -c "exec 3<>/dev/tcp/127.0.0.1/$port && printf 'GET /healthz HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n' >&3 && head -n1 <&3 | grep -q ' 200 '" ||
  { echo "image.sh: the health check command fails inside the container"; exit 1; }
# What compose does, without an engine for prom/prometheus: Debian's
# Prometheus with docker/prometheus.yml (target pointed at this container)
# scrapes it, and promtool checks the exposition and the config.
if command -v prometheus >/dev/null 2>&1; then
  pdir="$(mktemp -d)"
  sed "s/smarm:9090/127.0.0.1:$aport/" docker/prometheus.yml >"$pdir/prometheus.yml"
  promtool check config "$pdir/prometheus.yml" >/dev/null || { echo "image.sh: promtool rejects docker/prometheus.yml"; exit 1; }
  get /metrics "$aport" | sed '1,/^$/d' | promtool check metrics || { echo "image.sh: promtool rejects /metrics"; exit 1; }
  pport="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  prometheus --config.file="$pdir/prometheus.yml" --storage.tsdb.path="$pdir/data" \
    --web.listen-address="127.0.0.1:$pport" >"$pdir/log" 2>&1 &
  ppid_=$!
  up=""
  for _ in $(seq 1 60); do
    q="$(python3 - "$pport" <<'PY' 2>/dev/null || true
import json, sys, urllib.request
r = json.load(urllib.request.urlopen(
    "http://127.0.0.1:%s/api/v1/query?query=up%%7Bjob%%3D%%22smarm%%22%%7D" % sys.argv[1], timeout=2))
res = r["data"]["result"]
print(res[0]["value"][1] if res else "")
PY
)"
    if [ "$q" = "1" ]; then up=1; break; fi
    sleep 0.5
  done
  kill "$ppid_" 2>/dev/null || true
  wait "$ppid_" 2>/dev/null || true
  [ -n "$up" ] || { echo "image.sh: Prometheus never scraped the container"; cat "$pdir/log"; rm -rf "$pdir"; exit 1; }
  rm -rf "$pdir"
  echo "image.sh: Prometheus (docker/prometheus.yml) scrapes it: up{job=\"smarm\"} = 1"
else
  echo "image.sh: prometheus not installed: the scrape check is skipped"
fi
"${engine[@]}" stop -t 20 "$name" >/dev/null
code="$("${engine[@]}" inspect --format '{{.State.ExitCode}}' "$name")"
[ "$code" = "0" ] || { echo "image.sh: exit status $code after SIGTERM"; "${engine[@]}" logs "$name"; exit 1; }
echo "image.sh: $image serves /healthz, /readyz, /plaintext and /metrics as uid 10001, stops cleanly"
