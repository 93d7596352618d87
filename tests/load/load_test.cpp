// smarm-load: the histogram, scenarios, URLs, and runs against real servers
// on loopback (an in-process smarm server, raw sockets for misbehaviour).

#include <smarm/net.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <random>
#include <thread>

#include <smarm_test/http_client.hpp>
#include "load.hpp"

using namespace smarm_test;
namespace load = smarm::load;

namespace {

// ---- histogram ----------------------------------------------------------------

TEST(LoadHistogram, BucketsAreContiguousAndBoundTheRelativeError) {
    for (std::size_t i = 0; i + 1 < load::bucket_count; ++i) {
        const auto lo = load::bucket_low(i);
        const auto w = load::bucket_width(i);
        ASSERT_EQ(load::bucket_of(lo), i);
        ASSERT_EQ(load::bucket_of(lo + w - 1), i);
        ASSERT_EQ(load::bucket_low(i + 1), lo + w) << i;  // no gap, no overlap
        // A bucket is narrower than 2^-sub_bits of its values.
        ASSERT_LE(static_cast<double>(w - 1), static_cast<double>(lo) / (1 << load::sub_bits));
    }
    EXPECT_EQ(load::bucket_of(~std::uint64_t{0}), load::bucket_count - 1);
}

TEST(LoadHistogram, PercentilesOfAKnownDistribution) {
    load::histogram h;
    for (std::uint64_t v = 1; v <= 100000; ++v)
        h.record(v * 1000);  // 1 us .. 100 ms, uniform
    EXPECT_EQ(h.count(), 100000u);
    EXPECT_EQ(h.max(), 100000u * 1000);
    EXPECT_EQ(h.min(), 1000u);
    for (double p : {1.0, 50.0, 90.0, 99.0, 99.9}) {
        const double want = p / 100 * 1e8;
        EXPECT_NEAR(static_cast<double>(h.percentile(p)), want, want / 100) << p;
    }
    EXPECT_EQ(h.percentile(100), h.max());
    EXPECT_NEAR(h.mean(), 50000.5 * 1000, 1);
}

TEST(LoadHistogram, LiveHistogramsMergeExactly) {
    load::live_histogram a, b;
    load::histogram direct;
    std::mt19937_64 rng(7);
    for (int i = 0; i < 50000; ++i) {
        const std::uint64_t v = rng() % 10'000'000;
        (i % 2 ? a : b).record(v);
        direct.record(v);
    }
    load::histogram merged;
    a.merge_into(merged);
    b.merge_into(merged);
    EXPECT_EQ(merged.count(), direct.count());
    EXPECT_EQ(merged.counts(), direct.counts());
    EXPECT_EQ(merged.max(), direct.max());
    EXPECT_EQ(merged.percentile(99.9), direct.percentile(99.9));
}

// ---- scenarios and URLs ----------------------------------------------------------

TEST(LoadScenario, RendersTokensBodiesAndHeaders) {
    auto s = load::scenario::from_yaml(R"(
requests:
  - name: write
    method: PUT
    path: /kv/k{random:10}/{conn}/{seq}
    body: {min: 3, max: 5}
    headers: {Content-Type: text/plain}
)",
                                       "test");
    std::mt19937_64 rng(1);
    std::string out;
    s.render(0, rng, 42, 7, "h:1", false, out);
    EXPECT_EQ(out.rfind("PUT /kv/k", 0), 0u) << out;
    EXPECT_NE(out.find("/7/42 HTTP/1.1\r\nHost: h:1\r\nContent-Type: text/plain\r\n"),
              std::string::npos)
        << out;
    const auto cl = out.find("Content-Length: ");
    ASSERT_NE(cl, std::string::npos);
    const auto n = std::stoul(out.substr(cl + 16));
    EXPECT_GE(n, 3u);
    EXPECT_LE(n, 5u);
    EXPECT_EQ(out.size() - (out.find("\r\n\r\n") + 4), n);
    EXPECT_FALSE(s.is_fixed());
    s.render(0, rng, 0, 0, "h", true, out);
    EXPECT_NE(out.find("Connection: close\r\n"), std::string::npos);
}

TEST(LoadScenario, WeightsAreHonoured) {
    auto s = load::scenario::from_yaml(
        "requests:\n  - {weight: 9, path: /a}\n  - {weight: 1, path: /b}\n", "t");
    std::mt19937_64 rng(3);
    int a = 0;
    for (int i = 0; i < 100000; ++i)
        a += s.pick(rng) == 0;
    EXPECT_NEAR(a, 90000, 1500);
    EXPECT_EQ(s.requests()[1].name, "GET /b");
}

TEST(LoadScenario, ErrorsNameTheEntryAndTheKey) {
    auto msg = [](const std::string& yaml) {
        try {
            (void)load::scenario::from_yaml(yaml, "f.yaml");
        } catch (const load::scenario_error& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    EXPECT_EQ(msg("requests:\n  - {path: /a, colour: red}\n"),
              "scenario f.yaml: requests[0]: unknown key \"colour\" (allowed: name, weight, "
              "method, path, body, headers)");
    EXPECT_EQ(msg("requests:\n  - {path: /a}\n  - {path: '/b/{rnd:3}'}\n"),
              "scenario f.yaml: requests[1]: path \"/b/{rnd:3}\": unknown token {rnd:3} "
              "(allowed: {random:N}, {seq}, {conn})");
    EXPECT_EQ(msg("requests:\n  - {path: /a, weight: -1}\n"),
              "scenario f.yaml: requests[0].weight: \"-1\" is not a non-negative integer");
    EXPECT_EQ(msg("requests:\n  - {path: /a, body: {min: 9, max: 2}}\n"),
              "scenario f.yaml: requests[0].body: min > max");
    EXPECT_EQ(msg("requests: []\n"), "scenario f.yaml: needs a non-empty list \"requests\"");
    EXPECT_EQ(msg("requests:\n  - {method: GET}\n"), "scenario f.yaml: requests[0]: needs a path");
    EXPECT_NE(msg("requests: [").find("scenario f.yaml: "), std::string::npos);
}

TEST(LoadUrl, ParsesAndRejects) {
    auto t = load::parse_url("http://127.0.0.1:8080/plaintext?x=1");
    EXPECT_EQ(t.host, "127.0.0.1");
    EXPECT_EQ(t.port, 8080);
    EXPECT_EQ(t.path, "/plaintext?x=1");
    EXPECT_EQ(t.host_header, "127.0.0.1:8080");
    auto v6 = load::parse_url("http://[::1]:81");
    EXPECT_EQ(v6.host, "::1");
    EXPECT_EQ(v6.port, 81);
    EXPECT_EQ(v6.path, "/");
    EXPECT_EQ(load::parse_url("http://example").port, 80);
    EXPECT_THROW(load::parse_url("https://x/"), std::invalid_argument);
    EXPECT_THROW(load::parse_url("ftp://x/"), std::invalid_argument);
    EXPECT_THROW(load::parse_url("http://x:0/"), std::invalid_argument);
    EXPECT_THROW(load::parse_url("http://x:99999/"), std::invalid_argument);
    EXPECT_THROW(load::parse_url("http:///"), std::invalid_argument);
}

// ---- runs ------------------------------------------------------------------------

load::options quick(std::uint16_t port, const std::string& path) {
    load::options o;
    o.to = load::parse_url("http://127.0.0.1:" + std::to_string(port) + path);
    o.mix = load::scenario::single("GET", o.to.path, 0, {});
    o.connections = 4;
    o.duration = 300ms;
    o.timeout = 2s;
    return o;
}

http::router counting_routes(std::atomic<std::uint64_t>& served) {
    http::router r;
    r.get("/ok", [&served](http::request&) {
        served.fetch_add(1);
        return http::response(http::status::ok, "hello");
    });
    r.get("/fail",
          [](http::request&) { return http::response(http::status::internal_server_error, "no"); });
    r.put("/kv/{k}", [&served](http::request&) {
        served.fetch_add(1);
        return http::response(http::status::created, "");
    });
    return r;
}

TEST(LoadRun, ClosedLoopKeepAliveCountsEveryResponse) {
    std::atomic<std::uint64_t> served{0};
    with_server({}, counting_routes(served), [&](http::server&, std::uint16_t port) {
        auto r = load::run(quick(port, "/ok"));
        EXPECT_GT(r.requests, 0u);
        EXPECT_EQ(r.error_total(), 0u);
        EXPECT_EQ(r.statuses[200], r.requests);
        EXPECT_EQ(r.latency.count(), r.requests);
        EXPECT_EQ(r.connects, 4u);  // keep-alive: one connection each
        // Every counted response was served (requests in flight at the end
        // were served but not counted).
        EXPECT_GE(served.load(), r.requests);
        EXPECT_LE(served.load(), r.requests + 4);
    });
}

// The counts are kept per OS thread (load.cpp): 64 connections moving
// between two schedulers' threads count every response once, none lost to
// two writers of one shard.
TEST(LoadRun, ManyConnectionsOnTwoThreadsCountEveryResponse) {
    std::atomic<std::uint64_t> served{0};
    with_server({}, counting_routes(served), [&](http::server&, std::uint16_t port) {
        auto o = quick(port, "/ok");
        o.connections = 64;
        o.threads = 2;
        o.duration = 500ms;
        auto r = load::run(o);
        EXPECT_GT(r.requests, 1000u);
        EXPECT_EQ(r.error_total(), 0u);
        EXPECT_EQ(r.statuses[200], r.requests);
        EXPECT_EQ(r.latency.count(), r.requests);
        EXPECT_EQ(r.connects, 64u);
        EXPECT_GE(served.load(), r.requests);
        EXPECT_LE(served.load(), r.requests + 64);
    });
}

TEST(LoadUrl, WebSocketUrlsAndSizes) {
    auto t = load::parse_url("ws://127.0.0.1:8080/ws/echo");
    EXPECT_TRUE(t.websocket);
    EXPECT_EQ(t.path, "/ws/echo");
    EXPECT_FALSE(load::parse_url("http://127.0.0.1/").websocket);
    EXPECT_THROW(load::parse_url("wss://x/"), std::invalid_argument);
    auto s = load::parse_ws_sizes("32:9,4KiB:1,1M");
    ASSERT_EQ(s.size(), 3u);
    EXPECT_EQ(s[0], (std::pair<std::size_t, double>{32, 9}));
    EXPECT_EQ(s[1], (std::pair<std::size_t, double>{4096, 1}));
    EXPECT_EQ(s[2], (std::pair<std::size_t, double>{1 << 20, 1}));
    for (const char* bad : {"", "x", "32:0", "32:-1", "32:a", "2GiB"})
        EXPECT_THROW(load::parse_ws_sizes(bad), std::invalid_argument) << bad;
}

TEST(LoadRun, WebSocketEchoesAreTimedAndCounted) {
    std::atomic<std::uint64_t> messages{0}, bytes{0};
    http::router r;
    r.websocket("/ws", [&](http::websocket& ws) {
        for (auto m = ws.recv(); !m.is_close(); m = ws.recv()) {
            messages.fetch_add(1);
            bytes.fetch_add(m.data.size());
            EXPECT_EQ(m.type, http::websocket::kind::binary);
            ws.send(m.data, m.type);
        }
    });
    with_server({}, std::move(r), [&](http::server&, std::uint16_t port) {
        auto o = quick(port, "/ws");
        o.to = load::parse_url("ws://127.0.0.1:" + std::to_string(port) + "/ws");
        o.ws.sizes = {{10, 1}, {3000, 1}};
        o.ws.binary = true;
        auto rep = load::run(o);
        EXPECT_GT(rep.requests, 0u);
        EXPECT_EQ(rep.error_total(), 0u);
        EXPECT_EQ(rep.connects, 4u);  // one upgrade per connection
        EXPECT_EQ(rep.latency.count(), rep.requests);
        // Every counted echo was a message the server took; sizes are 10 or
        // 3000, so the echoed bytes say both sizes were drawn.
        EXPECT_GE(messages.load(), rep.requests);
        EXPECT_GT(rep.bytes, rep.requests * 10);
        EXPECT_LT(rep.bytes, rep.requests * 3000);
    });
}

TEST(LoadRun, ConnectionPerRequestOpensOneConnectionPerResponse) {
    std::atomic<std::uint64_t> served{0};
    with_server({}, counting_routes(served), [&](http::server&, std::uint16_t port) {
        auto o = quick(port, "/ok");
        o.keep_alive = false;
        auto r = load::run(o);
        EXPECT_GT(r.requests, 0u);
        EXPECT_EQ(r.error_total(), 0u);
        EXPECT_GE(r.connects, r.requests);
        EXPECT_LE(r.connects, r.requests + 4);
    });
}

TEST(LoadRun, OpenLoopNeverExceedsItsSchedule) {
    std::atomic<std::uint64_t> served{0};
    with_server({}, counting_routes(served), [&](http::server&, std::uint16_t port) {
        auto o = quick(port, "/ok");
        o.rate = 200;  // 60 requests in 300 ms at most
        o.warmup = 100ms;
        auto r = load::run(o);
        EXPECT_GT(r.requests, 0u);
        EXPECT_LE(served.load(), 80u);  // the schedule over warm-up + run
        EXPECT_LE(r.requests, 61u);
    });
}

TEST(LoadRun, OpenLoopChargesAStallToTheRequestsItDelayed) {
    // One connection at 100 req/s; the server stalls 300 ms on request 5.
    // The ~30 requests whose send times fell inside the stall are measured
    // from when they should have gone out, so many samples are slow; a
    // loop that timed from the actual send would see one slow sample.
    http::router r;
    r.get("/stall/{n}", [](http::request& req) {
        if (req.param("n").value_or("") == "5") smarm::sleep(300ms);
        return http::response(http::status::ok, "x");
    });
    with_server({}, std::move(r), [&](http::server&, std::uint16_t port) {
        auto o = quick(port, "/stall/{seq}");
        o.mix = load::scenario::single("GET", "/stall/{seq}", 0, {});
        o.connections = 1;
        o.rate = 100;
        o.duration = 1s;
        auto rep = load::run(o);
        EXPECT_EQ(rep.error_total(), 0u);
        EXPECT_GE(rep.latency.max(), 300'000'000u);
        std::uint64_t slow = 0;  // samples of 100 ms or more
        const auto& counts = rep.latency.counts();
        for (std::size_t i = load::bucket_of(100'000'000); i < counts.size(); ++i)
            slow += counts[i];
        EXPECT_GE(slow, 10u) << "open-loop latency must include the wait behind the stall";
    });
}

TEST(LoadRun, OpenLoopNeverSendsARequestWhoseTimeoutHasPassed) {
    // One connection at 200 req/s with a 100 ms timeout; the one scheduler
    // (the loader's and the server's) is blocked for 500 ms. The ~100
    // requests whose time ran out meanwhile are timeouts that never reach
    // the server: sending them would cost it their work and the loader a
    // connection each (after a long stall a run never caught up).
    std::atomic<std::uint64_t> served{0};
    with_server(
        {}, counting_routes(served),
        [&](http::server& srv, std::uint16_t port) {
            auto o = quick(port, "/ok");
            o.connections = 1;
            o.rate = 200;
            o.timeout = 100ms;
            o.duration = 1200ms;
            // The blocker holds the one scheduler's thread, not only its actor.
            auto blocker = smarm::spawn([] {
                smarm::sleep(300ms);
                std::this_thread::sleep_for(500ms);
            });
            auto r = load::run(o);
            (void)blocker.join();
            const auto timeouts = r.errors[static_cast<std::size_t>(load::error_kind::timeout)];
            EXPECT_GE(timeouts, 50u) << "the blocked half second's requests must time out";
            EXPECT_LE(served.load(), r.requests + 2)
                << "requests sent after their timeout: " << served.load() - r.requests;
            EXPECT_LE(r.connects, 3u);
            EXPECT_LE(srv.stats().accepted, 3u) << "connections opened for requests already late";
        },
        1);
}

TEST(LoadRun, StatusesAndScenarioEntriesAreCounted) {
    std::atomic<std::uint64_t> served{0};
    with_server({}, counting_routes(served), [&](http::server&, std::uint16_t port) {
        auto o = quick(port, "/");
        o.mix = load::scenario::from_yaml(R"(
requests:
  - {name: ok, path: /ok}
  - {name: fail, path: /fail}
  - {name: put, method: PUT, path: '/kv/{random:5}', body: {size: 10}}
)",
                                          "t");
        auto r = load::run(o);
        EXPECT_GT(r.statuses[200], 0u);
        EXPECT_GT(r.statuses[500], 0u);
        EXPECT_GT(r.statuses[201], 0u);
        EXPECT_EQ(r.by_request["ok"], r.statuses[200]);
        EXPECT_EQ(r.by_request["fail"], r.statuses[500]);
        EXPECT_EQ(r.by_request["put"], r.statuses[201]);
        EXPECT_EQ(r.bad_statuses(), r.statuses[500]);
    });
}

SMARM_TEST(LoadRun, RefusedConnectionsAreErrorsNotACrash) {
    std::uint16_t port;
    {
        auto l = smarm::tcp_listener::bind("127.0.0.1", 0);
        port = l.local_address().port();
    }  // closed: connects are refused
    auto r = load::run(quick(port, "/"));
    EXPECT_EQ(r.requests, 0u);
    EXPECT_GT(r.errors[static_cast<std::size_t>(load::error_kind::connect)], 0u);
}

/// A raw server answering every request with `reply`, then closing when
/// `close_after` is set.
void raw_server(smarm::tcp_listener& l, std::string reply, bool close_after) {
    for (;;) {
        auto c = std::make_shared<smarm::tcp_stream>(l.accept());
        smarm::spawn([c, reply, close_after] {
            char b[4096];
            try {
                for (;;) {
                    std::string got;
                    while (got.find("\r\n\r\n") == std::string::npos) {
                        auto n = c->read_some(b, sizeof b);
                        if (n == 0) return;
                        got.append(b, n);
                    }
                    c->write_all(reply.data(), reply.size());
                    if (close_after) return;
                }
            } catch (const std::system_error&) {
            }
        }).detach();
    }
}

SMARM_TEST(LoadRun, BodyToEofChunkedAndTruncatedResponses) {
    struct case_t {
        std::string reply;
        bool close;
        bool ok;
    };
    const case_t cases[] = {
        {"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nbody until eof", true, true},
        {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", false,
         true},
        {"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort", true, false},
        {"garbage\r\n\r\n", true, false},
        // Closed before any byte of an answer: a lost request, not a
        // response (Beast's put_eof completes an empty message).
        {"", true, false},
    };
    for (const auto& c : cases) {
        auto l = smarm::tcp_listener::bind("127.0.0.1", 0);
        const auto port = l.local_address().port();
        auto h = smarm::spawn([&] { raw_server(l, c.reply, c.close); });
        auto r = load::run(quick(port, "/"));
        if (c.ok) {
            EXPECT_GT(r.requests, 0u) << c.reply;
            EXPECT_EQ(r.error_total(), 0u) << c.reply;
        } else {
            EXPECT_EQ(r.requests, 0u) << c.reply;
            EXPECT_GT(r.errors[static_cast<std::size_t>(load::error_kind::read)] +
                          r.errors[static_cast<std::size_t>(load::error_kind::parse)],
                      0u)
                << c.reply;
        }
        smarm::request_stop(h.id());
        (void)h.join();
    }
}

TEST(LoadReport, TextAndJsonCarryTheNumbers) {
    load::options o = quick(1, "/x");
    load::report r;
    r.requests = 3;
    r.seconds = 1.5;
    r.latency.record(1000);
    r.latency.record(2000);
    r.latency.record(3000);
    r.statuses[200] = 3;
    r.errors[static_cast<std::size_t>(load::error_kind::timeout)] = 2;
    auto text = load::format_report(o, r);
    EXPECT_NE(text.find("3 in 1.50 s = 2.0 req/s"), std::string::npos) << text;
    EXPECT_NE(text.find("timeout: 2"), std::string::npos) << text;
    EXPECT_NE(text.find("200: 3"), std::string::npos) << text;
    // The header names the path as written, whatever the entry is called.
    o.mix = load::scenario::from_yaml("requests:\n  - {name: plaintext, path: /plaintext}\n", "t");
    EXPECT_EQ(load::format_report(o, r).rfind("smarm-load: http://127.0.0.1:1/plaintext, ", 0), 0u)
        << load::format_report(o, r);
    auto json = load::format_json(o, r);
    EXPECT_NE(json.find("\"requests\":3"), std::string::npos) << json;
    EXPECT_NE(json.find("\"timeout\":2"), std::string::npos) << json;
    EXPECT_NE(json.find("\"error_total\":2"), std::string::npos) << json;
}

}  // namespace
