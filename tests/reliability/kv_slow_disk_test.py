#!/usr/bin/env python3
"""kv on a slow disk: a sync that takes seconds is named in the server's log,
and in group mode reads do not wait for it.

With sync: always every kv request, reads included, waits while a write's
sync is on the disk; in group mode the group's sync runs beside the server
and only writes wait. Either way a disk that stalls shows up to clients as
slow answers or timeouts, and the server must say where the time went: a
log write or group sync that takes a second or more logs a warning naming
it, the log's path and how long it took.

The fault shim makes chosen fdatasync calls of the log sleep (`slowMS`)
before syncing for real. For each sync mode (always: the write's own sync;
group: the group's), one slow sync must give one answered PUT, the warning,
and the value after a restart; a fast sync must give no warning; in group
mode a GET during the slow sync is answered at once.

Usage: kv_slow_disk_test.py SMARM_SERVER CONFIG FAULT_SHIM
"""
import os
import re
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rel  # noqa: E402

SLOW_MS = 1500


def run(server, config, shim, sync):
    tmp = tempfile.mkdtemp(prefix="smarm-slowdisk-")
    try:
        control = os.path.join(tmp, "faults")
        open(control, "w").close()
        faults = os.path.join(tmp, "injected")
        args = [f"--kv.log_path={tmp}/kv.log", f"--kv.sync={sync}"]
        srv = rel.start(server, config, args, preload=shim,
                        env={"SMARM_FAULT_CONTROL": control, "SMARM_FAULT_LOG": faults})
        rel.wait_kv(srv.port)
        status, _ = rel.request(srv.port, "PUT", "/kv/fast", body=b"v0")
        rel.check(status == 201, f"{sync}: the fast PUT answered {status}")
        rel.check("took" not in srv.text(), f"{sync}: a fast sync was reported as slow:\n"
                  + srv.text()[-1000:])

        with open(control, "w") as f:
            f.write(f"fdatasync:kv.log:slow{SLOW_MS}:1:1\n")
        time.sleep(0.1)  # the shim polls its control file every 10 ms
        put = {}

        def slow_put():
            t0 = time.monotonic()
            put["status"], _ = rel.request(srv.port, "PUT", "/kv/slow", body=b"v1")
            put["took"] = time.monotonic() - t0

        putter = threading.Thread(target=slow_put)
        putter.start()
        time.sleep(0.2)  # the PUT's sync is on the disk now
        t0 = time.monotonic()
        status, body = rel.request(srv.port, "GET", "/kv/fast")
        read_took = time.monotonic() - t0
        rel.check(status == 200 and body == b"v0", f"{sync}: GET during the sync: {status} {body!r}")
        putter.join()
        status, took = put["status"], put["took"]
        rel.check(status == 201, f"{sync}: the PUT on a slow sync answered {status}")
        if sync == "group":
            # The group's sync runs beside the server: reads go on.
            # (A read that waits for the sync waits ~1.3 s: 0.9 s leaves
            # room for a busy machine.)
            rel.check(read_took < 0.9, f"group: a read waited {read_took:.2f} s for a sync")
        rel.check(rel.injected_faults(faults)["fdatasync:slow"] == 1,
                  f"{sync}: the slow sync was not injected")
        rel.check(took >= SLOW_MS / 1000, f"{sync}: the PUT was answered in {took:.2f} s, "
                  f"before its {SLOW_MS} ms sync ended")
        what = "a group sync" if sync == "group" else "a write"
        pattern = rf"kv: {what} to {re.escape(tmp)}/kv\.log took (\d+\.\d+) s"
        deadline = time.monotonic() + 5
        m = None
        while m is None and time.monotonic() < deadline:
            m = re.search(pattern, srv.text())
            time.sleep(0.02)
        rel.check(m is not None, f"{sync}: no warning for the slow sync in the log:\n"
                  + srv.text()[-1000:])
        rel.check(float(m.group(1)) >= SLOW_MS / 1000 - 0.01,
                  f"{sync}: the warning says {m.group(1)} s for a {SLOW_MS} ms sync")
        srv.stop()
        rel.restart_and_check_kv(server, config, args, {"fast": {"v0"}, "slow": {"v1"}})
        print(f"ok: {sync}: the {SLOW_MS} ms sync is named in the log ({m.group(0)})", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    server, config, shim = sys.argv[1:4]
    for sync in ("always", "group"):
        run(server, config, shim, sync)


if __name__ == "__main__":
    main()
