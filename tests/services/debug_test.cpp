// /debug/actors and /debug/tree.

#include <smarm/registry.hpp>

#include <gtest/gtest.h>

#include <smarm_test/http_client.hpp>
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
        auto t = c.get("/debug/tree");
        ASSERT_TRUE(t);
        EXPECT_EQ(t->status, 200u);
        EXPECT_NE(t->body.find("debug-probe"), std::string::npos) << t->body;
        (void)tx.send(1);
        named.join();
    });
}

}  // namespace
