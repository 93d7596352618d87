#!/usr/bin/env python3
"""kv under disk faults: nothing acknowledged is lost, nothing refused is stored.

smarm-server runs under the fault shim (fault_shim.c) with a kv log and a
small compaction threshold. While writers PUT and DELETE their own keys, the
shim fails the log's calls at random: ENOSPC, EIO and short writes on
pwrite, EIO on fdatasync, on the cut-back's ftruncate, on the directory
fsync, on the compaction's open and rename. A reader of /plaintext runs
throughout. Then the faults stop, more writes must all succeed (the log
repairs itself), the server is killed (-9) and restarted without the shim,
and every key is checked against what its writer was told:

  2xx                   the write happened: it must be there
  503 "not stored"      it did not: the key must be as before it
  503 "may or may not"  the log was damaged (a cut-back failed): either
  504                   the call timed out: either

Any other status fails, as does a /plaintext that is not 200, a fault rule
that never fired, or no 503 at all (the faults did not reach the log).

Usage: kv_faults_test.py SMARM_SERVER CONFIG FAULT_SHIM --sync always|group|none
       [--compact-bytes 32KiB] [--seconds 5] [--seed N]
"""
import argparse
import collections
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

ABSENT = rel.ABSENT


class Writer(threading.Thread):
    """PUTs and DELETEs keys of its own (so each key's history is sequential)
    and records, per key, every state the key may be in now."""

    def __init__(self, port, wid, rnd, stop, errors):
        super().__init__(daemon=True)
        self.port, self.wid, self.rnd, self.stop, self.errors = port, wid, rnd, stop, errors
        self.possible = {}  # key -> set of values (ABSENT for deleted/never stored)
        self.statuses = collections.Counter()
        self.acked = 0

    def conn(self):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=15)

    def op(self, c, method, key, value=None):
        c.request(method, f"/kv/{key}", body=value)
        r = c.getresponse()
        body = r.read().decode(errors="replace")
        self.statuses[r.status] += 1
        return r.status, body

    def record(self, key, status, body, new):
        before = self.possible.setdefault(key, {ABSENT})
        if status == 201 and ABSENT not in before:
            self.errors.append(f"PUT {key}: 201 (new), but the key was stored")
        if status == 204 and new is not ABSENT and before == {ABSENT}:
            self.errors.append(f"PUT {key}: 204 (replaced), but the key was absent")
        if status in (200, 201, 204):
            self.possible[key] = {new}
            self.acked += 1
        elif status == 503 and "not stored" in body:
            pass
        elif status == 503 and "may or may not" in body:
            before.add(new)
        elif status == 504:
            before.add(new)
        else:
            self.errors.append(f"{key}: unexpected {status} {body!r}")

    def run(self):
        c = self.conn()
        i = 0
        try:
            while not self.stop.is_set():
                key = f"w{self.wid}-k{self.rnd.randrange(40)}"
                state = self.possible.get(key, {ABSENT})
                if state != {ABSENT} and self.rnd.random() < 0.25:
                    status, body = self.op(c, "DELETE", key)
                    if status == 404 and ABSENT in state:
                        self.possible[key] = {ABSENT}
                        continue
                    self.record(key, status, body, ABSENT)
                else:
                    value = f"{key}-v{i}-" + "x" * self.rnd.randrange(50, 1500)
                    status, body = self.op(c, "PUT", key, value)
                    self.record(key, status, body, value)
                i += 1
        except (OSError, http.client.HTTPException) as e:
            self.errors.append(f"writer {self.wid}: {e!r}")


def reader(port, stop, errors, counts):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    try:
        while not stop.is_set():
            c.request("GET", "/plaintext")
            r = c.getresponse()
            r.read()
            counts["plaintext"] += 1
            if r.status != 200:
                errors.append(f"/plaintext: {r.status}")
            time.sleep(0.002)
    except (OSError, http.client.HTTPException) as e:
        errors.append(f"/plaintext reader: {e!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("server")
    ap.add_argument("config")
    ap.add_argument("shim")
    ap.add_argument("--sync", default="always", choices=["always", "group", "none"])
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--compact-bytes", default="64MiB",
                    help="32KiB: compactions run under the faults too (a compaction rewrites "
                         "the log from memory, which would hide a torn record left by an "
                         "append: test appends alone with the default)")
    ap.add_argument("--seed", type=int, default=int(time.time()))
    a = ap.parse_args()
    print(f"seed {a.seed}, sync {a.sync}")
    rnd = random.Random(a.seed)
    tmp = tempfile.mkdtemp(prefix="smarm-kvfaults-")
    try:
        log_path = os.path.join(tmp, "kv.log")
        control = os.path.join(tmp, "faults")
        fault_log = os.path.join(tmp, "injected")
        rules = [
            "write:kv.log:ENOSPC:0.08",
            "write:kv.log:short:0.10",
            "write:kv.log:EIO:0.03",
            "ftruncate:kv.log:EIO:0.10",
            "open:kv.log.compact:ENOSPC:0.2",
            "rename:kv.log.compact:EIO:0.2",
            f"fsync:{os.path.basename(tmp)}:EIO:0.2",
        ]
        if a.sync != "none":
            rules.append("fdatasync:kv.log:EIO:0.08")
        with open(control, "w") as f:
            f.write("\n".join(rules) + "\n")
        args = [f"--kv.log_path={log_path}", f"--kv.sync={a.sync}", f"--kv.compact_bytes={a.compact_bytes}",
                "--runtime.schedulers=2", "--kv.call_timeout=5s"]
        env = {"SMARM_FAULT_CONTROL": control, "SMARM_FAULT_LOG": fault_log,
               "SMARM_FAULT_SEED": str(a.seed)}
        srv = rel.start(a.server, a.config, args, env=env, preload=a.shim)
        rel.wait_kv(srv.port)
        stop = threading.Event()
        errors = []
        counts = collections.Counter()
        writers = [Writer(srv.port, w, random.Random(rnd.random()), stop, errors)
                   for w in range(4)]
        rd = threading.Thread(target=reader, args=(srv.port, stop, errors, counts), daemon=True)
        for t in writers + [rd]:
            t.start()
        time.sleep(a.seconds)
        # Faults off: the log must come back (a damaged log repairs itself
        # at the next write), so every later write is acknowledged.
        with open(control, "w") as f:
            f.write("")
        time.sleep(0.3)
        stop.set()
        for t in writers + [rd]:
            t.join(30)
        rel.check(not errors, "during the faults:\n  " + "\n  ".join(errors[:20]))
        after = Writer(srv.port, 9, random.Random(a.seed), threading.Event(), errors)
        c = after.conn()
        for w in writers:
            for key in list(w.possible)[:10]:
                value = f"{key}-final"
                status, body = after.op(c, "PUT", key, value)
                rel.check(status in (201, 204),
                          f"PUT {key} after the faults stopped: {status} {body!r}")
                w.possible[key] = {value}
        c.close()
        srv.kill()  # kill -9: only what the log holds comes back
        text = srv.text()

        injected = rel.injected_faults(fault_log)
        statuses = collections.Counter()
        for w in writers:
            statuses.update(w.statuses)
        acked = sum(w.acked for w in writers)
        print(f"injected: {dict(injected)}")
        print(f"statuses: {dict(statuses)}; acknowledged {acked}; /plaintext {counts['plaintext']}")
        compactions = text.count("compacted")
        print(f"compactions: {compactions}")
        if a.compact_bytes != "64MiB":
            rel.check(compactions > 0, "no compaction ran")
        for need in ("write:ENOSPC", "write:short", "ftruncate:EIO"):
            rel.check(injected[need] > 0, f"the rule {need} never fired")
        if a.sync != "none":
            rel.check(injected["fdatasync:EIO"] > 0, "no fdatasync failure was injected")
        rel.check(statuses[503] > 0, "no write was refused: the faults did not reach the log")
        rel.check(acked > 100, f"only {acked} writes were acknowledged")
        rel.check(counts["plaintext"] > 50, "the /plaintext reader barely ran")

        # Restart without the shim and compare every key.
        checked = rel.restart_and_check_kv(a.server, a.config, args,
                                           {key: possible for w in writers
                                            for key, possible in w.possible.items()})
        print(f"ok: {checked} keys as acknowledged after kill -9 and restart")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
