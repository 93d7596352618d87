// /metrics: a strict parse of the exposition, and counters that move.

#include <smarm/causal.hpp>
#include <smarm/metrics/metrics.hpp>
#include <smarm/monitor.hpp>
#include <smarm/registry.hpp>
#include <smarm/supervisor.hpp>

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include <smarm_test/http_client.hpp>
#include "kv/kv.hpp"

using namespace smarm_test;

namespace {

/// A strict reader of the Prometheus text format (0.0.4): every sample
/// belongs to a family announced by HELP and TYPE before it, names and
/// labels are well formed, values parse. Returns sample line -> value.
std::map<std::string, double> parse_strict(const std::string& text) {
    static const std::regex name_re("[a-zA-Z_:][a-zA-Z0-9_:]*");
    static const std::regex sample_re(
        R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{((?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*",?)*)\})? ([^ ]+))");
    std::map<std::string, std::string> types;  // family -> type
    std::set<std::string> helped;
    std::map<std::string, double> samples;
    std::istringstream in(text);
    std::string line;
    int n = 0;
    while (std::getline(in, line)) {
        ++n;
        if (line.empty()) continue;
        if (line.rfind("# HELP ", 0) == 0) {
            auto name = line.substr(7, line.find(' ', 7) - 7);
            EXPECT_TRUE(std::regex_match(name, name_re)) << "line " << n << ": " << line;
            EXPECT_TRUE(helped.insert(name).second) << "duplicate HELP: " << line;
            EXPECT_GT(line.size(), 8 + name.size()) << "empty HELP: " << line;
            continue;
        }
        if (line.rfind("# TYPE ", 0) == 0) {
            std::istringstream t(line.substr(7));
            std::string name, type;
            t >> name >> type;
            EXPECT_TRUE(std::regex_match(name, name_re)) << line;
            EXPECT_TRUE(type == "counter" || type == "gauge" || type == "histogram" ||
                        type == "summary" || type == "untyped")
                << line;
            EXPECT_TRUE(types.emplace(name, type).second) << "duplicate TYPE: " << line;
            EXPECT_TRUE(helped.count(name)) << "TYPE before HELP: " << line;
            if (type == "counter") {
                EXPECT_TRUE(name.size() > 6 && name.ends_with("_total")) << line;
            }
            continue;
        }
        EXPECT_NE(line[0], '#') << "unknown comment: " << line;
        std::smatch m;
        if (!std::regex_match(line, m, sample_re)) {
            ADD_FAILURE() << "line " << n << " is not a sample: " << line;
            continue;
        }
        std::string name = m[1];
        std::string fam = name;
        for (const char* suffix : {"_bucket", "_sum", "_count"})
            if (!types.count(fam) && name.ends_with(suffix))
                fam = name.substr(0, name.size() - std::string(suffix).size());
        EXPECT_TRUE(types.count(fam)) << "sample of an undeclared family: " << line;
        char* end = nullptr;
        std::string v = m[4];
        double value = std::strtod(v.c_str(), &end);
        EXPECT_TRUE(*end == '\0') << "bad value: " << line;
        samples[line.substr(0, line.rfind(' '))] = value;
    }
    return samples;
}

TEST(Metrics, ExpositionIsStrictAndCountersMove) {
    smarm::metrics::exporter m;
    http::server_config cfg;
    cfg.on_request = m.request_observer();
    http::router r;
    r.get("/hello/{name}", [](http::request&) { return http::response(http::status::ok, "hi"); });
    m.add_route(r);
    with_server(cfg, std::move(r), [&](http::server& srv, std::uint16_t port) {
        m.attach(srv);
        client c(port);
        auto first = parse_strict(c.get("/metrics")->body);
        EXPECT_EQ(
            first.count(
                R"(smarm_http_requests_total{method="GET",route="/hello/{name}",status="200"})"),
            0u);
        EXPECT_EQ(c.get("/hello/a")->status, 200u);
        EXPECT_EQ(c.get("/hello/b")->status, 200u);
        EXPECT_EQ(c.get("/nope")->status, 404u);
        auto s = parse_strict(c.get("/metrics")->body);
        EXPECT_EQ(
            (s[R"(smarm_http_requests_total{method="GET",route="/hello/{name}",status="200"})"]),
            2);
        EXPECT_EQ((s[R"(smarm_http_requests_total{method="GET",route="",status="404"})"]), 1);
        EXPECT_EQ((s[R"(smarm_http_request_duration_seconds_count{route="/hello/{name}"})"]), 2);
        EXPECT_GE(s["smarm_http_connections_accepted_total"], 1);
        EXPECT_GE(s["smarm_http_connections_active"], 1);
        EXPECT_GE(s["smarm_actor_spawns_total"], 3);
        EXPECT_GT(s["process_resident_memory_bytes"], 1e6);
        EXPECT_GT(s["process_open_fds"], 2);
        EXPECT_TRUE(s.count(R"(smarm_actors{state="parked"})"));
        // Every scheduler's time, by state; the run has been busy a little.
        for (const char* state : {"busy", "spinning", "parked"})
            EXPECT_TRUE(
                s.count(std::string(R"(smarm_scheduler_seconds_total{scheduler="0",state=")") +
                        state + "\"}"))
                << state;
        EXPECT_GT((s[R"(smarm_scheduler_seconds_total{scheduler="0",state="busy"})"]), 0);
        // The raw path never becomes a label value.
        for (auto& [k, v] : s)
            EXPECT_EQ(k.find("/hello/a"), std::string::npos) << k;
        m.detach();
    });
}

// The request families are counted per thread and merged at scrape
// (metrics/src/request_counts.hpp): threads observing while another
// scrapes; every scrape parses, its totals never go back, and at the end
// each series, count, sum and bucket is exact.
TEST(Metrics, RequestCountsFromManyThreadsAddUpWhileScraped) {
    smarm::metrics::exporter m;
    auto observe = m.request_observer();
    constexpr int threads = 4, per_thread = 20'000;
    const std::string total = R"(smarm_http_requests_total{method="GET",route="/a",status="200"})";
    std::atomic<bool> done{false};
    std::atomic<int> scrapes{0};
    std::thread scraper([&] {
        double last = 0;
        while (!done.load()) {
            auto s = parse_strict(m.scrape());
            const double now = s.count(total) ? s[total] : 0;
            EXPECT_GE(now, last);  // never backwards
            last = now;
            ++scrapes;
        }
    });
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t)
        workers.emplace_back([&, t] {
            for (int i = 0; i < per_thread; ++i) {
                // 50 us (first bucket), 300 us (le 0.0005), and one 20 s a thread (+Inf only)
                const auto d = i == 0 ? std::chrono::nanoseconds(std::chrono::seconds(20))
                               : i % 2 ? std::chrono::nanoseconds(50'000)
                                       : std::chrono::nanoseconds(300'000);
                observe({"/a", "GET", 200, 13, d});
                if (i % 100 == t) observe({"/b/{x}", "PUT", 503, 0, d});
            }
        });
    for (auto& w : workers)
        w.join();
    done = true;
    scraper.join();
    EXPECT_GT(scrapes.load(), 0);
    auto s = parse_strict(m.scrape());
    EXPECT_EQ(s[total], threads * per_thread);
    EXPECT_EQ((s[R"(smarm_http_requests_total{method="PUT",route="/b/{x}",status="503"})"]),
              threads * (per_thread / 100));
    const std::string h = "smarm_http_request_duration_seconds";
    EXPECT_EQ(s[h + R"(_count{route="/a"})"], threads * per_thread);
    EXPECT_EQ(s[h + R"(_bucket{route="/a",le="+Inf"})"], threads * per_thread);
    EXPECT_EQ(s[h + R"(_bucket{route="/a",le="0.0001"})"], threads * (per_thread / 2));
    EXPECT_EQ(s[h + R"(_bucket{route="/a",le="0.00025"})"], threads * (per_thread / 2));
    EXPECT_EQ(s[h + R"(_bucket{route="/a",le="0.0005"})"], threads * (per_thread - 1));
    EXPECT_EQ(s[h + R"(_bucket{route="/a",le="10"})"], threads * (per_thread - 1));
    const double sum = threads * (20.0 + (per_thread / 2) * 50e-6 + (per_thread / 2 - 1) * 300e-6);
    EXPECT_NEAR(s[h + R"(_sum{route="/a"})"], sum, 1e-6);
}

TEST(Metrics, CausalExperimentsAreVisible) {
    smarm::metrics::exporter m;
    smarm_test::run([&] {
        const auto site = smarm::causal::register_site("metrics_test.site");
        auto idle = parse_strict(m.scrape());
        EXPECT_EQ(idle["smarm_causal_experiment_running"], 0);
        const double before = idle["smarm_causal_injected_seconds_total"];
        smarm::causal::begin(site, 100);
        {
            auto g = SMARM_CAUSAL_SITE("metrics_test.site");
            const auto t0 = smarm_test::steady::now();
            while (smarm_test::since(t0) < 5ms)  // in the site, observing
                smarm::check();
        }
        auto during = parse_strict(m.scrape());
        smarm::causal::end();
        EXPECT_EQ(during["smarm_causal_experiment_running"], 1);
        EXPECT_GT(during["smarm_causal_injected_seconds_total"], before);
        EXPECT_EQ(parse_strict(m.scrape())["smarm_causal_experiment_running"], 0);
    });
}

TEST(Metrics, SupervisorRestartsAreCounted) {
    smarm::metrics::exporter m;
    smarm_test::run([&] {
        const auto before = parse_strict(m.scrape())["smarm_supervisor_restarts_total"];
        std::atomic<int> runs{0};
        auto sup =
            smarm::start_supervisor({}, {{"flaky", [&] {
                                              if (runs.fetch_add(1) == 0)
                                                  throw std::runtime_error("first run fails");
                                              smarm::sleep(std::chrono::hours(1));
                                          }}});
        auto t0 = smarm_test::steady::now();
        while (runs.load() < 2 && smarm_test::since(t0) < 10s)
            smarm::sleep(1ms);
        EXPECT_EQ(parse_strict(m.scrape())["smarm_supervisor_restarts_total"], before + 1);
        smarm::request_stop(sup.id);
    });
}

}  // namespace

namespace {

// The failure test of issue 6: stop the kv server actor; its supervisor
// restarts it, requests meanwhile get 503 (or are served by the new one),
// later ones succeed, and /metrics shows the restart.
TEST(Metrics, KvRestartIsServedAgainAndVisibleInMetrics) {
    smarm::metrics::exporter m;
    smarm::services::kv_options kv;
    http::router r;
    smarm::services::add_kv_routes(r, kv);
    m.add_route(r);
    with_server({}, std::move(r), [&](http::server&, std::uint16_t port) {
        auto sup = smarm::start_supervisor({}, {smarm::services::kv_child(kv)});
        auto t0 = smarm_test::steady::now();
        while (!smarm::whereis(smarm::services::kv_name) && smarm_test::since(t0) < 10s)
            smarm::sleep(1ms);
        client c(port);
        const double before =
            parse_strict(c.get("/metrics")->body)["smarm_supervisor_restarts_total"];
        auto old = *smarm::whereis(smarm::services::kv_name);
        auto mon = smarm::monitor(old);
        smarm::request_stop(old);
        (void)mon.rx.recv();
        unsigned status = 0;
        t0 = smarm_test::steady::now();
        do {
            status = c.get("/kv/x")->status;
            EXPECT_TRUE(status == 503u || status == 404u) << status;
        } while (status == 503u && smarm_test::since(t0) < 10s);
        EXPECT_EQ(status, 404u);  // served by the restarted kv
        const double after =
            parse_strict(c.get("/metrics")->body)["smarm_supervisor_restarts_total"];
        EXPECT_EQ(after, before + 1);
        smarm::request_stop(sup.id);
    });
}

}  // namespace
