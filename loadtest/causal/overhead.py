#!/usr/bin/env python3
"""What causal profiling costs smarm-server: causal.http on vs off with no
experiment running, and the throughput during an experiment.

Runs each scenario with smarm-load against a fresh smarm-server (default
config but --schedulers, kv in memory) with causal.http false (A), with
it true (B), and with it true while POST /debug/causal runs on its admin
listener over the same interval (B+exp), in interleaved rounds (the order
reverses every other round). Per
round it records req/s and the server's CPU per request (utime + stime from
/proc, over the requests answered); prints ratios B/A and experiment/B as
median (min..max) over the rounds.

Usage: loadtest/causal/overhead.py [--build build/release] [--rounds 6]
                                   [--duration 6] [--scenarios plaintext,kv]
                                   [--schedulers 1]
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from peerlib import ROOT, wait_port  # noqa: E402

SCEN = os.path.join(ROOT, "loadtest", "scenarios")
SCENARIOS = {
    "plaintext": (["/plaintext", "-t", "1", "-c", "64"], "GET /plaintext"),
    "kv": (["/", "-t", "1", "-c", "64", "-s", os.path.join(SCEN, "kv-90-10.yaml")],
           "kv.map,GET /kv/{key},GET /kv/{key} @kv,PUT /kv/{key} @kv"),
}
PORTS = {"A": (18200, 18201)}
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def load(load_bin, port, scenario, duration):
    args = SCENARIOS[scenario][0]
    cmd = [load_bin, "http://127.0.0.1:%d%s" % (port, args[0]), *args[1:], "-d", f"{duration}s",
           "-w", "1s", "-q", "--json", "-"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 60)
    if p.returncode != 0:
        raise RuntimeError(f"{cmd}: exit {p.returncode}: {p.stderr}")
    r = json.loads(p.stdout[p.stdout.index("{"):])
    if r["error_total"] != 0:
        raise RuntimeError(f"{cmd}: errors {r['errors']}")
    return r


def measure(load_bin, proc, port, scenario, duration, experiment_on=None):
    """req/s and server CPU us per request; with experiment_on=(admin port,
    sites), a causal profile runs over the measured interval."""
    result = {}

    def profile():
        form = ("sites=%s&speedups=0,50&window_ms=100&duration=%dms&format=ranking"
                "&rank=http.requests" % (experiment_on[1].replace(" ", "+").replace("{", "%7B")
                                         .replace("}", "%7D").replace("@", "%40"),
                                         (duration - 1) * 1000))
        req = urllib.request.Request("http://127.0.0.1:%d/debug/causal" % experiment_on[0],
                                     data=form.encode(), method="POST")
        try:
            result["profile"] = urllib.request.urlopen(req, timeout=duration * 4 + 30).read().decode()
        except urllib.error.HTTPError as e:
            result["error"] = "POST /debug/causal: %d %s" % (e.code, e.read().decode())

    t = None
    c0 = cpu_seconds(proc.pid)
    if experiment_on:
        # Starts after smarm-load's 1 s warm-up, like smarm-load --causal.
        t = threading.Timer(1.0, profile)
        t.start()
    r = load(load_bin, port, scenario, duration)
    c1 = cpu_seconds(proc.pid)
    if t:
        t.join()
        if "error" in result or "profile" not in result:
            raise RuntimeError(result.get("error", "the profile request failed"))
    # The CPU interval includes the warm-up's requests: count them too.
    answered = r["requests"] * (duration + 1) / duration
    return {"rps": r["rate"], "cpu_us": (c1 - c0) * 1e6 / answered,
            "profile": result.get("profile")}


def spread(xs):
    return f"{statistics.median(xs):.3f} ({min(xs):.3f}..{max(xs):.3f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--duration", type=int, default=6)
    ap.add_argument("--scenarios", default="plaintext,kv")
    ap.add_argument("--schedulers", type=int, default=1,
                    help="the server's (default 1: with the load generator on the same two "
                         "cores, two read ±20%% run to run)")
    a = ap.parse_args()
    server = os.path.join(a.build, "services", "smarm-server")
    load_bin = os.path.join(a.build, "loadtest", "load", "smarm-load")
    base = ["--config", os.path.join(ROOT, "config", "smarm.yaml"), "--http.host=127.0.0.1",
            "--log.level=warn", f"--runtime.schedulers={a.schedulers}"]
    # A fresh server per measurement: two long-lived processes read 11%
    # apart with the same settings (placement, not the hooks).
    def fresh(causal):
        port, admin = PORTS["A"]
        p = subprocess.Popen([server, *base, f"--http.port={port}", f"--admin.port={admin}",
                              f"--causal.http={causal}"])
        if not wait_port(port) or not wait_port(admin):
            p.kill()
            sys.exit("smarm-server did not start")
        return p, port, admin

    def once(s, causal, experiment):
        p, port, admin = fresh(causal)
        try:
            return measure(load_bin, p, port, s, a.duration,
                           (admin, SCENARIOS[s][1]) if experiment else None)
        finally:
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=30)

    res = {}
    runs = {"A": ("false", False), "B": ("true", False), "B+exp": ("true", True)}
    for r in range(a.rounds):
        for s in a.scenarios.split(","):
            order = ["A", "B", "B+exp"] if r % 2 == 0 else ["B+exp", "B", "A"]
            for name in order:
                res.setdefault((s, name), []).append(once(s, *runs[name]))
            print(f"round {r + 1} {s:9s} " + "  ".join(
                f"{n} {res[(s, n)][-1]['rps']:8.0f} req/s {res[(s, n)][-1]['cpu_us']:6.1f} us"
                for n in ("A", "B", "B+exp")), flush=True)
    print("\n| scenario | on/off req/s | on/off CPU per request | during an experiment / on, req/s |")
    print("|---|---|---|---|")
    for s in a.scenarios.split(","):
        A, B, E = res[(s, "A")], res[(s, "B")], res[(s, "B+exp")]
        print(f"| {s} | {spread([b['rps'] / x['rps'] for b, x in zip(B, A)])} | "
              f"{spread([b['cpu_us'] / x['cpu_us'] for b, x in zip(B, A)])} | "
              f"{spread([e['rps'] / b['rps'] for e, b in zip(E, B)])} |")
    last = res[(a.scenarios.split(",")[-1], "B+exp")][-1]["profile"]
    print("\nthe last experiment's ranking:\n" + (last or "(none)"))


if __name__ == "__main__":
    main()
