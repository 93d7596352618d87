#!/usr/bin/env python3
"""A database point select: smarm-server's GET /notes/{id} vs Go net/http +
pgx (loadtest/go/notes), same PostgreSQL, same pool size, side by side.

Starts a throwaway PostgreSQL (scripts/pgtest.sh, Unix socket), seeds
`notes` with ids 0..9999, starts both servers (pool of --pool each), then
runs smarm-load (notes-get.yaml: random ids) against each in interleaved
rounds (A B, B A, ...). Everything shares the two cores, so the measure is
each app server's own CPU per request (its /proc utime + stime, all
threads) beside PostgreSQL's (the postmaster and its children), plus
requests/s, p99 and errors; ratios smarm / Go per round, median (min..max).

Usage: python3 loadtest/postgres/compare_notes.py [build/release]
         [--rounds 3] [--duration 8] [--connections 64] [--pool 10]
Needs golang-go, golang-github-jackc-pgx-v4-dev, postgresql.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from peerlib import ROOT, wait_port  # noqa: E402

PGTEST = os.path.join(ROOT, "scripts", "pgtest.sh")
SCENARIO = os.path.join(ROOT, "loadtest", "scenarios", "notes-get.yaml")
PORTS = {"smarm": 18200, "go": 18201}
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def postgres_pids(pgdir):
    with open(os.path.join(pgdir, "data", "postmaster.pid")) as f:
        master = int(f.readline())
    pids = [master]
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == master:
                        pids.append(int(p))
            except OSError:
                pass
    return pids


def postgres_cpu(pgdir):
    """pid -> CPU seconds of the postmaster and its children."""
    out = {}
    for p in postgres_pids(pgdir):
        try:
            out[p] = cpu_seconds(p)
        except OSError:
            pass  # a backend that ended meanwhile
    return out


def postgres_delta(before, after):
    """CPU the processes alive at both samples spent between them."""
    return sum(after[p] - before[p] for p in before.keys() & after.keys())


def run_round(load, port, pid, pgdir, a):
    c0, p0 = cpu_seconds(pid), postgres_cpu(pgdir)
    cmd = [load, f"http://127.0.0.1:{port}/", "-t", "1", "-c", str(a.connections), "-s", SCENARIO,
           "-d", f"{a.duration}s", "-q", "--json", "-"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True,
                         timeout=a.duration + 60).stdout
    c1, p1 = cpu_seconds(pid), postgres_cpu(pgdir)
    pg = postgres_delta(p0, p1)
    r = json.loads(out[out.index('{"config"'):])
    n = max(r["requests"], 1)
    bad = r["error_total"] + sum(v for k, v in r["statuses"].items() if k != "200")
    return {"rps": r["rate"], "p99_ms": r["latency_us"]["p99"] / 1e3,
            "cpu_us": (c1 - c0) * 1e6 / n, "pg_us": pg * 1e6 / n, "errors": bad}


def spread(xs):
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}..{max(xs):.2f})"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=8)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--pool", type=int, default=10)
    a = ap.parse_args()
    server = os.path.join(a.build, "services", "smarm-server")
    load = os.path.join(a.build, "loadtest", "load", "smarm-load")
    tmp = tempfile.mkdtemp(prefix="smarm-notes-bench-")
    pgdir = f"/tmp/smarm-bench-pg-{os.getpid()}"
    env = dict(os.environ, GO111MODULE="off", GOPATH="/usr/share/gocode",
               GOCACHE=os.path.join(tmp, "gocache"))
    go = os.path.join(tmp, "go_notes")
    subprocess.run(["go", "build", "-o", go, os.path.join(ROOT, "loadtest", "go", "notes",
                                                          "main.go")], check=True, env=env)
    subprocess.run([PGTEST, "init", pgdir], check=True)
    procs = {}
    try:
        dsn = f"host={pgdir} port=5432 user=smarm dbname=postgres"
        subprocess.run(["psql", dsn, "-q", "-c",
                        "create table notes (id bigint primary key, body text not null); "
                        "insert into notes select g, 'note number ' || g "
                        "from generate_series(0, 9999) g; analyze notes;"], check=True)
        procs["smarm"] = subprocess.Popen(
            [server, "--config", os.path.join(ROOT, "config", "smarm.yaml"),
             f"--http.port={PORTS['smarm']}", "--admin.port=0", f"--postgres.url={dsn}",
             f"--postgres.pool_size={a.pool}", "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs["go"] = subprocess.Popen([go, f"127.0.0.1:{PORTS['go']}", dsn, str(a.pool)],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for name in procs:
            if not wait_port(PORTS[name]):
                raise SystemExit(f"{name} did not start")
        for name in procs:  # warm: pools open, statements prepared, caches hot
            run_round(load, PORTS[name], procs[name].pid, pgdir,
                      argparse.Namespace(connections=a.connections, duration=2))
        res = {n: [] for n in procs}
        for r in range(a.rounds):
            order = ["smarm", "go"] if r % 2 == 0 else ["go", "smarm"]
            for name in order:
                m = run_round(load, PORTS[name], procs[name].pid, pgdir, a)
                res[name].append(m)
                print(f"round {r + 1} {name:6} {m['rps']:9.0f} req/s  p99 {m['p99_ms']:6.2f} ms  "
                      f"server {m['cpu_us']:6.2f} us/req  postgres {m['pg_us']:6.2f} us/req  "
                      f"errors {m['errors']}", flush=True)
    finally:
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
        subprocess.run([PGTEST, "destroy", pgdir])
    print()
    print("| server | req/s | p99 ms | server CPU us/req | PostgreSQL CPU us/req | errors |")
    print("|---|---|---|---|---|---|")
    for name, ms in res.items():
        print(f"| {name} | {spread([m['rps'] for m in ms])} | "
              f"{statistics.median(m['p99_ms'] for m in ms):.2f} | "
              f"{spread([m['cpu_us'] for m in ms])} | {spread([m['pg_us'] for m in ms])} | "
              f"{sum(m['errors'] for m in ms)} |")
    rps = [s["rps"] / g["rps"] for s, g in zip(res["smarm"], res["go"])]
    cpu = [s["cpu_us"] / g["cpu_us"] for s, g in zip(res["smarm"], res["go"])]
    print()
    print(f"smarm / Go per round: req/s {spread(rps)} (goal >= 1.1), "
          f"server CPU per request {spread(cpu)} (goal <= 0.7)")


if __name__ == "__main__":
    main()
