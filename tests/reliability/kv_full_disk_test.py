#!/usr/bin/env python3
"""kv on a disk that fills up and frees again: no acknowledged write is lost.

The failure this reproduces (issue 27): a PUT during the full disk got 503,
but its failed append left a partial record at the log's tail; once space
was back, later PUTs were appended after the torn bytes and acknowledged,
and the next start's replay cut the log at the torn record, dropping every
one of them.

A small tmpfs holds the log and a filler file. PUTs run until the disk is
full (503s), a few more are refused, the filler is deleted, more PUTs must
all be acknowledged, and after a restart every acknowledged key must be
there and every refused one absent.

Needs to mount a tmpfs (root, CAP_SYS_ADMIN); exits 77 (skipped) when the
machine does not allow it: kv_faults_test covers the same logic through the
fault shim everywhere.

Usage: kv_full_disk_test.py SMARM_SERVER CONFIG
"""
import http.client
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rel  # noqa: E402


def main():
    server, config = sys.argv[1], sys.argv[2]
    tmp = tempfile.mkdtemp(prefix="smarm-fulldisk-")
    mnt = os.path.join(tmp, "mnt")
    os.mkdir(mnt)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", mnt],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print(f"skipped: cannot mount a tmpfs here ({r.stderr.strip()})")
        shutil.rmtree(tmp, ignore_errors=True)
        sys.exit(77)
    try:
        filler = os.path.join(mnt, "filler")
        with open(filler, "wb") as f:
            f.write(b"\0" * 96 * 1024)
        log_path = os.path.join(mnt, "kv.log")
        args = [f"--kv.log_path={log_path}", "--kv.sync=always", "--runtime.schedulers=2"]
        srv = rel.start(server, config, args)
        rel.wait_kv(srv.port)
        acked, refused = {}, set()
        c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)

        def put(key, value):
            c.request("PUT", f"/kv/{key}", body=value)
            resp = c.getresponse()
            body = resp.read().decode()
            if resp.status == 201:
                acked[key] = value
            elif resp.status == 503:
                rel.check("not stored" in body, f"PUT {key}: 503 {body!r}")
                refused.add(key)
            else:
                rel.fail(f"PUT {key}: {resp.status} {body!r}")
            return resp.status

        i = 0
        # Values of 3,000 bytes: the disk fills part-way through a record.
        while put(f"k{i}", f"v{i}-" + "y" * 3000) != 503:
            i += 1
            rel.check(i < 1000, "the disk never filled")
        for _ in range(5):
            i += 1
            put(f"k{i}", f"v{i}-" + "y" * 3000)
        full_at = len(acked)
        os.unlink(filler)
        for _ in range(20):
            i += 1
            rel.check(put(f"k{i}", f"v{i}-" + "z" * 100) == 201,
                      f"PUT k{i} after space was freed was not acknowledged")
        c.close()
        rel.check(srv.stop() == 0, "smarm-server did not stop cleanly")
        print(f"{full_at} acknowledged before the disk filled, {len(refused)} refused, "
              f"{len(acked) - full_at} acknowledged after it was freed")

        expected = {key: {rel.ABSENT} for key in refused}
        expected.update({key: {value} for key, value in acked.items()})
        rel.restart_and_check_kv(server, config, args, expected)
        print(f"ok: all {len(acked)} acknowledged writes survived; refused ones absent")
    finally:
        subprocess.run(["umount", mnt])
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
