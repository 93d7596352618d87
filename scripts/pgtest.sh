#!/bin/sh
# A throwaway PostgreSQL server for the tests, on a Unix socket only.
#   pgtest.sh init DIR      fresh cluster in DIR/data, started (socket in DIR)
#   pgtest.sh start DIR     start it again (after stop)
#   pgtest.sh stop DIR [fast|immediate]
#   pgtest.sh destroy DIR   stop it and remove DIR
# Clients connect with "host=DIR port=5432 user=smarm dbname=postgres"
# (trust authentication: it listens on no TCP port). As root, the server
# runs as the "postgres" user (initdb refuses root), so DIR must be in a
# place that user can reach (e.g. /tmp).
set -eu
cmd=$1
dir=$2
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
[ -n "$bin" ] || bin=$(pg_config --bindir 2>/dev/null || true)
if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
    echo "pgtest.sh: PostgreSQL server binaries not found (apt install postgresql)" >&2
    exit 2
fi
as_owner() {
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
start() {
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w -t 60 \
        -o "-k $dir -c listen_addresses= -p 5432 -F -c max_connections=200" start >/dev/null
}
case $cmd in
init)
    as_owner "$bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$dir"
    mkdir -p "$dir"
    [ "$(id -u)" = 0 ] && chown postgres "$dir"
    as_owner "$bin/initdb" -D "$dir/data" -A trust -U smarm -E UTF8 --locale=C --no-sync \
        >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; exit 1; }
    start || { cat "$dir/log" >&2; exit 1; }
    ;;
start) start || { cat "$dir/log" >&2; exit 1; } ;;
stop) as_owner "$bin/pg_ctl" -D "$dir/data" -m "${3:-fast}" -w stop >/dev/null ;;
destroy)
    as_owner "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
    rm -rf "$dir"
    ;;
*) echo "pgtest.sh: unknown command $cmd" >&2; exit 2 ;;
esac
