#!/usr/bin/env python3
"""SIGTERM under load loses no request (issue 27, the lame-duck drain).

smarm-load drives 32 keep-alive connections in a closed loop (each sends its
next request the moment the previous answer is read) at /plaintext and at
the kv routes while smarm-server gets SIGTERM. Before the lame-duck phase
each connection lost the request it had just sent on its "idle" connection
(32 read errors per SIGTERM). Now every request that reached the server is
answered, with Connection: close; the client reconnects and finds the
listener gone. So the only errors smarm-load may count are refused
connects: no read, write, parse or timeout error, and the server exits 0.

Usage: drain_test.py SMARM_SERVER CONFIG SMARM_LOAD
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rel  # noqa: E402


def one_round(server, config, load, path, extra):
    srv = rel.start(server, config, ["--runtime.schedulers=1", *extra])
    rel.wait_kv(srv.port)
    fd, out = tempfile.mkstemp(prefix="smarm-drain-", suffix=".json")
    os.close(fd)
    try:
        lg = subprocess.Popen([load, f"http://127.0.0.1:{srv.port}{path}", "-c", "32", "-t", "1",
                               "-d", "4s", "--timeout", "3s", "-q", "--json", out],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        # Mid-run (the load lasts 4 s; how far it got does not matter).
        time.sleep(1.5)
        srv.proc.send_signal(signal.SIGTERM)
        rc = srv.proc.wait(timeout=30)
        _, err = lg.communicate(timeout=60)
        rel.check(rc == 0, f"the server exited {rc} after SIGTERM:\n{srv.text()[-2000:]}")
        report = json.load(open(out))
    finally:
        if srv.alive():
            srv.kill()
        os.unlink(out)
    errors = report["errors"]
    lost = {k: v for k, v in errors.items() if k != "connect" and v}
    rel.check(not lost, f"{path}: errors other than refused connects at the drain: {errors} "
                        f"({report['requests']} requests); smarm-load: {err.decode()[-500:]}")
    rel.check(report["requests"] > 0, "no request completed")
    bad = {s: n for s, n in report["statuses"].items() if s not in ("200", "201", "204", "404")}
    rel.check(not bad, f"{path}: unexpected statuses {bad}")
    return report


def main():
    server, config, load = sys.argv[1:4]
    for path, extra in (("/plaintext", []),
                        # PUT/GET kv: each request a registry-routed call.
                        ("/kv/drain", ["--kv.sync=none"])):
        for _ in range(3):  # the race it guards is per connection: several stops
            r = one_round(server, config, load, path, extra)
            print(f"ok: {path}: {r['requests']} requests, errors {r['errors']}", flush=True)


if __name__ == "__main__":
    main()
