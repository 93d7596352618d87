#!/usr/bin/python3
"""smarm-server's HTTP/2 end to end, one ctest per case:

  curl      curl --http2-prior-knowledge: GET, a 1 MiB POST echoed, 404,
            HTTP/1.1 on the same port still served, a file and HEAD on
            it, a registry-routed route (kv PUT then GET)
  nghttp    nghttp (nghttp2-client): 20 concurrent streams, a 5 MB body
            through flow control, a streamed (chunked) body
  tls       ALPN both ways: curl --http2 gets h2, --http1.1 gets
            HTTP/1.1, and with http2.enabled false h2 is not selected
  slow      one connection: a handler sleeping 1 s on stream 1 and 20
            quick streams after it: all 20 answered before stream 1
  drain     SIGTERM with a stream in its handler: GOAWAY (NO_ERROR, its
            last stream id) at once, the stream still answered, exit 0
  idle      a connection without streams gets GOAWAY after idle_timeout
  stall     a client that never opens its window: every stream reset
            (CANCEL) after write_timeout, the connection still answers a
            PING, the server's RSS flat over 10 rounds
  uploads   100 concurrent 1 MB uploads on one connection: all answered, the
            server's RSS bounded by the connection's body budget (flow
            control holds the rest back)
  streamed  POST /upload/sha256 (a streamed body): 16 MiB on one stream hashed
            right with the server's RSS growing by far less than the body, 6
            concurrent streamed uploads, 413 past the route's limit (declared,
            and counted as DATA arrives), 408 for a body that stalls, 400
            at once when the peer closes its side mid-body
  metrics   access log lines and http_requests_total count every stream

    server_test.py CASE SMARM_SERVER CONFIG
"""
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "reliability"))
import rel  # noqa: E402
sys.path.insert(0, os.path.dirname(__file__))
import h2conn  # noqa: E402
import h2.config  # noqa: E402
import h2.connection  # noqa: E402
import h2.events  # noqa: E402
import h2.settings  # noqa: E402

TEST = ["--http.test_routes=true"]


class Client:
    """A well-behaved HTTP/2 client over one socket (python3-h2)."""

    def __init__(self, port, settings=None, timeout=10):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.conn.initiate_connection()
        if settings:
            self.conn.update_settings(settings)
        self.flush()
        self.responses = {}  # stream -> {"status", "body", "ended", "reset"}
        self.order = []  # streams in the order they ended
        self.goaway = None
        self.closed = False
        self.pings = 0

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def request(self, path, method="GET", body=None, end=True):
        sid = self.conn.get_next_available_stream_id()
        headers = [(":method", method), (":scheme", "http"), (":path", path),
                   (":authority", "127.0.0.1")]
        self.conn.send_headers(sid, headers, end_stream=body is None and end)
        if body is not None:
            self.conn.send_data(sid, body, end_stream=True)
        self.responses[sid] = {"status": None, "body": b"", "ended": False, "reset": None}
        self.flush()
        return sid

    def pump(self, until, timeout=10, ack_data=True):
        """Reads events until until() is true; False on timeout or close."""
        end = time.time() + timeout
        while not until():
            left = end - time.time()
            if left <= 0 or self.closed:
                return until()
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                return until()
            except ConnectionResetError:
                data = b""
            if not data:
                self.closed = True
                return until()
            for ev in self.conn.receive_data(data):
                self.on(ev, ack_data)
            self.flush()
        return True

    def on(self, ev, ack_data):
        r = self.responses.get(getattr(ev, "stream_id", None))
        if isinstance(ev, h2.events.ResponseReceived):
            r["status"] = int(dict(ev.headers)[b":status"])
        elif isinstance(ev, h2.events.DataReceived):
            r["body"] += ev.data
            if ack_data:
                self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
        elif isinstance(ev, h2.events.StreamEnded):
            r["ended"] = True
            self.order.append(ev.stream_id)
        elif isinstance(ev, h2.events.StreamReset):
            if r is not None:
                r["reset"] = ev.error_code
                self.order.append(ev.stream_id)
        elif isinstance(ev, h2.events.ConnectionTerminated):
            self.goaway = (ev.error_code, ev.last_stream_id)
        elif isinstance(ev, h2.events.PingAckReceived):
            self.pings += 1

    def done(self, sid):
        r = self.responses[sid]
        return r["ended"] or r["reset"] is not None


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, timeout=60, **kw)


def curl(binary, config):
    srv = rel.start(binary, config, TEST)
    try:
        base = f"http://127.0.0.1:{srv.port}"
        r = run(["curl", "-sS", "-i", "--http2-prior-knowledge", base + "/plaintext"])
        out = r.stdout.decode()
        rel.check(out.startswith("HTTP/2 200"), f"GET over h2c: {out[:80]!r}")
        rel.check(out.endswith("Hello, World!"), "GET body")
        big = os.urandom(1 << 20)
        with tempfile.NamedTemporaryFile() as f:
            f.write(big)
            f.flush()
            r = run(["curl", "-sS", "--http2-prior-knowledge", "--data-binary", "@" + f.name,
                     base + "/test/echo"])
        rel.check(r.returncode == 0 and r.stdout == big,
                  f"1 MiB echo: rc {r.returncode}, {len(r.stdout)} bytes {r.stderr!r}")
        r = run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_version} %{http_code}",
                 "--http2-prior-knowledge", base + "/nope"])
        rel.check(r.stdout.decode() == "2 404", f"404: {r.stdout!r}")
        r = run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_version} %{http_code}",
                 base + "/plaintext"])
        rel.check(r.stdout.decode() == "1.1 200", f"HTTP/1.1 alongside: {r.stdout!r}")
        # A file body, and HEAD on it: the file's length, no body.
        r = run(["curl", "-sS", "--http2-prior-knowledge", base + "/test/file"])
        rel.check(r.stdout == open(config, "rb").read(), f"file body: {len(r.stdout)} bytes")
        r = run(["curl", "-sS", "-I", "--http2-prior-knowledge", base + "/test/file"])
        rel.check(f"content-length: {os.path.getsize(config)}\r\n" in r.stdout.decode(),
                  f"HEAD on a file: {r.stdout!r}")
        # A registry-routed route (the kv gen_server) as on HTTP/1.1.
        r = run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_version} %{http_code}",
                 "--http2-prior-knowledge", "-X", "PUT", "--data-binary", "over h2",
                 base + "/kv/h2key"])
        rel.check(r.stdout.decode() in ("2 200", "2 201", "2 204"), f"kv PUT: {r.stdout!r}")
        r = run(["curl", "-sS", "--http2-prior-knowledge", base + "/kv/h2key"])
        rel.check(r.stdout == b"over h2", f"kv GET: {r.stdout!r}")
    finally:
        srv.stop()


def nghttp(binary, config):
    srv = rel.start(binary, config, TEST)
    try:
        base = f"http://127.0.0.1:{srv.port}"
        r = run(["nghttp", "-ns", "-m", "20", base + "/plaintext"])
        out = r.stdout.decode()
        rel.check(r.returncode == 0 and out.count(" 200 ") == 20,
                  f"20 streams: rc {r.returncode}\n{out[-600:]}")
        r = run(["nghttp", base + "/test/bytes?n=5000000"])
        rel.check(r.returncode == 0 and r.stdout == b"x" * 5_000_000,
                  f"5 MB body: rc {r.returncode}, {len(r.stdout)} bytes")
        r = run(["nghttp", base + "/test/chunks?n=40&size=100000"])
        rel.check(r.returncode == 0 and r.stdout == b"x" * 4_000_000,
                  f"streamed body: rc {r.returncode}, {len(r.stdout)} bytes")
    finally:
        srv.stop()


def make_cert(tmp):
    key, crt = os.path.join(tmp, "key.pem"), os.path.join(tmp, "crt.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                    "-out", crt, "-days", "2", "-subj", "/CN=127.0.0.1"],
                   check=True, capture_output=True)
    return crt, key


def tls(binary, config):
    with tempfile.TemporaryDirectory() as tmp:
        crt, key = make_cert(tmp)
        flags = [f"--http.tls_certificate={crt}", f"--http.tls_private_key={key}"]
        for enabled in (True, False):
            srv = rel.start(binary, config, flags + [f"--http2.enabled={str(enabled).lower()}"])
            try:
                url = f"https://127.0.0.1:{srv.port}/plaintext"
                fmt = ["-o", "/dev/null", "-w", "%{http_version} %{http_code}"]
                r = run(["curl", "-sSk", "--http2"] + fmt + [url])
                want = "2 200" if enabled else "1.1 200"
                rel.check(r.stdout.decode() == want,
                          f"--http2 with http2.enabled={enabled}: {r.stdout!r} {r.stderr!r}")
                r = run(["curl", "-sSk", "--http1.1"] + fmt + [url])
                rel.check(r.stdout.decode() == "1.1 200", f"--http1.1: {r.stdout!r}")
                if enabled:
                    r = run(["nghttp", "-n", "-s", url])  # ALPN h2 by nghttp2's client
                    rel.check(r.returncode == 0, f"nghttp over TLS: {r.stderr!r}")
            finally:
                srv.stop()


def slow(binary, config):
    srv = rel.start(binary, config, TEST)
    try:
        c = Client(srv.port)
        sleeper = c.request("/test/sleep?ms=1000")
        quick = [c.request("/plaintext") for _ in range(20)]
        rel.check(c.pump(lambda: all(c.done(s) for s in quick + [sleeper]), 10),
                  "every stream answered")
        rel.check(c.order[-1] == sleeper, f"the sleeper last: order {c.order}")
        for s in quick:
            rel.check(c.responses[s]["status"] == 200 and
                      c.responses[s]["body"] == b"Hello, World!", f"stream {s}")
        rel.check(c.responses[sleeper]["body"] == b"slept\n", "the sleeper's body")
    finally:
        srv.stop()


def drain(binary, config):
    # The raw client: python3-h2's state machine refuses frames after a
    # GOAWAY, and the open stream's response comes after it.
    srv = rel.start(binary, config, TEST + ["--http.drain_timeout=10s"])
    c = h2conn.Conn(srv.port, timeout=10).handshake()
    c.send(c.headers_frame(1, c.request_headers("GET", "/test/sleep?ms=1500")))
    time.sleep(0.3)  # the handler runs
    t0 = time.time()
    srv.proc.send_signal(signal.SIGTERM)
    last, code, _ = c.expect_goaway(0)
    rel.check(time.time() - t0 < 1.0, f"GOAWAY after {time.time() - t0:.2f} s")
    rel.check(last == 1, f"GOAWAY's last stream {last}")
    r = c.response(1, timeout=5)
    rel.check(r.status == 200 and r.body == b"slept\n", f"the open stream's response {r}")
    c.expect_closed()
    rel.check(srv.proc.wait(15) == 0, "exit 0")


def idle(binary, config):
    srv = rel.start(binary, config, TEST + ["--http.idle_timeout=1s"])
    try:
        c = Client(srv.port)
        sid = c.request("/plaintext")
        rel.check(c.pump(lambda: c.done(sid), 5), "a request first")
        t0 = time.time()
        rel.check(c.pump(lambda: c.goaway is not None, 6), "GOAWAY after idle_timeout")
        took = time.time() - t0
        rel.check(0.9 <= took < 4, f"GOAWAY after {took:.2f} s (idle_timeout 1 s)")
        rel.check(c.goaway[0] == 0, f"GOAWAY code {c.goaway}")
        rel.check(c.pump(lambda: c.closed, 5), "then the connection closes")
    finally:
        srv.stop()


def stall(binary, config):
    srv = rel.start(binary, config, TEST + ["--http.write_timeout=1s"])
    try:
        rss = []
        for _ in range(10):
            c = Client(srv.port, {h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
            # Headers need no window; every DATA frame does.
            sids = [c.request("/test/bytes?n=1000000") for _ in range(20)]
            ok = c.pump(lambda: all(c.done(s) for s in sids), 8)
            rel.check(ok, "every stalled stream ended")
            for s in sids:
                r = c.responses[s]
                rel.check(r["status"] == 200 and r["reset"] == 8 and r["body"] == b"",
                          f"stream {s}: {r['status']} reset {r['reset']} {len(r['body'])} B")
            c.conn.ping(b"12345678")
            c.flush()
            rel.check(c.pump(lambda: c.pings == 1, 5), "the connection still answers")
            c.sock.close()
            time.sleep(0.2)
            rss.append(srv.rss_kib())
        # 20 x 1 MB bodies are held each round and released on reset: kept,
        # they would add 20 MB a round (160 MB over these); malloc's own
        # retention of freed blocks stays under about one round's.
        rel.check(rss[-1] - rss[2] < 32 * 1024, f"RSS KiB over rounds {rss}")
    finally:
        srv.stop()


def uploads(binary, config):
    srv = rel.start(binary, config, TEST)
    try:
        base_rss = srv.rss_kib()
        c = Client(srv.port, timeout=30)
        size, n = 1_000_000, 100
        sids = [c.request("/plaintext", "POST", end=False) for _ in range(n)]
        sent = dict.fromkeys(sids, 0)
        peak = base_rss
        turn = 0
        end = time.time() + 60
        while any(v < size for v in sent.values()) and time.time() < end:
            # Each stream's open window in turn, one frame at a time: every
            # upload advances together while the server lets it (a client
            # filling one stream first would finish them one at a time).
            for _ in range(16):
                turn += 1  # the connection's window runs out mid-list: rotate
                for sid in sids[turn % n:] + sids[:turn % n]:
                    room = min(c.conn.local_flow_control_window(sid), size - sent[sid],
                               c.conn.max_outbound_frame_size)
                    if room > 0:
                        c.conn.send_data(sid, b"u" * room, end_stream=sent[sid] + room == size)
                        sent[sid] += room
            c.flush()
            c.pump(lambda: False, 0.005)
            peak = max(peak, srv.rss_kib())
        rel.check(c.pump(lambda: all(c.done(s) for s in sids), 30), "every upload answered")
        for sid in sids:
            r = c.responses[sid]
            rel.check(r["status"] == 200 and r["body"] == b"Hello, World!", f"stream {sid}: {r}")
        # Held at once without the connection's budget: up to 100 MB. With it: 4 x
        # body_limit, one body_limit more and a 64 KiB window per stream.
        print(f"RSS grew {peak - base_rss} KiB")
        rel.check(peak - base_rss < 32 * 1024, f"RSS grew {peak - base_rss} KiB (peak {peak})")
    finally:
        srv.stop()


def send_body(c, sids, bodies, rss=None, timeout=60):
    """Sends each stream's body as its windows allow (a frame per stream in
    turn), ending each stream; returns the largest RSS seen by `rss`."""
    sent = dict.fromkeys(sids, 0)
    peak = rss() if rss else 0
    end = time.time() + timeout
    while any(sent[s] < len(bodies[s]) for s in sids) and time.time() < end:
        for _ in range(8):
            for sid in sids:
                if c.done(sid):
                    sent[sid] = len(bodies[sid])  # answered early: the rest is not wanted
                    continue
                room = min(c.conn.local_flow_control_window(sid), len(bodies[sid]) - sent[sid],
                           c.conn.max_outbound_frame_size)
                if room > 0 or (sent[sid] == len(bodies[sid]) == 0):
                    last = sent[sid] + room == len(bodies[sid])
                    c.conn.send_data(sid, bodies[sid][sent[sid]:sent[sid] + room],
                                     end_stream=last)
                    sent[sid] += room
        c.flush()
        c.pump(lambda: False, 0.002)
        if rss:
            peak = max(peak, rss())
    rel.check(all(sent[s] == len(bodies[s]) for s in sids), f"bodies sent: {sent}")
    return peak


def streamed(binary, config):
    import hashlib
    limit = 16 << 20
    srv = rel.start(binary, config, TEST + [f"--workers.upload_limit={limit}",
                                            "--http.body_timeout=500ms"])
    try:
        c = Client(srv.port, timeout=30)
        sid = c.request("/plaintext")
        rel.check(c.pump(lambda: c.done(sid), 10), "warm-up")
        base = srv.rss_kib()
        # (1) One body at the limit, hashed as it arrives.
        body = os.urandom(limit)
        sid = c.request("/upload/sha256", "POST", end=False)
        peak = send_body(c, [sid], {sid: body}, srv.rss_kib)
        rel.check(c.pump(lambda: c.done(sid), 30), "the upload answered")
        r = c.responses[sid]
        want = f"{hashlib.sha256(body).hexdigest()} {len(body)}\n".encode()
        rel.check(r["status"] == 200 and r["body"] == want, f"16 MiB upload: {r}")
        # Read whole it would be 16 MiB (and more while its string grows);
        # streamed, ~2 MiB here whatever the body's size (8 MiB: the same).
        print(f"RSS grew {peak - base} KiB for a 16 MiB upload")
        rel.check(peak - base < 6 * 1024, f"RSS grew {peak - base} KiB (peak {peak})")
        # (2) Six at once on the connection, interleaved frame by frame.
        bodies = {}
        for _ in range(6):
            s = c.request("/upload/sha256", "POST", end=False)
            bodies[s] = os.urandom(300_000 + 1000 * s)
        send_body(c, list(bodies), bodies)
        rel.check(c.pump(lambda: all(c.done(s) for s in bodies), 30), "six uploads answered")
        for s, b in bodies.items():
            r = c.responses[s]
            want = f"{hashlib.sha256(b).hexdigest()} {len(b)}\n".encode()
            rel.check(r["status"] == 200 and r["body"] == want, f"stream {s}: {r}")
        # (3) Past the limit: declared (refused before the handler), then
        # undeclared (counted as DATA arrives; the handler's read throws).
        sid = c.conn.get_next_available_stream_id()
        c.conn.send_headers(sid, [(":method", "POST"), (":scheme", "http"),
                                  (":path", "/upload/sha256"), (":authority", "127.0.0.1"),
                                  ("content-length", str(limit + 1))])
        c.responses[sid] = {"status": None, "body": b"", "ended": False, "reset": None}
        c.flush()
        rel.check(c.pump(lambda: c.done(sid), 10), "declared too long: answered")
        rel.check(c.responses[sid]["status"] == 413, f"declared: {c.responses[sid]}")
        sid = c.request("/upload/sha256", "POST", end=False)
        send_body(c, [sid], {sid: b"x" * (limit + 100_000)})
        rel.check(c.pump(lambda: c.done(sid), 10), "too long: answered")
        rel.check(c.responses[sid]["status"] == 413, f"counted: {c.responses[sid]}")
        # (4) A body that stops coming: 408 after body_timeout.
        sid = c.request("/upload/sha256", "POST", end=False)
        c.conn.send_data(sid, b"y" * 1000)
        c.flush()
        t0 = time.time()
        rel.check(c.pump(lambda: c.done(sid), 10), "stalled: answered")
        rel.check(c.responses[sid]["status"] == 408 and time.time() - t0 >= 0.4,
                  f"stalled: {c.responses[sid]} after {time.time() - t0:.2f} s")
        # The connection is still good.
        sid = c.request("/plaintext")
        rel.check(c.pump(lambda: c.done(sid), 10) and c.responses[sid]["status"] == 200,
                  "still serving")
        # (5) The peer closes its side mid-body: 400 at once (the body can
        # never end), not 408 after body_timeout.
        d = Client(srv.port, timeout=10)
        sid = d.request("/upload/sha256", "POST", end=False)
        d.conn.send_data(sid, b"z" * 1000)
        d.flush()
        d.sock.shutdown(socket.SHUT_WR)
        d.flush = lambda: None  # nothing more goes out (acks would hit the closed side)
        rel.check(d.pump(lambda: d.done(sid), 10), "half-closed: answered")
        rel.check(d.responses[sid]["status"] == 400, f"half-closed: {d.responses[sid]}")
    finally:
        srv.stop()


def metrics(binary, config):
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "access.log")
        srv = rel.start(binary, config, TEST + ["--http.access_log=true",
                                                f"--http.access_log_file={log}"])
        try:
            name = 'smarm_http_requests_total{method="GET",route="/plaintext",status="200"}'
            c = Client(srv.port)
            sid = c.request("/plaintext")
            rel.check(c.pump(lambda: c.done(sid), 5), "a first stream")
            before = srv.metric(name)
            sids = [c.request("/plaintext") for _ in range(30)]
            rel.check(c.pump(lambda: all(c.done(s) for s in sids), 10), "30 streams")
            after = srv.metric(name)
            rel.check(after - before == 30, f"http_requests_total {before} -> {after}")
        finally:
            srv.stop()
        lines = [l for l in open(log) if "/plaintext" in l]
        rel.check(len(lines) == 31, f"{len(lines)} access lines for 31 streams")
        rel.check(all(" 200 13 " in l for l in lines), f"status and bytes: {lines[0]!r}")


CASES = {f.__name__: f for f in (curl, nghttp, tls, slow, drain, idle, stall, uploads, streamed,
                                 metrics)}

if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in CASES:
        sys.exit(f"usage: server_test.py {{{','.join(CASES)}}} SMARM_SERVER CONFIG")
    CASES[sys.argv[1]](sys.argv[2], sys.argv[3])
    print(f"h2 {sys.argv[1]}: ok")
