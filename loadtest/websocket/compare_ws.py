#!/usr/bin/env python3
"""WebSocket echo: smarm-server's GET /ws/echo vs Node's ws (echo.js, Debian
node-ws) and Go's golang.org/x/net/websocket (loadtest/go/wsecho, Debian
golang-golang-x-net-dev), side by side in interleaved rounds.

Loads, each with smarm-load's WebSocket mode (-t 1, closed loop, text
messages): 64 and 1,024 sockets, 32-byte and 4 KiB messages. The load
generator shares the two cores with the server, so besides round trips per
second and p99 the measure is each server's CPU per message (its /proc
utime + stime, all threads, over the run), next to smarm-load's own (its
rusage): 2 cores / (server + load generator CPU per message) is the most
round trips/s the machine allows that pair, the bound a throughput ratio
runs into. The floor (`smarm-http-floor --ws`, loadtest/http/floor.cpp: one
thread, epoll, unmask and send back, nothing else) runs the same rounds:
floor / the better peer is the most any one-threaded server's ratio can be
on this machine, so a target above it is the machine's bound, not the
server's. Then memory: 10,000 sockets
opened and left idle (smarm-load open loop at 1 message/s in all), the
server's RSS growth per socket.

Usage: python3 loadtest/websocket/compare_ws.py [build/release]
         [--rounds 3] [--duration 5] [--idle 10000]
Needs golang-go, golang-golang-x-net-dev, nodejs, node-ws (BENCH_PACKAGES).
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from peerlib import ROOT, wait_port  # noqa: E402

PORTS = {"smarm": 18300, "go": 18301, "node": 18302, "floor": 18303}
PEERS = ("go", "node")
TICK = os.sysconf("SC_CLK_TCK")
LOADS = [("c64_32B", 64, "32"), ("c64_4KiB", 64, "4KiB"), ("c1024_32B", 1024, "32"),
         ("c1024_4KiB", 1024, "4KiB")]


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def many_fds():
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    n = 65536 if hard == resource.RLIM_INFINITY else min(65536, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (n, hard))


def children_cpu():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_round(load, port, pid, conns, sizes, duration):
    c0, l0 = cpu_seconds(pid), children_cpu()
    cmd = [load, f"ws://127.0.0.1:{port}/ws/echo", "-t", "1", "-c", str(conns), "--ws-sizes",
           sizes, "-d", f"{duration}s", "-q", "--json", "-"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=duration + 60,
                         preexec_fn=many_fds).stdout
    c1, l1 = cpu_seconds(pid), children_cpu()
    r = json.loads(out[out.index('{"config"'):])
    # Both CPU figures span the whole run (connects, warm-up end, the
    # last partial second) but are divided by the messages counted: a
    # slight overstatement, the same for every server.
    n = max(r["requests"], 1)
    cpu_us, load_us = (c1 - c0) * 1e6 / n, (l1 - l0) * 1e6 / n
    return {"rps": r["rate"], "p99_ms": r["latency_us"]["p99"] / 1e3, "cpu_us": cpu_us,
            "load_us": load_us, "bound": 2e6 / (cpu_us + load_us), "errors": r["error_total"]}


def idle_memory(load, port, pid, n):
    """RSS growth per socket with `n` sockets open and idle (KiB)."""
    before = rss_kib(pid)
    p = subprocess.Popen([load, f"ws://127.0.0.1:{port}/ws/echo", "-t", "1", "-c", str(n),
                          "-R", "1", "-d", "20s", "-q", "--timeout", "20s"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         preexec_fn=many_fds)
    # Wait until the sockets are up (the server's fds), then let it settle.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if len(os.listdir(f"/proc/{pid}/fd")) >= n:
            break
        time.sleep(0.2)
    opened = len(os.listdir(f"/proc/{pid}/fd"))
    time.sleep(2)
    after = rss_kib(pid)
    p.terminate()
    p.wait()
    return (after - before) / max(n, 1), opened


def spread(xs, fmt="{:.2f}"):
    return f"{fmt.format(statistics.median(xs))} ({fmt.format(min(xs))}..{fmt.format(max(xs))})"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--idle", type=int, default=10000, help="idle sockets opened (0: skip)")
    ap.add_argument("--loads", default=",".join(l[0] for l in LOADS),
                    help="comma-separated subset of " + ", ".join(l[0] for l in LOADS))
    a = ap.parse_args()
    wanted = a.loads.split(",")
    unknown = [w for w in wanted if w not in {l[0] for l in LOADS}]
    if unknown:
        raise SystemExit(f"compare_ws: unknown load(s) {', '.join(unknown)}")
    loads = [l for l in LOADS if l[0] in wanted]
    server = os.path.join(a.build, "services", "smarm-server")
    load = os.path.join(a.build, "loadtest", "load", "smarm-load")
    tmp = tempfile.mkdtemp(prefix="smarm-ws-bench-")
    env = dict(os.environ, GO111MODULE="off", GOPATH="/usr/share/gocode",
               GOCACHE=os.path.join(tmp, "gocache"))
    go = os.path.join(tmp, "go_wsecho")
    subprocess.run(["go", "build", "-o", go,
                    os.path.join(ROOT, "loadtest", "go", "wsecho", "main.go")], check=True, env=env)
    cmds = {
        "smarm": [server, "--config", os.path.join(ROOT, "config", "smarm.yaml"),
                  f"--http.port={PORTS['smarm']}", "--http.host=127.0.0.1", "--admin.port=0",
                  "--http.max_connections=20000", "--log.level=warn"],
        "go": [go, f"127.0.0.1:{PORTS['go']}"],
        "node": ["node", os.path.join(ROOT, "loadtest", "websocket", "echo.js"),
                 str(PORTS["node"])],
    }
    floor = os.path.join(a.build, "loadtest", "http", "smarm-http-floor")
    if os.path.exists(floor):
        cmds["floor"] = [floor, str(PORTS["floor"]), "--ws"]
    procs = {}
    try:
        for name, cmd in cmds.items():
            procs[name] = subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL, preexec_fn=many_fds)
        for name in procs:
            if not wait_port(PORTS[name]):
                raise SystemExit(f"{name} did not start")
        for name in procs:  # warm-up: JIT, stacks, pools
            run_round(load, PORTS[name], procs[name].pid, 64, "32", 2)
        res = {(n, l[0]): [] for n in procs for l in loads}
        for r in range(a.rounds):
            for label, conns, sizes in loads:
                order = list(procs)
                order = order[r % len(order):] + order[:r % len(order)]
                for name in order:
                    m = run_round(load, PORTS[name], procs[name].pid, conns, sizes, a.duration)
                    res[(name, label)].append(m)
                    print(f"round {r + 1} {label:11} {name:6} {m['rps']:9.0f} msg/s  "
                          f"p99 {m['p99_ms']:6.2f} ms  server {m['cpu_us']:6.2f} us/msg  "
                          f"load {m['load_us']:6.2f} us/msg  bound {m['bound']:9.0f}  "
                          f"errors {m['errors']}", flush=True)
        memory = {}
        for name in procs if a.idle > 0 else []:
            memory[name] = idle_memory(load, PORTS[name], procs[name].pid, a.idle)
            print(f"idle {name:6} {memory[name][0]:6.2f} KiB per socket "
                  f"({memory[name][1]} fds open)", flush=True)
    finally:
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            p.wait()

    print("\n| load | server | msg/s | p99 ms | server CPU us/msg | smarm-load CPU us/msg | "
          "2 cores / both | smarm/peer msg/s | peer/smarm CPU per msg |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label, _, _ in loads:
        for name in procs:
            rs = res[(name, label)]
            rps = [m["rps"] for m in rs]
            cpu = [m["cpu_us"] for m in rs]
            ratio_rps = ratio_cpu = "-"
            if name != "smarm":
                sm = res[("smarm", label)]
                ratio_rps = spread([s["rps"] / p["rps"] for s, p in zip(sm, rs)])
                ratio_cpu = spread([p["cpu_us"] / s["cpu_us"] for s, p in zip(sm, rs)])
            print(f"| {label} | {name} | {spread(rps, '{:.0f}')} | "
                  f"{spread([m['p99_ms'] for m in rs])} | {spread(cpu)} | "
                  f"{spread([m['load_us'] for m in rs])} | "
                  f"{spread([m['bound'] for m in rs], '{:.0f}')} | {ratio_rps} | {ratio_cpu} |")
    if "floor" in procs:
        print("\n| load | smarm / better peer | floor / better peer | smarm / floor |")
        print("|---|---|---|---|")
        for label, _, _ in loads:
            best = [max(res[(p, label)][i]["rps"] for p in PEERS if p in procs)
                    for i in range(a.rounds)]
            sm = [m["rps"] for m in res[("smarm", label)]]
            fl = [m["rps"] for m in res[("floor", label)]]
            print(f"| {label} | {spread([s / b for s, b in zip(sm, best)])} | "
                  f"{spread([f / b for f, b in zip(fl, best)])} | "
                  f"{spread([s / f for s, f in zip(sm, fl)])} |")
    if not memory:
        return
    print("\n| server | KiB per idle socket |")
    print("|---|---|")
    for name in procs:
        print(f"| {name} | {memory[name][0]:.1f} |")


if __name__ == "__main__":
    main()
