#!/usr/bin/env python3
"""Loopback TCP echo: smarm vs Go, as ratios, in interleaved rounds.

Usage: compare_echo.py BUILD_DIR [--rounds N] [--seconds S]

Builds loadtest/go/echo (Go's net package: goroutine per connection) and
runs, per round and per connection count (1, 64): Go, smarm with persistent
socket registration, smarm with oneshot registration. Prints round trips per
second, ratios (median and min..max over rounds) and, from one extra
`strace -c -f` run per smarm mode, syscalls per round trip. A benchmark,
not a test: exit status 0 whatever the numbers.
"""
import argparse, os, re, shutil, statistics, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from peerlib import ROOT, go_build  # noqa: E402


def build_go(out):
    return go_build(os.path.join(ROOT, "loadtest", "go", "echo", "main.go"), out, "go_echo")


def rt_per_s(out):
    return float(re.search(r"rt_per_s=([0-9.]+)", out).group(1))


def run_go(exe, conns, seconds):
    env = dict(os.environ, GOMAXPROCS="2")
    return rt_per_s(subprocess.run([exe, "-conns", str(conns), "-seconds", str(seconds)],
                                   capture_output=True, text=True, check=True, env=env,
                                   timeout=120).stdout)


def run_smarm(exe, conns, seconds, mode):
    return rt_per_s(subprocess.run([exe, str(conns), str(seconds), "64", mode], capture_output=True,
                                   text=True, check=True, timeout=120).stdout)


def syscalls_per_rt(exe, conns, mode):
    if not shutil.which("strace"):
        return None
    with tempfile.NamedTemporaryFile(mode="r", suffix=".txt") as f:
        out = subprocess.run(["strace", "-f", "-c", "-o", f.name, exe, str(conns), "1", "64", mode],
                             capture_output=True, text=True, check=True, timeout=120).stdout
        rts = rt_per_s(out)  # 1 s run: round trips == rate
        table = f.read()
    calls = {}
    for line in table.splitlines():
        m = re.match(r"\s*[0-9.]+\s+[0-9.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)$", line)
        if m:
            calls[m.group(2)] = int(m.group(1))
    pick = ["recvfrom", "sendto", "epoll_wait", "epoll_ctl", "futex"]
    return {k: round(calls.get(k, 0) / max(rts, 1), 2) for k in pick}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3)
    a = ap.parse_args()
    echo = os.path.join(a.build, "loadtest", "io", "smarm-echo")
    with tempfile.TemporaryDirectory() as tmp:
        go = build_go(tmp)
        res = {}
        for r in range(a.rounds):
            for conns in (1, 64):
                g = run_go(go, conns, a.seconds)
                p = run_smarm(echo, conns, a.seconds, "persistent")
                o = run_smarm(echo, conns, a.seconds, "oneshot")
                res.setdefault(conns, []).append((g, p, o))
                print(f"round {r + 1} conns={conns}: go {g:.0f}  smarm persistent {p:.0f}  "
                      f"oneshot {o:.0f} round trips/s", flush=True)
    print("\n| connections | smarm persistent / Go | smarm oneshot / Go | persistent / oneshot |")
    print("|---|---|---|---|")
    for conns, rows in sorted(res.items()):
        def fmt(xs):
            return f"{statistics.median(xs):.2f} ({min(xs):.2f}..{max(xs):.2f})"
        print(f"| {conns} | {fmt([p / g for g, p, o in rows])} | {fmt([o / g for g, p, o in rows])} "
              f"| {fmt([p / o for g, p, o in rows])} |")
    for mode in ("persistent", "oneshot"):
        print(f"syscalls per round trip (64 connections, {mode}, strace -c -f):",
              syscalls_per_rt(echo, 64, mode))


if __name__ == "__main__":
    main()
