// The example of docs/writing-a-service.md, exercised.

#include <gtest/gtest.h>

#include <smarm_test/http_client.hpp>
#include "examples/greeter.hpp"

using namespace smarm_test;

namespace {

TEST(Greeter, InlineAndRegistryRoutedRoutes) {
    with_server({}, greeter::routes(), [](http::server&, std::uint16_t port) {
        client c(port);
        EXPECT_EQ(c.get("/visits/ada")->status, 503u);  // service not started yet
        auto sup = smarm::start_supervisor({}, {greeter::visit_counter_child()});
        auto t0 = smarm_test::steady::now();
        while (!smarm::whereis(greeter::visits) && smarm_test::since(t0) < 10s)
            smarm::sleep(1ms);
        EXPECT_EQ(c.get("/hello/ada")->body, "Hello, ada!\n");
        EXPECT_EQ(c.get("/visits/ada")->body, "ada has visited 1 time(s)\n");
        EXPECT_EQ(c.get("/visits/ada")->body, "ada has visited 2 time(s)\n");
        EXPECT_EQ(c.get("/visits/bob")->body, "bob has visited 1 time(s)\n");
        smarm::request_stop(sup.id);
    });
}

}  // namespace
