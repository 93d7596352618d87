#!/usr/bin/env python3
"""The open-file limit (issue 27, defect 3) and descriptor exhaustion.

1. smarm-server raises its soft RLIMIT_NOFILE to the hard limit at start, and
   warns once, naming both numbers, when that is below what
   http.max_connections needs.
2. Real EMFILE on accept: with a hard limit of 256, 400 clients connect and
   hold their connections. The server keeps serving the ones it accepted,
   logs the accept failures a few times rather than 100 times a second,
   counts them in /metrics, and once clients leave, accepts the waiting
   connections and answers them.
3. EMFILE on the kv log's open (fault shim): the kv service retries and
   comes up once the open works; other routes serve meanwhile.

Usage: fd_limits_test.py SMARM_SERVER CONFIG SHIM
"""
import os
import socket
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rel  # noqa: E402


def raised_and_warned(server, config):
    srv = rel.start(server, config, nofile=(256, 4096))
    try:
        rel.check(srv.nofile() == (4096, 4096), f"limit not raised: {srv.nofile()}")
        text = srv.text()
        rel.check("open-file limit is 4096 (hard limit 4096)" in text and "10128" in text,
                  f"no warning naming both numbers:\n{text}")
        rel.check(text.count("open-file limit") == 1, "warned more than once")
    finally:
        srv.stop()
    srv = rel.start(server, config, ["--http.max_connections=1000"], nofile=(256, 4096))
    try:
        rel.check("open-file limit" not in srv.text(), "warned although 4096 suffices for 1000")
    finally:
        srv.stop()
    print("ok: soft limit raised to the hard one; one warning naming both when short")


def real_emfile(server, config):
    srv = rel.start(server, config, ["--runtime.schedulers=2"], nofile=(256, 256))
    held = []
    try:
        for _ in range(400):
            held.append(socket.create_connection(("127.0.0.1", srv.port), timeout=5))
        time.sleep(2.5)  # ~2.5 s of EMFILE at the listener
        # Connections accepted before the limit still serve.
        first = held[0]
        first.sendall(b"GET /plaintext HTTP/1.1\r\nHost: t\r\n\r\n")
        first.settimeout(5)
        rel.check(rel.status_of(first.recv(4096)) == 200, "an accepted connection stopped serving")
        failures = srv.text().count("accept failed")
        rel.check(1 <= failures <= 3, f"{failures} accept-failure lines in 2.5 s")
        # A waiting connection: it is in the backlog until a descriptor frees.
        waiting = held[-1]
        waiting.sendall(b"GET /plaintext HTTP/1.1\r\nHost: t\r\n\r\n")
        for s in held[1:200]:
            s.close()
        waiting.settimeout(10)
        rel.check(rel.status_of(waiting.recv(4096)) == 200,
                  "a connection waiting in the backlog was not served once fds were free")
        errors = srv.metric("smarm_http_accept_errors_total")
        rel.check(errors >= 3, f"smarm_http_accept_errors_total = {errors}")
        rel.check("accepting again" in srv.text(), "no line saying accepting works again")
        print(f"ok: EMFILE on accept: {failures} log lines, {errors:.0f} failures counted, "
              "served again once descriptors were free")
    finally:
        for s in held:
            s.close()
        srv.stop()


def log_open_emfile(server, config, shim):
    tmp = tempfile.mkdtemp(prefix="smarm-fd-")
    log_path = os.path.join(tmp, "kv.log")
    fault_log = os.path.join(tmp, "faults")
    srv = rel.start(server, config, [f"--kv.log_path={log_path}"], preload=shim,
                    env={"SMARM_FAULTS": "open:kv.log:EMFILE:1:4", "SMARM_FAULT_LOG": fault_log})
    try:
        status, _ = rel.request(srv.port, "GET", "/plaintext")
        rel.check(status == 200, f"/plaintext: {status} while kv retries its open")
        rel.wait_kv(srv.port)
        status, _ = rel.request(srv.port, "PUT", "/kv/a", body=b"1")
        rel.check(status == 201, f"PUT after the log opened: {status}")
        with open(fault_log) as f:
            injected = f.read().count("EMFILE")
        rel.check(injected == 4, f"{injected} EMFILEs injected, expected 4")
        print("ok: EMFILE at the log's open: kv retried and came up; /plaintext served meanwhile")
    finally:
        srv.stop()


def main():
    server, config, shim = sys.argv[1:4]
    raised_and_warned(server, config)
    real_emfile(server, config)
    log_open_emfile(server, config, shim)


if __name__ == "__main__":
    main()
