#!/usr/bin/env python3
"""smarm-load end to end: against smarm-server with each shipped scenario,
--json parsed and checked, --plot writes a PNG and an SVG, bad arguments exit
2 naming what is wrong.

usage: cli_test.py SMARM_LOAD SMARM_SERVER CONFIG SCENARIO_DIR
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def main():
    load, server, config, scenarios = sys.argv[1:5]
    tmp = tempfile.mkdtemp(prefix="smarm-load-test-")
    log = open(os.path.join(tmp, "server.log"), "w+")
    srv = subprocess.Popen([server, "--config", config, "--http.host=127.0.0.1",
                            "--http.port=0", "--admin.port=0", "--runtime.schedulers=1"],
                           stdout=log, stderr=subprocess.STDOUT)
    try:
        port = None
        for _ in range(100):
            log.seek(0)
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", log.read())
            if m:
                port = int(m.group(1))
                break
            time.sleep(0.1)
        if port is None:
            log.seek(0)
            fail("smarm-server did not start:\n" + log.read())
        base = "http://127.0.0.1:%d" % port

        def run(args, expect=0):
            p = subprocess.run([load] + args, capture_output=True, text=True, timeout=60)
            if p.returncode != expect:
                fail("%s -> %d (want %d)\n%s%s" % (args, p.returncode, expect, p.stdout, p.stderr))
            return p

        for name in ("plaintext", "kv-90-10", "sha256-4k"):
            out = os.path.join(tmp, name + ".json")
            run([base + "/", "-s", os.path.join(scenarios, name + ".yaml"), "-c", "8",
                 "-t", "1", "-d", "1s", "-w", "200ms", "-q", "--json", out])
            r = json.load(open(out))
            if r["requests"] <= 0:
                fail("%s: no requests: %s" % (name, r))
            if r["error_total"] != 0:
                fail("%s: errors: %s" % (name, r["errors"]))
            bad = {k: v for k, v in r["statuses"].items() if not k.startswith("2") and k != "404"}
            if bad:
                fail("%s: unexpected statuses %s" % (name, r["statuses"]))
            lat = r["latency_us"]
            if not (0 < lat["p50"] <= lat["p99"] <= lat["max"]):
                fail("%s: latency percentiles out of order: %s" % (name, lat))
            print("%-10s %8.0f req/s  p99 %.0f us" % (name, r["rate"], lat["p99"]))
        # kv: both entries ran and the writes landed (reads after them hit).
        r = json.load(open(os.path.join(tmp, "kv-90-10.json")))
        if set(r["by_request"]) != {"get", "put"} or r["statuses"].get("200", 0) == 0:
            fail("kv mix: %s" % r)

        # Open loop, a connection per request, plots.
        p = run([base + "/plaintext", "-c", "4", "-t", "1", "-d", "1s", "-R", "400",
                 "--close", "-q", "--plot", os.path.join(tmp, "lat.png"), "--json", "-"])
        r = json.loads(p.stdout[p.stdout.index("{"):])
        if r["requests"] > 401 or r["requests"] < 100:
            fail("open loop at 400/s for 1 s counted %d" % r["requests"])
        if r["connections_opened"] < r["requests"]:
            fail("--close reused connections: %s" % r)
        with open(os.path.join(tmp, "lat.png"), "rb") as f:
            if f.read(8) != b"\x89PNG\r\n\x1a\n":
                fail("--plot did not write a PNG")
        run([base + "/plaintext", "-c", "2", "-t", "1", "-d", "300ms", "-q",
             "--plot", os.path.join(tmp, "lat.svg")])
        if "<svg" not in open(os.path.join(tmp, "lat.svg")).read():
            fail("--plot did not write an SVG")

        # WebSocket mode: echoes of two sizes, JSON and a plot.
        ws = "ws://127.0.0.1:%d/ws/echo" % port
        p = run([base + "/ws/echo", "--ws", "-c", "2", "-t", "1", "-d", "300ms", "-q", "--json", "-"])
        r = json.loads(p.stdout[p.stdout.index("{"):])
        if r["requests"] <= 0 or r["error_total"] != 0 or not r["config"]["target"].startswith("ws://"):
            fail("--ws on an http:// URL: %s" % r)
        p = run([ws, "-c", "4", "-t", "1", "-d", "1s", "-q", "--ws-sizes", "16:3,2KiB:1",
                 "--plot", os.path.join(tmp, "ws.png"), "--json", "-"])
        r = json.loads(p.stdout[p.stdout.index("{"):])
        if r["requests"] <= 0 or r["error_total"] != 0 or r["connections_opened"] != 4:
            fail("ws mode: %s" % r)
        if not (16 * r["requests"] < r["bytes"] < 2048 * r["requests"]):
            fail("ws mode: %d bytes for %d echoes of 16 or 2048" % (r["bytes"], r["requests"]))
        with open(os.path.join(tmp, "ws.png"), "rb") as f:
            if f.read(8) != b"\x89PNG\r\n\x1a\n":
                fail("ws mode: --plot did not write a PNG")
        print("ws         %8.0f msg/s  p99 %.0f us" % (r["rate"], r["latency_us"]["p99"]))

        # Bad arguments: exit 2 and say what is wrong.
        for args, want in [
            (["ftp://x/"], "must start with http://"),
            ([base + "/", "-d", "soon"], "not a duration"),
            ([base + "/", "-s", os.path.join(tmp, "missing.yaml")], "cannot be read"),
            ([base + "/", "-H", "nocolon"], "expected \"Name: value\""),
            ([base + "/", "-c", "0"], "connections"),
            (["wss://x/"], "TLS is not supported"),
            ([ws, "--ws-sizes", "32:x"], "the weight is not a number"),
            ([ws, "--close"], "neither --close nor --scenario"),
        ]:
            p = run(args, expect=2)
            if want not in p.stderr + p.stdout:
                fail("%s: message lacks %r:\n%s%s" % (args, want, p.stdout, p.stderr))
        p = run([base + "/", "--plot", os.path.join(tmp, "x.gif"), "-d", "200ms", "-q"], expect=1)
        if ".png or .svg" not in p.stderr:
            fail("bad plot name: " + p.stderr)
        print("ok")
    finally:
        srv.terminate()
        try:
            srv.wait(timeout=20)
        except subprocess.TimeoutExpired:
            srv.kill()


if __name__ == "__main__":
    main()
