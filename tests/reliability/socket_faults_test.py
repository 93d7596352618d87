#!/usr/bin/env python3
"""Socket faults (issue 27): EINTR and short writes are invisible to clients;
a connection reset mid-request or mid-response costs only that connection,
leaks nothing, and loses no acknowledged kv write.

smarm-server runs under the fault shim (fault_shim.c) with a kv log
(group commit). Three phases on one server:

1. Transparent faults: EINTR on recv, send and accept, and short sends
   (half of what was asked). smarm-load drives /plaintext and the kv 90/10
   scenario, and fresh connections are opened one after another: no error
   of any kind, only documented statuses, every rule fired.
2. Resets: ECONNRESET on recv and on send (the server sees the peer reset
   part-way through a request or a response). Writers PUT and DELETE their
   own keys, reconnecting after each lost connection, while smarm-load runs
   /plaintext. Allowed: read/write/parse errors of the reset connections.
   Not allowed: a timeout (a connection the server forgot), a refused
   connect, an undocumented status, a dead server.
3. Faults off: the open connections and fds fall back to what they were
   before, a clean smarm-load run has zero errors, more writes are all
   acknowledged; then kill -9, a restart without the shim, and every key is
   checked against what its writer was told (an answered write must be
   there; one whose connection reset may or may not be).

Usage: socket_faults_test.py SMARM_SERVER CONFIG FAULT_SHIM SMARM_LOAD [--seed N]
"""
import argparse
import http.client
import os
import random
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rel  # noqa: E402
from kv_faults_test import ABSENT, Writer  # noqa: E402
from rel import check_statuses, load, load_report, scenario  # noqa: E402


class ResettingWriter(Writer):
    """A Writer whose connection may be reset: the write it was waiting for
    may or may not have happened, and it goes on on a new connection."""

    def __init__(self, *args):
        super().__init__(*args)
        self.lost = 0

    def run(self):
        c = self.conn()
        i = 0
        while not self.stop.is_set():
            key = f"w{self.wid}-k{self.rnd.randrange(40)}"
            state = self.possible.get(key, {ABSENT})
            delete = state != {ABSENT} and self.rnd.random() < 0.25
            value = ABSENT if delete else f"{key}-v{i}-" + "x" * self.rnd.randrange(50, 1500)
            i += 1
            try:
                status, body = self.op(c, "DELETE" if delete else "PUT", key, value)
            except (OSError, http.client.HTTPException):
                self.possible.setdefault(key, {ABSENT}).add(value)
                self.lost += 1
                c.close()
                c = self.conn()
                continue
            if delete and status == 404 and ABSENT in state:
                self.possible[key] = {ABSENT}
                continue
            self.record(key, status, body, value)
        c.close()


def set_rules(control, rules):
    with open(control, "w") as f:
        f.write("\n".join(rules) + "\n" if rules else "")
    time.sleep(0.1)  # the shim polls every 10 ms


def transparent_phase(srv, a, control, fault_log):
    set_rules(control, ["recv:sock:EINTR:0.3", "send:sock:EINTR:0.3", "send:sock:short:0.3",
                        "accept:*:EINTR:0.3"])
    plain = load(a.load, srv.port, "/plaintext", ["-c", "8"], 3)
    kv = load(a.load, srv.port, "/", ["-c", "8", *scenario("kv-90-10.yaml")], 3)
    fresh = 0
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        status, body = rel.request(srv.port, "GET", "/plaintext")
        rel.check(status == 200 and body == b"Hello, World!",
                  f"a fresh connection under EINTR got {status} {body[:60]!r}")
        fresh += 1
    reports = {"plaintext": load_report(plain), "kv": load_report(kv)}
    set_rules(control, [])
    for name, r in reports.items():
        rel.check(r["error_total"] == 0, f"{name} under EINTR/short sends: errors {r['errors']}")
        check_statuses(name, r)
    got = rel.injected_faults(fault_log)
    for need in ("recv:EINTR", "send:EINTR", "send:short", "accept:EINTR"):
        rel.check(got[need] > 0, f"the rule {need} never fired ({dict(got)})")
    print(f"ok: transparent: {dict(got)}; {fresh} fresh connections; "
          f"plaintext {reports['plaintext']['requests']}, kv {reports['kv']['statuses']}",
          flush=True)
    return got


def reset_phase(srv, a, control, fault_log, before, rnd):
    stop = threading.Event()
    errors = []
    writers = [ResettingWriter(srv.port, w, random.Random(rnd.random()), stop, errors)
               for w in range(4)]
    set_rules(control, ["recv:sock:ECONNRESET:0.02", "send:sock:ECONNRESET:0.02"])
    plain = load(a.load, srv.port, "/plaintext", ["-c", "8"], 4)
    for w in writers:
        w.start()
    time.sleep(4)
    stop.set()
    for w in writers:
        w.join(30)
    r = load_report(plain)
    set_rules(control, [])
    rel.check(srv.alive(), "the server died under connection resets")
    rel.check(not errors, "writers under resets:\n  " + "\n  ".join(errors[:20]))
    bad = {k: v for k, v in r["errors"].items() if k in ("timeout", "connect") and v}
    rel.check(not bad, f"/plaintext under resets: {bad} (a forgotten or refused connection)")
    check_statuses("plaintext under resets", r)
    got = rel.injected_faults(fault_log) - before
    for need in ("recv:ECONNRESET", "send:ECONNRESET"):
        rel.check(got[need] > 0, f"the rule {need} never fired ({dict(got)})")
    lost = sum(w.lost for w in writers)
    acked = sum(w.acked for w in writers)
    rel.check(acked > 100, f"only {acked} writes were acknowledged under resets")
    # Each injected reset ends one connection: at most one failed request.
    failed = r["error_total"] + lost
    resets = got["recv:ECONNRESET"] + got["send:ECONNRESET"]
    rel.check(failed <= resets,
              f"{failed} requests failed but only {resets} resets were injected: "
              "a reset cost more than its own connection")
    print(f"ok: resets: {dict(got)}; {failed} failed requests; {acked} writes acknowledged; "
          f"plaintext {r['requests']} requests, errors {r['errors']}", flush=True)
    return writers


def settle(srv, base_fds):
    """Waits until no public connection is open (the gauge, read on the
    admin listener, counts the public one's) and the fd count is back near
    what it was before the faults."""
    deadline = time.monotonic() + 15
    while True:
        active = srv.metric("smarm_http_connections_active")
        fds = srv.fds()
        if active == 0 and fds <= base_fds + 2:
            return active, fds
        rel.check(time.monotonic() < deadline,
                  f"after the faults: {active:.0f} connections still open, {fds} fds "
                  f"(before: {base_fds}): a reset connection leaked")
        time.sleep(0.1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("server")
    ap.add_argument("config")
    ap.add_argument("shim")
    ap.add_argument("load")
    ap.add_argument("--seed", type=int, default=int(time.time()))
    a = ap.parse_args()
    print(f"seed {a.seed}")
    rnd = random.Random(a.seed)
    tmp = tempfile.mkdtemp(prefix="smarm-sockfaults-")
    try:
        log_path = os.path.join(tmp, "kv.log")
        control = os.path.join(tmp, "faults")
        fault_log = os.path.join(tmp, "injected")
        set_rules(control, [])
        args = [f"--kv.log_path={log_path}", "--kv.sync=group", "--runtime.schedulers=2",
                "--kv.call_timeout=5s"]
        env = {"SMARM_FAULT_CONTROL": control, "SMARM_FAULT_LOG": fault_log,
               "SMARM_FAULT_SEED": str(a.seed)}
        srv = rel.start(a.server, a.config, args, env=env, preload=a.shim)
        rel.wait_kv(srv.port)
        base_fds = srv.fds()
        before = transparent_phase(srv, a, control, fault_log)
        writers = reset_phase(srv, a, control, fault_log, before, rnd)
        active, fds = settle(srv, base_fds)
        r = load_report(load(a.load, srv.port, "/plaintext", ["-c", "8"], 2))
        rel.check(r["error_total"] == 0, f"after the faults: errors {r['errors']}")
        check_statuses("plaintext after the faults", r)
        after = Writer(srv.port, 9, random.Random(a.seed), threading.Event(), [])
        c = after.conn()
        for w in writers:
            for key in list(w.possible)[:10]:
                value = f"{key}-final"
                status, body = after.op(c, "PUT", key, value)
                rel.check(status in (201, 204), f"PUT {key} after the faults: {status} {body!r}")
                w.possible[key] = {value}
        c.close()
        print(f"ok: settled ({active:.0f} connections, {fds} fds, {base_fds} before); "
              f"clean run {r['requests']} requests, no error", flush=True)
        srv.kill()

        checked = rel.restart_and_check_kv(a.server, a.config, args,
                                           {key: possible for w in writers
                                            for key, possible in w.possible.items()},
                                           "after kill -9")
        print(f"ok: {checked} keys as acknowledged after kill -9 and restart")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
