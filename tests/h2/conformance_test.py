#!/usr/bin/python3
"""HTTP/2 conformance of smarm-server's h2c (prior knowledge) listener, laid
out like h2spec by the sections of RFC 9113, plus generic requests, hardening
against known HTTP/2 attacks (rapid reset, CONTINUATION flood, SETTINGS and
PING floods, HPACK bomb) and smarm's own routes and limits. Each case opens
its own connection with the raw-frame client (h2conn.py: hyperframe and
hpack over a plain socket, so it can send what a real client never would)
and asserts the exact outcome: a GOAWAY or RST_STREAM with a given error
code, or a response with a given :status and body.

    conformance_test.py SMARM_SERVER CONFIG [-k SUBSTRING]
        starts smarm-server (port 0, --http.test_routes=true) and runs
        every case
    conformance_test.py x x --port PORT [--nghttpd [--docroot DIR]] [-k ...]
        tests a server already listening on 127.0.0.1:PORT; --nghttpd says
        it is nghttpd (`nghttpd --no-tls -d DIR PORT`), so the smarm-only
        cases are skipped and the large response is DIR/big; --docroot
        writes DIR/plaintext and DIR/big first

Where RFC 9113 lets the server choose (a stream error may be escalated to a
connection error, 5.4.1; a malformed request may be refused or reset), the
case accepts exactly the outcomes the RFC allows and no others.
"""
import argparse
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "reliability"))
import h2conn as h  # noqa: E402
from h2conn import (ACK, CONTINUATION, DATA, END_HEADERS, END_STREAM, GOAWAY, HEADERS,  # noqa: E402
                    PADDED, PING, PRIORITY, PRIORITY_FLAG, RST_STREAM, SETTINGS,
                    WINDOW_UPDATE, Conn, data_frame, raw_frame, rst_stream,
                    settings_frame, window_update)

PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR, STREAM_CLOSED, FRAME_SIZE_ERROR, \
    REFUSED_STREAM, CANCEL, COMPRESSION_ERROR, ENHANCE_YOUR_CALM = \
    h.PROTOCOL_ERROR, h.INTERNAL_ERROR, h.FLOW_CONTROL_ERROR, h.STREAM_CLOSED, \
    h.FRAME_SIZE_ERROR, h.REFUSED_STREAM, h.CANCEL, h.COMPRESSION_ERROR, h.ENHANCE_YOUR_CALM

HELLO = b"Hello, World!"
BIG = 200000           # bytes of the large response (nghttpd: DOCROOT/big)
HEADER_LIMIT = 8192    # smarm's http.header_limit default
BODY_LIMIT = 1 << 20   # smarm's http.body_limit default
CASES = []


class Case:
    def __init__(self, ident, what, fn, smarm=False, server="main", nghttpd_differs=None):
        self.ident, self.what, self.fn, self.smarm, self.server = ident, what, fn, smarm, server
        self.nghttpd_differs = nghttpd_differs


def case(ident, what, smarm=False, server="main", nghttpd_differs=None):
    """Registers a case; smarm: it needs smarm-server's routes or limits
    (skipped with --nghttpd); server: which smarm-server it runs on
    ("main", or a differently configured one, see SERVERS);
    nghttpd_differs: libnghttp2 does not do what the RFC's MUST says here
    (why): with --nghttpd a failure is reported as "known", not counted."""
    def reg(fn):
        CASES.append(Case(ident, what, fn, smarm or server != "main", server, nghttpd_differs))
        return fn
    return reg


class Target:
    """What a case runs against."""

    def __init__(self, port, nghttpd=False, srv=None):
        self.port = port
        self.nghttpd = nghttpd
        self.srv = srv
        self.big_path = "/big" if nghttpd else f"/test/bytes?n={BIG}"

    def conn(self, settings=(), timeout=5.0, **kw):
        return Conn(self.port, timeout=timeout).handshake(settings, **kw)


# -- shared checks
def part(c, f):
    """A frame to send: bytes, or a function of the connection (for header
    blocks, which use the connection's HPACK encoder)."""
    return f(c) if callable(f) else f


def conn_error(t, codes, *frames, settings=(), closes=True, timeout=5.0):
    """Sends `frames` after the handshake; expects a GOAWAY with one of
    `codes` and (RFC 9113 5.4.1: after a GOAWAY for an error the endpoint
    MUST close the TCP connection) the connection closed."""
    c = t.conn(settings, timeout=timeout)
    c.send(*[part(c, f) for f in frames])
    c.expect_goaway(codes)
    if closes:
        c.expect_closed()
    return c


def stream_error(t, stream_id, codes, *frames, settings=()):
    """Sends `frames`; expects RST_STREAM with one of `codes` on the stream,
    or the same code in a GOAWAY (5.4.1 allows escalating). When it was a
    stream error, the connection must go on working."""
    c = t.conn(settings)
    c.send(*[part(c, f) for f in frames])
    if c.expect_error(stream_id, codes) == "stream":
        c.ping()
    return c


def served(c, stream_id, status=200, body=None):
    r = c.response(stream_id)
    assert r.status == status, f"status {r.status}, expected {status} ({r.headers})"
    if body is not None:
        assert r.body == body, f"body {r.body[:60]!r} ({len(r.body)} bytes), expected " \
                               f"{body[:60]!r} ({len(body)} bytes)"
    return r


def get(t, path="/plaintext", status=200, body=HELLO, **kw):
    c = t.conn()
    s = c.request("GET", path, **kw)
    return served(c, s, status, body)


def still_serving(t):
    """A fresh connection still gets GET /plaintext."""
    get(t)


def hdr(method="GET", path="/plaintext", extra=()):
    return [(":method", method), (":scheme", "http"), (":path", path),
            (":authority", "localhost")] + list(extra)


def headers(stream_id, hs, **kw):
    return lambda c: c.headers_frame(stream_id, hs, **kw)


def open_get(stream_id=1, path="/plaintext"):
    return headers(stream_id, hdr("GET", path))


def open_post(stream_id=1, path="/plaintext", extra=()):
    return headers(stream_id, hdr("POST", path, extra), end_stream=False)


def half_closed(t, path="/plaintext"):
    """A connection with stream 1 half-closed (remote) at the server: the
    request has ended, the response cannot (INITIAL_WINDOW_SIZE 0 stops its
    body). Waits for the response's HEADERS."""
    c = t.conn([(h.INITIAL_WINDOW_SIZE, 0)])
    c.request("GET", path, stream_id=1)
    c.read_until(lambda f: f.type == HEADERS and f.stream_id == 1, what="the response HEADERS")
    return c


# 3.4 HTTP/2 connection preface
def read_all(sock, timeout):
    sock.settimeout(timeout)
    out = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            b = sock.recv(65536)
            if not b:
                return out, True
            out += b
    except socket.timeout:
        return out, False
    except ConnectionResetError:
        return out, True
    return out, False


def parse_frames(data):
    out = []
    while len(data) >= 9:
        f, n = h.Frame.parse_frame_header(memoryview(data[:9]))
        if len(data) < 9 + n:
            break
        f.parse_body(memoryview(data[9:9 + n]))
        out.append(f)
        data = data[9 + n:]
    return out


@case("3.4.1", "an invalid connection preface: GOAWAY PROTOCOL_ERROR or a close")
def _(t):
    s = socket.create_connection(("127.0.0.1", t.port), timeout=5)
    s.sendall(b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n" + settings_frame())
    data, closed = read_all(s, 5)
    s.close()
    assert closed, f"not closed within 5 s ({len(data)} bytes)"
    if data.startswith(b"HTTP/1."):  # a shared HTTP/1.1 port may refuse it as HTTP/1
        status = int(data[9:12])
        assert 400 <= status < 600, data[:80]
        return
    for f in parse_frames(data):
        assert f.type == SETTINGS or (f.type == GOAWAY and f.error_code == PROTOCOL_ERROR), \
            f"{h.describe(f)} in answer to a bad preface"


@case("3.4.2", "the preface followed by PING, not SETTINGS: GOAWAY PROTOCOL_ERROR")
def _(t):
    c = Conn(t.port)
    c.send(h.PREFACE + h.ping_frame())
    c.expect_goaway(PROTOCOL_ERROR)
    c.expect_closed()


@case("3.4.3", "the preface followed by a SETTINGS ACK: GOAWAY PROTOCOL_ERROR")
def _(t):
    c = Conn(t.port)
    c.send(h.PREFACE + settings_frame(ack=True))
    c.expect_goaway(PROTOCOL_ERROR)


@case("3.4.4", "the server's first frame is SETTINGS, and it ACKs ours")
def _(t):
    c = t.conn()
    c.read_until(lambda f: f.type == SETTINGS and "ACK" in f.flags, what="SETTINGS ACK")


@case("3.4.5", "the preface and a request sent a byte at a time: served")
def _(t):
    c = Conn(t.port)
    enc = c.headers_frame(1, hdr())
    for b in h.PREFACE + settings_frame() + enc:
        c.sock.send(bytes([b]))
    served(c, 1, 200, HELLO)


# 4.1 Frame format
@case("4.1.1", "an unknown frame type: ignored")
def _(t):
    c = t.conn()
    c.send(raw_frame(0x77, 0xff, 0, b"unknown"), raw_frame(0x78, 0, 1, b"on an idle stream"))
    c.ping()


@case("4.1.2", "undefined flags on PING: ignored, the ACK has the payload")
def _(t):
    c = t.conn()
    c.send(raw_frame(PING, 0xfe, 0, b"flagsxx!"))
    c.read_until(lambda f: f.type == PING and "ACK" in f.flags, what="PING ACK")
    assert c.pings == [b"flagsxx!"], c.pings


@case("4.1.3", "the reserved bit set in a HEADERS stream id: ignored, served on the stream")
def _(t):
    c = t.conn()
    f = bytearray(c.headers_frame(1, hdr()))
    f[5] |= 0x80
    c.send(bytes(f))
    served(c, 1, 200, HELLO)


@case("4.1.4", "undefined flags on HEADERS and DATA: ignored")
def _(t):
    c = t.conn()
    f = bytearray(c.headers_frame(1, hdr("POST")[:], end_stream=False))
    f[4] |= 0x02 | 0x10 | 0x40 | 0x80
    c.send(bytes(f), raw_frame(DATA, END_STREAM | 0xf6 & ~PADDED, 1, b"body"))
    served(c, 1, 200)


# 4.2 Frame size
@case("4.2.1", "DATA of exactly SETTINGS_MAX_FRAME_SIZE (16384): accepted")
def _(t):
    c = t.conn()
    c.send(open_post()(c), data_frame(1, b"d" * 16384), data_frame(1, end_stream=True))
    served(c, 1, 200)


@case("4.2.2", "DATA one byte past SETTINGS_MAX_FRAME_SIZE: FRAME_SIZE_ERROR")
def _(t):
    c = t.conn()
    c.send(open_post()(c), data_frame(1, b"d" * 16385))
    c.expect_error(1, FRAME_SIZE_ERROR)


@case("4.2.3", "HEADERS past SETTINGS_MAX_FRAME_SIZE: GOAWAY FRAME_SIZE_ERROR")
def _(t):
    c = t.conn()
    block = c.header_block(hdr(extra=[("x-big", "b" * 16500)]), huffman=False)
    c.send(raw_frame(HEADERS, END_STREAM | END_HEADERS, 1, block))
    c.expect_goaway(FRAME_SIZE_ERROR)


@case("4.2.4", "SETTINGS past SETTINGS_MAX_FRAME_SIZE: GOAWAY FRAME_SIZE_ERROR")
def _(t):
    conn_error(t, FRAME_SIZE_ERROR, raw_frame(SETTINGS, 0, 0, b"\0\x63\0\0\0\0" * 2731))


@case("4.2.5", "the server's DATA frames never exceed SETTINGS_MAX_FRAME_SIZE")
def _(t):
    c = t.conn()
    s = c.request("GET", t.big_path)
    r = served(c, s, 200)
    assert len(r.body) == BIG, len(r.body)
    sizes = [f.raw_length for f in c.frames if f.type == DATA]
    assert max(sizes) <= 16384, max(sizes)


@case("4.2.6", "a client MAX_FRAME_SIZE of 2^24-1: frames still fit, the body arrives whole")
def _(t):
    c = t.conn([(h.MAX_FRAME_SIZE, (1 << 24) - 1)])
    s = c.request("GET", t.big_path)
    assert len(served(c, s, 200).body) == BIG


# 4.3 Header compression and decompression
@case("4.3.1", "an indexed header field with index 0: GOAWAY COMPRESSION_ERROR")
def _(t):
    conn_error(t, COMPRESSION_ERROR, raw_frame(HEADERS, END_STREAM | END_HEADERS, 1, b"\x80"))


@case("4.3.2", "an index past the dynamic table: GOAWAY COMPRESSION_ERROR")
def _(t):
    conn_error(t, COMPRESSION_ERROR,
               raw_frame(HEADERS, END_STREAM | END_HEADERS, 1, b"\x82\x86\x84\xff\xe9\x06"))


@case("4.3.3", "a table size update above SETTINGS_HEADER_TABLE_SIZE: GOAWAY COMPRESSION_ERROR")
def _(t):
    conn_error(t, COMPRESSION_ERROR,  # 001 prefix, 8192 = 31 + 8161
               raw_frame(HEADERS, END_STREAM | END_HEADERS, 1, b"\x3f\xe1\x3f\x82\x86\x84"))


@case("4.3.4", "a table size update after a header field: GOAWAY COMPRESSION_ERROR")
def _(t):
    conn_error(t, COMPRESSION_ERROR,
               raw_frame(HEADERS, END_STREAM | END_HEADERS, 1, b"\x82\x86\x84\x20"))


@case("4.3.5", "a literal cut short at the end of the block: GOAWAY COMPRESSION_ERROR")
def _(t):
    conn_error(t, COMPRESSION_ERROR,
               raw_frame(HEADERS, END_STREAM | END_HEADERS, 1, b"\x82\x86\x84\x40\x0ax-cut"))


@case("4.3.6", "Huffman padding longer than 7 bits: GOAWAY COMPRESSION_ERROR")
def _(t):
    conn_error(t, COMPRESSION_ERROR,
               raw_frame(HEADERS, END_STREAM | END_HEADERS, 1,
                         b"\x82\x86\x84\x40\x83\xff\xff\xff\x01a"))


@case("4.3.7", "requests sharing the dynamic table across streams: all served")
def _(t):
    c = t.conn()
    extra = [("x-shared", "a value worth indexing" * 4)]
    for s in (1, 3, 5):
        c.request("GET", "/plaintext", extra=extra, stream_id=s)
        served(c, s, 200, HELLO)


# 5.1 Stream states
@case("5.1.1", "idle: DATA: GOAWAY PROTOCOL_ERROR")
def _(t):
    conn_error(t, PROTOCOL_ERROR, data_frame(1, b"x", end_stream=True))


@case("5.1.2", "idle: WINDOW_UPDATE: GOAWAY PROTOCOL_ERROR")
def _(t):
    conn_error(t, PROTOCOL_ERROR, window_update(1, 100))


@case("5.1.3", "idle: CONTINUATION: GOAWAY PROTOCOL_ERROR")
def _(t):
    conn_error(t, PROTOCOL_ERROR, lambda c: raw_frame(CONTINUATION, END_HEADERS, 1,
                                                      c.header_block(hdr())))


@case("5.1.4", "half-closed (remote): DATA: STREAM_CLOSED")
def _(t):
    c = half_closed(t)
    c.send(data_frame(1, b"late", end_stream=True))
    c.expect_error(1, STREAM_CLOSED)


@case("5.1.5", "half-closed (remote): HEADERS: STREAM_CLOSED")
def _(t):
    c = half_closed(t)
    c.send(c.headers_frame(1, hdr()))
    c.expect_error(1, STREAM_CLOSED)


@case("5.1.6", "half-closed (remote): CONTINUATION: GOAWAY PROTOCOL_ERROR")
def _(t):
    c = half_closed(t)
    c.send(raw_frame(CONTINUATION, END_HEADERS, 1, c.header_block([("x-a", "b")])))
    c.expect_goaway(PROTOCOL_ERROR)


@case("5.1.7", "half-closed (remote): WINDOW_UPDATE, PRIORITY and RST_STREAM allowed")
def _(t):
    c = half_closed(t)
    c.send(raw_frame(PRIORITY, 0, 1, h.priority_payload(0, 32)), window_update(1, 5))
    c.read_until(lambda f: f.type == DATA and f.stream_id == 1, what="5 bytes of DATA")
    c.send(rst_stream(1, CANCEL))
    c.ping()


@case("5.1.8", "closed (the request and response ended): DATA: ignored, the connection goes "
      "on (RFC 7540 priorities off, nghttp2 drops such DATA unseen; 5.1 says STREAM_CLOSED)")
def _(t):
    # smarm sets SETTINGS_NO_RFC7540_PRIORITIES (RFC 9218): ~10% less CPU
    # per request, and nghttp2 then keeps no closed streams. HEADERS on such
    # a stream is caught from the frame header (5.1.9); DATA is discarded
    # before any callback sees it.
    c = t.conn()
    c.request("GET", "/plaintext", stream_id=1)
    served(c, 1)
    c.send(data_frame(1, b"late", end_stream=True))
    c.request("GET", "/plaintext", stream_id=3)
    served(c, 3, 200, HELLO)


@case("5.1.9", "closed (the request and response ended): HEADERS: STREAM_CLOSED")
def _(t):
    c = t.conn()
    c.request("GET", "/plaintext", stream_id=1)
    served(c, 1)
    c.send(c.headers_frame(1, hdr()))
    c.expect_error(1, STREAM_CLOSED)


@case("5.1.10", "an even (server-initiated) stream id from the client: GOAWAY PROTOCOL_ERROR")
def _(t):
    conn_error(t, PROTOCOL_ERROR, open_get(2))


@case("5.1.11", "a stream id lower than one already opened: ignored, the connection goes on "
      "(libnghttp2 ignores it; RFC 9113 5.1.1 says PROTOCOL_ERROR)")
def _(t):
    # libnghttp2 cannot tell such a HEADERS from one for a stream it has
    # already closed, which it must ignore; smarm ships its behaviour.
    c = t.conn()
    c.send(open_get(5)(c), open_get(3)(c))
    served(c, 5, 200, HELLO)
    c.request("GET", "/plaintext", stream_id=7)
    served(c, 7, 200, HELLO)
    assert not c.responses.get(3), "stream 3 was served"


@case("5.1.12", "stream ids may skip (1, then 9): both served")
def _(t):
    c = t.conn()
    c.send(open_get(1)(c), open_get(9)(c))
    served(c, 1, 200, HELLO)
    served(c, 9, 200, HELLO)


@case("5.1.13", "closed (we reset it): DATA: STREAM_CLOSED or ignored, the connection goes on")
def _(t):
    c = half_closed(t)
    c.send(rst_stream(1, CANCEL), data_frame(1, b"after reset"))
    c.send(h.ping_frame(b"after-rs"))
    f = c.read_until(lambda f: (f.type == PING and "ACK" in f.flags) or
                     (f.type == RST_STREAM and f.stream_id == 1) or f.type == GOAWAY,
                     what="the PING ACK")
    if f.type in (RST_STREAM, GOAWAY):
        assert f.error_code == STREAM_CLOSED, h.describe(f)


# 5.1.2 Stream concurrency
@case("5.1.2.1", "the server advertises SETTINGS_MAX_CONCURRENT_STREAMS")
def _(t):
    c = t.conn()
    n = c.server_settings.get(h.MAX_CONCURRENT_STREAMS)
    assert n is not None and 1 <= n <= 1000, c.server_settings


@case("5.1.2.2", "one stream past SETTINGS_MAX_CONCURRENT_STREAMS: REFUSED_STREAM or PROTOCOL_ERROR")
def _(t):
    c = t.conn([(h.INITIAL_WINDOW_SIZE, 0)])  # no response can finish
    n = c.server_settings[h.MAX_CONCURRENT_STREAMS]
    c.read_until(lambda f: f.type == SETTINGS and "ACK" in f.flags, what="SETTINGS ACK")
    c.send(*[c.headers_frame(2 * i + 1, hdr()) for i in range(n + 1)])
    kind = c.expect_error(2 * n + 1, {REFUSED_STREAM, PROTOCOL_ERROR})
    if kind == "stream":
        resets = [f.stream_id for f in c.frames if f.type == RST_STREAM]
        assert resets == [2 * n + 1], f"streams reset: {resets}"
        c.ping()
        return "RST_STREAM " + h.err_name(c.responses[2 * n + 1].reset)
    return f"GOAWAY {h.err_name(c.goaway[1])} {c.goaway[2][:60]!r}"


# 5.3 Stream priority
@case("5.3.1", "HEADERS depending on its own stream: PROTOCOL_ERROR")
def _(t):
    stream_error(t, 1, PROTOCOL_ERROR, headers(1, hdr(), priority=(1, 16, False)))


@case("5.3.2", "PRIORITY depending on its own stream: ignored (RFC 7540 priorities off: "
      "nghttp2 skips PRIORITY payloads unread; 5.3.1 says PROTOCOL_ERROR)")
def _(t):
    c = t.conn()
    c.send(raw_frame(PRIORITY, 0, 3, h.priority_payload(3)))
    c.request("GET", "/plaintext", stream_id=3)
    served(c, 3, 200, HELLO)


@case("5.3.3", "PRIORITY for an idle stream, then HEADERS on it: served")
def _(t):
    c = t.conn()
    c.send(raw_frame(PRIORITY, 0, 3, h.priority_payload(0, 200, True)), open_get(3)(c))
    served(c, 3, 200, HELLO)


@case("5.3.4", "HEADERS depending on a stream that does not exist: served")
def _(t):
    c = t.conn()
    c.send(c.headers_frame(1, hdr(), priority=(99, 8, True)))
    served(c, 1, 200, HELLO)


# 5.4 Error handling
@case("5.4.1", "a connection error: GOAWAY, then the TCP connection closed")
def _(t):
    conn_error(t, PROTOCOL_ERROR, raw_frame(DATA, 0, 0, b"x"), closes=True)


@case("5.4.2", "GOAWAY's last stream id is the last stream the server processed")
def _(t):
    c = t.conn()
    c.request("GET", "/plaintext", stream_id=3)
    served(c, 3)
    c.send(raw_frame(DATA, 0, 0, b"x"))
    last, code, _ = c.expect_goaway(PROTOCOL_ERROR)
    assert last == 3, f"last stream id {last}, expected 3"


@case("5.4.3", "after a stream error the connection serves another request")
def _(t):
    c = t.conn()
    c.send(c.headers_frame(1, hdr(extra=[("X-Upper", "a")])))
    assert c.expect_error(1, PROTOCOL_ERROR, connection_ok=False) == "stream"
    c.request("GET", "/plaintext", stream_id=3)
    served(c, 3, 200, HELLO)


# 5.5 Extending HTTP/2
@case("5.5.1", "an unknown frame type inside a header block: GOAWAY PROTOCOL_ERROR")
def _(t):
    conn_error(t, PROTOCOL_ERROR, headers(1, hdr(), end_headers=False),
               raw_frame(0x77, 0, 0, b"x"),
               lambda c: raw_frame(CONTINUATION, END_HEADERS, 1, b""))


@case("5.5.2", "an unknown SETTINGS identifier: ignored, ACKed")
def _(t):
    c = t.conn([(0xff, 1), (0x7777, 0xffffffff)])
    c.read_until(lambda f: f.type == SETTINGS and "ACK" in f.flags, what="SETTINGS ACK")
    c.ping()


# 6.1 DATA
@case("6.1.1", "DATA on stream 0: GOAWAY PROTOCOL_ERROR")
def _(t):
    conn_error(t, PROTOCOL_ERROR, raw_frame(DATA, 0, 0, b"x"))


@case("6.1.2", "DATA with a pad length past the payload: GOAWAY PROTOCOL_ERROR")
def _(t):
    conn_error(t, PROTOCOL_ERROR, open_post(), raw_frame(DATA, PADDED | END_STREAM, 1,
                                                         b"\x0aabcd"))


@case("6.1.3", "DATA with padding: the padding is not body, served")
def _(t):
    c = t.conn()
    c.send(open_post()(c), data_frame(1, b"padded", pad=200), data_frame(1, b"", pad=0),
           data_frame(1, b"!", end_stream=True, pad=255))
    served(c, 1, 200)


@case("6.1.4", "DATA with PADDED and a zero length (no pad length byte): FRAME_SIZE_ERROR "
      "or PROTOCOL_ERROR")
def _(t):
    conn_error(t, {FRAME_SIZE_ERROR, PROTOCOL_ERROR}, open_post(), raw_frame(DATA, PADDED, 1, b""))


# 6.2 HEADERS
@case("6.2.1", "HEADERS on stream 0: GOAWAY PROTOCOL_ERROR")
def _(t):
    conn_error(t, PROTOCOL_ERROR, headers(0, hdr()))


@case("6.2.2", "HEADERS with a pad length past the payload: GOAWAY PROTOCOL_ERROR")
def _(t):
    conn_error(t, PROTOCOL_ERROR,
               lambda c: raw_frame(HEADERS, PADDED | END_HEADERS | END_STREAM, 1,
                                   b"\xff" + c.header_block(hdr())))


@case("6.2.3", "HEADERS without END_HEADERS, then DATA: GOAWAY PROTOCOL_ERROR")
def _(t):
    conn_error(t, PROTOCOL_ERROR, headers(1, hdr("POST"), end_stream=False, end_headers=False),
               data_frame(1, b"x", end_stream=True))


@case("6.2.4", "HEADERS with padding and priority: served")
def _(t):
    c = t.conn()
    c.send(c.headers_frame(1, hdr(), pad=100, priority=(0, 255, False)))
    served(c, 1, 200, HELLO)


@case("6.2.5", "HEADERS with PRIORITY but 4 bytes long: GOAWAY FRAME_SIZE_ERROR")
def _(t):
    conn_error(t, FRAME_SIZE_ERROR, raw_frame(HEADERS, PRIORITY_FLAG | END_HEADERS, 1, b"\0\0\0\0"))


# 6.3 PRIORITY
@case("6.3.1", "PRIORITY on stream 0: GOAWAY PROTOCOL_ERROR")
def _(t):
    conn_error(t, PROTOCOL_ERROR, raw_frame(PRIORITY, 0, 0, h.priority_payload(1)))


@case("6.3.2", "PRIORITY 4 bytes long: FRAME_SIZE_ERROR")
def _(t):
    stream_error(t, 1, FRAME_SIZE_ERROR, raw_frame(PRIORITY, 0, 1, b"\0\0\0\0"))


@case("6.3.3", "PRIORITY on an idle stream: allowed")
def _(t):
    c = t.conn()
    c.send(raw_frame(PRIORITY, 0, 7, h.priority_payload(0, 1)))
    c.ping()
    c.request("GET", "/plaintext", stream_id=9)
    served(c, 9, 200, HELLO)


@case("6.3.4", "PRIORITY on a closed stream: allowed")
def _(t):
    c = t.conn()
    c.request("GET", "/plaintext", stream_id=1)
    served(c, 1)
    c.send(raw_frame(PRIORITY, 0, 1, h.priority_payload(0, 1)))
    c.ping()


# 6.4 RST_STREAM
@case("6.4.1", "RST_STREAM on stream 0: GOAWAY PROTOCOL_ERROR")
def _(t):
    conn_error(t, PROTOCOL_ERROR, rst_stream(0, CANCEL))


@case("6.4.2", "RST_STREAM on an idle stream: GOAWAY PROTOCOL_ERROR")
def _(t):
    conn_error(t, PROTOCOL_ERROR, rst_stream(1, CANCEL))


for i, n in enumerate([3, 5], 3):
    case(f"6.4.{i}", f"RST_STREAM {n} bytes long: GOAWAY FRAME_SIZE_ERROR")(
        lambda t, n=n: conn_error(t, FRAME_SIZE_ERROR, open_post(),
                                  raw_frame(RST_STREAM, 0, 1, b"\0" * n)))


@case("6.4.5", "RST_STREAM of an open stream: nothing more on it, the connection goes on")
def _(t):
    c = half_closed(t)
    c.send(rst_stream(1, CANCEL), window_update(0, 1000))
    c.ping()
    assert not any(f.type == DATA for f in c.frames), "DATA after RST_STREAM"
    c.request("GET", "/plaintext", stream_id=3)
    c.send(settings_frame([(h.INITIAL_WINDOW_SIZE, 65535)]))
    served(c, 3, 200, HELLO)


# 6.5 SETTINGS
SETTINGS_ERRORS = [
    ("an ACK with a payload", FRAME_SIZE_ERROR, raw_frame(SETTINGS, ACK, 0, b"\0\x03\0\0\0\x64")),
    ("on stream 1", PROTOCOL_ERROR, settings_frame([(h.MAX_CONCURRENT_STREAMS, 10)], stream_id=1)),
    ("3 bytes long", FRAME_SIZE_ERROR, raw_frame(SETTINGS, 0, 0, b"\0\x03\0")),
    ("7 bytes long", FRAME_SIZE_ERROR, raw_frame(SETTINGS, 0, 0, b"\0\x03\0\0\0\x64\0")),
    ("ENABLE_PUSH 2", PROTOCOL_ERROR, settings_frame([(h.ENABLE_PUSH, 2)])),
    ("INITIAL_WINDOW_SIZE 2^31", FLOW_CONTROL_ERROR, settings_frame([(h.INITIAL_WINDOW_SIZE, 1 << 31)])),
    ("INITIAL_WINDOW_SIZE 2^32-1", FLOW_CONTROL_ERROR,
     settings_frame([(h.INITIAL_WINDOW_SIZE, 0xffffffff)])),
    ("MAX_FRAME_SIZE 16383", PROTOCOL_ERROR, settings_frame([(h.MAX_FRAME_SIZE, 16383)])),
    ("MAX_FRAME_SIZE 2^24", PROTOCOL_ERROR, settings_frame([(h.MAX_FRAME_SIZE, 1 << 24)])),
    ("MAX_FRAME_SIZE 0", PROTOCOL_ERROR, settings_frame([(h.MAX_FRAME_SIZE, 0)])),
]
for i, (what, code, f) in enumerate(SETTINGS_ERRORS, 1):
    case(f"6.5.{i}", f"SETTINGS {what}: GOAWAY {h.ERRORS[code]}")(
        lambda t, code=code, f=f: conn_error(t, code, f))

SETTINGS_OK = [
    ("empty", []),
    ("ENABLE_PUSH 0 and 1", [(h.ENABLE_PUSH, 0), (h.ENABLE_PUSH, 1)]),
    ("MAX_FRAME_SIZE 16384 and 2^24-1", [(h.MAX_FRAME_SIZE, 16384), (h.MAX_FRAME_SIZE, (1 << 24) - 1)]),
    ("INITIAL_WINDOW_SIZE 2^31-1", [(h.INITIAL_WINDOW_SIZE, h.MAX_WINDOW)]),
    ("HEADER_TABLE_SIZE 2^32-1 and MAX_HEADER_LIST_SIZE 100000", [(h.HEADER_TABLE_SIZE, 0xffffffff),
                                                            (h.MAX_HEADER_LIST_SIZE, 100000)]),
    ("MAX_CONCURRENT_STREAMS 0 (no server pushes)", [(h.MAX_CONCURRENT_STREAMS, 0)]),
]
for i, (what, s) in enumerate(SETTINGS_OK, len(SETTINGS_ERRORS) + 1):
    def ok(t, s=s):
        c = t.conn()
        c.read_until(lambda f: f.type == SETTINGS and "ACK" in f.flags, what="the first ACK")
        c.send(settings_frame(s))
        c.read_until(lambda f: f.type == SETTINGS and "ACK" in f.flags, what="the second ACK")
        c.request("GET", "/plaintext", stream_id=1)
        served(c, 1, 200, HELLO)
    case(f"6.5.{i}", f"SETTINGS {what} mid-connection: ACKed, requests served")(ok)


@case("6.5.17", "HEADER_TABLE_SIZE 0: the server's header blocks use no dynamic table")
def _(t):
    c = t.conn([(h.HEADER_TABLE_SIZE, 0)])
    c.decoder.max_allowed_table_size = 0
    for s in (1, 3, 5):
        c.request("GET", "/plaintext", stream_id=s)
        served(c, s, 200, HELLO)
    assert c.decoder.header_table_size == 0, c.decoder.header_table_size


@case("6.5.18", "SETTINGS with 30 entries: ACKed")
def _(t):
    c = t.conn([(h.ENABLE_PUSH, i % 2) for i in range(15)] + [(0x100 + i, i) for i in range(15)])
    c.read_until(lambda f: f.type == SETTINGS and "ACK" in f.flags, what="SETTINGS ACK")


# 6.7 PING
@case("6.7.1", "PING: an ACK with the same payload")
def _(t):
    c = t.conn()
    c.ping(bytes(range(8)))


@case("6.7.2", "a PING ACK from the client: not answered")
def _(t):
    c = t.conn()
    c.send(h.ping_frame(b"unasked!", ack=True), h.ping_frame(b"asked!!!"))
    c.read_until(lambda f: f.type == PING and "ACK" in f.flags, what="PING ACK")
    c.quiet(0.2)
    assert c.pings == [b"asked!!!"], c.pings


@case("6.7.3", "PING on stream 1: GOAWAY PROTOCOL_ERROR")
def _(t):
    conn_error(t, PROTOCOL_ERROR, h.ping_frame(stream_id=1))


for i, n in enumerate([6, 9, 0], 4):
    case(f"6.7.{i}", f"PING {n} bytes long: GOAWAY FRAME_SIZE_ERROR")(
        lambda t, n=n: conn_error(t, FRAME_SIZE_ERROR, raw_frame(PING, 0, 0, b"p" * n)))


@case("6.7.7", "10 PINGs in one write: 10 ACKs in order")
def _(t):
    c = t.conn()
    c.send(*[h.ping_frame(b"ping%04d" % i) for i in range(10)])
    c.read_until(lambda f: len(c.pings) == 10, what="10 PING ACKs")
    assert c.pings == [b"ping%04d" % i for i in range(10)], c.pings


# 6.8 GOAWAY
@case("6.8.1", "GOAWAY on stream 1: GOAWAY PROTOCOL_ERROR")
def _(t):
    conn_error(t, PROTOCOL_ERROR, h.goaway_frame(stream_id=1))


@case("6.8.2", "GOAWAY 7 bytes long: GOAWAY FRAME_SIZE_ERROR")
def _(t):
    conn_error(t, FRAME_SIZE_ERROR, raw_frame(GOAWAY, 0, 0, b"\0" * 7))


@case("6.8.3", "a client GOAWAY after a request: the response still arrives")
def _(t):
    c = t.conn()
    c.request("GET", "/plaintext", stream_id=1)
    c.send(h.goaway_frame(0, h.NO_ERROR, b"bye"))
    served(c, 1, 200, HELLO)


# 6.9 WINDOW_UPDATE and flow control
def data_bytes(c, stream_id):
    return sum(f.raw_length - (f.pad_length + 1 if "PADDED" in f.flags else 0)
               for f in c.frames if f.type == DATA and f.stream_id == stream_id)


def wait_bytes(c, stream_id, n, what):
    c.read_until(lambda f: data_bytes(c, stream_id) >= n, what=what)
    assert data_bytes(c, stream_id) == n, f"{data_bytes(c, stream_id)} bytes, expected {n}"


def no_more(c, stream_id, n, seconds=0.5):
    c.quiet(seconds)
    got = data_bytes(c, stream_id)
    assert got == n, f"{got} bytes of DATA, the window allowed {n}"


@case("6.9.1", "WINDOW_UPDATE of 0 on the connection: GOAWAY PROTOCOL_ERROR")
def _(t):
    conn_error(t, PROTOCOL_ERROR, window_update(0, 0))


@case("6.9.2", "WINDOW_UPDATE of 0 on a stream: PROTOCOL_ERROR")
def _(t):
    stream_error(t, 1, PROTOCOL_ERROR, open_post(), window_update(1, 0))


for i, n in enumerate([3, 5], 3):
    case(f"6.9.{i}", f"WINDOW_UPDATE {n} bytes long: GOAWAY FRAME_SIZE_ERROR")(
        lambda t, n=n: conn_error(t, FRAME_SIZE_ERROR, raw_frame(WINDOW_UPDATE, 0, 0,
                                                                 b"\0" * (n - 1) + b"\x01")))


@case("6.9.5", "the connection window past 2^31-1: GOAWAY FLOW_CONTROL_ERROR")
def _(t):
    conn_error(t, FLOW_CONTROL_ERROR, window_update(0, h.MAX_WINDOW))


@case("6.9.6", "a stream window past 2^31-1: FLOW_CONTROL_ERROR")
def _(t):
    stream_error(t, 1, FLOW_CONTROL_ERROR, open_post(), window_update(1, h.MAX_WINDOW),
                 window_update(1, h.MAX_WINDOW))


@case("6.9.7", "INITIAL_WINDOW_SIZE 100: 100 bytes of DATA, then more after WINDOW_UPDATE")
def _(t):
    c = t.conn([(h.INITIAL_WINDOW_SIZE, 100)])
    s = c.request("GET", t.big_path)
    wait_bytes(c, s, 100, "100 bytes of DATA")
    no_more(c, s, 100)
    c.send(window_update(s, 1000))
    wait_bytes(c, s, 1100, "1100 bytes of DATA")
    no_more(c, s, 1100)
    c.send(window_update(s, BIG), window_update(0, BIG))
    r = c.response(s)
    assert r.status == 200 and len(r.body) == BIG and set(r.body) == {ord("x")}, r


@case("6.9.8", "the connection window: 65535 bytes, then more after a connection WINDOW_UPDATE")
def _(t):
    c = t.conn([(h.INITIAL_WINDOW_SIZE, 1 << 20)])
    s = c.request("GET", t.big_path)
    wait_bytes(c, s, 65535, "65535 bytes of DATA")
    no_more(c, s, 65535)
    c.send(window_update(0, 10000))
    wait_bytes(c, s, 75535, "75535 bytes of DATA")
    no_more(c, s, 75535)
    c.send(window_update(0, BIG))
    assert len(c.response(s).body) == BIG


@case("6.9.9", "INITIAL_WINDOW_SIZE raised mid-stream: applies to the open stream")
def _(t):
    c = half_closed(t, t.big_path)
    no_more(c, 1, 0, 0.2)
    c.send(settings_frame([(h.INITIAL_WINDOW_SIZE, 500)]))
    wait_bytes(c, 1, 500, "500 bytes of DATA")
    no_more(c, 1, 500)


@case("6.9.10", "INITIAL_WINDOW_SIZE lowered makes a window negative: no DATA until it is positive")
def _(t):
    c = t.conn([(h.INITIAL_WINDOW_SIZE, 1000)])
    s = c.request("GET", t.big_path)
    wait_bytes(c, s, 1000, "1000 bytes of DATA")
    c.send(settings_frame([(h.INITIAL_WINDOW_SIZE, 0)]))   # window: 0 - 1000
    c.read_until(lambda f: f.type == SETTINGS and "ACK" in f.flags and c.settings_acks >= 2,
                 what="the second SETTINGS ACK")
    c.send(window_update(s, 1000))                          # window: 0
    no_more(c, s, 1000)
    c.send(window_update(s, 100))                           # window: 100
    wait_bytes(c, s, 1100, "100 more bytes")
    no_more(c, s, 1100)


@case("6.9.11", "INITIAL_WINDOW_SIZE raised past 2^31-1 on an open stream: RST_STREAM "
      "FLOW_CONTROL_ERROR (libnghttp2's; RFC 9113 6.9.2 says a connection error)")
def _(t):
    c = half_closed(t, t.big_path)
    c.send(window_update(1, h.MAX_WINDOW), settings_frame([(h.INITIAL_WINDOW_SIZE, 1 << 17)]))
    assert c.expect_error(1, FLOW_CONTROL_ERROR, connection_ok=False) == "stream"
    c.request("GET", "/plaintext", stream_id=3)
    served(c, 3, 200, HELLO)


# 6.10 CONTINUATION
@case("6.10.1", "HEADERS and three CONTINUATIONs: served")
def _(t):
    c = t.conn()
    block = c.header_block(hdr(extra=[("x-long", "v" * 300)]))
    n = len(block) // 4 + 1
    parts = [block[i:i + n] for i in range(0, len(block), n)]
    assert len(parts) == 4
    c.send(raw_frame(HEADERS, END_STREAM, 1, parts[0]),
           *[raw_frame(CONTINUATION, END_HEADERS if i == 3 else 0, 1, p)
             for i, p in enumerate(parts) if i])
    served(c, 1, 200, HELLO)


@case("6.10.2", "HEADERS of one byte, then 7 CONTINUATIONs: served")
def _(t):
    # (not more: libnghttp2 closes the connection at the 9th CONTINUATION
    # of a block, its CVE-2024-28182 limit)
    c = t.conn()
    block = c.header_block(hdr())
    parts = [block[i:i + 1] for i in range(7)] + [block[7:]]
    c.send(raw_frame(HEADERS, END_STREAM, 1, parts[0]),
           *[raw_frame(CONTINUATION, END_HEADERS if i == 7 else 0, 1, p)
             for i, p in enumerate(parts) if i])
    served(c, 1, 200, HELLO)


CONT_ERRORS = [
    ("PING between HEADERS and CONTINUATION", lambda c: [
        c.headers_frame(1, hdr(), end_headers=False), h.ping_frame(),
        raw_frame(CONTINUATION, END_HEADERS, 1, b"")]),
    ("HEADERS of another stream between HEADERS and CONTINUATION", lambda c: [
        c.headers_frame(1, hdr(), end_headers=False), c.headers_frame(3, hdr())]),
    ("CONTINUATION on another stream", lambda c: [
        c.headers_frame(1, hdr(), end_headers=False), raw_frame(CONTINUATION, END_HEADERS, 3, b"")]),
    ("CONTINUATION on stream 0", lambda c: [
        c.headers_frame(1, hdr(), end_headers=False), raw_frame(CONTINUATION, END_HEADERS, 0, b"")]),
    ("CONTINUATION after END_HEADERS", lambda c: [
        c.headers_frame(1, hdr("POST"), end_stream=False),
        raw_frame(CONTINUATION, END_HEADERS, 1, c.header_block([("x-late", "1")]))]),
    ("a DATA frame inside a header block", lambda c: [
        c.headers_frame(1, hdr("POST"), end_stream=False, end_headers=False),
        data_frame(1, b"x"), raw_frame(CONTINUATION, END_HEADERS, 1, b"")]),
]
for i, (what, frames) in enumerate(CONT_ERRORS, 3):
    case(f"6.10.{i}", f"{what}: GOAWAY PROTOCOL_ERROR")(
        lambda t, frames=frames: conn_error(t, PROTOCOL_ERROR, lambda c: b"".join(frames(c))))


# 8.1 HTTP message semantics: malformed requests (8.1.1: a stream error of
# type PROTOCOL_ERROR)
MALFORMED = [
    ("an uppercase header name", hdr(extra=[("X-Upper", "1")])),
    ("a pseudo-header after a regular header",
     [(":method", "GET"), (":scheme", "http"), ("x-a", "1"), (":path", "/plaintext")]),
    ("no :method", [(":scheme", "http"), (":path", "/plaintext"), (":authority", "x")]),
    ("no :path", [(":method", "GET"), (":scheme", "http"), (":authority", "x")]),
    ("no :scheme", [(":method", "GET"), (":path", "/plaintext"), (":authority", "x")]),
    ("an empty :path", [(":method", "GET"), (":scheme", "http"), (":path", ""), (":authority", "x")]),
    ("two :path", hdr() + [(":path", "/plaintext")]),
    ("two :method", [(":method", "GET"), (":method", "GET"), (":scheme", "http"), (":path", "/p")]),
    ("an unknown pseudo-header :foo", hdr() [:3] + [(":foo", "bar")]),
    ("a response pseudo-header :status", hdr()[:3] + [(":status", "200")]),
    ("connection: keep-alive", hdr(extra=[("connection", "keep-alive")])),
    ("keep-alive: timeout=5", hdr(extra=[("keep-alive", "timeout=5")])),
    ("proxy-connection: keep-alive", hdr(extra=[("proxy-connection", "keep-alive")])),
    ("transfer-encoding: chunked", hdr(extra=[("transfer-encoding", "chunked")])),
    ("upgrade: h2c", hdr(extra=[("upgrade", "h2c")])),
    ("te: gzip", hdr(extra=[("te", "gzip")])),
    ("a header name with a space", hdr(extra=[("x y", "1")])),
    ("a header name with a colon", hdr(extra=[("x:y", "1")])),
    ("an empty header name", hdr(extra=[("", "1")])),
    ("a header value with NUL", hdr(extra=[("x-a", "a\0b")])),
    ("a header value with CR LF", hdr(extra=[("x-a", "a\r\nx-b: c")])),
    ("a header value with a bare LF", hdr(extra=[("x-a", "a\nb")])),
    ("a header value with leading space", hdr(extra=[("x-a", " a")])),
    ("a header value with a trailing tab", hdr(extra=[("x-a", "a\t")])),
    ("CONNECT with :scheme and :path", [(":method", "CONNECT"), (":scheme", "http"),
                                         (":path", "/"), (":authority", "x:443")]),
]
for i, (what, hs) in enumerate(MALFORMED, 1):
    case(f"8.1.{i}", f"{what}: RST_STREAM PROTOCOL_ERROR")(
        lambda t, hs=hs: stream_error(t, 1, PROTOCOL_ERROR,
                                      lambda c: c.headers_frame(1, c.header_block(hs, huffman=False))))

BODY_MALFORMED = [
    ("content-length 10, a 5-byte body", [("content-length", "10")],
     [data_frame(1, b"12345", end_stream=True)]),
    ("content-length 2, a 5-byte body", [("content-length", "2")],
     [data_frame(1, b"123"), data_frame(1, b"45", end_stream=True)]),
    ("two different content-lengths", [("content-length", "1"), ("content-length", "2")],
     [data_frame(1, b"1", end_stream=True)]),
    ("a non-numeric content-length", [("content-length", "5x")], [data_frame(1, b"12345", True)]),
]
for i, (what, extra, frames) in enumerate(BODY_MALFORMED, len(MALFORMED) + 1):
    case(f"8.1.{i}", f"{what}: RST_STREAM PROTOCOL_ERROR")(
        lambda t, extra=extra, frames=frames: stream_error(
            t, 1, PROTOCOL_ERROR, open_post(extra=extra), *frames))

n = len(MALFORMED) + len(BODY_MALFORMED)


@case(f"8.1.{n + 1}", "trailers with a pseudo-header: RST_STREAM PROTOCOL_ERROR")
def _(t):
    stream_error(t, 1, PROTOCOL_ERROR, open_post(), data_frame(1, b"body"),
                 headers(1, [(":path", "/x")]))


@case(f"8.1.{n + 2}", "trailers without END_STREAM: RST_STREAM PROTOCOL_ERROR")
def _(t):
    stream_error(t, 1, PROTOCOL_ERROR, open_post(), data_frame(1, b"body"),
                 headers(1, [("x-trailer", "1")], end_stream=False))


@case(f"8.1.{n + 3}", "a request with trailers: served")
def _(t):
    c = t.conn()
    c.send(open_post(extra=[("te", "trailers")])(c), data_frame(1, b"body"),
           c.headers_frame(1, [("x-checksum", "abc")]))
    served(c, 1, 200)


@case(f"8.1.{n + 4}", "content-length matching the DATA: served")
def _(t):
    c = t.conn()
    c.send(open_post(extra=[("content-length", "5")])(c), data_frame(1, b"12"),
           data_frame(1, b"345", end_stream=True))
    served(c, 1, 200)


@case(f"8.1.{n + 5}", "a cookie split in crumbs: served")
def _(t):
    c = t.conn()
    c.request("GET", "/plaintext", extra=[("cookie", "a=1"), ("cookie", "b=2"), ("cookie", "c=3")])
    served(c, 1, 200, HELLO)


# G Generic requests
@case("G.1", "GET /plaintext: 200 Hello, World!")
def _(t):
    r = get(t)
    assert r.header("content-length") in (None, "13"), r.headers


@case("G.2", "GET with a body: served")
def _(t):
    c = t.conn()
    s = c.request("GET", "/plaintext", body=b"a body on a GET")
    served(c, s, 200, HELLO)


@case("G.3", "POST with a body in several DATA frames: served")
def _(t):
    c = t.conn()
    s = c.request("POST", "/plaintext", body=bytes(range(256)) * 200, chunk=1000)
    served(c, s, 200)


@case("G.4", "HEAD: the headers, no body")
def _(t):
    c = t.conn()
    s = c.request("HEAD", "/plaintext")
    served(c, s, 200, b"")


@case("G.5", "100 request headers: served")
def _(t):
    get(t, extra=[(f"x-header-{i}", f"value {i}") for i in range(100)])


@case("G.6", "10 requests one after another on one connection")
def _(t):
    c = t.conn()
    for i in range(10):
        s = c.request("GET", "/plaintext")
        served(c, s, 200, HELLO)


@case("G.7", "30 requests at once on one connection: all served")
def _(t):
    c = t.conn()
    c.send(*[c.headers_frame(2 * i + 1, hdr()) for i in range(30)])
    for i in range(30):
        served(c, 2 * i + 1, 200, HELLO)


@case("G.8", "header blocks without Huffman coding: served")
def _(t):
    c = t.conn()
    c.send(c.headers_frame(1, c.header_block(hdr(extra=[("x-plain", "text")]), huffman=False)))
    served(c, 1, 200, HELLO)


@case("G.9", "an unknown path: 404")
def _(t):
    get(t, "/no/such/path", status=404, body=None)


@case("G.10", f"a {BIG}-byte response over flow control: whole")
def _(t):
    c = t.conn()
    s = c.request("GET", t.big_path)
    r = served(c, s, 200)
    assert r.body == b"x" * BIG, len(r.body)


# X Hardening
def survives(t):
    if t.srv is not None:
        assert t.srv.alive(), "the server died"
    still_serving(t)


def rapid_reset(t, n):
    """n streams opened and reset in one burst, then a GET on a new one:
    a GOAWAY ENHANCE_YOUR_CALM (or INTERNAL_ERROR: what libnghttp2's
    stream-reset rate limit sends), or the GET served."""
    c = t.conn(timeout=10)
    burst = []
    last = 2 * n + 1
    for i in range(n):
        s = 2 * i + 1
        burst.append(c.headers_frame(s, hdr()))
        burst.append(rst_stream(s, CANCEL))
    c.try_send(b"".join(burst), 10)
    c.send(c.headers_frame(last, hdr()))
    f = c.read_until(lambda f: f.type == GOAWAY or (f.stream_id == last and
                                                     c.responses[last].ended),
                     timeout=10, what=f"GOAWAY or the response on stream {last}")
    if f.type == GOAWAY:
        assert f.error_code in (ENHANCE_YOUR_CALM, INTERNAL_ERROR), h.describe(f)
        outcome = f"GOAWAY {h.err_name(f.error_code)} last={f.last_stream_id}"
    else:
        assert c.responses[last].status == 200, c.responses[last]
        outcome = "still serving"
    survives(t)
    return outcome


for i, n in enumerate([500, 5000], 1):
    case(f"X.1.{i}", f"rapid reset: {n} streams opened and reset at once: GOAWAY "
         "ENHANCE_YOUR_CALM (or INTERNAL_ERROR), or the connection still serves")(
        lambda t, n=n: rapid_reset(t, n))


@case("X.2", "CONTINUATION flood: HEADERS then 10000 empty CONTINUATIONs: closed with an error, "
      "within 5 s")
def _(t):
    c = t.conn(timeout=5)
    t0 = time.monotonic()
    c.send(c.headers_frame(1, hdr(), end_headers=False))
    c.try_send(raw_frame(CONTINUATION, 0, 1, b"") * 10000, 5)
    try:
        c.expect_closed(timeout=5)
    except h.Timeout:
        raise AssertionError(f"still open 5 s into the flood; got {c.summary()}") from None
    if c.goaway is not None:
        assert c.goaway[1] != h.NO_ERROR, c.goaway
    assert time.monotonic() - t0 < 6
    assert not c.responses.get(1) or c.responses[1].status is None, c.responses[1]
    survives(t)
    return (f"GOAWAY {h.err_name(c.goaway[1])}" if c.goaway else "closed without GOAWAY") + \
        f" after {time.monotonic() - t0:.2f} s"


def flood(t, frame, n, what):
    """Writes n copies of `frame` for up to 10 s without reading (the
    client's receive buffer kept small, so the answers back up in the
    server), then a PING. The server must either close (without a GOAWAY,
    or with GOAWAY ENHANCE_YOUR_CALM) or, once read, answer the PING; a
    smarm-server must not have grown by more than 64 MiB meanwhile."""
    c = Conn(t.port, timeout=10, rcvbuf=4096).handshake()
    rss0 = t.srv.rss_kib() if t.srv else None
    data = frame * n
    sent = c.try_send(data, 10)
    grown = (t.srv.rss_kib() - rss0) // 1024 if t.srv else None
    rest = data[sent:sent + (-sent % len(frame))]   # the frame cut short, if any
    mark = b"afterfld"
    w = threading.Thread(target=c.send, args=(rest + h.ping_frame(mark),), daemon=True)
    w.start()
    try:
        counts = c.skim(lambda ty, fl, sid, p: ty == PING and fl & ACK and p == mark,
                        timeout=30)
    except h.Timeout:
        raise AssertionError(f"{what}: neither closed nor answered the PING within 30 s "
                             f"({sent} of {len(data)} bytes written)") from None
    w.join(10)
    if c.goaway is not None:
        assert c.goaway[1] == ENHANCE_YOUR_CALM, \
            f"GOAWAY {h.err_name(c.goaway[1])} {c.goaway[2][:60]!r} after the {what}"
    outcome = ("GOAWAY ENHANCE_YOUR_CALM" if c.goaway else "closed" if c.closed
               else "answered") + f" after {sent} of {len(data)} bytes, {counts.get(frame[3], 0)} acks"
    if grown is not None:
        assert grown < 64, f"the server grew by {grown} MiB during the {what} ({outcome})"
        outcome += f", grew {grown} MiB"
    survives(t)
    return outcome


@case("X.3", "SETTINGS flood (1000000, unread ACKs): closed with ENHANCE_YOUR_CALM, or bounded")
def _(t):
    return flood(t, settings_frame([(h.ENABLE_PUSH, 0)]), 1000000, "SETTINGS flood")


@case("X.4", "PING flood (1000000, unread ACKs): closed with ENHANCE_YOUR_CALM, or bounded")
def _(t):
    return flood(t, h.ping_frame(b"flooding"), 1000000, "PING flood")


def bomb(c):
    """One 4000-byte header inserted in the dynamic table, then referenced
    1000 times: 27 KB on the wire, 4 MB decoded."""
    base = c.header_block(hdr(), huffman=False)
    lit = b"\x40" + b"\x06x-bomb" + _hpack_int(4000, 7) + b"b" * 4000
    # the new entry is dynamic index 62 (this block inserts nothing after
    # it); the encoder learns of it, so later blocks stay in step
    c.encoder.header_table.add(b"x-bomb", b"b" * 4000)
    return base + lit + b"\xbe" * 1000


def _hpack_int(v, prefix):
    mx = (1 << prefix) - 1
    if v < mx:
        return bytes([v])
    out = [mx]
    v -= mx
    while v >= 128:
        out.append((v & 0x7f) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def bomb_frames(c, stream_id=1):
    block = bomb(c)
    first, rest = block[:16000], block[16000:]
    return [raw_frame(HEADERS, END_STREAM, stream_id, first),
            raw_frame(CONTINUATION, END_HEADERS, stream_id, rest)]


@case("X.5", "HPACK bomb (4 MB decoded from 27 KB): 431, RST_STREAM or GOAWAY, within 5 s")
def _(t):
    c = t.conn()
    t0 = time.monotonic()
    c.send(*bomb_frames(c))
    f = c.read_until(lambda f: f.type in (RST_STREAM, GOAWAY) or
                     (f.stream_id == 1 and c.responses.get(1) and c.responses[1].status),
                     what="431, RST_STREAM or GOAWAY")
    assert time.monotonic() - t0 < 5
    if f.type == HEADERS or f.type == DATA:
        assert c.responses[1].status == 431, c.responses[1]
    survives(t)
    return h.describe(f) if f.type in (RST_STREAM, GOAWAY) else "431"


@case("X.6", "10000 empty DATA frames on one stream: the server survives and serves")
def _(t):
    c = t.conn(timeout=10)
    c.send(open_post()(c))
    c.try_send(data_frame(1, b"") * 10000 + data_frame(1, b"", end_stream=True), 10)
    try:
        c.read_until(lambda f: f.type in (RST_STREAM, GOAWAY) or
                     (c.responses.get(1) and c.responses[1].ended), timeout=10,
                     what="the response, RST_STREAM or GOAWAY")
    except AssertionError:
        if c.goaway is None or c.goaway[1] != ENHANCE_YOUR_CALM:
            raise
    survives(t)
    r = c.responses.get(1)
    return f"GOAWAY {h.err_name(c.goaway[1])}" if c.goaway else repr(r)


@case("X.7", "500 streams opened at once with 100 allowed: refused past the limit, "
      "the server survives")
def _(t):
    c = t.conn([(h.INITIAL_WINDOW_SIZE, 0)], timeout=10)
    n = c.server_settings.get(h.MAX_CONCURRENT_STREAMS, 100)
    c.send(*[c.headers_frame(2 * i + 1, hdr()) for i in range(500)])
    try:
        c.read_until(lambda f: sum(1 for f in c.frames if f.type == RST_STREAM) >= 500 - n or
                     f.type == GOAWAY, timeout=10, what=f"{500 - n} RST_STREAMs")
    except AssertionError:
        if c.goaway is None:
            raise
    codes = {f.error_code for f in c.frames if f.type in (RST_STREAM, GOAWAY)}
    assert codes <= {REFUSED_STREAM, PROTOCOL_ERROR, ENHANCE_YOUR_CALM}, codes
    survives(t)
    resets = sum(1 for f in c.frames if f.type == RST_STREAM)
    return f"{resets} RST_STREAM" + (f", GOAWAY {h.err_name(c.goaway[1])} {c.goaway[2][:50]!r}"
                                      if c.goaway else "")


@case("X.8", "SETTINGS with 1000 entries: ACKed, or GOAWAY ENHANCE_YOUR_CALM")
def _(t):
    c = t.conn()
    c.send(settings_frame([(0x100 + i % 50, i) for i in range(1000)]))
    f = c.read_until(lambda f: (f.type == SETTINGS and "ACK" in f.flags and c.settings_acks >= 2)
                     or f.type == GOAWAY, what="the second SETTINGS ACK or GOAWAY")
    if f.type == GOAWAY:
        assert f.error_code == ENHANCE_YOUR_CALM, h.describe(f)
        return "GOAWAY ENHANCE_YOUR_CALM"
    return "ACKed"


# S smarm-specific: its routes and limits (--http.test_routes=true)
def post(t, path, body, chunk=16384, extra=()):
    c = t.conn()
    s = c.request("POST", path, body=body, chunk=chunk, extra=extra)
    return c, s


@case("S.1", "GET /plaintext: 200 Hello, World! as text/plain with content-length 13", smarm=True)
def _(t):
    r = get(t)
    assert r.header("content-type", ) and r.header("content-type").startswith("text/plain"), r.headers
    assert r.header("content-length") == "13", r.headers


@case("S.2", "the server advertises MAX_CONCURRENT_STREAMS 100", smarm=True)
def _(t):
    c = t.conn()
    assert c.server_settings.get(h.MAX_CONCURRENT_STREAMS) == 100, c.server_settings


@case("S.3", "GET /healthz: ok", smarm=True)
def _(t):
    get(t, "/healthz", body=b"ok\n")


@case("S.4", "GET /json: 200 application/json", smarm=True)
def _(t):
    r = get(t, "/json", body=None)
    assert (r.header("content-type") or "").startswith("application/json"), r.headers
    assert r.body.startswith(b"{"), r.body[:40]


@case("S.5", "GET of an unknown path: 404", smarm=True)
def _(t):
    get(t, "/no/such/route", status=404, body=None)


@case("S.6", "DELETE /plaintext: 405", smarm=True)
def _(t):
    c = t.conn()
    s = c.request("DELETE", "/plaintext")
    served(c, s, 405)


@case("S.7", "POST /plaintext with a body: 200 Hello, World!", smarm=True)
def _(t):
    c, s = post(t, "/plaintext", b"discard me" * 100)
    served(c, s, 200, HELLO)


@case("S.8", "POST /test/echo with a body in 37 DATA frames: echoed", smarm=True)
def _(t):
    body = bytes(range(256)) * 145
    c, s = post(t, "/test/echo", body, chunk=1000)
    served(c, s, 200, body)


@case("S.9", "POST /test/echo of 1 MiB (the body limit): echoed, flow control both ways",
      smarm=True)
def _(t):
    body = os.urandom(BODY_LIMIT)
    c = t.conn([(h.INITIAL_WINDOW_SIZE, h.MAX_WINDOW)], timeout=10)
    c.send(window_update(0, h.MAX_WINDOW - 65535))
    s = 1
    c.send(c.headers_frame(s, hdr("POST", "/test/echo"), end_stream=False))
    send_body(c, s, body)
    served(c, s, 200, body)


def send_body(c, s, body, stop=None):
    """Sends `body` on stream s within the server's flow-control windows
    (reading its WINDOW_UPDATEs); stop(c): give up early (a response came)."""
    stream_win = c.server_settings.get(h.INITIAL_WINDOW_SIZE, 65535)
    sent_conn = sent_stream = off = 0
    frame_max = c.server_settings.get(h.MAX_FRAME_SIZE, 16384)
    while off < len(body):
        if stop and stop(c):
            return False
        cw = 65535 + c.window_updates.get(0, 0) - sent_conn
        sw = stream_win + c.window_updates.get(s, 0) - sent_stream
        n = min(cw, sw, frame_max, len(body) - off)
        if n <= 0:
            c.recv_frame(timeout=10)
            continue
        last = off + n == len(body)
        c.send(data_frame(s, body[off:off + n], end_stream=last))
        off += n
        sent_conn += n
        sent_stream += n
    return True


@case("S.10", "a header list past http.header_limit (8 KiB): 431", smarm=True)
def _(t):
    c = t.conn()
    s = c.request("GET", "/plaintext", extra=[(f"x-big-{i}", "v" * 1000) for i in range(10)])
    served(c, s, 431)
    c.request("GET", "/plaintext", stream_id=s + 2)
    served(c, s + 2, 200, HELLO)


@case("S.11", "one 20 KiB header over CONTINUATION frames: 431", smarm=True)
def _(t):
    c = t.conn()
    block = c.header_block(hdr(extra=[("x-huge", "h" * 20000)]), huffman=False)
    c.send(raw_frame(HEADERS, END_STREAM, 1, block[:16000]),
           raw_frame(CONTINUATION, END_HEADERS, 1, block[16000:]))
    served(c, 1, 431)


@case("S.12", "HPACK bomb: 431 and the connection goes on", smarm=True)
def _(t):
    c = t.conn()
    c.send(*bomb_frames(c))
    served(c, 1, 431)
    c.request("GET", "/plaintext", stream_id=3)
    served(c, 3, 200, HELLO)


@case("S.13", "content-length past http.body_limit: 413 before the body is sent", smarm=True)
def _(t):
    c = t.conn()
    c.send(open_post(1, "/test/echo", extra=[("content-length", str(BODY_LIMIT + 1))])(c))
    served(c, 1, 413)


@case("S.14", "a body past http.body_limit without content-length: 413", smarm=True)
def _(t):
    c = t.conn(timeout=10)
    c.send(c.headers_frame(1, hdr("POST", "/test/echo"), end_stream=False))
    done = send_body(c, 1, b"z" * (BODY_LIMIT + 65536),
                     stop=lambda c: c.responses.get(1) and c.responses[1].status is not None)
    r = c.responses[1]
    if r.status is None:
        c.read_until(lambda f: r.status is not None or r.reset is not None, timeout=10,
                     what="the 413")
    assert r.status == 413, f"{r} (body sent whole: {done})"


@case("S.15", "GET /test/bytes of 200000 with a window of 1000: 1000 bytes, resumes after "
      "WINDOW_UPDATE", smarm=True)
def _(t):
    c = t.conn([(h.INITIAL_WINDOW_SIZE, 1000)])
    s = c.request("GET", f"/test/bytes?n={BIG}")
    wait_bytes(c, s, 1000, "1000 bytes")
    no_more(c, s, 1000)
    c.send(window_update(s, 30000))
    wait_bytes(c, s, 31000, "31000 bytes")
    no_more(c, s, 31000)
    c.send(window_update(s, BIG), window_update(0, BIG))
    r = c.response(s)
    assert r.status == 200 and r.body == b"x" * BIG and r.header("content-length") == str(BIG), r


@case("S.16", "GET /test/chunks?n=20&size=5000: 100000 bytes streamed", smarm=True)
def _(t):
    c = t.conn()
    s = c.request("GET", "/test/chunks?n=20&size=5000")
    r = served(c, s, 200, b"x" * 100000)
    assert r.data_frames >= 2, r.data_frames


@case("S.17", "a slow stream does not block others: 20 GETs finish before a 1 s sleep",
      smarm=True)
def _(t):
    c = t.conn()
    c.send(c.headers_frame(1, hdr("GET", "/test/sleep?ms=1000")))
    t0 = time.monotonic()
    c.send(*[c.headers_frame(2 * i + 3, hdr()) for i in range(20)])
    order = []
    c.read_until(lambda f: f.type in (HEADERS, DATA) and c.responses[f.stream_id].ended and
                 (order.append(f.stream_id) or len(order) == 21), timeout=5,
                 what="21 responses")
    assert order[-1] == 1, f"stream 1 finished before {order[order.index(1) + 1:]}"
    assert c.responses[1].body == b"slept\n", c.responses[1]
    assert time.monotonic() - t0 >= 0.9
    for i in range(20):
        assert c.responses[2 * i + 3].body == HELLO


@case("S.18", "100 sleeping streams open, the limit acknowledged: one more ends the "
      "connection with GOAWAY PROTOCOL_ERROR (RFC 9113 5.1.2)", smarm=True)
def _(t):
    c = t.conn(timeout=10)
    c.read_until(lambda f: f.type == SETTINGS and "ACK" in f.flags, what="SETTINGS ACK")
    c.send(*[c.headers_frame(2 * i + 1, hdr("GET", "/test/sleep?ms=1500")) for i in range(100)])
    c.send(c.headers_frame(201, hdr()))
    c.expect_goaway(PROTOCOL_ERROR)
    still_serving(t)


@case("S.19", "RST_STREAM of a sleeping stream: the connection goes on", smarm=True)
def _(t):
    c = t.conn()
    c.send(c.headers_frame(1, hdr("GET", "/test/sleep?ms=500")), rst_stream(1, CANCEL))
    c.request("GET", "/plaintext", stream_id=3)
    served(c, 3, 200, HELLO)
    c.quiet(0.7)
    assert not (c.responses.get(1) and c.responses[1].ended), "the reset stream got its response"
    still_serving(t)


@case("S.20", "the client closes with 10 sleeping streams: the server lets go", smarm=True)
def _(t):
    c = t.conn()
    c.send(*[c.headers_frame(2 * i + 1, hdr("GET", "/test/sleep?ms=300")) for i in range(10)])
    c.ping()
    c.close()
    time.sleep(0.5)
    survives(t)


@case("S.21", "HTTP/1.1 still served on the same port", smarm=True)
def _(t):
    import http.client
    hc = http.client.HTTPConnection("127.0.0.1", t.port, timeout=5)
    hc.request("GET", "/plaintext")
    r = hc.getresponse()
    assert (r.status, r.read()) == (200, HELLO)
    hc.close()


@case("S.22", "http2.max_concurrent_streams=5: advertised; before the client acknowledged "
      "it, the 6th stream is refused (REFUSED_STREAM) and the 5 served", server="small")
def _(t):
    c = Conn(t.port, timeout=10).handshake(ack_server=False)
    assert c.server_settings.get(h.MAX_CONCURRENT_STREAMS) == 5, c.server_settings
    c.send(*[c.headers_frame(2 * i + 1, hdr("GET", "/test/sleep?ms=800")) for i in range(5)])
    c.send(c.headers_frame(11, hdr()))
    assert c.expect_error(11, REFUSED_STREAM, connection_ok=False) == "stream"
    for i in range(5):
        served(c, 2 * i + 1, 200, b"slept\n")


@case("S.23", "http2.enabled=false: the preface gets no HTTP/2 answer", server="noh2")
def _(t):
    s = socket.create_connection(("127.0.0.1", t.port), timeout=5)
    s.sendall(h.PREFACE + settings_frame())
    data, closed = read_all(s, 5)
    s.close()
    assert data.startswith(b"HTTP/1.1 4") or data.startswith(b"HTTP/1.1 5") or \
        (data == b"" and closed), data[:100]


# -- running
SERVERS = {
    "main": [],
    "small": ["--http2.max_concurrent_streams=5"],
    "noh2": ["--http2.enabled=false"],
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("server")
    ap.add_argument("config")
    ap.add_argument("-k", default="", help="run only the cases whose id or text has this")
    ap.add_argument("--port", type=int, help="test a server already on 127.0.0.1:PORT")
    ap.add_argument("--nghttpd", action="store_true", help="it is nghttpd: skip smarm-only cases")
    ap.add_argument("--docroot", help="with --nghttpd: write plaintext and big there first")
    a = ap.parse_args()
    if a.docroot:
        with open(os.path.join(a.docroot, "plaintext"), "wb") as f:
            f.write(HELLO)
        with open(os.path.join(a.docroot, "big"), "wb") as f:
            f.write(b"x" * BIG)
    selected = [c for c in CASES if a.k in c.ident or a.k in c.what]
    servers = {}
    failed, known, skipped, ran = [], [], 0, 0
    import rel  # noqa: E402  (only needed when starting smarm-server)
    common = ["--http.test_routes=true"]

    def target(name):
        if a.port:
            return Target(a.port, a.nghttpd)
        if name not in servers or not servers[name].alive():
            servers[name] = rel.start(a.server, a.config, common + SERVERS[name])
        return Target(servers[name].port, False, servers[name])
    try:
        for c in selected:
            if c.smarm and (a.nghttpd or (a.port and c.server != "main")):
                skipped += 1
                continue
            ran += 1
            t = target(c.server)
            t0 = time.monotonic()
            try:
                note = c.fn(t)
                if t.srv is not None and not t.srv.alive():
                    raise AssertionError("the server died:\n" + t.srv.text()[-3000:])
                print(f"ok   {c.ident:8} {c.what}" + (f" [{note}]" if note else "") +
                      f" ({time.monotonic() - t0:.2f} s)", flush=True)
            except Exception as e:  # noqa: BLE001 - report every case
                msg = f"{c.ident:8} {c.what}: {type(e).__name__}: {e}"
                if a.nghttpd and c.nghttpd_differs:
                    known.append(c.ident)
                    print(f"known {msg} (nghttp2: {c.nghttpd_differs})", flush=True)
                else:
                    failed.append(c.ident)
                    print(f"FAIL {msg}", flush=True)
    finally:
        for s in servers.values():
            if s.alive():
                s.stop()
    print(f"{ran - len(failed) - len(known)} passed, {len(failed)} failed, "
          f"{len(known)} known to differ in nghttp2, {skipped} skipped (smarm-only)" +
          (f": {' '.join(failed)}" if failed else ""))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
