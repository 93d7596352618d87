// smarm-server's supervision tree (services/server/app.hpp), in process:
// its shape, a kv restart gap held open (503, then served), a crashed
// listener restarted on its address, a graceful stop, and a tree that gives
// up.

#include <smarm/monitor.hpp>
#include <smarm/registry.hpp>
#include <smarm/supervisor.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <memory>

#include <smarm_test/http_client.hpp>
#include "server/app.hpp"

using namespace smarm_test;
namespace services = smarm::services;

namespace {

smarm::config::settings test_settings(bool admin = false) {
    auto s = smarm::config::load_from("", {});
    s.http.host = "127.0.0.1";
    s.http.port = 0;
    s.admin.enabled = admin;
    s.admin.port = 0;
    return s;
}

/// Parks until `pred` holds (10 s at most); returns whether it did.
template <class Pred>
bool eventually(Pred pred) {
    auto t0 = smarm_test::steady::now();
    while (!pred()) {
        if (smarm_test::since(t0) > 10s) return false;
        smarm::sleep(1ms);
    }
    return true;
}

/// The value of an unlabelled sample in an exposition text (-1 if absent).
double sample(const std::string& text, const std::string& name) {
    auto at = text.find("\n" + name + " ");
    if (at == std::string::npos) return -1;
    return std::stod(text.substr(at + name.size() + 2));
}

std::vector<std::string> child_ids(const smarm::supervisor_ref& sup) {
    std::vector<std::string> out;
    for (auto& [id, p] : smarm::which_children(sup))
        out.push_back(id);
    return out;
}

TEST(App, HttpSettingsReachTheServerConfig) {
    smarm::config::settings s;
    s.http.backlog = 77;
    s.http.defer_accept = std::chrono::milliseconds(1500);  // whole seconds, rounded up
    s.http.header_timeout = std::chrono::seconds(3);
    s.http.drain_grace = std::chrono::milliseconds(250);
    const auto c = smarm::services::http_config_from(s);
    EXPECT_EQ(c.drain_grace, std::chrono::milliseconds(250));
    EXPECT_EQ(c.backlog, 77);
    EXPECT_EQ(c.defer_accept, std::chrono::seconds(2));
    EXPECT_EQ(c.header_timeout, std::chrono::seconds(3));
    EXPECT_EQ(smarm::services::http_config_from(smarm::config::settings{}).defer_accept,
              std::chrono::seconds(0));
}

SMARM_TEST(App, TreeHasServicesThenListeners) {
    services::application app(test_settings(true));
    app.start();
    EXPECT_EQ(child_ids(app.top()), (std::vector<std::string>{"services", "http", "admin"}));
    ASSERT_TRUE(eventually([&] { return app.ready(); }));
    // /metrics lives on the admin listener only.
    client pub(app.http_address().port());
    EXPECT_EQ(pub.get("/readyz")->status, 200u);
    EXPECT_EQ(pub.get("/metrics")->status, 404u);
    client adm(app.admin_address().port());
    EXPECT_EQ(adm.get("/metrics")->status, 200u);
    app.stop();
    EXPECT_EQ(app.wait(), 0);
    EXPECT_FALSE(app.ready());
}

SMARM_TEST(App, KvRestartGapAnswers503ThenTheRestartedKvServes) {
    auto s = test_settings();
    // The kv child, with its restarts held at a gate the test opens: the
    // gap between the crash and the new kv is as long as the test needs.
    auto starts = std::make_shared<std::atomic<int>>(0);
    auto gate = std::make_shared<std::atomic<bool>>(false);
    auto children = services::default_services(s);
    ASSERT_EQ(children.front().id, "kv");
    auto kv_body = children.front().body;
    children.front().body = [kv_body, starts, gate] {
        if (starts->fetch_add(1) > 0)
            while (!gate->load())
                smarm::sleep(1ms);
        kv_body();
    };
    services::application app(s, std::move(children));
    app.start();
    ASSERT_TRUE(eventually([&] { return app.ready(); }));
    client c(app.http_address().port());
    c.send("PUT /kv/a HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\n\r\nx");
    EXPECT_EQ(c.read()->status, 201u);
    const double restarts_before =
        sample(c.get("/metrics")->body, "smarm_supervisor_restarts_total");

    auto old = smarm::whereis(services::kv_name);
    ASSERT_TRUE(old);
    auto m = smarm::monitor(*old);
    smarm::request_stop(*old);
    (void)m.rx.recv();
    ASSERT_TRUE(eventually([&] { return starts->load() == 2; }));
    // In the gap: the kv routes and readiness say 503; the rest serves.
    EXPECT_EQ(c.get("/kv/a")->status, 503u);
    EXPECT_EQ(c.get("/readyz")->status, 503u);
    EXPECT_EQ(c.get("/plaintext")->status, 200u);
    gate->store(true);
    ASSERT_TRUE(eventually([&] { return app.ready(); }));
    // The in-memory kv restarted empty.
    EXPECT_EQ(c.get("/kv/a")->status, 404u);
    EXPECT_EQ(sample(c.get("/metrics")->body, "smarm_supervisor_restarts_total"),
              restarts_before + 1);
    app.stop();
    EXPECT_EQ(app.wait(), 0);
}

SMARM_TEST(App, CrashedListenerIsRestartedOnItsAddress) {
    services::application app(test_settings());
    app.start();
    const auto port = app.http_address().port();
    smarm::pid http;
    for (auto& [id, p] : smarm::which_children(app.top()))
        if (id == "http") http = p;
    ASSERT_TRUE(http.valid());
    auto m = smarm::monitor(http);
    smarm::request_stop(http);  // ends abnormally: the supervisor restarts it
    (void)m.rx.recv();
    smarm::pid again;
    ASSERT_TRUE(eventually([&] {
        for (auto& [id, p] : smarm::which_children(app.top()))
            if (id == "http" && p != http) again = p;
        return again.valid() && app.http_address().port() == port;
    }));
    ASSERT_TRUE(eventually([&] { return app.ready(); }));
    client c(port);
    EXPECT_EQ(c.get("/plaintext")->body, "Hello, World!");
    app.stop();
    EXPECT_EQ(app.wait(), 0);
}

SMARM_TEST(App, GracefulStopFinishesInFlightRequestsThenRefuses) {
    auto s = test_settings();
    s.workers.count = 0;
    // The only worker: it announces each job and answers it only once
    // the gate opens, so the request is in flight for as long as needed.
    auto [got_tx, got_rx] = smarm::channel<int>();
    auto gate = std::make_shared<std::atomic<bool>>(false);
    auto children = services::default_services(s);
    children.push_back({"gated-worker", [gate, got_tx = got_tx] {
                            auto [tx, rx] = smarm::channel<services::work_request>();
                            smarm::join(services::workers_group, tx);
                            while (auto job = rx.recv()) {
                                (void)got_tx.send(1);
                                while (!gate->load())
                                    smarm::sleep(1ms);
                                (void)job->reply.send(services::sha256_hex(job->body));
                            }
                        }});
    services::application app(s, std::move(children));
    app.start();
    ASSERT_TRUE(eventually([&] { return app.ready(); }));
    const auto port = app.http_address().port();
    client c(port);
    const std::string body(4096, 'z');
    c.send("POST /work/sha256 HTTP/1.1\r\nHost: t\r\nContent-Length: 4096\r\n\r\n" + body);
    ASSERT_TRUE(got_rx.recv_timeout(10s));  // the request is in its handler
    app.stop();
    EXPECT_FALSE(app.ready());
    // New connections are refused while the request finishes.
    EXPECT_THROW(smarm::tcp_stream::connect("127.0.0.1", port, 2s), std::system_error);
    gate->store(true);
    auto r = c.read();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200u);
    EXPECT_EQ(r->body, services::sha256_hex(body) + "\n");
    EXPECT_FALSE(r->keep_alive);
    EXPECT_EQ(app.wait(), 0);
    EXPECT_FALSE(smarm::whereis(services::kv_name));  // the services went too
}

SMARM_TEST(App, TreeThatKeepsFailingGivesUpAndWaitReturnsOne) {
    auto s = test_settings();
    auto armed = std::make_shared<std::atomic<bool>>(false);
    auto children = services::default_services(s);
    children.push_back({"fragile", [armed] {
                            while (!armed->load())
                                smarm::sleep(1ms);
                            throw std::runtime_error("fragile: broken on purpose");
                        }});
    services::application app(s, std::move(children));
    app.start();
    armed->store(true);
    EXPECT_EQ(app.wait(), 1);
    EXPECT_FALSE(smarm::whereis(services::kv_name));
}

}  // namespace
