// /debug/actors and /debug/tree; /debug/causal's parameters and formats.

#include <smarm/causal.hpp>
#include <smarm/progress.hpp>
#include <smarm/registry.hpp>
#include <smarm/supervisor.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <optional>
#include <string>

#include <smarm_test/http_client.hpp>
#include "debug/causal_routes.hpp"
#include "debug/debug.hpp"

using namespace smarm_test;
namespace services = smarm::services;

namespace {

TEST(Debug, ActorsJsonNamesRegisteredActorsAndTreeRenders) {
    http::router r;
    services::add_debug_routes(r);
    with_server({}, std::move(r), [](http::server&, std::uint16_t port) {
        auto [tx, rx] = smarm::channel<int>();
        auto named = smarm::spawn([rx = std::move(rx), tx = tx]() mutable {
            (void)smarm::register_name(smarm::name<int>("debug-probe"), tx);
            (void)rx.recv();
        });
        auto t0 = smarm_test::steady::now();
        while (!smarm::whereis(smarm::name<int>("debug-probe")) && smarm_test::since(t0) < 10s)
            smarm::sleep(1ms);
        client c(port);
        auto a = c.get("/debug/actors");
        ASSERT_TRUE(a);
        EXPECT_EQ(a->status, 200u);
        EXPECT_EQ(a->header("content-type"), "application/json");
        EXPECT_EQ(a->body.rfind("{\"version\":1,\"actors\":[", 0), 0u) << a->body;
        EXPECT_NE(a->body.find("\"names\":[\"debug-probe\"]"), std::string::npos) << a->body;
        EXPECT_NE(a->body.find("\"stats\":{\"spawns\":"), std::string::npos);
        auto k = c.get("/debug/schedulers");
        ASSERT_TRUE(k);
        EXPECT_EQ(k->status, 200u);
        EXPECT_EQ(k->header("content-type"), "application/json");
        EXPECT_EQ(k->body.rfind("{\"spawns\":", 0), 0u) << k->body;
        for (const char* f : {"\"schedulers\":[{\"id\":0,", "\"running_ns\":", "\"busy_ns\":",
                              "\"spinning_ns\":", "\"parked_ns\":", "\"run_queue_len\":"})
            EXPECT_NE(k->body.find(f), std::string::npos) << f << " in " << k->body;
        // One actor by pid, in both spellings; a stale or malformed one.
        const smarm::pid probe = named.id();
        const std::string dotted =
            std::to_string(probe.index) + "." + std::to_string(probe.generation);
        for (const std::string& path :
             {"/debug/actor/" + dotted, "/debug/actor/%3C0." + dotted + "%3E"}) {
            auto one = c.get(path);
            ASSERT_TRUE(one);
            EXPECT_EQ(one->status, 200u) << path << " " << one->body;
            EXPECT_EQ(one->body.rfind("{\"pid\":\"" + probe.to_string() + "\"", 0), 0u)
                << one->body;
            EXPECT_NE(one->body.find("\"names\":[\"debug-probe\"]"), std::string::npos);
            EXPECT_NE(one->body.find("\"wait\":\"channel\""), std::string::npos) << one->body;
        }
        auto stale = c.get("/debug/actor/" + std::to_string(probe.index) + "." +
                           std::to_string(probe.generation + 1));
        ASSERT_TRUE(stale);
        EXPECT_EQ(stale->status, 404u);
        for (const char* bad : {"/debug/actor/x", "/debug/actor/1.", "/debug/actor/.1",
                                "/debug/actor/1.2.3", "/debug/actor/99999999999.1"}) {
            auto r = c.get(bad);
            ASSERT_TRUE(r);
            EXPECT_EQ(r->status, 400u) << bad;
            EXPECT_NE(r->body.find("want <0.INDEX.GENERATION>"), std::string::npos) << r->body;
        }
        auto t = c.get("/debug/tree");
        ASSERT_TRUE(t);
        EXPECT_EQ(t->status, 200u);
        EXPECT_NE(t->body.find("debug-probe"), std::string::npos) << t->body;
        // The stop action (its own listener, as the admin one): the probe
        // ends stopped; then it is gone (404); a malformed pid is 400.
        http::router acts;
        services::add_debug_actions(acts);
        http::server_config acfg;
        acfg.host = "127.0.0.1";
        acfg.port = 0;
        http::server admin(acfg, std::move(acts));
        admin.start();
        client ac(admin.local_address().port());
        auto stop = [&](const std::string& who) {
            ac.send("POST /debug/actor/" + who +
                    "/stop HTTP/1.1\r\nHost: t\r\n"
                    "Content-Length: 0\r\n\r\n");
            auto r = ac.read();
            return r ? r->status : 0u;
        };
        EXPECT_EQ(stop(dotted), 202u);
        EXPECT_EQ(named.join().kind, smarm::exit_kind::stopped);
        EXPECT_EQ(stop(dotted), 404u);
        EXPECT_EQ(stop("nope"), 400u);
        admin.stop(0ns);
        admin.wait();
    });
}

// The observer's JSON: the tree with supervisor and child records, the
// supervisors, the process figures beside the counters; fields move.
TEST(Debug, TreeJsonCarriesSupervisorsAndProcessFiguresMove) {
    http::router r;
    services::add_debug_routes(r);
    with_server({}, std::move(r), [](http::server&, std::uint16_t port) {
        auto crashes = std::make_shared<std::atomic<int>>(0);
        auto sup =
            smarm::start_supervisor({}, {{"debug-flaky", [crashes] {
                                              if (crashes->fetch_add(1) == 0)
                                                  throw std::runtime_error("first run fails");
                                              smarm::sleep(10s);
                                          }}});
        client c(port);
        std::optional<reply> t;
        const auto t0 = smarm_test::steady::now();
        do {
            t = c.get("/debug/tree?format=json");
            ASSERT_TRUE(t);
        } while (t->body.find("\"restarts\":1,\"last_exit\":\"panic: first run fails\"") ==
                     std::string::npos &&
                 smarm_test::since(t0) < 10s && (smarm::sleep(5ms), true));
        EXPECT_EQ(t->status, 200u);
        EXPECT_EQ(t->header("content-type"), "application/json");
        EXPECT_EQ(t->body.rfind("{\"version\":1,\"roots\":[{\"actor\":{\"pid\":", 0), 0u);
        EXPECT_NE(t->body.find("\"supervisor\":{\"pid\":\"" + sup.id.to_string() +
                               "\",\"strategy\":\"one_for_one\""),
                  std::string::npos)
            << t->body;
        EXPECT_NE(t->body.find("\"child\":{\"id\":\"debug-flaky\""), std::string::npos);
        EXPECT_NE(t->body.find("\"restarts\":1,\"last_exit\":\"panic: first run fails\""),
                  std::string::npos)
            << t->body;
        for (const char* f : {"\"groups\":[", "\"mailbox_age_ns\":", "\"cpu_ns\":"})
            EXPECT_NE(t->body.find(f), std::string::npos) << f;
        // Accept: application/json picks JSON too; an unknown format is 400.
        c.send("GET /debug/tree HTTP/1.1\r\nHost: t\r\nAccept: application/json\r\n\r\n");
        auto j = c.read();
        ASSERT_TRUE(j);
        EXPECT_EQ(j->body.rfind("{\"version\":1,\"roots\":", 0), 0u);
        auto bad = c.get("/debug/tree?format=xml");
        ASSERT_TRUE(bad);
        EXPECT_EQ(bad->status, 400u);
        EXPECT_NE(bad->body.find("format=xml"), std::string::npos);
        auto sups = c.get("/debug/supervisors");
        ASSERT_TRUE(sups);
        EXPECT_EQ(sups->status, 200u);
        EXPECT_NE(sups->body.find("\"id\":\"debug-flaky\""), std::string::npos) << sups->body;
        // Uptime and the process's CPU time move between two reads.
        auto num = [](const std::string& body, const std::string& key) {
            const auto at = body.find("\"" + key + "\":");
            return at == std::string::npos ? -1.0 : std::stod(body.substr(at + key.size() + 3));
        };
        auto k1 = c.get("/debug/schedulers");
        ASSERT_TRUE(k1);
        for (const char* f : {"\"max_actors\":", "\"uptime_ns\":", "\"process\":{\"rss_bytes\":",
                              "\"cpu_seconds\":", "\"open_fds\":", "\"restarts\":"})
            EXPECT_NE(k1->body.find(f), std::string::npos) << f << " in " << k1->body;
        EXPECT_GT(num(k1->body, "rss_bytes"), 0);
        const auto spin_until = std::chrono::steady_clock::now() + 30ms;
        while (std::chrono::steady_clock::now() < spin_until)
            smarm::check();
        auto k2 = c.get("/debug/schedulers");
        ASSERT_TRUE(k2);
        EXPECT_GT(num(k2->body, "uptime_ns"), num(k1->body, "uptime_ns"));
        EXPECT_GE(num(k2->body, "restarts"), 1);
        smarm::request_stop(sup.id);
    });
}

}  // namespace

namespace {

std::optional<reply> post(client& c, const std::string& form, const std::string& extra = {}) {
    c.send("POST /debug/causal HTTP/1.1\r\nHost: t\r\n" + extra +
           "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: " +
           std::to_string(form.size()) + "\r\n\r\n" + form);
    return c.read(false, 30s);
}

std::size_t count(const std::string& hay, const std::string& needle) {
    std::size_t n = 0;
    for (auto at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1))
        ++n;
    return n;
}

}  // namespace

TEST(DebugCausal, DurationRankFormatsAndBadParametersByName) {
    http::router r;
    services::add_causal_routes(r);
    with_server({}, std::move(r), [](http::server&, std::uint16_t port) {
        // A point that moves and a site nobody is in: each window is a
        // measurement of nothing, which is all the routes need.
        std::atomic<bool> stop{false};
        auto ticker = smarm::spawn([&stop] {
            while (!stop.load()) {
                SMARM_PROGRESS("debug.tick");
                smarm::sleep(1ms);
            }
        });
        (void)smarm::causal::register_site("debug.idle");
        client c(port);
        auto bad = post(c, "duration=soon");
        ASSERT_TRUE(bad);
        EXPECT_EQ(bad->status, 400u);
        EXPECT_NE(bad->body.find("duration=soon"), std::string::npos) << bad->body;
        bad = post(c, "duration=1s&rounds=2");
        ASSERT_TRUE(bad);
        EXPECT_EQ(bad->status, 400u);
        EXPECT_NE(bad->body.find("not both"), std::string::npos) << bad->body;
        bad = post(c, "sites=debug.idle&format=gnuplot&output=plot.jpg&window_ms=10");
        ASSERT_TRUE(bad);
        EXPECT_EQ(bad->status, 400u);
        EXPECT_NE(bad->body.find("output=plot.jpg"), std::string::npos) << bad->body;

        // 240 ms fits four rounds of the two cells, 30 ms a window (20 ms
        // and the 10 ms cooldown).
        auto g = post(c,
                      "sites=debug.idle&speedups=0,50&window_ms=20&duration=240ms"
                      "&points=debug.tick&rank=debug.tick&format=gnuplot&output=causal.png");
        ASSERT_TRUE(g);
        ASSERT_EQ(g->status, 200u) << g->body;
        EXPECT_NE(g->body.find("set output 'causal.png'"), std::string::npos) << g->body;
        EXPECT_NE(g->body.find("causal profile: debug.tick"), std::string::npos) << g->body;

        c.send("GET /debug/causal/last HTTP/1.1\r\nHost: t\r\nAccept: application/json\r\n\r\n");
        auto j = c.read();
        ASSERT_TRUE(j);
        EXPECT_EQ(j->header("content-type"), "application/json");
        // Counted windows per cell (a thin one is repeated, not counted).
        for (const char* cell : {"{\"site\":\"debug.idle\",\"speedup\":0,\"windows\":4,",
                                 "{\"site\":\"debug.idle\",\"speedup\":50,\"windows\":4,"})
            EXPECT_EQ(count(j->body, cell), 1u) << cell << " in " << j->body;
        bad = post(c, "sites=debug.idle&points=http.requests");
        ASSERT_TRUE(bad);
        EXPECT_EQ(bad->status, 400u);  // no causal.http here
        EXPECT_NE(bad->body.find("points=http.requests"), std::string::npos) << bad->body;
        bad = post(c, "sites=debug.idle&speedups=0,50&window_ms=100&duration=150ms");
        ASSERT_TRUE(bad);
        EXPECT_EQ(bad->status, 400u);  // two cells of 110 ms do not fit
        EXPECT_NE(bad->body.find("shorter than one round"), std::string::npos) << bad->body;
        auto k = c.get("/debug/causal/last?format=ranking&rank=debug.tick");
        ASSERT_TRUE(k);
        EXPECT_EQ(k->body.rfind("== sites ranked by debug.tick (throughput higher by", 0), 0u)
            << k->body;
        EXPECT_EQ(c.get("/debug/causal/last?format=ranking")->status, 400u);
        auto s = c.get("/debug/causal/last?rank=debug.tick");
        ASSERT_TRUE(s);
        EXPECT_EQ(s->body.rfind("== sites ranked by debug.tick", 0), 0u) << s->body;
        EXPECT_NE(s->body.find("debug.idle"), std::string::npos);
        stop = true;
        ticker.join();
    });
}
