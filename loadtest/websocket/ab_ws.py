#!/usr/bin/env python3
"""A/B two smarm-server builds on WebSocket echo: smarm-load's ws mode
against GET /ws/echo (-t 1, text messages of --sizes, default 32 bytes), interleaved pairs (A B,
B A, ...), a fresh server per run; the median per-pair ratio B/A of round
trips/s and of the server's CPU per message (/proc utime + stime over the
measured run, after a 1 s warm-up run).

Usage: python3 loadtest/websocket/ab_ws.py --a OLD/smarm-server --b NEW/smarm-server
         [--conns 64,1024] [--pairs 5] [--duration 4] [--load build/release/...]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from peerlib import ROOT, wait_port  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
PORT = 18400


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def run(exe, load, conns, duration, sizes):
    p = subprocess.Popen([exe, "--config", os.path.join(ROOT, "config", "smarm.yaml"),
                          f"--http.port={PORT}", "--http.host=127.0.0.1", "--admin.port=0",
                          "--log.level=warn"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if not wait_port(PORT):
            raise SystemExit(f"{exe} did not start")
        url = f"ws://127.0.0.1:{PORT}/ws/echo"
        subprocess.run([load, url, "-t", "1", "-c", str(conns), "-d", "1s", "-q"],
                       capture_output=True, check=True)
        c0 = cpu_seconds(p.pid)
        out = subprocess.run([load, url, "-t", "1", "-c", str(conns), "-d", f"{duration}s", "-q",
                              "--ws-sizes", sizes, "--json", "-"], capture_output=True, text=True, check=True).stdout
        c1 = cpu_seconds(p.pid)
    finally:
        p.terminate()
        p.wait()
    r = json.loads(out[out.index('{"config"'):])
    return r["rate"], (c1 - c0) * 1e6 / max(r["requests"], 1)


def spread(xs):
    return f"{statistics.median(xs):.3f} ({min(xs):.3f}..{max(xs):.3f})"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True)
    ap.add_argument("--b", required=True)
    ap.add_argument("--conns", default="64,1024")
    ap.add_argument("--sizes", default="32", help="smarm-load --ws-sizes")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--duration", type=int, default=4)
    ap.add_argument("--load", default=os.path.join(ROOT, "build", "release", "loadtest", "load",
                                                   "smarm-load"))
    a = ap.parse_args()
    for conns in (int(c) for c in a.conns.split(",")):
        rate, cpu = [], []
        for i in range(a.pairs):
            res = {}
            for k in (["a", "b"] if i % 2 == 0 else ["b", "a"]):
                res[k] = run(getattr(a, k), a.load, conns, a.duration, a.sizes)
            rate.append(res["b"][0] / res["a"][0])
            cpu.append(res["b"][1] / res["a"][1])
            print(f"c{conns} pair {i + 1}: A {res['a'][0]:.0f} msg/s {res['a'][1]:.2f} us/msg  "
                  f"B {res['b'][0]:.0f} msg/s {res['b'][1]:.2f} us/msg", flush=True)
        print(f"c{conns}: B/A msg/s {spread(rate)}  CPU/msg {spread(cpu)}", flush=True)


if __name__ == "__main__":
    main()
