#!/usr/bin/python3
"""smarm-server's WebSockets end to end, one ctest per case:

  interop  python3-websockets as an ordinary client of /ws/echo
  chat     200 clients in 4 rooms of the chat example: every client sees
           every message of its room exactly once, in order per sender
  drain    SIGTERM with sockets open: each gets close 1001, the server
           exits 0
  idle     a peer that never answers pings is pinged, then closed with 1001
           after idle_timeout; one that answers stays open
  memory   2,000 idle sockets: RSS per socket bounded
  slowframe  a frame begun and never finished: closed after message_timeout
  slowreader a chat member that never reads while another floods the room:
           closed, the room goes on, memory bounded

    server_test.py CASE SMARM_SERVER CONFIG
"""
import asyncio
import os
import signal
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "reliability"))
import rel  # noqa: E402
import websockets  # noqa: E402
from wsframe import CLOSE, PING, Client  # noqa: E402


def url(srv, path):
    return f"ws://127.0.0.1:{srv.port}{path}"


def interop(binary, config):
    srv = rel.start(binary, config)
    try:
        async def go():
            async with websockets.connect(url(srv, "/ws/echo"), max_size=None) as ws:
                for m in ["hi", "\u00b5" * 1000, "x" * 300_000, b"\x00\xff" * 40_000]:
                    await ws.send(m)
                    rel.check(await ws.recv() == m, f"echo of {len(m)}")
                await asyncio.wait_for(await ws.ping(b"abc"), 5)
                await ws.close(4001, "done")
                rel.check(ws.close_code == 4001, f"close code {ws.close_code}")
            # Compression negotiated by the client's default offer.
        asyncio.run(go())

        async def deflate():
            async with websockets.connect(url(srv2, "/ws/echo"), compression="deflate") as ws:
                rel.check(ws.response_headers.get("Sec-WebSocket-Extensions", "")
                          .startswith("permessage-deflate"), "deflate negotiated")
                await ws.send("z" * 100_000)
                rel.check(await ws.recv() == "z" * 100_000, "deflate echo")
        srv2 = rel.start(binary, config, ["--websocket.deflate=true"])
        try:
            asyncio.run(deflate())
        finally:
            srv2.stop()
    finally:
        rel.check(srv.stop() == 0, "server exit status")


def chat(binary, config):
    srv = rel.start(binary, config, ["--websocket.chat=true", "--http.max_connections=1000"])
    clients, rooms, per_client = 200, 4, 20
    try:
        async def go():
            socks = []
            for i in range(clients):
                ws = await websockets.connect(url(srv, f"/ws/chat/room{i % rooms}"))
                rel.check(await ws.recv() == f"joined room{i % rooms}", "joined first")
                socks.append(ws)
            # Every client has joined before anyone speaks.
            async def speak(i, ws):
                for k in range(per_client):
                    await ws.send(f"{i}:{k}")

            async def listen(i, ws):
                expect = (clients // rooms) * per_client
                seen = {}
                got = 0
                while got < expect:
                    m = await asyncio.wait_for(ws.recv(), 60)
                    sender, k = map(int, m.split(":"))
                    rel.check(sender % rooms == i % rooms, f"client {i} got {m} from another room")
                    rel.check(seen.get(sender, -1) == k - 1,
                              f"client {i}: {m} after {seen.get(sender)} (order, exactly once)")
                    seen[sender] = k
                    got += 1
                rel.check(len(seen) == clients // rooms, "every sender heard")
                # Nothing more: no duplicates after the last expected one.
                try:
                    extra = await asyncio.wait_for(ws.recv(), 0.3)
                    rel.fail(f"client {i}: an extra message {extra}")
                except asyncio.TimeoutError:
                    pass

            await asyncio.gather(*(speak(i, ws) for i, ws in enumerate(socks)),
                                 *(listen(i, ws) for i, ws in enumerate(socks)))
            for ws in socks:
                await ws.close()
        asyncio.run(go())
    finally:
        rel.check(srv.stop() == 0, "server exit status")
    print(f"chat: {clients} clients x {per_client} messages in {rooms} rooms, each seen once in order")


def drain(binary, config):
    srv = rel.start(binary, config, ["--http.drain_timeout=10s"])
    socks = [Client(srv.port) for _ in range(20)]
    t0 = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    for c in socks:
        code = c.expect_close()
        rel.check(code == 1001, f"drain close code {code}")
    rc = srv.proc.wait(timeout=30)
    rel.check(rc == 0, f"exit status {rc}")
    print(f"drain: 20 sockets closed with 1001, exit 0 in {time.monotonic() - t0:.2f} s")


def idle(binary, config):
    srv = rel.start(binary, config, ["--websocket.ping_interval=200ms",
                                     "--websocket.idle_timeout=1s"])
    try:
        silent = Client(srv.port)
        fin, rsv, op, p = silent.recv_frame()
        rel.check(op == PING, f"first frame {op}, expected a ping")
        code = silent.expect_close()
        rel.check(code == 1001, f"idle close code {code}")

        async def alive():
            async with websockets.connect(url(srv, "/ws/echo"), ping_interval=None) as ws:
                await asyncio.sleep(2.5)  # the library answers the server's pings
                await ws.send("still here")
                rel.check(await ws.recv() == "still here", "answering peer kept")
        asyncio.run(alive())
    finally:
        rel.check(srv.stop() == 0, "server exit status")
    print("idle: a silent peer was pinged and closed with 1001; an answering one stayed")


def memory(binary, config):
    n = 2000
    srv = rel.start(binary, config, ["--http.max_connections=5000"], nofile=(8192, 8192))
    try:
        base = srv.rss_kib()
        socks = [Client(srv.port) for _ in range(n)]
        for c in socks[::50]:  # each one served
            c.send(b"\x81\x82abcd" + bytes(x ^ y for x, y in zip(b"hi", b"ab")))
            rel.check(c.recv_frame()[3] == b"hi", "echo")
        # Each client has its 101, and the server counts a socket before it
        # sends the 101: the gauge reads n at once.
        open_now = srv.metric("smarm_http_websockets_active")
        rel.check(open_now == n, f"smarm_http_websockets_active {open_now}, {n} open")
        per = (srv.rss_kib() - base) * 1024 / n
        print(f"memory: {per / 1024:.1f} KiB per idle socket ({n} open)")
        rel.check(per < 32 * 1024, f"{per:.0f} bytes per idle socket")
        for c in socks:
            c.close()
    finally:
        rel.check(srv.stop() == 0, "server exit status")


def slowframe(binary, config):
    """A frame begun and never finished: closed after message_timeout, never
    before; the server keeps serving others."""
    srv = rel.start(binary, config, ["--websocket.message_timeout=500ms"])
    try:
        c = Client(srv.port)
        t0 = time.monotonic()
        c.send(b"\x81\xfe\x10\x00abcd" + b"x" * 100)  # a 4 KiB text frame, 100 bytes of it
        c.sock.settimeout(15)
        closed = False
        try:
            while True:
                chunk = c.sock.recv(4096)
                if not chunk:
                    closed = True
                    break
        except ConnectionResetError:
            closed = True
        waited = time.monotonic() - t0
        rel.check(closed, "a stalled frame was not closed")
        rel.check(waited >= 0.5, f"closed after {waited:.3f} s, before message_timeout")
        other = Client(srv.port)
        other.send_frame(0x1, b"still serving")
        rel.check(other.recv_message() == (0x1, b"still serving"), "another socket served")
    finally:
        rel.check(srv.stop() == 0, "server exit status")
    print(f"slowframe: a stalled frame closed after {waited:.2f} s (message_timeout 500ms)")


def slowreader(binary, config):
    """A chat member that never reads while another floods the room: its
    writes stall, it is closed (message_timeout), the room goes on, and the
    server's memory stays bounded."""
    srv = rel.start(binary, config, ["--websocket.chat=true", "--websocket.message_timeout=2s"])
    try:
        stalled = Client(srv.port, "/ws/chat/flood")
        stalled.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        rel.check(stalled.recv_message() == (0x1, b"joined flood"), "joined")
        base = srv.rss_kib()

        async def go():
            # The writer reads its own echoes all along (a reader task, and
            # the flood yields to it), or its own member would be the slow
            # one and each stalled write would wait out message_timeout.
            async with websockets.connect(url(srv, "/ws/chat/flood"), max_queue=None) as w:
                rel.check(await w.recv() == "joined flood", "writer joined")

                async def hears_last():
                    while await w.recv() != "last":
                        pass
                reader = asyncio.create_task(hears_last())
                payload = "y" * 1024
                for i in range(20000):
                    await w.send(payload)
                    if i % 50 == 0:
                        await asyncio.sleep(0)
                # The stalled member is dropped (the server's count of open
                # sockets falls to the writer alone); the writer still hears
                # itself. (Reading the stalled socket to its end instead took
                # minutes: megabytes queued in the kernel, a 4 KiB window.)
                deadline = time.monotonic() + 30
                while srv.metric("smarm_http_websockets_active") > 1:
                    rel.check(time.monotonic() < deadline, "the stalled reader was not closed")
                    await asyncio.sleep(0.1)
                await w.send("last")
                await asyncio.wait_for(reader, 30)
        asyncio.run(go())
        grown = srv.rss_kib() - base
        stalled.close()
        # The stalled member holds at most chat::max_backlog (4096) lines of
        # 1 KiB (6.5 MiB of RSS measured); before the bound it held the whole
        # flood (25 MiB for 20,000 lines).
        rel.check(grown < 12 * 1024, f"RSS grew {grown} KiB over a 20 MiB flood")
    finally:
        rel.check(srv.stop() == 0, "server exit status")
    print(f"slowreader: the stalled member was closed; RSS grew {grown} KiB over a 20 MiB flood")


if __name__ == "__main__":
    {"interop": interop, "chat": chat, "drain": drain, "idle": idle, "memory": memory,
     "slowframe": slowframe, "slowreader": slowreader}[sys.argv[1]](sys.argv[2], sys.argv[3])
