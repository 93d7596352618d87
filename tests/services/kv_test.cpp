// The kv service over HTTP, supervised as in smarm-server.

#include <smarm/monitor.hpp>
#include <smarm/registry.hpp>
#include <smarm/supervisor.hpp>

#include <gtest/gtest.h>

#include "http_support.hpp"
#include "kv/kv.hpp"

using namespace http_test;
namespace services = smarm::services;

namespace {

struct kv_fixture {
    services::kv_options opts{64, std::chrono::seconds(2)};
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
