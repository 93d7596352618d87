// The kv service over HTTP, supervised as in smarm-server.

#include <smarm/monitor.hpp>
#include <smarm/registry.hpp>
#include <smarm/supervisor.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <map>

#include <smarm_test/http_client.hpp>
#include "kv/kv.hpp"
#include "kv/log.hpp"

using namespace smarm_test;
namespace services = smarm::services;

namespace {

struct kv_fixture {
    services::kv_options opts = [] {
        services::kv_options o;
        o.value_limit = 64;
        return o;
    }();
    http::router routes() const {
        http::router r;
        services::add_kv_routes(r, opts);
        return r;
    }
};

/// Waits until the kv name resolves (the supervised child registered it).
void wait_for_kv() {
    auto t0 = smarm_test::steady::now();
    while (!smarm::whereis(services::kv_name) && smarm_test::since(t0) < 10s)
        smarm::sleep(1ms);
    ASSERT_TRUE(smarm::whereis(services::kv_name));
}

TEST(KvService, PutGetDeleteAndLimits) {
    kv_fixture f;
    with_server({}, f.routes(), [&](http::server&, std::uint16_t port) {
        auto sup = smarm::start_supervisor({}, {services::kv_child(f.opts)});
        wait_for_kv();
        client c(port);
        auto put = [&](const std::string& key, const std::string& v) {
            c.send("PUT /kv/" + key + " HTTP/1.1\r\nHost: t\r\nContent-Length: " +
                   std::to_string(v.size()) + "\r\n\r\n" + v);
            return c.read()->status;
        };
        EXPECT_EQ(c.get("/kv/a")->status, 404u);
        EXPECT_EQ(put("a", "one"), 201u);
        EXPECT_EQ(put("a", "uno"), 204u);
        EXPECT_EQ(c.get("/kv/a")->body, "uno");
        EXPECT_EQ(put("big", std::string(65, 'x')), 413u);
        EXPECT_EQ(put("b%20c", "spaced"), 201u);
        EXPECT_EQ(c.get("/kv/b%20c")->body, "spaced");
        c.send("DELETE /kv/a HTTP/1.1\r\nHost: t\r\n\r\n");
        EXPECT_EQ(c.read()->status, 204u);
        c.send("DELETE /kv/a HTTP/1.1\r\nHost: t\r\n\r\n");
        EXPECT_EQ(c.read()->status, 404u);
        EXPECT_EQ(c.get("/kv/a")->status, 404u);
        smarm::request_stop(sup.id);
    });
}

TEST(KvService, ListingIsOrderedAndPaginated) {
    kv_fixture f;
    with_server({}, f.routes(), [&](http::server&, std::uint16_t port) {
        auto sup = smarm::start_supervisor({}, {services::kv_child(f.opts)});
        wait_for_kv();
        client c(port);
        for (std::string k : {"d", "a", "c", "b", "e"}) {
            c.send("PUT /kv/" + k + " HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\n\r\nx");
            ASSERT_EQ(c.read()->status, 201u);
        }
        auto r = c.get("/kv?limit=2");
        EXPECT_EQ(r->body, "{\"keys\":[\"a\",\"b\"],\"next\":\"b\"}\n");
        r = c.get("/kv?limit=2&after=b");
        EXPECT_EQ(r->body, "{\"keys\":[\"c\",\"d\"],\"next\":\"d\"}\n");
        r = c.get("/kv?limit=2&after=d");
        EXPECT_EQ(r->body, "{\"keys\":[\"e\"]}\n");
        EXPECT_EQ(c.get("/kv?limit=0")->status, 400u);
        smarm::request_stop(sup.id);
    });
}

TEST(KvService, StoppedKvIsRestartedAnd503Meanwhile) {
    kv_fixture f;
    with_server({}, f.routes(), [&](http::server&, std::uint16_t port) {
        auto sup = smarm::start_supervisor({}, {services::kv_child(f.opts)});
        wait_for_kv();
        client c(port);
        c.send("PUT /kv/k HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\n\r\nv");
        ASSERT_EQ(c.read()->status, 201u);
        const auto before = smarm::supervisor_totals().restarts;
        auto old = *smarm::whereis(services::kv_name);
        auto m = smarm::monitor(old);
        smarm::request_stop(old);
        (void)m.rx.recv();
        // Down now; the restarted server answers once it has registered.
        auto t0 = smarm_test::steady::now();
        unsigned status = 0;
        for (;;) {
            status = c.get("/kv/k")->status;
            if (status != 503u || smarm_test::since(t0) > 10s) break;
            smarm::sleep(1ms);
        }
        EXPECT_EQ(status, 404u) << "a restarted kv starts empty (no durable log yet)";
        EXPECT_NE(*smarm::whereis(services::kv_name), old);
        EXPECT_GT(smarm::supervisor_totals().restarts, before);
        smarm::request_stop(sup.id);
    });
}

}  // namespace

namespace {

using kv_map = std::map<std::string, std::string, std::less<>>;

std::string temp_log(const char* name) {
    std::string p = ::testing::TempDir() + name;
    std::remove(p.c_str());
    std::remove((p + ".compact").c_str());
    return p;
}

TEST(KvLog, ReplaysPutsAndDeletes) {
    auto path = temp_log("kv_replay.log");
    {
        kv_map m;
        services::kv_log log(path, services::sync_mode::always, 1 << 20, m);
        log.put("a", "1");
        log.put("b", std::string(1000, 'b'));
        log.put("a", "2");
        log.erase("b");
        log.put("", "empty key");
    }
    kv_map m;
    services::kv_log log(path, services::sync_mode::none, 1 << 20, m);
    EXPECT_EQ(m, (kv_map{{"", "empty key"}, {"a", "2"}}));
    EXPECT_EQ(log.truncated(), 0u);
    std::remove(path.c_str());
}

TEST(KvLog, TornTailIsCutOffNeverMisread) {
    auto path = temp_log("kv_torn.log");
    std::uint64_t good = 0;
    {
        kv_map m;
        services::kv_log log(path, services::sync_mode::none, 1 << 20, m);
        log.put("k1", "v1");
        log.put("k2", "v2");
        good = log.size();
        log.put("k3", "a value that will be torn");
    }
    // Tear the last record: keep its header and half its body.
    std::string all;
    {
        std::ifstream in(path, std::ios::binary);
        all.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    const std::size_t torn = good + (all.size() - good) / 2;
    { std::ofstream(path, std::ios::binary | std::ios::trunc) << all.substr(0, torn); }
    kv_map m;
    {
        services::kv_log log(path, services::sync_mode::none, 1 << 20, m);
        EXPECT_EQ(m, (kv_map{{"k1", "v1"}, {"k2", "v2"}}));
        EXPECT_EQ(log.truncated(), torn - good);
        EXPECT_EQ(log.size(), good);
        log.put("k4", "v4");  // appended on the record boundary
    }
    // A flipped byte inside a record: its checksum fails, the rest is dropped.
    {
        std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
        f.seekp(static_cast<std::streamoff>(good - 3));
        f.put('X');
    }
    m.clear();
    services::kv_log again(path, services::sync_mode::none, 1 << 20, m);
    EXPECT_EQ(m, (kv_map{{"k1", "v1"}}));
    std::remove(path.c_str());
}

TEST(KvLog, CompactionKeepsTheLiveDataAndShrinksTheFile) {
    auto path = temp_log("kv_compact.log");
    kv_map live;
    {
        kv_map m;
        services::kv_log log(path, services::sync_mode::none, 4096, m);
        for (int i = 0; i < 200; ++i) {
            std::string k = "key" + std::to_string(i % 10);
            std::string v(100, static_cast<char>('a' + i % 26));
            log.put(k, v);
            live[k] = v;
        }
        const auto before = log.size();
        log.maybe_compact(live);
        EXPECT_LT(log.size(), before / 5);
        log.put("after", "compaction");
        live["after"] = "compaction";
    }
    kv_map m;
    services::kv_log log(path, services::sync_mode::none, 4096, m);
    EXPECT_EQ(m, live);
    std::remove(path.c_str());
}

TEST(KvService, DurableKvSurvivesARestartOfItsActor) {
    kv_fixture f;
    f.opts.log_path = temp_log("kv_service.log");
    with_server({}, f.routes(), [&](http::server&, std::uint16_t port) {
        auto sup = smarm::start_supervisor({}, {services::kv_child(f.opts)});
        wait_for_kv();
        client c(port);
        c.send("PUT /kv/keep HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\n\r\ndata");
        ASSERT_EQ(c.read()->status, 201u);
        auto old = *smarm::whereis(services::kv_name);
        auto m = smarm::monitor(old);
        smarm::request_stop(old);
        (void)m.rx.recv();
        auto t0 = smarm_test::steady::now();
        std::optional<reply> r;
        do {
            r = c.get("/kv/keep");
            if (r->status != 503u) break;
            smarm::sleep(1ms);
        } while (smarm_test::since(t0) < 10s);
        EXPECT_EQ(r->status, 200u);
        EXPECT_EQ(r->body, "data");
        smarm::request_stop(sup.id);
    });
    std::remove(f.opts.log_path.c_str());
}

// Group commit with the sync beside the server (kv.hpp): writers that each
// PUT their own key 0..N-1 in order, readers meanwhile, and the kv actor
// stopped mid-run (a sync may be running: its actor outlives the server).
// Every key ends at N-1, read back live and again after a replay; a writer
// answered 503 (kv down) puts the same value again.
TEST(KvService, GroupCommitKeepsEachWritersOrderAcrossSyncsAndARestart) {
    kv_fixture f;
    f.opts.log_path = temp_log("kv_group.log");
    f.opts.sync = services::sync_mode::group;
    f.opts.group_interval = 1ms;
    constexpr int writers = 6, values = 60;
    with_server({}, f.routes(), [&](http::server&, std::uint16_t port) {
        auto sup = smarm::start_supervisor({}, {services::kv_child(f.opts)});
        wait_for_kv();
        std::atomic<bool> writing{true};
        std::atomic<int> bad{0};
        std::vector<smarm::join_handle> hs;
        for (int w = 0; w < writers; ++w)
            hs.push_back(smarm::spawn([&, w] {
                client c(port);
                for (int v = 0; v < values; ++v) {
                    for (int attempt = 0;; ++attempt) {
                        const std::string body = std::to_string(v);
                        c.send("PUT /kv/w" + std::to_string(w) +
                               " HTTP/1.1\r\nHost: t\r\nContent-Length: " +
                               std::to_string(body.size()) + "\r\n\r\n" + body);
                        auto r = c.read();
                        if (r && (r->status == 201u || r->status == 204u)) break;
                        if (!r || r->status != 503u || attempt > 2000) {
                            bad.fetch_add(1);
                            return;
                        }
                        smarm::sleep(1ms);
                    }
                }
            }));
        auto reader = smarm::spawn([&] {
            client c(port);
            while (writing.load()) {
                auto r = c.get("/kv/w0");
                if (!r || (r->status != 200u && r->status != 404u && r->status != 503u))
                    bad.fetch_add(1);
            }
        });
        smarm::sleep(20ms);
        auto old = *smarm::whereis(services::kv_name);
        auto m = smarm::monitor(old);
        smarm::request_stop(old);
        (void)m.rx.recv();
        for (auto& h : hs)
            (void)h.join();
        writing.store(false);
        (void)reader.join();
        EXPECT_EQ(bad.load(), 0);
        auto expect_all = [&](const char* when) {
            client c(port);
            for (int w = 0; w < writers; ++w) {
                auto r = c.get("/kv/w" + std::to_string(w));
                ASSERT_TRUE(r) << when;
                EXPECT_EQ(r->status, 200u) << when << ": w" << w;
                EXPECT_EQ(r->body, std::to_string(values - 1)) << when << ": w" << w;
            }
        };
        expect_all("live");
        auto cur = *smarm::whereis(services::kv_name);
        auto m2 = smarm::monitor(cur);
        smarm::request_stop(cur);
        (void)m2.rx.recv();
        wait_for_kv();
        auto t0 = smarm_test::steady::now();
        while (smarm::whereis(services::kv_name) == cur && smarm_test::since(t0) < 10s)
            smarm::sleep(1ms);
        expect_all("after the replay");
        smarm::request_stop(sup.id);
    });
    std::remove(f.opts.log_path.c_str());
}

}  // namespace
