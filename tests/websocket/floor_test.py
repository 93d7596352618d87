#!/usr/bin/env python3
"""smarm-http-floor --ws, the WebSocket benchmark's floor, echoes what a
server would: compare_ws.py's floor ratios mean something only if it does
the same work per message as the servers it calibrates.

Checks: the 101's Sec-WebSocket-Accept for the client's key; text and
binary messages of 0, 1, 125, 126, 65535, 65536 and 70000 bytes come back
unmasked with the same payload and the shortest length form; two frames in
one send and a frame sent a byte at a time; a ping is answered with a pong
of its payload; a close is answered with a close and the connection ends.

Usage: floor_test.py SMARM_HTTP_FLOOR
"""
import base64
import hashlib
import os
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wsframe  # noqa: E402
from wsframe import BINARY, CLOSE, PING, PONG, TEXT  # noqa: E402

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check(cond, msg):
    if not cond:
        print("FAIL: " + msg, file=sys.stderr)
        sys.exit(1)


def main():
    port = free_port()
    p = subprocess.Popen([sys.argv[1], str(port), "--ws"])
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                check(time.monotonic() < deadline, "the floor did not listen")
                time.sleep(0.02)
        c = wsframe.Client(port, path="/floor")
        want = base64.b64encode(hashlib.sha1((c.key + GUID).encode()).digest()).decode()
        check(c.headers.get("sec-websocket-accept") == want,
              f"accept {c.headers.get('sec-websocket-accept')!r}, expected {want!r}")
        for n in (0, 1, 125, 126, 65535, 65536, 70000):
            for op in (TEXT, BINARY):
                payload = os.urandom(n) if op == BINARY else b"x" * n
                c.send_frame(op, payload)
                fin, rsv, o, got = c.recv_frame()  # recv_frame checks the length form
                check(fin and rsv == 0 and o == op and got == payload,
                      f"{n} bytes, opcode {op}: got opcode {o}, {len(got)} bytes")
        c.send(wsframe.frame(TEXT, b"one") + wsframe.frame(BINARY, b"two"))
        check(c.recv_frame()[2:] == (TEXT, b"one"), "the first of two frames in one send")
        check(c.recv_frame()[2:] == (BINARY, b"two"), "the second of two frames in one send")
        c.send_slowly(wsframe.frame(TEXT, b"byte at a time"))
        check(c.recv_frame()[2:] == (TEXT, b"byte at a time"), "a frame sent a byte at a time")
        c.send_frame(PING, b"are you there")
        check(c.recv_frame()[2:] == (PONG, b"are you there"), "the ping's pong")
        c.send_frame(CLOSE, wsframe.close_payload(1000))
        fin, rsv, o, got = c.recv_frame()
        check(o == CLOSE and got == wsframe.close_payload(1000), f"close answered with {o} {got!r}")
        c.sock.settimeout(5)
        check(c.sock.recv(1) == b"", "the connection did not end after the close")
        print("ok: the floor's handshake and echo are a server's")
    finally:
        p.kill()
        p.wait()


if __name__ == "__main__":
    main()
