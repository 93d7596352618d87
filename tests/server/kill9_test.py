#!/usr/bin/env python3
"""kv durability under kill -9: every acknowledged write survives.

Rounds (default 20): start smarm-server with a kv log, let 4 clients write
unique keys (and delete some of their own) over keep-alive connections,
kill -9 the server at a random moment, restart it, and check that every
acknowledged PUT is present with its value and every acknowledged DELETE is
absent. Writes in flight at the kill may land either way.

Usage: kill9_test.py SMARM_SERVER CONFIG [--rounds 20] [--sync always|none]
"""
import argparse
import http.client
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time


def wait_ready(p, port, logfile):
    """Waits for GET /readyz to answer 200: the listener is up before the kv
    log is replayed, and kv routes answer 503 until the service registers
    (what a load balancer's readiness probe sees)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/readyz")
            r = c.getresponse()
            r.read()
            c.close()
            if r.status == 200:
                return
        except (OSError, http.client.HTTPException):
            pass
        if p.poll() is not None:
            sys.exit(f"server exited at start:\n{open(logfile).read()}")
        time.sleep(0.02)
    p.kill()
    sys.exit("server did not become ready within 30 s")


def start(server, config, log_path, sync, logfile):
    out = open(logfile, "w")
    p = subprocess.Popen([server, "--config", config, "--http.host=127.0.0.1", "--http.port=0", "--admin.port=0",
                          f"--kv.log_path={log_path}", f"--kv.sync={sync}",
                          "--runtime.schedulers=2"], stdout=out, stderr=subprocess.STDOUT)
    for _ in range(200):
        text = open(logfile).read()
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", text)
        if m:
            port = int(m.group(1))
            wait_ready(p, port, logfile)
            return p, port
        if p.poll() is not None:
            sys.exit(f"server exited at start:\n{text}")
        time.sleep(0.05)
    p.kill()
    sys.exit("server did not start")


def writer(port, rnd, wid, acked, deleted, maybe_deleted, stop):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        mine = []
        i = 0
        while not stop.is_set():
            key = f"r{rnd}-w{wid}-{i}"
            value = f"value-{rnd}-{wid}-{i}-" + "x" * (i % 50)
            c.request("PUT", f"/kv/{key}", body=value)
            r = c.getresponse()
            r.read()
            if r.status != 201:
                raise RuntimeError(f"PUT {key}: {r.status}")
            acked[key] = value
            mine.append(key)
            if i % 7 == 3:
                victim = mine.pop(0)
                maybe_deleted.add(victim)  # in flight: may land either way
                c.request("DELETE", f"/kv/{victim}")
                r = c.getresponse()
                r.read()
                if r.status != 204:
                    raise RuntimeError(f"DELETE {victim}: {r.status}")
                deleted.add(victim)
            i += 1
    except (OSError, http.client.HTTPException):
        pass  # the server was killed


def verify(port, acked, deleted, maybe_deleted):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    bad = []
    for key, value in acked.items():
        c.request("GET", f"/kv/{key}")
        r = c.getresponse()
        body = r.read().decode()
        if key in deleted:
            if r.status != 404:
                bad.append(f"{key}: deleted but GET gave {r.status}")
        elif key in maybe_deleted and r.status == 404:
            pass  # its DELETE was in flight at the kill and landed
        elif r.status != 200 or body != value:
            bad.append(f"{key}: acknowledged {value!r} but GET gave {r.status} {body!r}")
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("server")
    ap.add_argument("config")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--sync", default="always")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="smarm_kill9_")
    log_path = os.path.join(work, "kv.log")
    logfile = os.path.join(work, "server.out")
    acked, deleted, maybe_deleted = {}, set(), set()
    rng = random.Random(1234)
    for rnd in range(a.rounds):
        p, port = start(a.server, a.config, log_path, a.sync, logfile)
        bad = verify(port, acked, deleted, maybe_deleted)
        if bad:
            p.kill()
            sys.exit(f"round {rnd}: {len(bad)} acknowledged writes lost, e.g.\n" + "\n".join(bad[:10]))
        stop = threading.Event()
        ts = [threading.Thread(target=writer, args=(port, rnd, w, acked, deleted, maybe_deleted, stop))
              for w in range(4)]
        for t in ts:
            t.start()
        time.sleep(rng.uniform(0.05, 0.4))
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        stop.set()
        for t in ts:
            t.join()
        print(f"round {rnd}: {len(acked)} keys acknowledged so far, {len(deleted)} deleted",
              flush=True)
    p, port = start(a.server, a.config, log_path, a.sync, logfile)
    bad = verify(port, acked, deleted, maybe_deleted)
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=20)
    if bad:
        sys.exit(f"final: {len(bad)} acknowledged writes lost, e.g.\n" + "\n".join(bad[:10]))
    print(f"ok: {a.rounds} kill -9 rounds, {len(acked)} acknowledged writes all present "
          f"({len(deleted)} acknowledged deletes absent)")


if __name__ == "__main__":
    main()
