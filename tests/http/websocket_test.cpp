// The WebSocket API in process: the handler's recv_or over its own
// channels, try_recv with readable(), authorization before accepting, a
// throwing handler, close codes, the server's counters, and WebSocket over
// TLS. The frame-level conformance cases are tests/websocket (against
// smarm-server).

#include <smarm/channel.hpp>
#include <smarm/http/server.hpp>
#include <smarm/http/websocket.hpp>
#include <smarm/select.hpp>

#include <gtest/gtest.h>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/websocket/stream.hpp>

#include <atomic>
#include <optional>
#include <string>

#include <smarm_test/http_client.hpp>

namespace {

using namespace smarm_test;
namespace beast_ws = boost::beast::websocket;

/// A Beast client over an actor stream (the test runs in an actor).
struct ws_client {
    smarm::tcp_stream sock;
    http::internal::actor_stream raw;
    beast_ws::stream<http::internal::actor_stream&> ws;
    boost::beast::flat_buffer buf;

    explicit ws_client(std::uint16_t port, const std::string& path = "/ws",
                       const std::string& extra_header = {})
        : sock(smarm::tcp_stream::connect("127.0.0.1", port, 5s)), raw(sock), ws(raw) {
        raw.set_deadline(std::chrono::steady_clock::now() + 20s);
        if (!extra_header.empty())
            ws.set_option(beast_ws::stream_base::decorator(
                [extra_header](beast_ws::request_type& r) { r.set(extra_header, "yes"); }));
        ws.handshake("127.0.0.1", path);
    }
    void send(const std::string& s) { ws.write(boost::asio::buffer(s)); }
    std::string recv() {
        buf.clear();
        ws.read(buf);
        return boost::beast::buffers_to_string(buf.data());
    }
    /// The close code the server ends with (its close frame).
    unsigned closed_with() {
        boost::beast::error_code ec;
        buf.clear();
        while (!ec)
            ws.read(buf, ec);
        EXPECT_EQ(ec, beast_ws::error::closed) << ec.message();
        return ws.reason().code;
    }
};

TEST(WebSocket, EchoCountsOpenSockets) {
    http::router r;
    r.websocket("/ws", [](http::websocket& ws) {
        for (auto m = ws.recv(); !m.is_close(); m = ws.recv())
            ws.send(m.data, m.type);
    });
    with_server({}, std::move(r), [](http::server& srv, std::uint16_t port) {
        {
            ws_client c(port);
            c.send("one");
            EXPECT_EQ(c.recv(), "one");
            EXPECT_EQ(srv.stats().websockets, 1u);
            c.ws.close(beast_ws::close_code::normal);
        }
        for (int i = 0; i < 200 && srv.stats().websockets != 0; ++i)
            smarm::sleep(5ms);
        EXPECT_EQ(srv.stats().websockets, 0u);
    });
}

/// Where the handler publishes its inbox for the test to send to.
std::optional<smarm::sender<std::string>> published;

TEST(WebSocket, RecvOrServesTheSocketAndTheActorsOwnChannel) {
    published.reset();
    http::router r;
    r.websocket("/ws", [](http::websocket& ws) {
        auto [tx, rx] = smarm::channel<std::string>();
        published.emplace(std::move(tx));
        for (;;) {
            auto ev = ws.recv_or({rx});
            if (auto* m = std::get_if<http::websocket::message>(&ev)) {
                if (m->is_close()) return;
                ws.send("from client: " + m->data);
            } else {
                EXPECT_EQ(std::get<std::size_t>(ev), 0u);
                if (auto line = rx.try_recv()) ws.send("from actor: " + *line.value);
            }
        }
    });
    with_server({}, std::move(r), [](http::server&, std::uint16_t port) {
        ws_client c(port);
        c.send("a");
        EXPECT_EQ(c.recv(), "from client: a");
        ASSERT_TRUE(published);
        // The handler is parked in recv_or: a channel message wakes it.
        (void)published->send("b");
        EXPECT_EQ(c.recv(), "from actor: b");
        c.send("c");
        EXPECT_EQ(c.recv(), "from client: c");
        (void)published->send("d");
        EXPECT_EQ(c.recv(), "from actor: d");
        c.ws.close(beast_ws::close_code::normal);
    });
}

TEST(WebSocket, TryRecvWithReadableInALoopOfOnesOwn) {
    published.reset();
    http::router r;
    r.websocket("/ws", [](http::websocket& ws) {
        auto [tx, rx] = smarm::channel<std::string>();
        EXPECT_FALSE(ws.try_recv());  // nothing sent yet: no wait
        published.emplace(std::move(tx));
        for (;;) {
            const std::size_t i = smarm::select({ws.readable(), rx});
            if (i == 0) {
                auto m = ws.try_recv();
                if (!m) continue;  // readiness without a frame (a ping answered)
                if (m->is_close()) return;
                ws.send(m->data + "!");
            } else if (auto line = rx.try_recv()) {
                ws.send(*line.value + "?");
            }
        }
    });
    with_server({}, std::move(r), [](http::server&, std::uint16_t port) {
        ws_client c(port);
        c.ws.ping({});  // answered inside try_recv, which then has no message
        c.send("x");
        EXPECT_EQ(c.recv(), "x!");  // the pong was read and skipped by Beast
        for (int i = 0; i < 200 && !published; ++i)
            smarm::sleep(5ms);
        ASSERT_TRUE(published);
        (void)published->send("y");
        EXPECT_EQ(c.recv(), "y?");
        c.ws.close(beast_ws::close_code::normal);
    });
}

TEST(WebSocket, AuthorizationBeforeAcceptingAndCloseCodes) {
    http::router r;
    r.get("/ws", [](http::request& req) {
        if (!req.header("X-Allowed")) return http::response(http::status::forbidden, "no\n");
        return http::accept_websocket(req, [](http::websocket& ws) {
            EXPECT_THROW(ws.close(1005), std::invalid_argument);  // reserved
            EXPECT_THROW(ws.close(5000), std::invalid_argument);  // undefined
            EXPECT_THROW(ws.close(4000, std::string(124, 'r')), std::invalid_argument);
            EXPECT_TRUE(ws.is_open());
            ws.close(4000, "bye");
            EXPECT_FALSE(ws.is_open());
            EXPECT_FALSE(ws.send("after"));
            EXPECT_TRUE(ws.recv().is_close());
        });
    });
    with_server({}, std::move(r), [](http::server&, std::uint16_t port) {
        client plain(port);
        plain.send(
            "GET /ws HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n");
        auto refused = plain.read();
        ASSERT_TRUE(refused);
        EXPECT_EQ(refused->status, 403u);
        ws_client c(port, "/ws", "X-Allowed");
        EXPECT_EQ(c.closed_with(), 4000u);
        EXPECT_EQ(c.ws.reason().reason, "bye");
    });
}

TEST(WebSocket, AThrowingHandlerClosesWith1011AndCountsAnError) {
    http::router r;
    r.websocket("/ws", [](http::websocket& ws) {
        (void)ws.recv();
        throw std::runtime_error("handler broke");
    });
    with_server({}, std::move(r), [](http::server& srv, std::uint16_t port) {
        ws_client c(port);
        c.send("boom");
        EXPECT_EQ(c.closed_with(), 1011u);
        EXPECT_EQ(srv.stats().errors, 1u);
    });
}

TEST(WebSocket, ThePeersCloseReachesTheHandler) {
    std::atomic<unsigned> seen{0};
    http::router r;
    r.websocket("/ws", [&](http::websocket& ws) {
        auto m = ws.recv();
        EXPECT_TRUE(m.is_close());
        EXPECT_EQ(m.data, "done");
        seen = m.code;
        // Every later receive is the same close.
        EXPECT_EQ(ws.recv().code, m.code);
    });
    with_server({}, std::move(r), [&](http::server& srv, std::uint16_t port) {
        ws_client c(port);
        c.ws.close(beast_ws::close_reason(beast_ws::close_code::going_away, "done"));
        for (int i = 0; i < 200 && srv.stats().websockets != 0; ++i)
            smarm::sleep(5ms);
        EXPECT_EQ(seen.load(), 1001u);
    });
}

TEST(WebSocket, MessagesInOneWriteAreAllServed) {
    // Several frames in one TCP segment: the gate keeps what follows the
    // first message, and recv_or must not wait on the socket for them.
    published.reset();
    http::router r;
    r.websocket("/ws", [](http::websocket& ws) {
        auto [tx, rx] = smarm::channel<std::string>();
        for (int n = 0;; ++n) {
            auto ev = ws.recv_or({rx});
            auto* m = std::get_if<http::websocket::message>(&ev);
            ASSERT_TRUE(m);
            if (m->is_close()) return;
            ws.send(std::to_string(n) + ":" + m->data);
        }
    });
    with_server({}, std::move(r), [](http::server&, std::uint16_t port) {
        client raw(port);
        raw.send(
            "GET /ws HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n");
        // Three masked (zero key) text frames "a", "b", "c" right behind.
        std::string frames;
        for (char ch : {'a', 'b', 'c'})
            frames += std::string("\x81\x81\0\0\0\0", 6) + ch;
        raw.send(frames);
        std::string got;
        char b[512];
        while (got.find("2:c") == std::string::npos) {
            const std::size_t n = raw.socket().read_some(b, sizeof b, 10s);
            ASSERT_GT(n, 0u);
            got.append(b, n);
        }
        EXPECT_NE(got.find("0:a"), std::string::npos);
        EXPECT_NE(got.find("1:b"), std::string::npos);
    });
}

}  // namespace
