// smarm::postgres::pool against a real server (the fixture's, and for the
// restart case a server of the test's own).

#include <smarm/channel.hpp>
#include <smarm/io.hpp>
#include <smarm/postgres/pool.hpp>
#include <smarm/runtime.hpp>
#include <smarm_test/run.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

using namespace std::chrono_literals;
namespace pq = smarm::postgres;

namespace {

std::string conninfo(const std::string& dir, const std::string& app) {
    return "host=" + dir + " port=5432 user=smarm dbname=postgres application_name=" + app;
}

pq::pool_options pool_opts(const std::string& app, std::size_t size) {
    pq::pool_options o;
    o.connection.conninfo = conninfo(SMARM_PG_DIR, app);
    o.size = size;
    return o;
}

std::int64_t sessions(pq::connection& c, const std::string& app) {
    return *c.query_one<std::int64_t>(
        "select count(*) from pg_stat_activity where application_name = $1", app);
}

// Runs scripts/pgtest.sh off the scheduler threads.
int pgtest(const std::string& args) {
    const std::string cmd = std::string(SMARM_PGTEST) + " " + args;
    return smarm::block_on_io([&cmd] { return std::system(cmd.c_str()); });
}

// A returned lease reaches the pool's actor as a message: wait for its
// effect (bounded; the assertion after says what did not happen).
template <class Pred>
void eventually(Pred p) {
    const auto t0 = smarm_test::steady::now();
    while (!p() && smarm_test::since(t0) < 10s)
        smarm::sleep(1ms);
}

SMARM_TEST(PostgresPool, AThousandHandlersShareTenConnections) {
    auto o = pool_opts("pool_thousand", 10);
    o.checkout_timeout = 60s;
    pq::pool db(o);
    std::atomic<int> ok{0}, wrong{0}, failed{0};
    std::vector<smarm::join_handle> hs;
    for (int i = 0; i < 1000; ++i)
        hs.push_back(smarm::spawn([&, i] {
            try {
                if (db.query_one<int>("select $1::int * 2", i) == i * 2)
                    ++ok;
                else
                    ++wrong;
            } catch (const std::exception&) {
                ++failed;
            }
        }));
    for (auto& h : hs)
        h.join();
    eventually([&] { return db.stats().in_use == 0; });
    EXPECT_EQ(ok.load(), 1000);
    EXPECT_EQ(wrong.load(), 0);
    EXPECT_EQ(failed.load(), 0);
    const pq::pool_stats st = db.stats();
    EXPECT_LE(st.open, 10u);
    EXPECT_EQ(st.in_use, 0u);
    EXPECT_EQ(st.checkouts, 1000u);
    EXPECT_GT(st.waited, 0u) << "1000 at once on 10 connections never queued";
    auto c = pq::connection::connect({.conninfo = conninfo(SMARM_PG_DIR, "pool_watch")});
    EXPECT_LE(sessions(c, "pool_thousand"), 10);
}

SMARM_TEST(PostgresPool, ACheckoutPastItsDeadlineIsAPoolTimeout) {
    pq::pool db(pool_opts("pool_deadline", 1));
    {
        auto held = db.checkout();
        try {
            (void)db.checkout(100ms);
            ADD_FAILURE() << "a second connection from a pool of one";
        } catch (const pq::pool_timeout& e) {
            EXPECT_NE(std::string(e.what()).find("within 100 ms"), std::string::npos) << e.what();
        }
        EXPECT_EQ(held->query_one<int>("select 1"), 1);
    }
    EXPECT_EQ(db.query_one<int>("select 2"), 2) << "the lease came back";
    eventually([&] { return db.stats().in_use == 0; });
    EXPECT_EQ(db.stats().open, 1u);
    EXPECT_EQ(db.stats().in_use, 0u);
}

SMARM_TEST(PostgresPool, BrokenOrMidTransactionConnectionsAreDiscarded) {
    pq::pool db(pool_opts("pool_discard", 2));
    auto watch = pq::connection::connect({.conninfo = conninfo(SMARM_PG_DIR, "pool_watch2")});
    watch.execute("drop table if exists t_pool_discard");
    watch.execute("create table t_pool_discard (id int)");
    int pid = 0;
    {
        auto c = db.checkout();
        c->execute("begin");
        c->execute("insert into t_pool_discard values (1)");
        pid = c->backend_pid();
    }  // returned inside a transaction (no transaction scope): closed
    eventually([&] { return db.stats().discarded == 1; });
    EXPECT_EQ(db.stats().discarded, 1u);
    EXPECT_EQ(*watch.query_one<std::int64_t>("select count(*) from t_pool_discard"), 0);
    {
        auto c = db.checkout();
        EXPECT_NE(c->backend_pid(), pid) << "the mid-transaction connection was reused";
        pid = c->backend_pid();
        EXPECT_TRUE(*watch.query_one<bool>("select pg_terminate_backend($1)", pid));
        EXPECT_THROW(c->execute("select 1"), pq::connection_error);
    }
    eventually([&] { return db.stats().discarded == 2; });
    EXPECT_EQ(db.stats().discarded, 2u);
    auto c = db.checkout();
    EXPECT_NE(c->backend_pid(), pid);
    EXPECT_EQ(c->query_one<int>("select 3"), 3);
}

SMARM_TEST(PostgresPool, AStoppedActorsTransactionRollsBackAndItsConnectionIsReused) {
    pq::pool db(pool_opts("pool_stop", 1));
    db.execute("drop table if exists t_pool_stop");
    db.execute("create table t_pool_stop (id int)");
    auto [tx_in, rx_in] = smarm::channel<int>();
    auto h = smarm::spawn([&, tx_in = std::move(tx_in)]() mutable {
        auto c = db.checkout();
        auto tx = c->begin();
        tx.execute("insert into t_pool_stop values ($1)", 1);
        (void)tx_in.send(c->backend_pid());
        smarm::sleep(1h);
        tx.commit();
    });
    const int pid = *rx_in.recv();
    smarm::request_stop(h.id());
    EXPECT_EQ(h.join().kind, smarm::exit_kind::stopped);
    auto c = db.checkout(5s);
    EXPECT_EQ(c->backend_pid(), pid) << "the rolled-back connection was not reused";
    EXPECT_EQ(*c->query_one<std::int64_t>("select count(*) from t_pool_stop"), 0);
    EXPECT_EQ(db.stats().discarded, 0u);
}

SMARM_TEST(PostgresPool, RecoversAfterTheServerRestartsUnderLoad) {
    const std::string dir = std::string(SMARM_PG_DIR) + "-restart";
    ASSERT_EQ(pgtest("init " + dir), 0);
    pq::pool_options o;
    o.connection.conninfo = conninfo(dir, "pool_restart");
    o.connection.connect_timeout = 2s;
    o.size = 4;
    o.checkout_timeout = 1s;
    o.backoff_max = 200ms;
    o.idle_check = 100ms;
    pq::pool db(o);
    std::atomic<bool> stop{false};
    std::atomic<int> before{0}, during_err{0}, after{0};
    std::atomic<int> phase{0};  // 0 up, 1 down, 2 up again
    std::vector<smarm::join_handle> hs;
    for (int i = 0; i < 16; ++i)
        hs.push_back(smarm::spawn([&] {
            while (!stop) {
                try {
                    (void)db.query_one<int>("select 1");
                    const int p = phase;
                    if (p == 0)
                        ++before;
                    else if (p == 2)
                        ++after;
                } catch (const pq::error&) {
                    // connection_error or pool_timeout: what a handler turns
                    // into 503 while the server is away.
                    if (phase == 1) ++during_err;
                    smarm::sleep(5ms);
                }
            }
        }));
    while (before < 200)
        smarm::sleep(5ms);
    phase = 1;
    ASSERT_EQ(pgtest("stop " + dir + " immediate"), 0);
    while (during_err < 20)
        smarm::sleep(5ms);
    EXPECT_FALSE(db.stats().healthy);
    ASSERT_EQ(pgtest("start " + dir), 0);
    phase = 2;
    const auto t0 = smarm_test::steady::now();
    while (after < 200 && smarm_test::since(t0) < 60s)
        smarm::sleep(5ms);
    stop = true;
    for (auto& h : hs)
        h.join();
    EXPECT_GE(after.load(), 200) << "the pool did not recover after the server came back";
    EXPECT_TRUE(db.stats().healthy);
    EXPECT_LE(db.stats().open, 4u);
    EXPECT_EQ(pgtest("destroy " + dir), 0);
}

SMARM_TEST(PostgresPool, BadOptionsAreRefusedByName) {
    auto o = pool_opts("pool_bad", 0);
    try {
        pq::pool p(o);
        ADD_FAILURE() << "a pool of 0";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("size = 0"), std::string::npos) << e.what();
    }
    o = pool_opts("pool_bad", 2);
    o.connection.conninfo.clear();
    EXPECT_THROW(pq::pool{o}, std::invalid_argument);
}

}  // namespace
