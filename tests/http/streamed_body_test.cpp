// Streamed request bodies over HTTP/1.1 (http::streamed_body,
// request::read_body): raw-socket tests on loopback. HTTP/2's side is
// tests/h2/server_test.py's `upload` case.

#include <smarm/http/router.hpp>
#include <smarm/http/server.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include <smarm_test/http_client.hpp>

using namespace smarm_test;
using namespace std::chrono_literals;

namespace {

/// What a streaming handler saw: pieces, their largest, bytes, a checksum.
struct seen {
    std::atomic<int> runs{0};
    std::atomic<std::size_t> pieces{0}, largest{0};
};

std::uint64_t checksum(std::string_view s, std::uint64_t h = 1469598103934665603ull) {
    for (unsigned char c : s)
        h = (h ^ c) * 1099511628211ull;
    return h;
}

/// A body of `n` bytes that is not one repeated byte.
std::string pattern(std::size_t n) {
    std::string s(n, '\0');
    for (std::size_t i = 0; i < n; ++i)
        s[i] = static_cast<char>('a' + (i * 7 + i / 1000) % 26);
    return s;
}

http::router routes(std::shared_ptr<seen> log, std::uint64_t limit) {
    http::router r;
    r.post(
        "/sum",
        [log](http::request& q) {
            ++log->runs;
            if (!q.body_streamed() || !q.body().empty())
                return http::response(http::status::internal_server_error, "not streamed\n");
            std::uint64_t bytes = 0, h = 1469598103934665603ull;
            for (std::string p = q.read_body(4096); !p.empty(); p = q.read_body(4096)) {
                ++log->pieces;
                log->largest = std::max(log->largest.load(), p.size());
                bytes += p.size();
                h = checksum(p, h);
            }
            EXPECT_EQ(q.read_body(), "");  // the end stays the end
            return http::response(http::status::ok,
                                  std::to_string(bytes) + " " + std::to_string(h));
        },
        http::streamed_body{limit});
    // Answers without reading what was sent.
    r.put(
        "/ignore", [](http::request&) { return http::response(http::status::ok, "ignored"); },
        http::streamed_body{limit});
    r.post("/echo", [](http::request& q) {
        // read_body on a whole body hands it out from the front.
        std::string out;
        for (std::string p = q.read_body(7); !p.empty(); p = q.read_body(7))
            out += p;
        return http::response(http::status::ok, out);
    });
    r.get("/plaintext",
          [](http::request&) { return http::response(http::status::ok, "Hello, World!"); });
    return r;
}

http::server_config config() {
    http::server_config c;
    c.body_limit = 100;  // whole bodies: small; streamed ones have their own limit
    c.header_timeout = 10s;
    c.idle_timeout = 10s;
    return c;
}

std::string post(const std::string& target, const std::string& body) {
    return "POST " + target + " HTTP/1.1\r\nHost: t\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
}

std::string expected(const std::string& body) {
    return std::to_string(body.size()) + " " + std::to_string(checksum(body));
}

}  // namespace

TEST(StreamedBody, ALengthPastBodyLimitIsReadInPiecesAndTheConnectionStaysOpen) {
    auto log = std::make_shared<seen>();
    with_server(config(), routes(log, 10'000'000), [&](http::server&, std::uint16_t port) {
        client c(port);
        const std::string body = pattern(3'000'000);
        c.send(post("/sum", body));
        auto r = c.read();
        ASSERT_TRUE(r);
        EXPECT_EQ(r->status, 200u) << r->body;
        EXPECT_EQ(r->body, expected(body));
        EXPECT_TRUE(r->keep_alive);
        // Pieces of at most what was asked, so never the body whole.
        EXPECT_GT(log->pieces.load(), 700u);
        EXPECT_LE(log->largest.load(), 4096u);
        auto next = c.get("/plaintext");  // the connection goes on
        ASSERT_TRUE(next);
        EXPECT_EQ(next->body, "Hello, World!");
    });
}

TEST(StreamedBody, AChunkedBodyIsDeChunkedAsItArrives) {
    auto log = std::make_shared<seen>();
    with_server(config(), routes(log, 10'000'000), [&](http::server&, std::uint16_t port) {
        client c(port);
        const std::string body = pattern(200'000);
        std::string req = "POST /sum HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n";
        for (std::size_t off = 0; off < body.size(); off += 4000) {
            const std::size_t n = std::min<std::size_t>(4000, body.size() - off);
            char size[16];
            std::snprintf(size, sizeof size, "%zx\r\n", n);
            req += size + body.substr(off, n) + "\r\n";
        }
        req += "0\r\n\r\n";
        c.send(req);
        auto r = c.read();
        ASSERT_TRUE(r);
        EXPECT_EQ(r->status, 200u) << r->body;
        EXPECT_EQ(r->body, expected(body));
        auto next = c.get("/plaintext");
        ASSERT_TRUE(next);
        EXPECT_EQ(next->status, 200u);
    });
}

TEST(StreamedBody, ADeclaredLengthPastTheRouteLimitIsRefusedBeforeTheHandler) {
    auto log = std::make_shared<seen>();
    with_server(config(), routes(log, 1000), [&](http::server&, std::uint16_t port) {
        client c(port);
        c.send("POST /sum HTTP/1.1\r\nHost: t\r\nContent-Length: 1001\r\n\r\n");
        auto r = c.read();
        ASSERT_TRUE(r);
        EXPECT_EQ(r->status, 413u);
        EXPECT_EQ(log->runs.load(), 0);
        client d(port);  // at the limit: read
        const std::string body = pattern(1000);
        d.send(post("/sum", body));
        auto ok = d.read();
        ASSERT_TRUE(ok);
        EXPECT_EQ(ok->body, expected(body));
    });
}

TEST(StreamedBody, AChunkedBodyPastTheRouteLimitIs413AndCloses) {
    auto log = std::make_shared<seen>();
    with_server(config(), routes(log, 1000), [&](http::server&, std::uint16_t port) {
        client c(port);
        std::string req = "POST /sum HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n";
        for (int i = 0; i < 5; ++i)
            req += "100\r\n" + std::string(256, 'x') + "\r\n";  // 1,280 bytes
        req += "0\r\n\r\n";
        c.send(req);
        auto r = c.read();
        ASSERT_TRUE(r);
        EXPECT_EQ(r->status, 413u);
        EXPECT_FALSE(r->keep_alive);
        EXPECT_TRUE(c.closed_by_peer());
        EXPECT_EQ(log->runs.load(), 1);  // the handler ran, read_body threw
    });
}

TEST(StreamedBody, AStalledBodyIs408AfterBodyTimeout) {
    auto log = std::make_shared<seen>();
    auto cfg = config();
    cfg.body_timeout = 300ms;
    with_server(cfg, routes(log, 1'000'000), [&](http::server&, std::uint16_t port) {
        client c(port);
        c.send("POST /sum HTTP/1.1\r\nHost: t\r\nContent-Length: 5000\r\n\r\n" +
               std::string(1000, 'x'));
        const auto t0 = std::chrono::steady_clock::now();
        auto r = c.read();
        ASSERT_TRUE(r);
        EXPECT_EQ(r->status, 408u);
        EXPECT_GE(std::chrono::steady_clock::now() - t0, 250ms);  // never early
        EXPECT_TRUE(c.closed_by_peer());
    });
}

TEST(StreamedBody, ABodyTheHandlerLeavesUnreadClosesTheConnectionAfterTheAnswer) {
    auto log = std::make_shared<seen>();
    with_server(config(), routes(log, 10'000'000), [&](http::server&, std::uint16_t port) {
        client c(port);
        c.send("PUT /ignore HTTP/1.1\r\nHost: t\r\nContent-Length: 20000\r\n\r\n" +
               std::string(20000, 'z'));
        auto r = c.read();
        ASSERT_TRUE(r);
        EXPECT_EQ(r->status, 200u);
        EXPECT_EQ(r->body, "ignored");
        EXPECT_FALSE(r->keep_alive);  // the rest of the body is not drained
        EXPECT_TRUE(c.closed_by_peer());
    });
}

TEST(StreamedBody, WholeRoutesKeepBodyLimitBesideStreamedOnes) {
    auto log = std::make_shared<seen>();
    with_server(config(), routes(log, 10'000'000), [&](http::server&, std::uint16_t port) {
        {
            client c(port);  // the head passes (a streamed route may take it), the route not
            c.send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 101\r\n\r\n");
            auto r = c.read();
            ASSERT_TRUE(r);
            EXPECT_EQ(r->status, 413u);
        }
        {
            client c(port);
            std::string req =
                "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n";
            for (int i = 0; i < 5; ++i)
                req += "20\r\n" + std::string(32, 'x') + "\r\n";
            req += "0\r\n\r\n";
            c.send(req);
            auto r = c.read();
            ASSERT_TRUE(r);
            EXPECT_EQ(r->status, 413u);
        }
        {
            client c(port);
            const std::string body = pattern(100);
            c.send(post("/echo", body));
            auto r = c.read();
            ASSERT_TRUE(r);
            EXPECT_EQ(r->status, 200u);
            EXPECT_EQ(r->body, body);
        }
        {
            client c(port);  // a route that does not exist still answers 404
            c.send(post("/nowhere", "abc"));
            auto r = c.read();
            ASSERT_TRUE(r);
            EXPECT_EQ(r->status, 404u);
        }
    });
}

TEST(StreamedBody, TheRouterNamesStreamedRoutesAndRefusesAZeroLimit) {
    http::router r;
    r.post("/a", [](http::request&) { return http::response(http::status::ok); },
           http::streamed_body{5});
    r.post("/b", [](http::request&) { return http::response(http::status::ok); });
    EXPECT_EQ(r.stream_limit(), 5u);
    ASSERT_EQ(r.routes().size(), 2u);
    EXPECT_TRUE(r.routes()[0].streamed);
    EXPECT_FALSE(r.routes()[1].streamed);
    EXPECT_THROW(r.post("/c", [](http::request&) { return http::response(http::status::ok); },
                        http::streamed_body{0}),
                 std::invalid_argument);
    http::request q;
    EXPECT_THROW((void)q.read_body(0), std::invalid_argument);
    EXPECT_FALSE(q.body_streamed());
    EXPECT_EQ(q.read_body(), "");
}
