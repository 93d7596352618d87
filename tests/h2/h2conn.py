"""A small raw-socket HTTP/2 client for conformance tests.

It builds frames with hyperframe (and header blocks with hpack) and writes
them to a plain socket, so a test can send sequences that a real HTTP/2
state machine (the h2 package) would refuse: frames on the wrong stream,
bad lengths, broken HPACK, floods. Frames from the server are read back
with hyperframe (the 9-byte head, then the payload) and server header
blocks are decoded with one hpack.Decoder per connection, so the dynamic
table stays in step.

Needs Debian's /usr/bin/python3 (python3-hyperframe, python3-hpack).
"""
import socket
import struct
import time

import hpack
from hyperframe.frame import (ContinuationFrame, DataFrame, Frame, GoAwayFrame,
                              HeadersFrame, PingFrame, RstStreamFrame, SettingsFrame,
                              WindowUpdateFrame)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

# Frame types (RFC 9113 section 6)
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, \
    WINDOW_UPDATE, CONTINUATION = range(10)

# Flags
END_STREAM = 0x1
ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY_FLAG = 0x20

# Error codes (RFC 9113 section 7)
ERRORS = {
    0x0: "NO_ERROR", 0x1: "PROTOCOL_ERROR", 0x2: "INTERNAL_ERROR",
    0x3: "FLOW_CONTROL_ERROR", 0x4: "SETTINGS_TIMEOUT", 0x5: "STREAM_CLOSED",
    0x6: "FRAME_SIZE_ERROR", 0x7: "REFUSED_STREAM", 0x8: "CANCEL",
    0x9: "COMPRESSION_ERROR", 0xa: "CONNECT_ERROR", 0xb: "ENHANCE_YOUR_CALM",
    0xc: "INADEQUATE_SECURITY", 0xd: "HTTP_1_1_REQUIRED",
}
NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR, SETTINGS_TIMEOUT, STREAM_CLOSED, \
    FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL, COMPRESSION_ERROR, CONNECT_ERROR, \
    ENHANCE_YOUR_CALM, INADEQUATE_SECURITY, HTTP_1_1_REQUIRED = range(14)

# Settings (RFC 9113 section 6.5.2)
HEADER_TABLE_SIZE, ENABLE_PUSH, MAX_CONCURRENT_STREAMS, INITIAL_WINDOW_SIZE, \
    MAX_FRAME_SIZE, MAX_HEADER_LIST_SIZE = range(1, 7)

MAX_WINDOW = (1 << 31) - 1


def err_name(code):
    return f"{ERRORS.get(code, 'UNKNOWN')}({code:#x})"


def raw_frame(ftype, flags, stream_id, payload=b"", length=None):
    """Any frame, valid or not: `length` overrides the length field (the
    payload sent is still `payload`)."""
    n = len(payload) if length is None else length
    return struct.pack("!I", n)[1:] + struct.pack("!BBI", ftype, flags, stream_id) + payload


def settings_payload(settings):
    return b"".join(struct.pack("!HI", k, v) for k, v in settings)


def settings_frame(settings=(), ack=False, stream_id=0):
    """SETTINGS from (id, value) pairs; values are not checked."""
    return raw_frame(SETTINGS, ACK if ack else 0, stream_id, settings_payload(settings))


def ping_frame(data=b"\0" * 8, ack=False, stream_id=0):
    return raw_frame(PING, ACK if ack else 0, stream_id, data)


def window_update(stream_id, increment):
    return raw_frame(WINDOW_UPDATE, 0, stream_id, struct.pack("!I", increment))


def rst_stream(stream_id, code=CANCEL):
    return raw_frame(RST_STREAM, 0, stream_id, struct.pack("!I", code))


def goaway_frame(last_stream_id=0, code=NO_ERROR, debug=b"", stream_id=0):
    return raw_frame(GOAWAY, 0, stream_id, struct.pack("!II", last_stream_id, code) + debug)


def priority_payload(depends_on=0, weight=16, exclusive=False):
    return struct.pack("!IB", depends_on | (0x80000000 if exclusive else 0), weight - 1)


def data_frame(stream_id, data=b"", end_stream=False, pad=None):
    """DATA; pad: the number of padding bytes (PADDED flag)."""
    f = DataFrame(stream_id, data)
    if end_stream:
        f.flags.add("END_STREAM")
    if pad is not None:
        f.flags.add("PADDED")
        f.pad_length = pad
    return f.serialize()


class Timeout(AssertionError):
    pass


class Closed(AssertionError):
    pass


class Response:
    def __init__(self, stream_id):
        self.stream_id = stream_id
        self.headers = []     # [(name, value)] of the first (final) header block
        self.informational = []
        self.trailers = []
        self.body = b""
        self.data_frames = 0
        self.ended = False
        self.reset = None     # an RST_STREAM's error code

    @property
    def status(self):
        for k, v in self.headers:
            if k == ":status":
                return int(v)
        return None

    def header(self, name):
        for k, v in self.headers:
            if k == name:
                return v
        return None

    def __repr__(self):
        return (f"<stream {self.stream_id} status {self.status} {len(self.body)} bytes"
                f"{' ended' if self.ended else ''}"
                f"{' reset ' + err_name(self.reset) if self.reset is not None else ''}>")


class Conn:
    """One HTTP/2 connection. `handshake()` sends the preface and SETTINGS
    and waits for the server's SETTINGS; the rest is up to the test."""

    def __init__(self, port, host="127.0.0.1", timeout=5.0, rcvbuf=None):
        """rcvbuf: a small SO_RCVBUF (set before connecting, so the window
        the kernel advertises stays small), for floods the server must not
        be able to write away."""
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout)
        self.sock.connect((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self.buf = bytearray()
        self.pos = 0
        self.write_failed = None    # the error of a write the server refused
        self.encoder = hpack.Encoder()
        self.decoder = hpack.Decoder()
        self.decoder.max_header_list_size = 1 << 24
        self.server_settings = {}
        self.settings_acks = 0      # SETTINGS ACKs received
        self.pings = []             # payloads of PING ACKs received
        self.goaway = None          # (last_stream_id, code, debug)
        self.window_updates = {}    # stream -> total increment received
        self.responses = {}         # stream -> Response
        self.frames = []            # every frame received, in order
        self.closed = False
        self.next_stream = 1
        self._header_block = None   # (stream, flags, fragment) being continued

    # -- writing
    def send(self, *frames):
        data = b"".join(f if isinstance(f, (bytes, bytearray)) else f.serialize()
                        for f in frames)
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError) as e:
            # the server has closed: what it sent first (a GOAWAY) is still
            # to be read, and reading tells the test what happened
            self.write_failed = e

    def try_send(self, data, seconds):
        """Writes as much of `data` as the peer takes in `seconds` without
        blocking for longer; returns the number of bytes written (a peer
        that stops reading, or closes, ends it early)."""
        self.sock.setblocking(False)
        sent = 0
        deadline = time.monotonic() + seconds
        try:
            while sent < len(data) and time.monotonic() < deadline:
                try:
                    sent += self.sock.send(data[sent:sent + 65536])
                except BlockingIOError:
                    time.sleep(0.005)
                except (BrokenPipeError, ConnectionResetError):
                    break
        finally:
            self.sock.setblocking(True)
            self.sock.settimeout(self.timeout)
        return sent

    def handshake(self, settings=(), preface=PREFACE, wait=True, ack_server=True):
        """The client preface and SETTINGS; with `wait`, reads until the
        server's SETTINGS (its first frame, RFC 9113 3.4) and ACKs it."""
        self.send(preface + settings_frame(settings))
        if wait:
            f = self.recv_frame()
            assert f.type == SETTINGS and "ACK" not in f.flags, \
                f"the server's first frame is {describe(f)}, not SETTINGS"
            if ack_server:
                self.send(settings_frame(ack=True))
        return self

    def header_block(self, headers, huffman=True):
        return self.encoder.encode(headers, huffman=huffman)

    def request_headers(self, method="GET", path="/plaintext", extra=(), authority="localhost",
                        scheme="http"):
        h = [(":method", method), (":scheme", scheme), (":path", path)]
        if authority is not None:
            h.append((":authority", authority))
        return h + list(extra)

    def headers_frame(self, stream_id, headers, end_stream=True, end_headers=True,
                      pad=None, priority=None):
        """HEADERS carrying `headers` (a list of pairs, or a bytes block);
        priority: (depends_on, weight, exclusive)."""
        block = headers if isinstance(headers, (bytes, bytearray)) else self.header_block(headers)
        flags = (END_STREAM if end_stream else 0) | (END_HEADERS if end_headers else 0)
        payload = b""
        if pad is not None:
            flags |= PADDED
            payload += bytes([pad])
        if priority is not None:
            flags |= PRIORITY_FLAG
            payload += priority_payload(*priority)
        payload += bytes(block) + b"\0" * (pad or 0)
        return raw_frame(HEADERS, flags, stream_id, payload)

    def new_stream(self):
        s = self.next_stream
        self.next_stream += 2
        return s

    def request(self, method="GET", path="/plaintext", body=None, extra=(), stream_id=None,
                end_stream=None, chunk=16384):
        """Sends a request; the body (if any) in DATA frames of `chunk`
        bytes. Returns the stream id."""
        s = stream_id or self.new_stream()
        if stream_id and stream_id >= self.next_stream:
            self.next_stream = stream_id + 2
        self.responses.setdefault(s, Response(s))
        if body is None:
            es = True if end_stream is None else end_stream
            self.send(self.headers_frame(s, self.request_headers(method, path, extra), end_stream=es))
        else:
            frames = [self.headers_frame(s, self.request_headers(method, path, extra),
                                         end_stream=False)]
            for i in range(0, len(body), chunk):
                frames.append(data_frame(s, body[i:i + chunk]))
            frames.append(data_frame(s, b"", end_stream=True if end_stream is None else end_stream))
            self.send(*frames)
        return s

    # -- reading
    def _fill(self, n, deadline):
        """Until n bytes are buffered past pos."""
        while len(self.buf) - self.pos < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Timeout("timed out waiting for a frame")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(262144)
            except socket.timeout:
                raise Timeout("timed out waiting for a frame") from None
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                self.closed = True
                partial = len(self.buf) - self.pos
                raise Closed("the server closed the connection" +
                             (f" (after {partial} bytes of a frame)" if partial else ""))
            if self.pos > (1 << 20):
                del self.buf[:self.pos]
                self.pos = 0
            self.buf += chunk

    def _recv_exact(self, n, deadline):
        self._fill(n, deadline)
        out = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return out

    def skim(self, stop=None, timeout=None):
        """Reads frames fast, without keeping them: for the answers to a
        flood. Returns {type: count} when the server closes or stop(type,
        flags, stream, payload) is true; a GOAWAY is recorded in
        self.goaway. Raises Timeout."""
        counts = {}
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            try:
                self._fill(9, deadline)
                n = int.from_bytes(self.buf[self.pos:self.pos + 3], "big")
                ftype, flags = self.buf[self.pos + 3], self.buf[self.pos + 4]
                sid = int.from_bytes(self.buf[self.pos + 5:self.pos + 9], "big") & 0x7fffffff
                self._fill(9 + n, deadline)
            except Closed:
                return counts
            payload = bytes(self.buf[self.pos + 9:self.pos + 9 + n]) \
                if ftype in (GOAWAY, PING, SETTINGS) else b""
            self.pos += 9 + n
            counts[ftype] = counts.get(ftype, 0) + 1
            if ftype == GOAWAY and len(payload) >= 8:
                last, code = struct.unpack("!II", payload[:8])
                self.goaway = (last & 0x7fffffff, code, payload[8:])
            if stop and stop(ftype, flags, sid, payload):
                return counts

    def recv_frame(self, timeout=None):
        """The next frame from the server, already accounted for (settings,
        pings, goaway, responses). Raises Timeout or Closed."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        self._fill(9, deadline)
        length = int.from_bytes(self.buf[self.pos:self.pos + 3], "big")
        self._fill(9 + length, deadline)   # a frame is taken whole or not at all
        head = self._recv_exact(9, deadline)
        f, length = Frame.parse_frame_header(memoryview(head))
        body = self._recv_exact(length, deadline)
        f.parse_body(memoryview(body))
        f.raw_length = length
        self._account(f)
        self.frames.append(f)
        return f

    def _account(self, f):
        if isinstance(f, SettingsFrame):
            if "ACK" in f.flags:
                self.settings_acks += 1
            else:
                self.server_settings.update(f.settings)
        elif isinstance(f, PingFrame):
            if "ACK" in f.flags:
                self.pings.append(bytes(f.opaque_data))
            else:
                self.send(ping_frame(bytes(f.opaque_data), ack=True))
        elif isinstance(f, GoAwayFrame):
            self.goaway = (f.last_stream_id, f.error_code, bytes(f.additional_data))
        elif isinstance(f, WindowUpdateFrame):
            self.window_updates[f.stream_id] = \
                self.window_updates.get(f.stream_id, 0) + f.window_increment
        elif isinstance(f, (HeadersFrame, ContinuationFrame)):
            if isinstance(f, HeadersFrame):
                self._header_block = (f.stream_id, set(f.flags), bytes(f.data))
            else:
                s, flags, block = self._header_block
                self._header_block = (s, flags | set(f.flags), block + bytes(f.data))
            if "END_HEADERS" in f.flags:
                s, flags, block = self._header_block
                self._header_block = None
                headers = [(k.decode() if isinstance(k, bytes) else k,
                            v.decode(errors="replace") if isinstance(v, bytes) else v)
                           for k, v in self.decoder.decode(block, raw=True)]
                r = self.responses.setdefault(s, Response(s))
                status = dict(headers).get(":status")
                if status is None:
                    r.trailers = headers
                elif status.startswith("1"):
                    r.informational.append(headers)
                else:
                    r.headers = headers
                if "END_STREAM" in flags:
                    r.ended = True
        elif isinstance(f, DataFrame):
            r = self.responses.setdefault(f.stream_id, Response(f.stream_id))
            r.body += bytes(f.data)
            r.data_frames += 1
            if "END_STREAM" in f.flags:
                r.ended = True
        elif isinstance(f, RstStreamFrame):
            r = self.responses.setdefault(f.stream_id, Response(f.stream_id))
            r.reset = f.error_code

    def read_until(self, pred, timeout=None, what="the expected frame", window=False):
        """Reads frames until pred(frame) is true; returns that frame.
        window: replenish both windows for every DATA frame (so large
        responses flow). A GOAWAY or close first fails, naming it."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            left = deadline - time.monotonic()
            try:
                f = self.recv_frame(timeout=max(left, 0.001))
            except Timeout:
                raise Timeout(f"timed out waiting for {what}; got {self.summary()}") from None
            except Closed as e:
                raise Closed(f"{e} while waiting for {what}; got {self.summary()}") from None
            if window and isinstance(f, DataFrame) and f.raw_length:
                self.send(window_update(0, f.raw_length), window_update(f.stream_id, f.raw_length))
            if pred(f):
                return f
            if isinstance(f, GoAwayFrame) and not pred(f):
                raise AssertionError(f"GOAWAY {err_name(f.error_code)} "
                                     f"{bytes(f.additional_data)[:80]!r} while waiting for {what}")

    def response(self, stream_id, timeout=None, window=True):
        """Reads until the stream's response has ended; fails if the
        stream is reset first."""
        r = self.responses.setdefault(stream_id, Response(stream_id))

        def done(f):
            if isinstance(f, RstStreamFrame) and f.stream_id == stream_id:
                raise AssertionError(f"stream {stream_id} reset with {err_name(f.error_code)} "
                                     f"(headers {r.headers})")
            return r.ended
        if not r.ended:
            self.read_until(done, timeout, f"the response on stream {stream_id}", window=window)
        return r

    def ping(self, data=b"smarmh2!", timeout=None):
        """A PING; waits for its ACK (the connection still works)."""
        self.send(ping_frame(data))
        self.read_until(lambda f: isinstance(f, PingFrame) and "ACK" in f.flags
                        and bytes(f.opaque_data) == data, timeout, "the PING ACK")

    def expect_goaway(self, codes, timeout=None):
        """Reads until a GOAWAY; fails unless its code is in `codes` (one
        code or a set). An RST_STREAM or a close first is a failure."""
        codes = {codes} if isinstance(codes, int) else set(codes)
        want = " or ".join(err_name(c) for c in sorted(codes))

        def pred(f):
            if isinstance(f, RstStreamFrame):
                raise AssertionError(f"RST_STREAM {err_name(f.error_code)} on stream "
                                     f"{f.stream_id}, expected GOAWAY {want}")
            return isinstance(f, GoAwayFrame)
        if self.goaway is None:
            self.read_until(pred, timeout, f"GOAWAY {want}")
        code = self.goaway[1]
        assert code in codes, f"GOAWAY {err_name(code)} {self.goaway[2][:80]!r}, expected {want}"
        return self.goaway

    def expect_error(self, stream_id, codes, timeout=None, connection_ok=True):
        """A stream error: RST_STREAM on `stream_id` with a code in `codes`,
        or (connection_ok: RFC 9113 5.4.1 lets an endpoint treat a stream
        error as a connection error) a GOAWAY with one. Returns 'stream' or
        'connection'."""
        codes = {codes} if isinstance(codes, int) else set(codes)
        want = " or ".join(err_name(c) for c in sorted(codes))

        def pred(f):
            if isinstance(f, RstStreamFrame) and f.stream_id == stream_id:
                return True
            if isinstance(f, GoAwayFrame):
                if not connection_ok:
                    raise AssertionError(f"GOAWAY {err_name(f.error_code)}, expected "
                                         f"RST_STREAM {want} on stream {stream_id}")
                return True
            if isinstance(f, (HeadersFrame, DataFrame)) and f.stream_id == stream_id:
                r = self.responses.get(stream_id)
                if r is not None and r.ended:
                    raise AssertionError(f"a response ({r.status}) on stream {stream_id}, "
                                         f"expected RST_STREAM {want}")
            return False
        f = self.read_until(pred, timeout, f"RST_STREAM {want} on stream {stream_id}")
        code = f.error_code
        kind = "stream" if isinstance(f, RstStreamFrame) else "connection"
        assert code in codes, f"{'RST_STREAM' if kind == 'stream' else 'GOAWAY'} " \
                              f"{err_name(code)}, expected {want}"
        return kind

    def expect_closed(self, timeout=None):
        """Reads (and drops) frames until the server closes; fails on a
        timeout."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            try:
                self.recv_frame(timeout=max(deadline - time.monotonic(), 0.001))
            except Closed:
                return
            except Timeout:
                raise Timeout("the server did not close the connection; got " +
                              self.summary()) from None

    def quiet(self, seconds):
        """Reads frames for `seconds`; returns them (nothing must be pending
        at the end for the caller to have a clean view)."""
        out = []
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return out
            try:
                out.append(self.recv_frame(timeout=left))
            except Timeout:
                return out

    def summary(self, n=8):
        fs = self.frames[-n:]
        return "[" + ", ".join(describe(f) for f in fs) + "]" + \
            (" (closed)" if self.closed else "")

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def describe(f):
    name = type(f).__name__.replace("Frame", "").upper()
    extra = ""
    if isinstance(f, GoAwayFrame):
        extra = f" {err_name(f.error_code)} last={f.last_stream_id} {bytes(f.additional_data)[:60]!r}"
    elif isinstance(f, RstStreamFrame):
        extra = f" {err_name(f.error_code)}"
    elif isinstance(f, (DataFrame, HeadersFrame, ContinuationFrame)):
        extra = f" len={f.raw_length if hasattr(f, 'raw_length') else '?'}"
    elif isinstance(f, WindowUpdateFrame):
        extra = f" +{f.window_increment}"
    elif isinstance(f, SettingsFrame):
        extra = f" {dict(f.settings)}"
    flags = ",".join(sorted(f.flags))
    return f"{name}(s={f.stream_id}{' ' + flags if flags else ''}{extra})"
