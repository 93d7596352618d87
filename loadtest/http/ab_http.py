#!/usr/bin/env python3
"""A/B two HTTP servers under one wrk load: interleaved pairs, per-pair ratios.

Each server is started once (its command gets the port appended as the
first argument, so `smarm-hello` variants work as they are), warmed up,
then measured in pairs whose order alternates (A B, B A, ...), so a slow
spell of the shared machine hits both sides. Per pair it prints requests/s
and the server's CPU per request (utime + stime from /proc/PID/stat around
the run, all threads), and at the end the median and spread of the B/A
ratios of both. CPU per request is the more sensitive measure when the
load generator, not the server, bounds the rate.

Usage:
  python3 loadtest/http/ab_http.py --a "build/release/loadtest/http/smarm-hello" \\
      --a-args "1" --b "../exp/build/loadtest/http/smarm-hello" --b-args "1" \\
      [--load ka_t1_c64] [--pairs 8] [--duration 5]
  smarm-server: --port-flag=--http.port= --a-args "--config config/smarm.yaml --admin.port=0"
  Mixed servers: "{port}" in one side's arguments places its port there, e.g.
      --b-args "--config config/smarm.yaml --http.port={port} --admin.port=0"

Loads are compare_http.py's (ka_t1_c64, ka_t2_c256, close_t2_c32). Needs wrk.
"""
import argparse
import os
import shlex
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_http import LOADS, run_wrk, spread, stop_servers, wait_port  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True, help="server A's executable")
    ap.add_argument("--a-args", default="", help="A's arguments after the port")
    ap.add_argument("--b", required=True, help="server B's executable")
    ap.add_argument("--b-args", default="", help="B's arguments after the port")
    ap.add_argument("--load", default="ka_t1_c64", choices=sorted(LOADS))
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--port", type=int, default=18190)
    ap.add_argument("--port-flag", default="",
                    help="pass the port as this flag's value (e.g. --http.port=, for "
                         "smarm-server) instead of as the first argument")
    a = ap.parse_args()

    sides = {}
    for i, (name, exe, args) in enumerate((("A", a.a, a.a_args), ("B", a.b, a.b_args))):
        port = a.port + i
        if "{port}" in args:  # the port placed by the arguments themselves
            cmd = [exe, *shlex.split(args.replace("{port}", str(port)))]
        else:
            where = [a.port_flag + str(port)] if a.port_flag else [str(port)]
            cmd = [exe, *where, *shlex.split(args)]
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
        if not wait_port(port) or p.poll() is not None:
            for q, _ in sides.values():
                q.kill()
            p.kill()
            sys.exit(f"server {name} ({exe}) did not start on port {port}")
        sides[name] = (p, port)
    res = {"A": [], "B": []}
    try:
        for name, (p, port) in sides.items():
            run_wrk(port, a.load, 2)  # warm-up
        for i in range(a.pairs):
            order = ("A", "B") if i % 2 == 0 else ("B", "A")
            for name in order:
                p, port = sides[name]
                rps, _, err, us, _ = run_wrk(port, a.load, a.duration, p.pid)
                res[name].append((rps, us))
                print(f"pair {i + 1} {name} {rps:10.0f} req/s  {us:6.2f} us CPU/req  errors {err}",
                      flush=True)
    finally:
        stop_servers(p for p, _ in sides.values())
    rps = [b[0] / x[0] for x, b in zip(res["A"], res["B"])]
    cpu = [b[1] / x[1] for x, b in zip(res["A"], res["B"])]
    print(f"\n{a.load}: B/A req/s {spread(rps, 3)}   "
          f"B/A server CPU per request {spread(cpu, 3)}")


if __name__ == "__main__":
    main()
