"""A frame-level WebSocket client over a raw socket, for tests that must send
what no conforming client would (reserved bits, bad opcodes, fragmented
control frames, invalid UTF-8) and see exactly what the server answers.
"""
import os
import socket
import struct
import time
import base64
import zlib

CONT, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA


class Closed(Exception):
    pass


def frame(opcode, payload=b"", fin=True, rsv=0, mask=True):
    """The bytes of one frame (rsv: 3 bits, RSV1 = 4)."""
    b0 = (0x80 if fin else 0) | (rsv << 4) | opcode
    n = len(payload)
    mbit = 0x80 if mask else 0
    if n < 126:
        head = struct.pack("!BB", b0, mbit | n)
    elif n < 65536:
        head = struct.pack("!BBH", b0, mbit | 126, n)
    else:
        head = struct.pack("!BBQ", b0, mbit | 127, n)
    if not mask:
        return head + payload
    key = os.urandom(4)
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


def close_payload(code, reason=b""):
    return struct.pack("!H", code) + reason


class Client:
    def __init__(self, port, path="/ws/echo", extensions=None, timeout=10, host="127.0.0.1"):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buf = b""
        key = base64.b64encode(os.urandom(16)).decode()
        self.key = key  # Sec-WebSocket-Key sent
        req = (f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
               f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
               "Sec-WebSocket-Version: 13\r\n")
        if extensions:
            req += f"Sec-WebSocket-Extensions: {extensions}\r\n"
        self.sock.sendall((req + "\r\n").encode())
        while b"\r\n\r\n" not in self.buf:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise Closed("closed during the handshake")
            self.buf += chunk
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode().split("\r\n")
        self.status = int(lines[0].split()[1])
        self.headers = {}
        for line in lines[1:]:
            k, v = line.split(":", 1)
            self.headers[k.strip().lower()] = v.strip()
        if self.status != 101:
            raise RuntimeError(f"handshake answered {lines[0]}")

    def send(self, data):
        self.sock.sendall(data)

    def send_frame(self, opcode, payload=b"", **kw):
        self.sock.sendall(frame(opcode, payload, **kw))

    def send_slowly(self, data, piece=1):
        for i in range(0, len(data), piece):
            self.sock.sendall(data[i:i + piece])
            time.sleep(0.001)

    def _need(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise Closed("the server closed the TCP connection")
            self.buf += chunk

    def recv_frame(self):
        """(fin, rsv, opcode, payload) of the server's next frame."""
        self._need(2)
        b0, b1 = self.buf[0], self.buf[1]
        if b1 & 0x80:
            raise AssertionError("the server masked a frame")
        n, off = b1 & 0x7F, 2
        if n == 126:
            self._need(4)
            n, off = struct.unpack("!H", self.buf[2:4])[0], 4
            if n < 126:
                raise AssertionError(f"the server sent length {n} in the 16-bit form")
        elif n == 127:
            self._need(10)
            n, off = struct.unpack("!Q", self.buf[2:10])[0], 10
            if n < 65536:
                raise AssertionError(f"the server sent length {n} in the 64-bit form")
        self._need(off + n)
        payload, self.buf = self.buf[off:off + n], self.buf[off + n:]
        return bool(b0 & 0x80), (b0 >> 4) & 7, b0 & 0xF, payload

    def recv_message(self):
        """(opcode, payload) of the next data message, reassembled; pongs and
        pings skipped; a close raises Closed with its code."""
        op, parts = None, []
        while True:
            fin, rsv, o, p = self.recv_frame()
            if o in (PING, PONG):
                continue
            if o == CLOSE:
                raise Closed(f"close {struct.unpack('!H', p[:2])[0] if len(p) >= 2 else None}")
            if op is None:
                op = o
            parts.append(p)
            if fin:
                return op, b"".join(parts)

    def expect_close(self):
        """Reads to the server's close frame; returns its code (None: empty).
        The TCP connection must end after it."""
        while True:
            fin, rsv, o, p = self.recv_frame()
            if o == CLOSE:
                code = struct.unpack("!H", p[:2])[0] if len(p) >= 2 else None
                break
        # Answer it (a client completes the handshake), then see EOF.
        try:
            self.send_frame(CLOSE, p[:2])
        except OSError:
            pass
        self.sock.settimeout(5)
        try:
            while self.sock.recv(4096):
                pass
        except (ConnectionResetError, socket.timeout):
            pass
        self.sock.close()
        return code

    def close(self):
        self.sock.close()


def deflate_message(data):
    """permessage-deflate's payload of one message (RFC 7692 7.2.1)."""
    c = zlib.compressobj(wbits=-15)
    out = c.compress(data) + c.flush(zlib.Z_SYNC_FLUSH)
    assert out.endswith(b"\x00\x00\xff\xff")
    return out[:-4]


def inflate_message(data):
    d = zlib.decompressobj(wbits=-15)
    return d.decompress(data + b"\x00\x00\xff\xff")
