#!/usr/bin/env python3
"""smarm-load --causal end to end: smarm-server with causal.http and its
test route (a 300 us site test.slow and a 1 us test.fast in one handler),
smarm-load driving it from another process while it asks the admin
listener for the profile. The ranking puts test.slow first with a positive
gain, profile.coz is what Coz's viewer reads, the plot is written; against
a server without causal.http the ranking point is refused by name.

usage: causal_cli_test.py SMARM_LOAD SMARM_SERVER CONFIG
"""
import os
import re
import subprocess
import sys
import tempfile
import time

COZ_REQUIRED = {
    "startup": {"time"}, "runtime": {"time"},
    "experiment": {"selected", "speedup", "duration"},
    "throughput-point": {"name", "delta"},
    "latency-point": {"name", "arrivals", "departures", "difference"},
}
COZ_INTEGERS = {"time", "duration", "delta", "arrivals", "departures", "difference",
                "selected-samples"}


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def check_coz(text):
    """Coz's viewer grammar (tests/support/.../coz_grammar.hpp has the C++ twin)."""
    seen_experiment = False
    for n, line in enumerate(text.splitlines(), 1):
        if not line:
            continue
        parts = line.split("\t")
        if parts[0] not in COZ_REQUIRED:
            fail("profile.coz line %d: unknown record %r" % (n, line))
        fields = {}
        for p in parts[1:]:
            k, eq, v = p.partition("=")
            if not eq or not k:
                fail("profile.coz line %d: %r is not key=value" % (n, p))
            fields[k] = v
            if k in COZ_INTEGERS and not v.isdigit():
                fail("profile.coz line %d: %s=%r is not an integer" % (n, k, v))
            if k == "speedup" and not 0 <= float(v) <= 1:
                fail("profile.coz line %d: speedup %r" % (n, v))
        missing = COZ_REQUIRED[parts[0]] - set(fields)
        if missing:
            fail("profile.coz line %d: no %s in %r" % (n, missing, line))
        seen_experiment = seen_experiment or parts[0] == "experiment"
        if parts[0].endswith("-point") and not seen_experiment:
            fail("profile.coz line %d: a point before any experiment" % n)
    if not seen_experiment:
        fail("profile.coz has no experiment")


def start(server, config, tmp, name, extra):
    log = open(os.path.join(tmp, name + ".log"), "w+")
    srv = subprocess.Popen([server, "--config", config, "--http.host=127.0.0.1",
                            "--http.port=0", "--admin.port=0", "--http.test_routes=true"] + extra,
                           stdout=log, stderr=subprocess.STDOUT)
    for _ in range(100):
        log.seek(0)
        text = log.read()
        pub = re.search(r"listening on 127\.0\.0\.1:(\d+)", text)
        adm = re.search(r"admin listener on 127\.0\.0\.1:(\d+)", text)
        if pub and adm:
            return srv, int(pub.group(1)), int(adm.group(1))
        time.sleep(0.1)
    srv.kill()
    log.seek(0)
    fail("smarm-server did not start:\n" + log.read())


def main():
    load, server, config = sys.argv[1:4]
    tmp = tempfile.mkdtemp(prefix="smarm-load-causal-")
    coz, plot = os.path.join(tmp, "profile.coz"), os.path.join(tmp, "causal.svg")
    srv, port, admin = start(server, config, tmp, "causal", ["--causal.http=true"])
    try:
        p = subprocess.run(
            [load, "http://127.0.0.1:%d/test/causal" % port, "-c", "4", "-t", "1", "-d", "6s",
             "-w", "500ms", "-q", "--causal", "http://127.0.0.1:%d" % admin,
             "--causal-sites", "test.slow,test.fast", "--causal-speedups", "0,50",
             "--causal-window", "300ms", "--causal-coz", coz, "--causal-plot", plot],
            capture_output=True, text=True, timeout=90)
        if p.returncode != 0:
            fail("smarm-load --causal -> %d\n%s%s" % (p.returncode, p.stdout, p.stderr))
        out = p.stdout
        print(out)
        if "errors     none" not in out:
            fail("requests failed during the profile:\n" + out)
        m = re.search(r"== sites ranked by http\.requests .*?\n.*?\n\s+1\.\s+([+-][\d.]+)%\s+(\S+)\n"
                      r"\s+2\.\s+([+-][\d.]+)%\s+(\S+)", out)
        if not m:
            fail("no throughput ranking in:\n" + out)
        first, first_site, second, second_site = float(m.group(1)), m.group(2), float(m.group(3)), m.group(4)
        if first_site != "test.slow" or first < 5 or first <= second + 5:
            fail("test.slow should lead with a clear gain: %s %+.1f, %s %+.1f"
                 % (first_site, first, second_site, second))
        if abs(second) > 10:
            fail("test.fast should show no gain: %+.1f" % second)
        if "== sites ranked by http.request (mean latency" not in out:
            fail("no latency ranking in:\n" + out)
        check_coz(open(coz).read())
        if "selected=test.slow\t" not in open(coz).read():
            fail("profile.coz has no test.slow experiment")
        svg = open(plot).read()
        if "<svg" not in svg or "test.slow" not in svg:
            fail("the plot is not an SVG naming the sites")
    finally:
        srv.terminate()
        srv.wait(timeout=30)

    # Without causal.http the http.* points do not exist: refused by name.
    srv, port, admin = start(server, config, tmp, "plain", [])
    try:
        p = subprocess.run(
            [load, "http://127.0.0.1:%d/test/causal" % port, "-c", "2", "-t", "1", "-d", "3s",
             "-q", "--causal", "http://127.0.0.1:%d" % admin, "--causal-sites", "test.slow"],
            capture_output=True, text=True, timeout=60)
        if p.returncode != 1 or "points=http.requests" not in p.stderr:
            fail("want exit 1 naming points=http.requests: %d\n%s%s"
                 % (p.returncode, p.stdout, p.stderr))
    finally:
        srv.terminate()
        srv.wait(timeout=30)
    # Bad arguments exit 2 naming the flag.
    p = subprocess.run([load, "http://127.0.0.1:1/", "--causal", "http://127.0.0.1:2",
                        "--causal-plot", "x.jpg"], capture_output=True, text=True, timeout=30)
    if p.returncode != 2 or "--causal-plot" not in p.stderr:
        fail("want exit 2 naming --causal-plot: %d %s" % (p.returncode, p.stderr))
    p = subprocess.run([load, "http://127.0.0.1:1/", "--causal-sites", "a"],
                       capture_output=True, text=True, timeout=30)
    if p.returncode != 2:
        fail("--causal-sites without --causal should exit 2: %d" % p.returncode)
    print("ok")


if __name__ == "__main__":
    main()
