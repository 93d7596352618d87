// smarm-server's supervision tree (services/server/app.hpp), in process:
// its shape, a kv restart gap held open (503, then served), a crashed
// listener restarted on its address, a graceful stop, and a tree that gives
// up.

#include <smarm/causal.hpp>
#include <smarm/monitor.hpp>
#include <smarm/registry.hpp>
#include <smarm/supervisor.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <smarm_test/coz_grammar.hpp>
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

/// A client outside the runtime (an OS thread, blocking sockets): to the
/// causal profiler, the world outside, which experiments do not slow. GETs
/// `path` until `stop`, counting 200s and anything else.
void outside_client(std::uint16_t port, const char* path, std::atomic<bool>& stop,
                    std::atomic<long>& ok, std::atomic<long>& bad) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        bad.fetch_add(1);
        if (fd >= 0) ::close(fd);
        return;
    }
    const std::string req = std::string("GET ") + path + " HTTP/1.1\r\nHost: t\r\n\r\n";
    std::string in;
    char buf[4096];
    while (!stop.load()) {
        if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size()))
            break;
        // One response: the head, then Content-Length bytes of body.
        std::size_t head_end, need = 0;
        for (;;) {
            head_end = in.find("\r\n\r\n");
            if (head_end != std::string::npos) {
                const auto cl = in.find("Content-Length: ");
                need = head_end + 4 +
                       (cl < head_end ? std::strtoul(in.c_str() + cl + 16, nullptr, 10) : 0);
                if (in.size() >= need) break;
            }
            const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
            if (n <= 0) {
                bad.fetch_add(1);
                ::close(fd);
                return;
            }
            in.append(buf, static_cast<std::size_t>(n));
        }
        (in.compare(0, 12, "HTTP/1.1 200") == 0 ? ok : bad).fetch_add(1);
        in.erase(0, need);
    }
    ::close(fd);
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

/// `"impact_pct"` of throughput point `point` in the JSON profile's cell
/// (site, speedup), or nullopt.
std::optional<double> impact_in(const std::string& json, const std::string& site, unsigned speedup,
                                const std::string& point) {
    const std::string cell =
        "{\"site\":\"" + site + "\",\"speedup\":" + std::to_string(speedup) + ",";
    const auto cells = json.find("\"cells\":[");
    const auto at = cells == std::string::npos ? cells : json.find(cell, cells);
    if (at == std::string::npos) return std::nullopt;
    const auto p = json.find("\"" + point + "\":{\"kind\":\"throughput\"", at);
    const auto end = json.find("}}", at);
    if (p == std::string::npos || p > end) return std::nullopt;
    const auto im = json.find("\"impact_pct\":", p);
    if (im == std::string::npos || json.compare(im + 13, 4, "null") == 0) return std::nullopt;
    return std::stod(json.substr(im + 13));
}

SMARM_TEST(App, ALiveCausalProfileRanksTheSlowSiteFirst) {
    auto s = test_settings(true);
    s.http.test_routes = true;
    s.causal.http = true;  // the route's site and the request points
    services::application app(s);
    app.start();
    ASSERT_TRUE(eventually([&] { return app.ready(); }));
    const auto pub_port = app.http_address().port();
    const auto adm_port = app.admin_address().port();

    // Traffic on the public port all along: four closed-loop clients from
    // outside the runtime. (Clients that are actors of the same process
    // would be read as the world outside too, through their socket waits,
    // yet be slowed with it: their waits would owe the very speedup they
    // saw, and the gain would read as none.)
    std::atomic<bool> stop{false};
    std::atomic<long> ok{0}, bad{0};
    std::vector<std::thread> load;
    for (int i = 0; i < 4; ++i)
        load.emplace_back(outside_client, pub_port, "/test/causal", std::ref(stop), std::ref(ok),
                          std::ref(bad));
    // A second POST while the first runs is refused, naming the run.
    std::atomic<unsigned> second_status{0};
    auto second = smarm::spawn([&, adm_port] {
        while (!smarm::causal::running())
            if (stop.load())
                return;
            else
                smarm::sleep(1ms);
        client c(adm_port);
        c.send("POST /debug/causal?window_ms=50 HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n");
        if (auto r = c.read()) second_status = r->status;
    });

    // Whatever fails below, the clients end (an ASSERT returns early).
    struct stopper {
        std::atomic<bool>& stop;
        services::application& app;
        bool ended = false;
        ~stopper() {
            stop = true;
            if (!ended) {
                app.stop();
                (void)app.wait();
            }
        }
    } guard{stop, app};
    // Sites register at their first run: let the route run first.
    ASSERT_TRUE(eventually([&] { return ok.load() > 20; }));
    client adm(adm_port);
    // The plan in a form body, as curl -d sends it; ranked by the front
    // end's own progress point.
    const std::string form =
        "sites=test.slow,test.fast,GET+/test/causal&speedups=0,50&window_ms=300&rounds=2"
        "&points=http.requests&format=json";
    adm.send(
        "POST /debug/causal HTTP/1.1\r\nHost: t\r\n"
        "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: " +
        std::to_string(form.size()) + "\r\n\r\n" + form);
    const auto r = adm.read();
    stop = true;
    for (auto& h : load)
        h.join();
    second.join();
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200u) << r->body;
    const auto slow = impact_in(r->body, "test.slow", 50, "http.requests");
    const auto fast = impact_in(r->body, "test.fast", 50, "http.requests");
    // The route's own site holds only what is outside the two (they nest
    // inside it); its progress point counts the same requests.
    const auto route = impact_in(r->body, "GET /test/causal", 50, "http.requests");
    const auto slow_by_route = impact_in(r->body, "test.slow", 50, "GET /test/causal");
    ASSERT_TRUE(slow && fast && route && slow_by_route) << r->body;
    std::printf(
        "test.slow@50%%: %+.1f%%, test.fast@50%%: %+.1f%%, GET /test/causal@50%%: %+.1f%%\n", *slow,
        *fast, *route);
    EXPECT_NEAR(*slow_by_route, *slow, 5.0);
    EXPECT_LT(*route, *slow);
    EXPECT_NE(r->body.find("\"http.request\":{\"kind\":\"latency\""), std::string::npos);
    // Theory: the slow site is ~all of the handler's CPU, so +50% is a
    // large gain (the clients share the cores: well under +100%, the
    // ceiling; four handlers on two cores read +264% with per-actor
    // ledgers); the fast one is ~1/300 of it.
    EXPECT_GT(*slow, 10.0) << r->body;
    EXPECT_LT(*slow, 100.0) << r->body;
    EXPECT_GT(*slow, *fast + 10.0);
    EXPECT_LT(std::abs(*fast), 8.0) << r->body;
    EXPECT_GT(ok.load(), 100);
    EXPECT_EQ(bad.load(), 0);
    EXPECT_EQ(second_status.load(), 409u);

    // The last profile is kept; the public port has no /debug/causal.
    auto last = adm.get("/debug/causal/last?format=coz");
    ASSERT_TRUE(last);
    EXPECT_EQ(last->status, 200u);
    EXPECT_EQ(last->body.rfind("startup\ttime=", 0), 0u);
    // Every line as Coz's viewer reads it; the route's site and points too.
    EXPECT_EQ(smarm_test::coz_grammar_errors(last->body), "") << last->body;
    EXPECT_NE(last->body.find("selected=GET /test/causal\t"), std::string::npos);
    EXPECT_NE(last->body.find("latency-point\tname=http.request\t"), std::string::npos);
    client pub(pub_port);
    pub.send("POST /debug/causal HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n");
    auto on_public = pub.read();
    ASSERT_TRUE(on_public);
    EXPECT_NE(on_public->status, 200u);
    EXPECT_NE(on_public->status, 409u);
    // Bad input is refused by name.
    adm.send("POST /debug/causal?speedups=0,150 HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n");
    auto refused = adm.read();
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->status, 400u);
    EXPECT_NE(refused->body.find("speedups=150"), std::string::npos) << refused->body;
    adm.send(
        "POST /debug/causal?window_ms=60000&rounds=100 HTTP/1.1\r\nHost: t\r\n"
        "Content-Length: 0\r\n\r\n");
    auto too_long = adm.read();
    ASSERT_TRUE(too_long);
    EXPECT_EQ(too_long->status, 413u);
    guard.ended = true;
    app.stop();
    EXPECT_EQ(app.wait(), 0);
}

}  // namespace
