// The notes service in smarm-server over HTTP, against the fixture's server
// and, for the outage case, a server of the test's own.

#include <smarm/io.hpp>
#include <smarm/runtime.hpp>
#include <smarm_test/http_client.hpp>
#include <smarm_test/run.hpp>

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "notes/notes.hpp"
#include "server/app.hpp"

using namespace std::chrono_literals;
using namespace smarm_test;
namespace services = smarm::services;

namespace {

smarm::config::settings settings_for(const std::string& dir) {
    auto s = smarm::config::load_from("", {});
    s.http.host = "127.0.0.1";
    s.http.port = 0;
    s.admin.enabled = false;
    s.postgres.url = "host=" + dir + " port=5432 user=smarm dbname=postgres";
    s.postgres.pool_size = 4;
    return s;
}

template <class Pred>
bool eventually(Pred pred) {
    const auto t0 = smarm_test::steady::now();
    while (!pred()) {
        if (smarm_test::since(t0) > 20s) return false;
        smarm::sleep(5ms);
    }
    return true;
}

std::optional<reply> request(client& c, const std::string& method, const std::string& target,
                             const std::string& body = "") {
    c.send(method + " " + target + " HTTP/1.1\r\nHost: t\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body);
    return c.read();
}

int pgtest(const std::string& args) {
    const std::string cmd = std::string(SMARM_PGTEST) + " " + args;
    return smarm::block_on_io([&cmd] { return std::system(cmd.c_str()); });
}

SMARM_TEST(Notes, CrudAndPagesOverHttp) {
    services::application app(settings_for(SMARM_PG_DIR));
    app.start();
    ASSERT_TRUE(eventually([&] { return app.ready(); })) << "never ready with the database up";
    client c(app.http_address().port());
    // A clean table for this test.
    for (int id = 1; id <= 5; ++id)
        (void)request(c, "DELETE", "/notes/" + std::to_string(id));
    EXPECT_EQ(request(c, "PUT", "/notes/1", "first \xe2\x9c\x93")->status, 201u);
    EXPECT_EQ(request(c, "PUT", "/notes/1", "first, edited")->status, 204u);
    EXPECT_EQ(request(c, "PUT", "/notes/2", "x'); drop table notes; --")->status, 201u);
    EXPECT_EQ(request(c, "PUT", "/notes/3", "three \"quoted\"")->status, 201u);
    auto one = request(c, "GET", "/notes/1");
    EXPECT_EQ(one->status, 200u);
    EXPECT_EQ(one->body, "first, edited");
    EXPECT_EQ(request(c, "GET", "/notes/2")->body, "x'); drop table notes; --");
    EXPECT_EQ(request(c, "GET", "/notes/4")->status, 404u);
    EXPECT_EQ(request(c, "GET", "/notes/abc")->status, 400u);
    EXPECT_EQ(request(c, "GET", "/notes/99999999999999999999")->status, 400u);
    auto page = request(c, "GET", "/notes?limit=2");
    EXPECT_EQ(page->status, 200u);
    EXPECT_EQ(page->body,
              "{\"notes\":[{\"id\":1,\"body\":\"first, edited\"},{\"id\":2,\"body\":\"x'); drop "
              "table notes; --\"}],\"next\":2}\n");
    EXPECT_EQ(request(c, "GET", "/notes?limit=2&after=2")->body,
              "{\"notes\":[{\"id\":3,\"body\":\"three \\\"quoted\\\"\"}]}\n");
    EXPECT_EQ(request(c, "GET", "/notes?limit=0")->status, 400u);
    EXPECT_EQ(request(c, "GET", "/notes?after=x")->status, 400u);
    EXPECT_EQ(request(c, "DELETE", "/notes/3")->status, 204u);
    EXPECT_EQ(request(c, "DELETE", "/notes/3")->status, 404u);
    const std::string m = app.metrics().scrape();
    EXPECT_NE(m.find("smarm_db_pool_healthy 1"), std::string::npos);
    EXPECT_NE(m.find("smarm_db_query_duration_seconds_count"), std::string::npos);
    app.stop();
    EXPECT_EQ(app.wait(), 0);
}

SMARM_TEST(Notes, AnswerServiceUnavailableWhileTheDatabaseIsDownThenRecover) {
    const std::string dir = std::string(SMARM_PG_DIR) + "-notes";
    ASSERT_EQ(pgtest("init " + dir), 0);
    auto s = settings_for(dir);
    s.postgres.checkout_timeout = 500ms;
    s.postgres.connect_timeout = 1s;
    services::application app(s);
    app.start();
    ASSERT_TRUE(eventually([&] { return app.ready(); }));
    client c(app.http_address().port());
    EXPECT_EQ(request(c, "PUT", "/notes/7", "kept")->status, 201u);
    ASSERT_EQ(pgtest("stop " + dir + " immediate"), 0);
    std::optional<reply> r;
    EXPECT_TRUE(eventually([&] {
        r = request(c, "GET", "/notes/7");
        return r && r->status == 503u;
    })) << "the notes route did not answer 503 with the database down";
    EXPECT_EQ(r->header("retry-after"), "1");
    EXPECT_EQ(r->body, "database unavailable\n") << "no socket paths or hosts to clients";
    EXPECT_TRUE(eventually([&] { return !app.ready(); }));
    EXPECT_EQ(request(c, "GET", "/readyz")->status, 503u);
    EXPECT_EQ(request(c, "GET", "/plaintext")->status, 200u) << "the rest of the server serves";
    ASSERT_EQ(pgtest("start " + dir), 0);
    EXPECT_TRUE(eventually([&] {
        r = request(c, "GET", "/notes/7");
        return r && r->status == 200u;
    })) << "never recovered";
    EXPECT_EQ(r->body, "kept");
    EXPECT_TRUE(eventually([&] { return app.ready(); }));
    const std::string m = app.metrics().scrape();
    EXPECT_EQ(m.find("smarm_db_pool_connect_failures_total 0"), std::string::npos)
        << "the outage's connect failures were not counted";
    app.stop();
    EXPECT_EQ(app.wait(), 0);
    EXPECT_EQ(pgtest("destroy " + dir), 0);
}

// The pool's actor ending is the notes child's failure: the supervisor
// restarts it and the routes get a fresh, working pool.
SMARM_TEST(Notes, APoolWhoseActorEndsIsReplacedByTheSupervisor) {
    auto st = std::make_shared<services::notes_state>();
    services::notes_options o;
    o.pool.connection.conninfo = "host=" SMARM_PG_DIR " port=5432 user=smarm dbname=postgres";
    o.pool.size = 2;
    o.table = "notes_restart";
    auto sup = smarm::start_supervisor({}, {services::notes_child(o, st)});
    ASSERT_TRUE(eventually([&] { return st->pool() != nullptr; }));
    auto first = st->pool();
    EXPECT_EQ(first->query_one<int>("select 1"), 1);
    const smarm::pid old = first->actor();
    first.reset();
    ASSERT_TRUE(smarm::request_stop(old));
    ASSERT_TRUE(eventually([&] {
        auto p = st->pool();
        return p != nullptr && p->actor() != old;
    })) << "no fresh pool after its actor ended";
    EXPECT_EQ(st->pool()->query_one<int>("select 2"), 2);
    smarm::request_stop(sup.id);
}

}  // namespace
