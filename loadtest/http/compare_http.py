#!/usr/bin/env python3
"""HTTP plaintext: smarm-hello vs nginx (1 worker) vs Go net/http, same run.

Loads (wrk, interleaved rounds: every server under one load, then the next):
  ka_t1_c64    keep-alive, -t1 -c64
  ka_t2_c256   keep-alive, -t2 -c256
  close_t2_c32 a new connection per request (Connection: close), -t2 -c32

smarm runs twice: smarm1 with one scheduler (like-for-like with one nginx
worker) and smarm with the default (one scheduler per hardware thread);
server is smarm-server on its default config (config/smarm.yaml: the full
router, metrics per request, the supervision tree), GET /plaintext. nginx2
is nginx with two workers; h2o (Debian h2o, when installed) serves a static
"Hello, World!" file, keep-alive being its fast path.
floor is smarm-http-floor (loadtest/http/floor.cpp): a parser-less epoll
loop sending the same response bytes, the most any one-threaded server
reaches on this machine and kernel; its ratio to Go bounds what a ratio
target against Go can ask of a real server here.
Prints requests/s per server and load (median of the rounds, min..max), every
server's ratios to nginx, Go and the floor per round (median and spread),
p99 latency,
each server's CPU time per request (utime + stime of its process and
direct children, i.e. nginx's workers, from /proc around each run): the
efficiency measure, which holds when the load generator bounds the rate,
and its syscalls per request (perf stat on raw_syscalls:sys_enter over the
same pids, when perf and the tracepoint are there).
Servers listen on 127.0.0.1:18090-18098 and are stopped by PID.

Usage: python3 loadtest/http/compare_http.py BUILD_DIR [--rounds 3] [--duration 10]
Needs: wrk, nginx (nginx-light), go (servers whose binary is missing are skipped).
"""
import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from peerlib import ROOT, go_build, h2o_docroot, wait_port  # noqa: E402

LOADS = {
    "ka_t1_c64": ["-t1", "-c64"],
    "ka_t2_c256": ["-t2", "-c256"],
    "close_t2_c32": ["-t2", "-c32", "-H", "Connection: close"],
}


def start_servers(build, tmp):
    servers = {}
    hello = os.path.join(build, "loadtest", "http", "smarm-hello")
    # smarm1: one scheduler, like-for-like with one nginx worker; smarm:
    # the default (a scheduler per hardware thread).
    servers["smarm1"] = (subprocess.Popen([hello, "18093", "1"], stdout=subprocess.DEVNULL), 18093)
    servers["smarm"] = (subprocess.Popen([hello, "18090"], stdout=subprocess.DEVNULL), 18090)
    srv = os.path.join(build, "services", "smarm-server")
    if os.path.exists(srv):
        servers["server"] = (subprocess.Popen(
            [srv, "--config", os.path.join(ROOT, "config", "smarm.yaml"), "--http.port=18095",
             "--admin.port=0"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), 18095)
    floor = os.path.join(build, "loadtest", "http", "smarm-http-floor")
    if os.path.exists(floor):
        servers["floor"] = (subprocess.Popen([floor, "18094"]), 18094)
    if shutil.which("nginx"):
        tmpl = open(os.path.join(ROOT, "loadtest", "http", "nginx.conf.tmpl")).read()
        for name, port, workers in (("nginx", 18091, 1), ("nginx2", 18096, 2)):
            rundir = os.path.join(tmp, name)
            os.makedirs(rundir, exist_ok=True)
            conf = tmpl.replace("@PORT@", str(port)).replace("@RUNDIR@", rundir)
            conf = conf.replace("worker_processes 1;", f"worker_processes {workers};")
            path = os.path.join(rundir, "nginx.conf")
            open(path, "w").write(conf)
            servers[name] = (subprocess.Popen(["nginx", "-c", path, "-p", rundir],
                                              stderr=subprocess.DEVNULL), port)
    if shutil.which("h2o"):
        rundir = h2o_docroot(tmp)
        path = os.path.join(rundir, "h2o.conf")
        open(path, "w").write(
            f"listen:\n  host: 127.0.0.1\n  port: 18097\n"
            f"num-threads: {os.cpu_count()}\n"
            f"error-log: {rundir}/error.log\n"
            f"hosts:\n  default:\n    paths:\n      /:\n"
            f"        file.dir: {rundir}/www\n")
        servers["h2o"] = (subprocess.Popen(["h2o", "-c", path], stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL), 18097)
    if shutil.which("go"):
        exe = go_build(os.path.join(ROOT, "loadtest", "go", "http", "main.go"), tmp, "go_http")
        env = dict(os.environ, GOMAXPROCS=str(os.cpu_count()))
        servers["go"] = (subprocess.Popen([exe, "127.0.0.1:18092"], env=env), 18092)
    for name, (p, port) in list(servers.items()):
        if not wait_port(port):
            print(f"{name} did not start; skipped", file=sys.stderr)
            p.kill()
            del servers[name]
    return servers


def parse_wrk(out):
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p99 = None
    m = re.search(r"^\s+99%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
    if m:
        p99 = float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)]
    errors = 0
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if m:
        errors += int(m.group(1))
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if m:
        errors += sum(int(x) for x in m.groups())
    return rps, p99, errors


TCK = os.sysconf("SC_CLK_TCK")


def family(pid):
    """`pid` and its direct children (nginx's workers)."""
    pids = [pid]
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            pids += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return pids


def cpu_seconds(pid):
    """utime + stime of `pid` and its direct children (nginx's workers)."""
    total = 0.0
    for p in family(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / TCK
        except OSError:
            pass
    return total


def start_syscall_count(pid):
    """perf stat counting the server's syscalls, or None without perf."""
    if not pid or not shutil.which("perf"):
        return None
    out = tempfile.NamedTemporaryFile(prefix="smarm_perf_", suffix=".csv", delete=False).name
    p = subprocess.Popen(["perf", "stat", "-x", ",", "-e", "raw_syscalls:sys_enter", "-p",
                          ",".join(str(x) for x in family(pid)), "-o", out],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return p, out


def stop_syscall_count(counter):
    """The count perf saw, or nan (perf refused, or no tracepoint)."""
    if counter is None:
        return float("nan")
    p, out = counter
    p.send_signal(signal.SIGINT)
    p.wait(timeout=10)
    try:
        for line in open(out):
            f = line.split(",")
            if len(f) > 2 and "raw_syscalls:sys_enter" in line and f[0].strip().isdigit():
                return float(f[0])
        return float("nan")
    finally:
        os.unlink(out)


def run_wrk(port, load, duration, pid=None):
    """requests/s, p99 ms, errors, the server's CPU us and syscalls per request."""
    cmd = ["wrk", *LOADS[load], f"-d{duration}s", "--latency",
           f"http://127.0.0.1:{port}/plaintext"]
    c0 = cpu_seconds(pid) if pid else 0.0
    counter = start_syscall_count(pid)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 60).stdout
    calls = stop_syscall_count(counter)
    c1 = cpu_seconds(pid) if pid else 0.0
    rps, p99, errors = parse_wrk(out)
    cpu = (c1 - c0) / (rps * duration) * 1e6 if pid and rps else float("nan")
    sys_per = calls / (rps * duration) if rps else float("nan")
    return rps, p99, errors, cpu, sys_per


def stop_servers(procs):
    """SIGTERM every server, then wait for each (killed after 10 s)."""
    procs = list(procs)
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()


def spread(xs, digits=2):
    return f"{statistics.median(xs):.{digits}f} ({min(xs):.{digits}f}..{max(xs):.{digits}f})"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--loads", default=",".join(LOADS))
    a = ap.parse_args()
    if not shutil.which("wrk"):
        sys.exit("wrk is not installed (apt-get install wrk)")
    loads = a.loads.split(",")
    tmp = tempfile.mkdtemp(prefix="smarm_http_")
    servers = start_servers(a.build, tmp)
    res = {(s, l): [] for s in servers for l in loads}
    try:
        for load in loads:  # warm-up
            for name, (_, port) in servers.items():
                run_wrk(port, load, 2)
        for r in range(a.rounds):
            for load in loads:
                for name, (p, port) in servers.items():
                    rps, p99, err, cpu, calls = run_wrk(port, load, a.duration, p.pid)
                    res[(name, load)].append((rps, p99, err, cpu, calls))
                    print(f"round {r + 1} {load:13s} {name:6s} {rps:10.0f} req/s  "
                          f"p99 {p99 if p99 is not None else float('nan'):.2f} ms  "
                          f"cpu {cpu:6.2f} us/req  syscalls {calls:5.2f}/req  errors {err}",
                          flush=True)
    finally:
        stop_servers(p for p, _ in servers.values())
        shutil.rmtree(tmp, ignore_errors=True)

    print("\n| load | server | req/s median (min..max) | p99 ms median | server CPU us/req median (min..max) "
          "| syscalls/req | errors |")
    print("|---|---|---|---|---|---|---|")
    for load in loads:
        for name in servers:
            rs = res[(name, load)]
            rps = [x[0] for x in rs]
            p99 = [x[1] for x in rs if x[1] is not None]
            cpu = [x[3] for x in rs]
            print(f"| {load} | {name} | {statistics.median(rps):,.0f} ({min(rps):,.0f}..{max(rps):,.0f}) | "
                  f"{statistics.median(p99) if p99 else float('nan'):.2f} | "
                  f"{spread(cpu)} | {statistics.median(x[4] for x in rs):.2f} | "
                  f"{sum(x[2] for x in rs)} |")
    print("\n| load | server | /nginx per round: median (min..max) | /Go | /floor | CPU per request /nginx |")
    print("|---|---|---|---|---|---|")
    for load in loads:
        for mine in ("smarm1", "smarm", "server", "nginx", "floor"):
            if mine not in servers:
                continue
            row = [load, mine]
            for peer in ("nginx", "go", "floor"):
                if peer == mine:
                    row.append("-")
                elif peer in servers:
                    ratios = [s[0] / p[0] for s, p in zip(res[(mine, load)], res[(peer, load)])]
                    row.append(spread(ratios))
                else:
                    row.append("n/a")
            if mine == "nginx":
                row.append("-")
            elif "nginx" in servers:
                ratios = [s[3] / p[3] for s, p in zip(res[(mine, load)], res[("nginx", load)])]
                row.append(spread(ratios))
            else:
                row.append("n/a")
            print("| " + " | ".join(row) + " |")
    if "server" in servers:
        peers = [p for p in ("nginx", "nginx2", "h2o") if p in servers]
        print("\n| load | server / " + " | server / ".join(peers) + " (req/s) | CPU per request: "
              + " | ".join(f"server / {p}" for p in peers) + " |")
        print("|---|" + "---|" * (2 * len(peers)))
        for load in loads:
            mine = res[("server", load)]
            row = [load]
            row += [spread([s[0] / q[0] for s, q in zip(mine, res[(p, load)])]) for p in peers]
            row += [spread([s[3] / q[3] for s, q in zip(mine, res[(p, load)])]) for p in peers]
            print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
