#!/usr/bin/python3
"""WebSocket conformance of smarm-server's GET /ws/echo, in the style of the
Autobahn testsuite's sections 1-7 and 10 (Autobahn itself is Python 2 only),
plus the limits, the handshake's refusals and permessage-deflate. Each case
opens its own connection with the raw-frame client (wsframe.py) and asserts
the exact echo or close code.

    conformance_test.py SMARM_SERVER CONFIG [-k SUBSTRING]
"""
import argparse
import os
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "reliability"))
import rel  # noqa: E402
from wsframe import (BINARY, CLOSE, CONT, PING, PONG, TEXT, Client, Closed,  # noqa: E402
                     close_payload, deflate_message, frame, inflate_message)

MAX = 1 << 20  # --websocket.max_message for this run
CASES = []


def case(ident, what):
    def reg(fn):
        CASES.append((ident, what, fn))
        return fn
    return reg


def echo(port, opcode, payload, **kw):
    c = Client(port)
    c.send_frame(opcode, payload, **kw)
    op, got = c.recv_message()
    assert (op, got) == (opcode, payload), f"echo: opcode {op}, {len(got)} bytes"
    c.send_frame(CLOSE, close_payload(1000))
    assert c.expect_close() == 1000
    return c


def fails_with(port, code, *frames, slowly=False):
    c = Client(port)
    data = b"".join(frames)
    c.send_slowly(data, 7) if slowly else c.send(data)
    got = c.expect_close()
    assert got == code, f"close {got}, expected {code}"


# 1 Framing
for i, n in enumerate([0, 125, 126, 127, 128, 65535, 65536], 1):
    case(f"1.1.{i}", f"text message of {n} bytes echoed")(
        lambda port, n=n: echo(port, TEXT, b"*" * n))
    case(f"1.2.{i}", f"binary message of {n} bytes echoed")(
        lambda port, n=n: echo(port, BINARY, bytes(range(256)) * (n // 256) + b"\xfe" * (n % 256)))


@case("1.1.9", "a 20-byte text then a 200-byte binary sent a byte at a time: both echoed")
def _(port):
    c = Client(port)
    c.send_slowly(frame(TEXT, b"t" * 20) + frame(BINARY, bytes(range(200))), 1)
    assert c.recv_message() == (TEXT, b"t" * 20)
    assert c.recv_message() == (BINARY, bytes(range(200)))


# RFC 6455 5.2: "the minimal number of bytes MUST be used to encode the
# length"; a longer form is a protocol error.
def long_form(opcode, payload, ext):
    key = os.urandom(4)
    n = len(payload)
    head = (struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n) if ext == 2
            else struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n))
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


@case("1.3.1", "a 5-byte text with its length in the 16-bit form: 1002")
def _(port):
    fails_with(port, 1002, long_form(TEXT, b"hello", 2))


@case("1.3.2", "a 300-byte binary with its length in the 64-bit form: 1002")
def _(port):
    fails_with(port, 1002, long_form(BINARY, b"b" * 300, 8))


@case("1.3.3", "a text then a binary in one write: both echoed, in order")
def _(port):
    c = Client(port)
    c.send(frame(TEXT, b"first") + frame(BINARY, b"\x00\xff" * 100))
    assert c.recv_message() == (TEXT, b"first")
    assert c.recv_message() == (BINARY, b"\x00\xff" * 100)


@case("1.1.8", "text message of 65536 bytes sent in pieces of 997")
def _(port):
    c = Client(port)
    c.send_slowly(frame(TEXT, b"*" * 65536), 997)
    assert c.recv_message() == (TEXT, b"*" * 65536)


# 2 Pings and pongs
@case("2.1", "ping without payload: pong without payload")
def _(port):
    c = Client(port)
    c.send_frame(PING)
    assert c.recv_frame() == (True, 0, PONG, b"")


@case("2.2", "ping with 125 bytes: pong with the same")
def _(port):
    c = Client(port)
    p = bytes(range(125))
    c.send_frame(PING, p)
    assert c.recv_frame() == (True, 0, PONG, p)


@case("2.5", "ping with 126 bytes: 1002")
def _(port):
    fails_with(port, 1002, frame(PING, b"x" * 126))


@case("2.6", "ping with 125 bytes sent a byte at a time: pong")
def _(port):
    c = Client(port)
    c.send_slowly(frame(PING, b"p" * 125), 1)
    assert c.recv_frame() == (True, 0, PONG, b"p" * 125)


@case("2.7", "unsolicited pong: ignored")
def _(port):
    c = Client(port)
    c.send_frame(PONG, b"unsolicited")
    c.send_frame(TEXT, b"after")
    assert c.recv_frame() == (True, 0, TEXT, b"after")


@case("2.9", "pong then ping: one pong")
def _(port):
    c = Client(port)
    c.send(frame(PONG, b"a") + frame(PING, b"b"))
    assert c.recv_frame() == (True, 0, PONG, b"b")


@case("2.10", "10 pings in one write: 10 pongs in order")
def _(port):
    c = Client(port)
    c.send(b"".join(frame(PING, b"%d" % i) for i in range(10)))
    for i in range(10):
        assert c.recv_frame() == (True, 0, PONG, b"%d" % i)


@case("2.11", "10 pings sent a byte at a time: 10 pongs")
def _(port):
    c = Client(port)
    c.send_slowly(b"".join(frame(PING, b"%d" % i) for i in range(10)), 1)
    for i in range(10):
        assert c.recv_frame() == (True, 0, PONG, b"%d" % i)


@case("2.12", "unmasked ping: 1002")
def _(port):
    fails_with(port, 1002, frame(PING, b"x", mask=False))


# 3 Reserved bits
for i, (op, rsv) in enumerate([(TEXT, 4), (TEXT, 2), (TEXT, 1), (TEXT, 7), (BINARY, 2),
                                (PING, 4), (CLOSE, 2)], 1):
    case(f"3.{i}", f"opcode {op} with RSV {rsv}: 1002")(
        lambda port, op=op, rsv=rsv: fails_with(
            port, 1002, frame(op, close_payload(1000) if op == CLOSE else b"x", rsv=rsv)))


@case("3.8", "a good message, then RSV2 in one write: the echo, then 1002")
def _(port):
    c = Client(port)
    c.send(frame(TEXT, b"good") + frame(TEXT, b"bad", rsv=2))
    assert c.recv_frame() == (True, 0, TEXT, b"good")
    assert c.expect_close() == 1002


# 4 Opcodes
for i, op in enumerate([3, 4, 5, 6, 7], 1):
    case(f"4.1.{i}", f"reserved non-control opcode {op}: 1002")(
        lambda port, op=op: fails_with(port, 1002, frame(op, b"x")))
for i, op in enumerate([11, 12, 13, 14, 15], 1):
    case(f"4.2.{i}", f"reserved control opcode {op}: 1002")(
        lambda port, op=op: fails_with(port, 1002, frame(op, b"x")))


@case("4.3", "a good message, then opcode 5, then a ping: the echo, then 1002")
def _(port):
    c = Client(port)
    c.send(frame(TEXT, b"ok") + frame(5, b"") + frame(PING))
    assert c.recv_frame() == (True, 0, TEXT, b"ok")
    assert c.expect_close() == 1002


# 5 Fragmentation
@case("5.1", "fragmented ping: 1002")
def _(port):
    fails_with(port, 1002, frame(PING, b"a", fin=False), frame(CONT, b"b"))


@case("5.2", "fragmented pong: 1002")
def _(port):
    fails_with(port, 1002, frame(PONG, b"a", fin=False), frame(CONT, b"b"))


@case("5.3", "text in two fragments: echoed whole")
def _(port):
    c = Client(port)
    c.send(frame(TEXT, b"frag", fin=False) + frame(CONT, b"ment"))
    assert c.recv_message() == (TEXT, b"fragment")


@case("5.5", "text in 5 fragments, a byte at a time")
def _(port):
    c = Client(port)
    data = b"".join(frame(TEXT if i == 0 else CONT, b"%d" % i, fin=i == 4) for i in range(5))
    c.send_slowly(data, 1)
    assert c.recv_message() == (TEXT, b"01234")


@case("5.6", "a ping between fragments: the pong, then the message")
def _(port):
    c = Client(port)
    c.send(frame(TEXT, b"a", fin=False) + frame(PING, b"mid") + frame(CONT, b"b"))
    assert c.recv_frame() == (True, 0, PONG, b"mid")
    assert c.recv_message() == (TEXT, b"ab")


@case("5.9", "a continuation with nothing to continue: 1002")
def _(port):
    fails_with(port, 1002, frame(CONT, b"x"))


@case("5.15", "a new text message inside a fragmented one: 1002")
def _(port):
    fails_with(port, 1002, frame(TEXT, b"a", fin=False), frame(TEXT, b"b"))


@case("5.19", "empty fragments: echoed as one empty message")
def _(port):
    c = Client(port)
    c.send(frame(TEXT, b"", fin=False) + frame(CONT, b"", fin=False) + frame(CONT, b""))
    assert c.recv_message() == (TEXT, b"")


@case("5.20", "fragments 1 s apart with pings between: the pongs, then the message")
def _(port):
    c = Client(port)
    c.send(frame(TEXT, b"slow ", fin=False))
    for i in range(2):
        time.sleep(0.5)
        c.send(frame(PING, b"%d" % i))
        assert c.recv_frame() == (True, 0, PONG, b"%d" % i)
    c.send(frame(CONT, b"message"))
    assert c.recv_message() == (TEXT, b"slow message")


# 6 UTF-8
VALID = "Hello-\u00b5@\u00df\u00f6\u00e4\u00fc\u00e0\u00e1-UTF-8!! \U0001f600 \u03ba\u1f79\u03c3\u03bc\u03b5".encode()
INVALID = [b"\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5\xed\xa0\x80\x65\x64\x69\x74\x65\x64",
           b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe0\x80\xaf", b"\x80"]


@case("6.1", "valid UTF-8 echoed")
def _(port):
    echo(port, TEXT, VALID)


@case("6.2", "valid UTF-8 split inside code points across fragments: echoed")
def _(port):
    c = Client(port)
    parts = [VALID[i:i + 3] for i in range(0, len(VALID), 3)]
    data = b"".join(frame(TEXT if i == 0 else CONT, p, fin=i == len(parts) - 1)
                    for i, p in enumerate(parts))
    c.send(data)
    assert c.recv_message() == (TEXT, VALID)


for i, bad in enumerate(INVALID, 3):
    case(f"6.{i}", f"invalid UTF-8 {bad[:8].hex()}: 1007")(
        lambda port, bad=bad: fails_with(port, 1007, frame(TEXT, b"ok " + bad)))


@case("6.10", "invalid UTF-8 in the second fragment: 1007")
def _(port):
    fails_with(port, 1007, frame(TEXT, b"fine", fin=False), frame(CONT, b"\xed\xa0\x80"))


@case("6.11", "a code point cut short at the message's end: 1007")
def _(port):
    fails_with(port, 1007, frame(TEXT, b"ok \xce"))


@case("6.12", "invalid UTF-8 in a binary message is data: echoed")
def _(port):
    echo(port, BINARY, INVALID[0])


# 7 Close handling
@case("7.1.1", "a message, then close 1000: the echo, then close 1000")
def _(port):
    c = Client(port)
    c.send(frame(TEXT, b"bye") + frame(CLOSE, close_payload(1000)))
    assert c.recv_frame() == (True, 0, TEXT, b"bye")
    assert c.expect_close() == 1000


@case("7.1.3", "close, then a ping and a message: nothing after our close")
def _(port):
    c = Client(port)
    c.send(frame(CLOSE, close_payload(1000)) + frame(PING, b"late") + frame(TEXT, b"late"))
    fin, rsv, op, p = c.recv_frame()
    assert op == CLOSE and struct.unpack("!H", p[:2])[0] == 1000, (op, p)
    c.sock.settimeout(5)
    rest = c.buf
    try:
        while True:
            chunk = c.sock.recv(4096)
            if not chunk:
                break
            rest += chunk
    except ConnectionResetError:
        pass
    assert rest == b"", f"{len(rest)} bytes after the close"


@case("7.3.1", "close without payload: close 1000")
def _(port):
    fails_with(port, 1000, frame(CLOSE))


@case("7.3.2", "close with a 1-byte payload: 1002")
def _(port):
    fails_with(port, 1002, frame(CLOSE, b"\x03"))


@case("7.3.4", "close 1000 with a reason: close 1000")
def _(port):
    fails_with(port, 1000, frame(CLOSE, close_payload(1000, b"done here")))


@case("7.3.5", "close 1000 with a 123-byte reason: close 1000")
def _(port):
    fails_with(port, 1000, frame(CLOSE, close_payload(1000, b"r" * 123)))


@case("7.3.6", "close with a 124-byte reason (payload 126): 1002")
def _(port):
    fails_with(port, 1002, frame(CLOSE, close_payload(1000, b"r" * 124)))


@case("7.5.1", "close with an invalid UTF-8 reason: 1002 (Beast fails it as a protocol error)")
def _(port):
    fails_with(port, 1002, frame(CLOSE, close_payload(1000, b"\xce\xba\xed\xa0\x80")))


for i, code in enumerate([1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 3000, 3999,
                          4000, 4999], 1):
    case(f"7.7.{i}", f"close {code}: echoed")(
        lambda port, code=code: fails_with(port, code, frame(CLOSE, close_payload(code))))
for i, code in enumerate([0, 999, 1004, 1005, 1006, 1016, 1100, 2000, 2999, 5000, 65535], 1):
    case(f"7.9.{i}", f"close with invalid code {code}: 1002")(
        lambda port, code=code: fails_with(port, 1002, frame(CLOSE, close_payload(code))))


@case("7.13", "the TCP connection closed without a close: the server lets go")
def _(port):
    c = Client(port)
    c.send_frame(TEXT, b"x")
    c.close()


# 9 Limits (the run's max_message is 1 MiB)
@case("9.1", "a message of exactly max_message: echoed")
def _(port):
    echo(port, BINARY, b"m" * MAX)


def head_only(data, payload_sent=16):
    """A frame cut after its head and a little payload: the server must
    decide from the head alone. (Sending the whole oversized payload races
    the server's close: once it has failed the message it reads no more,
    and a client still writing may get a reset before it reads the close;
    seen under TSan.)"""
    b1 = data[1] & 0x7F
    head = 2 + (2 if b1 == 126 else 8 if b1 == 127 else 0) + 4
    return data[:head + payload_sent]


@case("9.2", "a message one byte past max_message: 1009 from its head")
def _(port):
    fails_with(port, 1009, head_only(frame(BINARY, b"m" * (MAX + 1))))


@case("9.3", "fragments adding up past max_message: 1009 at the second head")
def _(port):
    half = b"m" * (MAX // 2 + 1)
    fails_with(port, 1009, frame(BINARY, half, fin=False), head_only(frame(CONT, half)))


@case("9.4", "a 64-bit length with the top bit set: 1002")
def _(port):
    c = Client(port)
    c.send(struct.pack("!BBQ", 0x82, 0x80 | 127, 1 << 63) + b"\x00" * 4)
    assert c.expect_close() in (1002, 1009)


@case("9.5", "an unmasked client frame: 1002")
def _(port):
    fails_with(port, 1002, frame(TEXT, b"x", mask=False))


# 10 Auto-fragmentation
@case("10.1.1", "65536 bytes in fragments of 1300: echoed whole")
def _(port):
    c = Client(port)
    data = b"*" * 65536
    parts = [data[i:i + 1300] for i in range(0, len(data), 1300)]
    c.send(b"".join(frame(TEXT if i == 0 else CONT, p, fin=i == len(parts) - 1)
                    for i, p in enumerate(parts)))
    assert c.recv_message() == (TEXT, data)


# The handshake
def http_status(port, req):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(req.encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    s.close()
    return data.decode(errors="replace")


UP = ("GET /ws/echo HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n")


@case("H.1", "the accept key of RFC 6455's example")
def _(port):
    r = http_status(port, UP + "Sec-WebSocket-Version: 13\r\n\r\n")
    assert r.startswith("HTTP/1.1 101"), r
    assert "sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo=" in r.lower(), r


@case("H.2", "a plain GET: 426 with Upgrade: websocket")
def _(port):
    r = http_status(port, "GET /ws/echo HTTP/1.1\r\nHost: x\r\n\r\n")
    assert r.startswith("HTTP/1.1 426") and "Upgrade: websocket" in r, r


@case("H.3", "version 8: 426 with Sec-WebSocket-Version: 13")
def _(port):
    r = http_status(port, UP + "Sec-WebSocket-Version: 8\r\n\r\n")
    assert r.startswith("HTTP/1.1 426") and "Sec-WebSocket-Version: 13" in r, r


@case("H.4", "a key that is not 16 bytes of base64: 400")
def _(port):
    r = http_status(port, UP.replace("dGhlIHNhbXBsZSBub25jZQ==", "short") +
                    "Sec-WebSocket-Version: 13\r\n\r\n")
    assert r.startswith("HTTP/1.1 400"), r


@case("H.5", "Connection without upgrade: 400")
def _(port):
    r = http_status(port, UP.replace("Connection: Upgrade", "Connection: keep-alive") +
                    "Sec-WebSocket-Version: 13\r\n\r\n")
    assert r.startswith("HTTP/1.1 400"), r


@case("H.6", "a POST upgrade: 405 (the route is GET)")
def _(port):
    r = http_status(port, UP.replace("GET", "POST") + "Sec-WebSocket-Version: 13\r\n"
                    "Content-Length: 0\r\n\r\n")
    assert r.startswith("HTTP/1.1 405"), r


@case("H.7", "a frame sent right behind the upgrade request: echoed")
def _(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall((UP + "Sec-WebSocket-Version: 13\r\n\r\n").encode() + frame(TEXT, b"early"))
    data = b""
    while b"early" not in data:
        chunk = s.recv(4096)
        assert chunk, data
        data += chunk
    assert data.startswith(b"HTTP/1.1 101"), data


@case("H.8", "no extension offered: none negotiated")
def _(port):
    c = Client(port, extensions=None)
    assert "sec-websocket-extensions" not in c.headers


# permessage-deflate (on the second server, websocket.deflate on)
@case("D.1", "permessage-deflate negotiated, a compressed message echoed compressed")
def deflate_echo(port):
    c = Client(port, extensions="permessage-deflate; client_max_window_bits")
    assert c.headers.get("sec-websocket-extensions", "").startswith("permessage-deflate"), c.headers
    data = b"compress me " * 500
    c.send_frame(TEXT, deflate_message(data), rsv=4)
    fin, rsv, op, p = c.recv_frame()
    assert fin and op == TEXT and rsv == 4, (fin, rsv, op)
    assert inflate_message(p) == data
    assert len(p) < len(data) // 10


@case("D.2", "an uncompressed message on a deflate socket: echoed")
def deflate_plain(port):
    c = Client(port, extensions="permessage-deflate")
    c.send_frame(TEXT, b"plain")
    fin, rsv, op, p = c.recv_frame()
    got = inflate_message(p) if rsv == 4 else p
    assert got == b"plain"


@case("D.3", "RSV1 without the extension negotiated: 1002")
def deflate_unnegotiated(port):
    c = Client(port)
    c.send_frame(TEXT, deflate_message(b"x"), rsv=4)
    assert c.expect_close() == 1002


@case("D.4", "a compressed message inflating past max_message: 1009")
def deflate_bomb(port):
    c = Client(port, extensions="permessage-deflate")
    c.send_frame(BINARY, deflate_message(b"\0" * (MAX + 4096)), rsv=4)
    assert c.expect_close() == 1009


@case("D.5", "a compressed frame declaring 2^40 bytes: 1009 before any of it is read")
def deflate_huge_declared(port):
    c = Client(port, extensions="permessage-deflate")
    c.send(struct.pack("!BBQ", 0xC1, 0x80 | 127, 1 << 40) + b"\x01\x02\x03\x04" + b"xx")
    assert c.expect_close() == 1009


DEFLATE = {"D.1", "D.2", "D.3", "D.4", "D.5"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("server")
    ap.add_argument("config")
    ap.add_argument("-k", default="")
    a = ap.parse_args()
    common = [f"--websocket.max_message={MAX}"]
    plain = rel.start(a.server, a.config, common)
    deflate = rel.start(a.server, a.config, common + ["--websocket.deflate=true"])
    failed = []
    ran = 0
    try:
        for ident, what, fn in CASES:
            if a.k not in ident and a.k not in what:
                continue
            ran += 1
            port = deflate.port if ident in DEFLATE else plain.port
            try:
                fn(port)
                print(f"ok   {ident:8} {what}")
            except Exception as e:  # noqa: BLE001 - report every case
                failed.append(ident)
                print(f"FAIL {ident:8} {what}: {type(e).__name__}: {e}")
        for s in (plain, deflate):
            if not s.alive():
                failed.append("server")
                print("FAIL the server died:\n" + s.text()[-3000:])
    finally:
        for s in (plain, deflate):
            if s.alive():
                s.stop()
    print(f"{ran - len(failed)} passed, {len(failed)} failed" +
          (f": {' '.join(failed)}" if failed else ""))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
