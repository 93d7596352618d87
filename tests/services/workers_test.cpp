// The workers pool over HTTP.

#include <smarm/pg.hpp>
#include <smarm/supervisor.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include <smarm_test/http_client.hpp>
#include "workers/workers.hpp"

using namespace smarm_test;
namespace services = smarm::services;

namespace {

void wait_for_workers(std::size_t n) {
    auto t0 = smarm_test::steady::now();
    while (smarm::members(services::workers_group).size() < n && smarm_test::since(t0) < 10s)
        smarm::sleep(1ms);
    ASSERT_EQ(smarm::members(services::workers_group).size(), n);
}

std::string post(client& c, const std::string& body) {
    c.send("POST /work/sha256 HTTP/1.1\r\nHost: t\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body);
    auto r = c.read();
    return r ? std::to_string(r->status) + " " + r->body + r->header("retry-after") : "none";
}

TEST(Workers, Sha256KnownAnswers) {
    EXPECT_EQ(services::sha256_hex(""),
              "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(services::sha256_hex("abc"),
              "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Workers, PoolAnswersConcurrentRequests) {
    services::workers_options o;
    o.count = 3;
    http::router r;
    services::add_worker_routes(r, o);
    with_server({}, std::move(r), [&](http::server&, std::uint16_t port) {
        auto sup = smarm::start_supervisor({}, services::worker_children(o));
        wait_for_workers(3);
        std::atomic<int> ok{0};
        std::vector<smarm::join_handle> hs;
        for (int i = 0; i < 20; ++i)
            hs.push_back(smarm::spawn([&, i] {
                client c(port);
                for (int k = 0; k < 10; ++k) {
                    std::string body = "job " + std::to_string(i) + "/" + std::to_string(k);
                    if (post(c, body) == "200 " + services::sha256_hex(body) + "\n")
                        ok.fetch_add(1);
                }
            }));
        for (auto& h : hs)
            h.join();
        EXPECT_EQ(ok.load(), 200);
        smarm::request_stop(sup.id);
    });
}

TEST(Workers, EveryWorkerBehindMeans503WithRetryAfter) {
    services::workers_options o;
    o.count = 2;
    o.queue_limit = 0;  // every worker counts as behind
    http::router r;
    services::add_worker_routes(r, o);
    with_server({}, std::move(r), [&](http::server&, std::uint16_t port) {
        client c(port);
        EXPECT_EQ(post(c, "x"), "503 all workers are busy\n1");  // no workers at all
        auto sup = smarm::start_supervisor({}, services::worker_children(o));
        wait_for_workers(2);
        EXPECT_EQ(post(c, "x"), "503 all workers are busy\n1");
        smarm::request_stop(sup.id);
    });
}

}  // namespace
