#!/usr/bin/env python3
"""HTTP/2 plaintext (h2c): smarm-server vs nginx (1 and 2 workers) vs h2o,
and smarm-server's HTTP/2 against its own HTTP/1.1, same run.

Every server speaks cleartext HTTP/2 by prior knowledge on 127.0.0.1
(ports 18190-18193), started by this script and stopped by PID:
  nginx     nginx-light, 1 worker, `listen ... http2` (loadtest/h2/nginx.conf.tmpl)
  nginx2    the same with 2 workers
  h2o       Debian h2o 2.2, a thread per core (loadtest/h2/h2o.conf.tmpl); GET is
            a static file; its file handler answers POST with 405, so its POST
            load goes to /post/plaintext, a one-line mruby handler
  smarm     BUILD_DIR/services/smarm-server on config/smarm.yaml, HTTP/2 by prior
            knowledge on its HTTP port
  smarm-h1  the same process, the same loads over HTTP/1.1 keep-alive (h2load --h1)

Loads (h2load -t 1: one load thread, it shares the two cores with the
server; -D duration after --warm-up-time, each run):
  get_c64_m10     64 connections, 10 streams in flight each, GET /plaintext
  get_c256_m1     256 connections, 1 stream each, GET /plaintext
  post4k_c64_m10  64 connections x 10 streams, POST /plaintext, a 4 KiB body
(--h1 has no streams: -m N there pipelines up to N GETs per connection, but
h2load sends POSTs one at a time per connection: "in flight" per run, rate x
mean time per request, shows the concurrency each server really got.)

Interleaved rounds: each round runs every load against every server once,
the server order rotated per round. Per run: requests/s (h2load's "finished
in", main phase only), succeeded/failed/errored and status counts (a run
with any failure, error, timeout or non-2xx is flagged, and left out of the
medians and ratios), h2load's "time for request" min/max/mean/sd, and
p50/p99/p99.9 from h2load --log-file (one line per request of the main
phase; h2load's summary has no percentiles). The server's CPU time (utime +
stime of its process and its direct children, nginx's workers, from /proc)
and h2load's are sampled when h2load reports the main phase starting and
ending, so CPU us per request = delta / requests done; syscalls per request
from perf stat on raw_syscalls:sys_enter over the same window (when perf
and the tracepoint are there). An h2 run must report "Application protocol:
h2c" and get responses (and the server must answer the h2c preface with a
SETTINGS frame at start), or it fails loudly and the exit status is 1.
Prints per load each server's medians (min..max) and the per-round ratios
smarm / best nginx (the higher req/s and the lower CPU per request of nginx
and nginx2, per round), smarm / h2o and smarm / smarm-h1; --json writes it
all. Servers whose binary is missing are skipped with a note.

Usage: python3 loadtest/h2/compare_h2.py BUILD_DIR [--rounds 3] [--duration 10]
         [--warm-up 1] [--loads get_c64_m10,...] [--servers nginx,h2o,...]
         [--json FILE] [--smarm-config config/smarm.yaml]
         [--smarm-arg=--http2.max_concurrent_streams=100 ...]
Needs: h2load (nghttp2-client), nginx (nginx-light), h2o; perf optional.
"""
import argparse
import json
import math
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "http"))
from peerlib import ROOT, h2o_docroot, wait_port  # noqa: E402
from compare_http import (cpu_seconds, start_syscall_count, stop_syscall_count,  # noqa: E402
                          stop_servers)

LOADS = {
    "get_c64_m10": (["-c", "64", "-m", "10"], False),
    "get_c256_m1": (["-c", "256", "-m", "1"], False),
    "post4k_c64_m10": (["-c", "64", "-m", "10"], True),
}
SERVERS = ["nginx", "nginx2", "h2o", "smarm", "smarm-h1"]
PORTS = {"nginx": 18190, "nginx2": 18191, "h2o": 18192, "smarm": 18193, "smarm-h1": 18193}
BODY_BYTES = 4096


class Server:
    def __init__(self, name, proc, port, h1=False, post_path="/plaintext"):
        self.name, self.proc, self.port, self.h1, self.post_path = name, proc, port, h1, post_path

    def url(self, post):
        return f"http://127.0.0.1:{self.port}{self.post_path if post else '/plaintext'}"


def log_tail(path, n=5):
    try:
        return "".join(open(path, errors="replace").readlines()[-n:]).strip()
    except OSError:
        return ""


def start_servers(build, tmp, names, smarm_config, smarm_args, notes, procs):
    """Starts the servers asked for; returns name -> Server (smarm-h1 shares
    smarm's process) and every process started."""
    servers = {}

    def note(msg):
        print(msg, file=sys.stderr, flush=True)
        notes.append(msg)

    if {"nginx", "nginx2"} & set(names):
        if not shutil.which("nginx"):
            note("nginx not found (apt-get install nginx-light): nginx, nginx2 skipped")
        else:
            tmpl = open(os.path.join(HERE, "nginx.conf.tmpl")).read()
            for name, workers in (("nginx", 1), ("nginx2", 2)):
                if name not in names:
                    continue
                rundir = os.path.join(tmp, name)
                os.makedirs(rundir, exist_ok=True)
                conf = tmpl.replace("@PORT@", str(PORTS[name])).replace("@RUNDIR@", rundir)
                conf = conf.replace("worker_processes 1;", f"worker_processes {workers};")
                path = os.path.join(rundir, "nginx.conf")
                open(path, "w").write(conf)
                p = subprocess.Popen(["nginx", "-c", path, "-p", rundir],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                procs.append(p)
                servers[name] = Server(name, p, PORTS[name])
                servers[name].log = os.path.join(rundir, "error.log")
    if "h2o" in names:
        if not shutil.which("h2o"):
            note("h2o not found (apt-get install h2o): h2o skipped")
        else:
            rundir = h2o_docroot(tmp)
            version = subprocess.run(["h2o", "--version"], capture_output=True, text=True).stdout
            conf = open(os.path.join(HERE, "h2o.conf.tmpl")).read()
            post_path = "/post/plaintext"
            if not re.search(r"mruby:\s*YES", version):
                # Without mruby nothing in h2o 2.2 answers a POST 200 cheaply
                # (the file handler says 405); the preflight then skips it.
                conf = conf[:conf.index("      /post/plaintext:")]
                post_path = "/plaintext"
                note("h2o has no mruby: its POST load is not comparable (the file handler "
                     "answers 405) and is skipped")
            conf = (conf.replace("@PORT@", str(PORTS["h2o"])).replace("@RUNDIR@", rundir)
                    .replace("@THREADS@", str(os.cpu_count())))
            path = os.path.join(rundir, "h2o.conf")
            open(path, "w").write(conf)
            p = subprocess.Popen(["h2o", "-c", path], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
            procs.append(p)
            servers["h2o"] = Server("h2o", p, PORTS["h2o"], post_path=post_path)
            servers["h2o"].log = os.path.join(rundir, "error.log")
    if {"smarm", "smarm-h1"} & set(names):
        exe = os.path.join(build, "services", "smarm-server")
        if not os.path.exists(exe):
            note(f"{exe} not found: smarm, smarm-h1 skipped")
        else:
            log = os.path.join(tmp, "smarm.log")
            p = subprocess.Popen(
                [exe, "--config", smarm_config,
                 f"--http.port={PORTS['smarm']}", "--http.host=127.0.0.1", "--admin.port=0",
                 "--log.level=warn", *smarm_args],
                stdout=subprocess.DEVNULL, stderr=open(log, "w"))
            procs.append(p)
            for name in ("smarm", "smarm-h1"):
                if name in names:
                    servers[name] = Server(name, p, PORTS[name], h1=(name == "smarm-h1"))
                    servers[name].log = log
    for name, s in list(servers.items()):
        if not wait_port(s.port) or s.proc.poll() is not None:
            note(f"{name} did not start; skipped. {log_tail(s.log)}")
            s.proc.kill()
            del servers[name]
    return servers


def probe_h2c(port):
    """(True, "") when the server answers the HTTP/2 preface with a SETTINGS frame."""
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=3) as c:
            c.sendall(preface)
            got = b""
            while len(got) < 9:
                b = c.recv(9 - len(got))
                if not b:
                    break
                got += b
    except OSError as e:
        return False, f"{e}"
    if len(got) == 9 and got[3] == 4:
        return True, ""
    return False, f"reply to the h2c preface was {got!r}, not a SETTINGS frame"


UNIT = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def ms(text):
    m = re.fullmatch(r"([\d.]+)(us|ms|s)", text)
    return float(m.group(1)) * UNIT[m.group(2)] if m else float("nan")


def parse_h2load(out):
    r = {"protocol": None, "rps": 0.0, "total": 0, "done": 0, "succeeded": 0, "failed": 0,
         "errored": 0, "timeout": 0, "2xx": 0, "3xx": 0, "4xx": 0, "5xx": 0, "time_for_request": None}
    m = re.search(r"^Application protocol: (\S+)", out, re.M)
    if m:
        r["protocol"] = m.group(1)
    m = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out)
    if m:
        r["rps"] = float(m.group(1))
    m = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, "
                  r"(\d+) failed, (\d+) errored, (\d+) timeout", out)
    if m:
        (r["total"], _, r["done"], r["succeeded"], r["failed"], r["errored"],
         r["timeout"]) = map(int, m.groups())
    m = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out)
    if m:
        r["2xx"], r["3xx"], r["4xx"], r["5xx"] = map(int, m.groups())
    m = re.search(r"time for request:\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+([\d.]+)%", out)
    if m:
        r["time_for_request"] = {"min_ms": ms(m.group(1)), "max_ms": ms(m.group(2)),
                                 "mean_ms": ms(m.group(3)), "sd_ms": ms(m.group(4)),
                                 "within_sd_pct": float(m.group(5))}
    return r


def percentiles(log):
    """p50/p99/p99.9/max ms and the count of failed streams from h2load --log-file."""
    durs, failed = [], 0
    try:
        with open(log) as f:
            for line in f:
                parts = line.split("\t")
                if len(parts) < 3:
                    continue
                if parts[1] == "-1":
                    failed += 1
                    continue
                durs.append(int(parts[2]))
    except OSError:
        return {}
    if not durs:
        return {"log_failed": failed}
    durs.sort()
    n = len(durs)

    def q(p):
        return durs[min(n - 1, max(0, math.ceil(p * n) - 1))] / 1e3

    return {"p50_ms": q(0.50), "p99_ms": q(0.99), "p999_ms": q(0.999), "max_ms": durs[-1] / 1e3,
            "logged": n, "log_failed": failed}


def h2load_cmd(server, load, duration, warm_up, body, log):
    args, post = LOADS[load]
    cmd = ["h2load", "-t", "1", *args, "-D", f"{duration}s", f"--warm-up-time={warm_up}s"]
    if server.h1:
        cmd.append("--h1")
    if post:
        cmd += ["-d", body]
    if log:
        cmd.append(f"--log-file={log}")
    return cmd + [server.url(post)]


def check(server, r):
    """Why the run is flagged (a list of reasons, empty when clean), and whether the
    protocol was wrong."""
    want = "http/1.1" if server.h1 else "h2c"
    reasons, wrong_protocol = [], False
    if r["protocol"] != want:
        reasons.append(f"protocol {r['protocol']}, not {want}")
        wrong_protocol = True
    elif not server.h1 and r["done"] == 0:
        reasons.append("no response over h2c (the server does not speak HTTP/2?)")
        wrong_protocol = True
    if r["done"] == 0:
        reasons.append("no request done")
    for k in ("failed", "errored", "timeout"):
        if r[k]:
            reasons.append(f"{r[k]} {k}")
    non2xx = r["3xx"] + r["4xx"] + r["5xx"]
    if non2xx:
        reasons.append(f"non-2xx {non2xx} ({r['3xx']} 3xx, {r['4xx']} 4xx, {r['5xx']} 5xx)")
    return reasons, wrong_protocol


def run(server, load, duration, warm_up, body, tmp, p99=True):
    """One h2load run; the server's and h2load's CPU (and the server's
    syscalls) counted over the main phase only."""
    log = os.path.join(tmp, "requests.tsv") if p99 else None
    cmd = h2load_cmd(server, load, duration, warm_up, body, log)
    pid = server.proc.pid
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    watchdog = threading.Timer(warm_up + duration + 60, p.kill)
    watchdog.start()
    lines, c0 = [], None
    c1 = counter = None
    calls = float("nan")
    try:
        for line in p.stdout:
            if line.startswith("progress:"):
                continue
            lines.append(line)
            if line.startswith("Main benchmark duration is started"):
                c0 = (cpu_seconds(pid), cpu_seconds(p.pid), time.monotonic())
                counter = start_syscall_count(pid)
            elif line.startswith("Main benchmark duration is over"):
                c1 = (cpu_seconds(pid), cpu_seconds(p.pid), time.monotonic())
                calls = stop_syscall_count(counter)
                counter = None
        p.wait()
    finally:
        watchdog.cancel()
        if counter is not None:
            stop_syscall_count(counter)
    out = "".join(lines)
    r = parse_h2load(out)
    r["cmd"] = " ".join(cmd)
    r["rc"] = p.returncode
    nan = float("nan")
    if c0 and c1 and r["done"]:
        r["cpu_us"] = (c1[0] - c0[0]) * 1e6 / r["done"]
        r["load_us"] = (c1[1] - c0[1]) * 1e6 / r["done"]
        r["server_cores"] = (c1[0] - c0[0]) / (c1[2] - c0[2])
        r["syscalls"] = calls / r["done"]
    else:
        r["cpu_us"] = r["load_us"] = r["server_cores"] = r["syscalls"] = nan
    if log:
        r.update(percentiles(log))
        try:
            os.unlink(log)
        except OSError:
            pass
    # Requests in flight on average (Little's law: rate x mean time per
    # request): --h1 pipelines GETs up to -m deep but sends POSTs one at a
    # time per connection, which this shows.
    tfr = r["time_for_request"]
    r["in_flight"] = r["rps"] * tfr["mean_ms"] / 1e3 if tfr else nan
    r["flags"], r["wrong_protocol"] = check(server, r)
    if r["rc"] != 0 and not r["flags"]:
        r["flags"].append(f"h2load exit status {r['rc']}")
    r["output"] = out if r["flags"] else ""
    return r


def preflight(server, load, body, tmp):
    """A few requests of the load's kind; the reason it cannot be measured, or None."""
    args, post = LOADS[load]
    cmd = ["h2load", "-n", "20", "-c", "1", "-t", "1"] + (["--h1"] if server.h1 else [])
    cmd += (["-d", body] if post else []) + [server.url(post)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout
    except subprocess.TimeoutExpired:
        return "preflight timed out"
    r = parse_h2load(out)
    reasons, _ = check(server, r)
    if r["2xx"] != 20:
        reasons.append(f"{r['2xx']}/20 answered 2xx")
    if reasons:
        what = "POST (4 KiB body)" if post else "GET"
        return f"{what} {server.url(post)}: " + "; ".join(dict.fromkeys(reasons))
    return None


def fmt(x, digits=2):
    return "nan" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def spread(xs, digits=2):
    xs = [x for x in xs if x is not None and not math.isnan(x)]
    if not xs:
        return "n/a"
    return (f"{statistics.median(xs):,.{digits}f} ({min(xs):,.{digits}f}..{max(xs):,.{digits}f})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=10, help="seconds measured per run")
    ap.add_argument("--warm-up", type=int, default=1, help="h2load --warm-up-time per run, s")
    ap.add_argument("--loads", default=",".join(LOADS))
    ap.add_argument("--servers", default=",".join(SERVERS))
    ap.add_argument("--json", help="write every run and the summary here")
    ap.add_argument("--no-p99", action="store_true", help="no h2load --log-file (no percentiles)")
    ap.add_argument("--smarm-config", default=os.path.join(ROOT, "config", "smarm.yaml"),
                    help="smarm-server's config file (default config/smarm.yaml)")
    ap.add_argument("--smarm-arg", action="append", default=[],
                    help="an extra smarm-server flag (repeatable), e.g. --smarm-arg=--http.x=y")
    a = ap.parse_args()
    if not shutil.which("h2load"):
        sys.exit("h2load is not installed (apt-get install nghttp2-client)")
    loads = a.loads.split(",")
    names = a.servers.split(",")
    for x in loads:
        if x not in LOADS:
            sys.exit(f"unknown load {x} (known: {', '.join(LOADS)})")
    for x in names:
        if x not in SERVERS:
            sys.exit(f"unknown server {x} (known: {', '.join(SERVERS)})")
    notes, loud = [], []
    tmp = tempfile.mkdtemp(prefix="smarm_h2_")
    body = os.path.join(tmp, "body4k")
    open(body, "wb").write(b"x" * BODY_BYTES)
    os.chmod(body, 0o644)
    procs = []
    try:
        servers = start_servers(a.build, tmp, names, a.smarm_config, a.smarm_arg, notes,
                                procs)
    except BaseException:
        stop_servers(procs)
        raise
    res = {}
    skip = {}
    try:
        for name, s in list(servers.items()):
            if not s.h1:
                ok, why = probe_h2c(s.port)
                if not ok:
                    msg = (f"ERROR: {name} on port {s.port} does not speak HTTP/2 by prior "
                           f"knowledge: {why}; {name} skipped")
                    print(msg, file=sys.stderr, flush=True)
                    notes.append(msg)
                    loud.append(msg)
                    del servers[name]
        for load in loads:
            for name, s in servers.items():
                why = preflight(s, load, body, tmp)
                if why:
                    skip[(name, load)] = why
                    msg = f"{name} {load}: not comparable, skipped: {why}"
                    print(msg, file=sys.stderr, flush=True)
                    notes.append(msg)
        order0 = list(servers)
        for r in range(a.rounds):
            for load in loads:
                k = r % len(order0) if order0 else 0
                for name in order0[k:] + order0[:k]:
                    if (name, load) in skip:
                        continue
                    s = servers[name]
                    m = run(s, load, a.duration, a.warm_up, body, tmp, not a.no_p99)
                    m.update(round=r + 1, load=load, server=name)
                    res.setdefault((name, load), []).append(m)
                    flag = ("  FLAGGED: " + "; ".join(m["flags"])) if m["flags"] else ""
                    print(f"round {r + 1} {load:14s} {name:8s} {m['rps']:10.0f} req/s  "
                          f"p99 {fmt(m.get('p99_ms'))} ms  mean {fmt((m['time_for_request'] or {}).get('mean_ms'))} ms  "
                          f"cpu {fmt(m['cpu_us'])} us/req ({fmt(m['server_cores'])} cores)  "
                          f"h2load {fmt(m['load_us'])} us/req  syscalls {fmt(m['syscalls'])}/req  "
                          f"in flight {fmt(m['in_flight'], 0)}  ok {m['succeeded']}/{m['done']}{flag}", flush=True)
                    if m["wrong_protocol"]:
                        msg = (f"ERROR: round {r + 1} {load} {name}: wrong protocol: "
                               + "; ".join(m["flags"]))
                        print(msg + "\n" + m["output"], file=sys.stderr, flush=True)
                        loud.append(msg)
    finally:
        stop_servers(procs)
        shutil.rmtree(tmp, ignore_errors=True)

    def clean(name, load):
        """Per round: the run, or None when missing or flagged."""
        runs = {m["round"]: m for m in res.get((name, load), []) if not m["flags"]}
        return [runs.get(r + 1) for r in range(a.rounds)]

    def col(name, load, key):
        return [m[key] for m in clean(name, load) if m and m.get(key) is not None]

    summary = {}
    print("\nMedians over the unflagged rounds (min..max). p50/p99 from h2load --log-file "
          "(h2load itself prints no percentiles: min/max/mean/sd of 'time for request' only).")
    for load in loads:
        args, post = LOADS[load]
        print(f"\n### {load}: h2load -t 1 {' '.join(args)}, {'POST (4 KiB body)' if post else 'GET'} "
              f"/plaintext, {a.duration} s after {a.warm_up} s warm-up, {a.rounds} round(s)\n")
        print("| server | req/s | server CPU us/req | server cores | h2load CPU us/req "
              "| syscalls/req | p50 ms | p99 ms | mean ms (sd) | in flight | flagged |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        summary[load] = {}
        for name in servers:
            if (name, load) in skip:
                print(f"| {name} | skipped: {skip[(name, load)]} ||||||||||")
                summary[load][name] = {"skipped": skip[(name, load)]}
                continue
            runs = res.get((name, load), [])
            nflag = sum(1 for m in runs if m["flags"])
            tfr = [m["time_for_request"] for m in clean(name, load) if m and m["time_for_request"]]
            mean = statistics.median(t["mean_ms"] for t in tfr) if tfr else float("nan")
            sd = statistics.median(t["sd_ms"] for t in tfr) if tfr else float("nan")
            print(f"| {name} | {spread(col(name, load, 'rps'), 0)} | {spread(col(name, load, 'cpu_us'))} | "
                  f"{spread(col(name, load, 'server_cores'))} | {spread(col(name, load, 'load_us'))} | "
                  f"{spread(col(name, load, 'syscalls'))} | {spread(col(name, load, 'p50_ms'))} | "
                  f"{spread(col(name, load, 'p99_ms'))} | {fmt(mean)} ({fmt(sd)}) | "
                  f"{spread(col(name, load, 'in_flight'), 0)} | {nflag}/{len(runs)} |")
            summary[load][name] = {
                k: (statistics.median(col(name, load, k)) if col(name, load, k) else None)
                for k in ("rps", "cpu_us", "server_cores", "load_us", "syscalls", "p50_ms",
                          "p99_ms", "p999_ms", "in_flight")}
            summary[load][name]["flagged_runs"] = nflag
            summary[load][name]["runs"] = len(runs)

    # Per-round ratios. nginx-best: per round, the higher req/s and the
    # lower CPU per request of nginx and nginx2 (possibly not the same one).
    def best_nginx(load):
        a_, b_ = clean("nginx", load), clean("nginx2", load)
        out = []
        for x, y in zip(a_, b_):
            xs = [m for m in (x, y) if m]
            out.append({"rps": max(m["rps"] for m in xs), "cpu_us": min(m["cpu_us"] for m in xs)}
                       if xs else None)
        return out

    def ratios(mine, peer, key):
        return [m[key] / p[key] for m, p in zip(mine, peer)
                if m and p and p[key] and not math.isnan(m[key]) and not math.isnan(p[key])]

    print("\nPer-round ratios, median (min..max): req/s (higher is better for the first) and "
          "CPU per request (lower is better). nginx-best = per round the higher req/s and "
          "lower CPU/req of nginx and nginx2. smarm-h1 vs the h2 peers crosses protocols.\n")
    print("| load | ratio | req/s | CPU us/req | rounds |")
    print("|---|---|---|---|---|")
    ratio_json = {}
    if not ({"smarm", "smarm-h1"} & set(servers)) or len(servers) < 2:
        print("| - | no smarm run and peer to compare | | | |")
    for load in loads:
        peers = {}
        if any(n in servers for n in ("nginx", "nginx2")):
            peers["nginx-best"] = best_nginx(load) if "nginx" in servers and "nginx2" in servers \
                else clean("nginx" if "nginx" in servers else "nginx2", load)
        if "h2o" in servers:
            peers["h2o"] = clean("h2o", load)
        if "smarm-h1" in servers:
            peers["smarm-h1"] = clean("smarm-h1", load)
        for mine in ("smarm", "smarm-h1"):
            if mine not in servers:
                continue
            for pname, peer in peers.items():
                if pname == mine:
                    continue
                rr = ratios(clean(mine, load), peer, "rps")
                rc = ratios(clean(mine, load), peer, "cpu_us")
                print(f"| {load} | {mine} / {pname} | {spread(rr)} | {spread(rc)} | {len(rr)} |")
                ratio_json[f"{load} {mine}/{pname}"] = {"rps": rr, "cpu_us": rc}
    if "smarm" not in servers and "smarm" in names:
        print("\n(smarm over h2c was not measured: see the notes; the ratios with smarm-h1 "
              "are HTTP/1.1 against the peers' HTTP/2.)")
    if notes:
        print("\nNotes:\n" + "\n".join(f"- {n}" for n in notes))
    flagged = [f"round {m['round']} {m['load']} {m['server']}: {'; '.join(m['flags'])}"
               for runs in res.values() for m in runs if m["flags"]]
    if flagged:
        print("\nFlagged runs (left out of the medians and ratios):\n"
              + "\n".join(f"- {f}" for f in flagged))
    if a.json:
        versions = {}
        for tool, cmd in (("h2load", ["h2load", "--version"]), ("nginx", ["nginx", "-v"]),
                          ("h2o", ["h2o", "--version"])):
            if shutil.which(cmd[0]):
                p = subprocess.run(cmd, capture_output=True, text=True)
                versions[tool] = (p.stdout + p.stderr).strip().splitlines()[0]
        with open(a.json, "w") as f:
            json.dump({"config": {"build": os.path.abspath(a.build), "rounds": a.rounds,
                                  "duration_s": a.duration, "warm_up_s": a.warm_up,
                                  "loads": {l: LOADS[l][0] + (["POST 4 KiB"] if LOADS[l][1] else [])
                                            for l in loads},
                                  "servers": list(servers), "smarm_config": a.smarm_config,
                                  "smarm_args": a.smarm_arg,
                                  "versions": versions, "cpus": os.cpu_count(),
                                  "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")},
                       "notes": notes, "errors": loud, "skipped": {f"{n} {l}": w for (n, l), w in skip.items()},
                       "runs": [m for runs in res.values() for m in runs],
                       "summary": summary, "ratios": ratio_json}, f, indent=1)
        print(f"\nwrote {a.json}")
    if loud:
        print("\n" + "\n".join(loud), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
