// smarm::postgres against a real server: the ctest fixture
// (tests/postgres/CMakeLists.txt, scripts/pgtest.sh) starts one on a Unix
// socket in SMARM_PG_DIR before these run and removes it after.

#include <smarm/channel.hpp>
#include <smarm/postgres/postgres.hpp>
#include <smarm/runtime.hpp>
#include <smarm_test/run.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <string>

using namespace std::chrono_literals;
namespace pq = smarm::postgres;

namespace {

pq::options opts(std::string extra = "") {
    pq::options o;
    o.conninfo = "host=" SMARM_PG_DIR " port=5432 user=smarm dbname=postgres " + extra;
    return o;
}

pq::connection db() {
    return pq::connection::connect(opts());
}

// A table of this test's own (tests run in parallel processes).
std::string table(pq::connection& c, const char* name, const char* columns) {
    const std::string t = std::string("t_") + name;
    c.execute("drop table if exists " + t);
    c.execute("create table " + t + " (" + columns + ")");
    return t;
}

SMARM_TEST(Postgres, CrudRoundTrips) {
    auto c = db();
    ASSERT_TRUE(c.ok());
    const std::string t = table(c, "crud", "id bigint primary key, body text not null");
    EXPECT_EQ(
        c.execute("insert into " + t + " values ($1, $2), ($3, $4)", 1, "one", 2, "two").affected(),
        2u);
    auto rows = c.query<std::int64_t, std::string>("select id, body from " + t + " order by id");
    ASSERT_EQ(rows.size(), 2u);
    EXPECT_EQ(rows[0], std::make_tuple(std::int64_t{1}, std::string("one")));
    EXPECT_EQ(rows[1], std::make_tuple(std::int64_t{2}, std::string("two")));
    EXPECT_EQ(c.execute("update " + t + " set body = $1 where id = $2", "uno", 1).affected(), 1u);
    EXPECT_EQ(c.query_one<std::string>("select body from " + t + " where id = $1", 1),
              std::optional<std::string>("uno"));
    EXPECT_EQ(c.execute("delete from " + t + " where id = $1", 2).affected(), 1u);
    EXPECT_EQ(c.query_one<std::string>("select body from " + t + " where id = $1", 2),
              std::nullopt);
    const pq::result r = c.execute("select id, body from " + t);
    ASSERT_EQ(r.size(), 1);
    EXPECT_EQ(r.columns(), 2);
    EXPECT_EQ(r[0].get<std::string>("body"), "uno");
    EXPECT_STREQ(r[0].name(0), "id");
    int seen = 0;
    for (pq::row x : r) {
        EXPECT_EQ(x.get<std::int64_t>(0), 1);
        ++seen;
    }
    EXPECT_EQ(seen, 1);
}

SMARM_TEST(Postgres, EveryParameterTypeRoundTrips) {
    auto c = db();
    EXPECT_EQ(c.query_one<bool>("select $1", true), true);
    EXPECT_EQ(c.query_one<bool>("select $1", false), false);
    for (std::int16_t v : {std::numeric_limits<std::int16_t>::min(), std::int16_t{0},
                           std::numeric_limits<std::int16_t>::max()})
        EXPECT_EQ(c.query_one<std::int16_t>("select $1", v), v);
    for (std::int32_t v :
         {std::numeric_limits<std::int32_t>::min(), -1, std::numeric_limits<std::int32_t>::max()})
        EXPECT_EQ(c.query_one<std::int32_t>("select $1", v), v);
    for (std::int64_t v : {std::numeric_limits<std::int64_t>::min(), std::int64_t{42},
                           std::numeric_limits<std::int64_t>::max()})
        EXPECT_EQ(c.query_one<std::int64_t>("select $1", v), v);
    EXPECT_EQ(c.query_one<std::int64_t>("select $1", 7u), 7) << "unsigned goes as bigint";
    EXPECT_THROW(c.execute("select $1", std::numeric_limits<std::uint64_t>::max()), pq::type_error);
    for (double v : {0.1, -1e300, 5e-324, std::numeric_limits<double>::infinity(),
                     -std::numeric_limits<double>::infinity()})
        EXPECT_EQ(c.query_one<double>("select $1", v), v);
    EXPECT_TRUE(std::isnan(*c.query_one<double>("select $1", std::nan(""))));
    EXPECT_EQ(c.query_one<float>("select $1", 1.5f), 1.5f);
    const std::string unicode = "h\xc3\xa9llo \xe2\x9c\x93 \xf0\x9f\x90\x98 'quoted' \"and\" \\";
    EXPECT_EQ(c.query_one<std::string>("select $1", unicode), unicode);
    EXPECT_EQ(c.query_one<std::string>("select $1", std::string()), std::string());
    EXPECT_THROW(c.execute("select $1", std::string("a\0b", 3)), pq::type_error)
        << "a NUL would cut a text value short";
    pq::bytes all;
    for (int i = 0; i < 256; ++i)
        all.data.push_back(static_cast<std::byte>(i));
    EXPECT_EQ(c.query_one<pq::bytes>("select $1", all), all);
    EXPECT_EQ(c.query_one<pq::bytes>("select $1", pq::bytes{}), pq::bytes{});
    // NULL both ways.
    EXPECT_EQ(c.query_one<std::optional<std::int32_t>>("select $1::int", std::nullopt),
              std::optional<std::optional<std::int32_t>>(std::optional<std::int32_t>()));
    const std::optional<std::string> none, some("x");
    EXPECT_EQ(*c.query_one<std::optional<std::string>>("select $1::text", none), std::nullopt);
    EXPECT_EQ(*c.query_one<std::optional<std::string>>("select $1::text", some), "x");
    // Into a table of every type and back.
    const std::string t = table(c, "types",
                                "b bool, s smallint, i int, l bigint, r real, d float8, "
                                "t text, v varchar(20), y bytea, n int");
    c.execute("insert into " + t + " values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)", true,
              std::int16_t{-7}, 123456, std::int64_t{1} << 40, 2.5f, 0.25, unicode, "vc", all,
              std::optional<int>());
    auto row =
        c.query_one<bool, std::int16_t, std::int32_t, std::int64_t, float, double, std::string,
                    std::string, pq::bytes, std::optional<int>>("select * from " + t);
    ASSERT_TRUE(row.has_value());
    EXPECT_EQ(*row, std::make_tuple(true, std::int16_t{-7}, 123456, std::int64_t{1} << 40, 2.5f,
                                    0.25, unicode, std::string("vc"), all, std::optional<int>()));
}

SMARM_TEST(Postgres, AColumnReadAsTheWrongTypeIsATypeErrorNamingIt) {
    auto c = db();
    try {
        (void)c.query_one<std::int32_t>("select 'abc'::text as word");
        ADD_FAILURE() << "text read as int";
    } catch (const pq::type_error& e) {
        EXPECT_NE(std::string(e.what()).find("\"word\" is text"), std::string::npos) << e.what();
    }
    try {
        (void)c.query_one<std::int32_t>("select null::int as gone");
        ADD_FAILURE() << "NULL read as int";
    } catch (const pq::type_error& e) {
        EXPECT_NE(std::string(e.what()).find("\"gone\" is NULL"), std::string::npos) << e.what();
    }
    EXPECT_THROW((void)c.query_one<std::int16_t>("select 70000"), pq::type_error) << "out of range";
    EXPECT_THROW((void)(c.query<int, int>("select 1")), pq::type_error) << "arity";
    EXPECT_THROW((void)c.execute("select 1 as a")[0].get<int>("b"), pq::type_error);
    EXPECT_EQ(c.query_one<std::string>("select 12::int"), "12") << "any type reads as text";
    EXPECT_TRUE(c.ok()) << "a type error leaves the connection usable";
    EXPECT_EQ(c.query_one<int>("select 1"), 1);
}

SMARM_TEST(Postgres, ServerErrorsCarryTheSqlstateAndLeaveTheConnectionUsable) {
    auto c = db();
    const std::string t = table(c, "errors", "id int primary key");
    c.execute("insert into " + t + " values ($1)", 1);
    try {
        c.execute("insert into " + t + " values ($1)", 1);
        ADD_FAILURE() << "duplicate key accepted";
    } catch (const pq::server_error& e) {
        EXPECT_EQ(e.sqlstate(), "23505");
        EXPECT_NE(e.message().find("duplicate key"), std::string::npos) << e.message();
        EXPECT_NE(e.detail().find("(id)=(1)"), std::string::npos) << e.detail();
    }
    try {
        c.execute("selec 1");
        ADD_FAILURE() << "syntax error accepted";
    } catch (const pq::server_error& e) {
        EXPECT_EQ(e.sqlstate(), "42601");
    }
    EXPECT_TRUE(c.ok());
    EXPECT_EQ(c.query_one<int>("select count(*)::int from " + t), 1);
}

SMARM_TEST(Postgres, InjectionThroughParametersStaysData) {
    auto c = db();
    const std::string t = table(c, "inject", "name text");
    const std::string evil = "x'); drop table t_inject; --";
    c.execute("insert into " + t + " values ($1)", evil);
    EXPECT_EQ(c.query_one<std::string>("select name from " + t + " where name = $1", evil), evil);
    EXPECT_EQ(
        c.query_one<std::int64_t>("select count(*) from " + t + " where name = $1", "' or '1'='1"),
        0);
    EXPECT_EQ(c.query_one<std::string>("select $1", "1; select pg_sleep(10)"),
              "1; select pg_sleep(10)");
    EXPECT_EQ(c.query_one<std::int64_t>("select count(*) from " + t), 1) << "the table is intact";
}

SMARM_TEST(Postgres, ADeadlineCancelsTheQueryOnTheServer) {
    auto c = db();
    auto watcher = db();
    const auto t0 = smarm_test::steady::now();
    try {
        c.execute(pq::within{200ms}, "select pg_sleep(60)");
        ADD_FAILURE() << "pg_sleep(60) finished";
    } catch (const pq::timeout& e) {
        EXPECT_EQ(e.sqlstate(), "57014");
        EXPECT_NE(std::string(e.what()).find("cancelled on the server"), std::string::npos)
            << e.what();
    }
    EXPECT_LT(smarm_test::since(t0), 30s) << "the cancel did not end the sleep";
    EXPECT_TRUE(c.ok()) << "a confirmed cancel leaves the connection usable";
    EXPECT_EQ(watcher.query_one<std::int64_t>(
                  "select count(*) from pg_stat_activity where pid = $1 and state = 'active'",
                  c.backend_pid()),
              0)
        << "the backend still runs the query";
    EXPECT_EQ(c.query_one<int>("select 1"), 1);
}

SMARM_TEST(Postgres, TransactionsCommitOrRollBack) {
    auto c = db();
    auto other = db();
    const std::string t = table(c, "tx", "id int");
    {
        auto tx = c.begin();
        EXPECT_TRUE(c.in_transaction());
        tx.execute("insert into " + t + " values ($1)", 1);
        EXPECT_EQ(other.query_one<std::int64_t>("select count(*) from " + t), 0)
            << "visible before commit";
        tx.commit();
    }
    EXPECT_FALSE(c.in_transaction());
    {
        auto tx = c.begin();
        tx.execute("insert into " + t + " values ($1)", 2);
    }  // no commit: rolled back
    EXPECT_FALSE(c.in_transaction());
    {
        auto tx = c.begin();
        tx.execute("insert into " + t + " values ($1)", 3);
        EXPECT_THROW(tx.execute("insert into nowhere values (1)"), pq::server_error);
        try {
            tx.commit();
            ADD_FAILURE() << "a failed transaction committed";
        } catch (const pq::error& e) {
            EXPECT_EQ(e.sqlstate(), "25P02");
        }
    }
    EXPECT_EQ(other.query<int>("select id from " + t + " order by id"), std::vector<int>{1});
    EXPECT_TRUE(c.ok());
}

SMARM_TEST(Postgres, ATransactionWhoseActorIsStoppedRollsBack) {
    auto setup = db();
    const std::string t = table(setup, "stopped", "id int");
    // The connection outlives the stopped actor (as a pooled one does), so
    // the rollback must come from the transaction's scope, not a close.
    auto c = db();
    auto [tx_in, rx_in] = smarm::channel<int>();
    auto h = smarm::spawn([&, tx_in = std::move(tx_in)]() mutable {
        auto tx = c.begin();
        tx.execute("insert into " + t + " values ($1)", 1);
        (void)tx_in.send(1);
        smarm::sleep(1h);  // stopped here, inside the transaction
        tx.commit();
    });
    ASSERT_EQ(rx_in.recv(), std::optional<int>(1));
    smarm::request_stop(h.id());
    EXPECT_EQ(h.join().kind, smarm::exit_kind::stopped);
    EXPECT_TRUE(c.ok()) << "the rollback went through: the connection is reusable";
    EXPECT_FALSE(c.in_transaction());
    EXPECT_EQ(c.query_one<std::int64_t>("select count(*) from " + t), 0);
    EXPECT_EQ(setup.query_one<std::int64_t>("select count(*) from " + t), 0);
}

SMARM_TEST_N(Postgres, AQueryParksOnlyItsActor, 1) {
    // One scheduler: a blocking libpq call would stop the ticker too.
    std::atomic<bool> running{false}, done{false};
    auto h = smarm::spawn([&] {
        auto c = db();
        running = true;
        c.execute("select pg_sleep(0.5)");
        done = true;
    });
    while (!running)
        smarm::sleep(1ms);
    int ticks = 0;
    while (!done) {
        smarm::sleep(10ms);
        ++ticks;
    }
    h.join();
    EXPECT_GE(ticks, 5) << "the scheduler thread was held while the query ran";
}

SMARM_TEST(Postgres, ConnectFailuresNameTheReason) {
    try {
        (void)pq::connection::connect(opts("dbname=no_such_db"));
        ADD_FAILURE() << "connected to a missing database";
    } catch (const pq::connection_error& e) {
        EXPECT_NE(std::string(e.what()).find("no_such_db"), std::string::npos) << e.what();
    }
    pq::options o;
    o.conninfo = "host=/nonexistent/dir port=5432 user=smarm";
    EXPECT_THROW((void)pq::connection::connect(o), pq::connection_error);
    o.conninfo = "this is not a conninfo";
    EXPECT_THROW((void)pq::connection::connect(o), pq::connection_error);
    o = opts();
    o.query_timeout = 0s;
    EXPECT_THROW((void)pq::connection::connect(o), std::invalid_argument);
}

SMARM_TEST(Postgres, StatementsArePreparedOnceAndTheCacheIsBounded) {
    auto c = db();
    for (int i = 0; i < 3; ++i)
        EXPECT_EQ(c.query_one<int>("select $1::int + 1", i), i + 1);
    EXPECT_EQ(c.prepared(), 1u);
    (void)c.query_one<std::string>("select $1::text", "x");
    EXPECT_EQ(c.prepared(), 2u);
    auto o = opts();
    o.statement_cache = 1;
    auto small = pq::connection::connect(o);
    EXPECT_EQ(small.query_one<int>("select 1"), 1);
    EXPECT_EQ(small.query_one<int>("select 2"), 2) << "past the cache: unprepared";
    EXPECT_EQ(small.query_one<int>("select 2"), 2);
    EXPECT_EQ(small.prepared(), 1u);
}

SMARM_TEST(Postgres, ABrokenConnectionSaysSoAndRefusesFurtherCalls) {
    auto c = db();
    auto killer = db();
    EXPECT_TRUE(killer.query_one<bool>("select pg_terminate_backend($1)", c.backend_pid()).value());
    EXPECT_THROW(c.execute("select 1"), pq::connection_error);
    EXPECT_FALSE(c.ok());
    try {
        c.execute("select 1");
        ADD_FAILURE() << "a broken connection ran a statement";
    } catch (const pq::connection_error& e) {
        EXPECT_NE(std::string(e.what()).find("connect again"), std::string::npos) << e.what();
    }
}

}  // namespace

namespace {

SMARM_TEST(Postgres, TheStatementHookSeesEachStatementAndItsSqlstate) {
    std::vector<std::string> states;
    auto o = opts();
    o.on_statement = [&](std::chrono::nanoseconds d, std::string_view sqlstate) {
        EXPECT_GE(d.count(), 0);
        states.emplace_back(sqlstate);
    };
    auto c = pq::connection::connect(o);
    (void)c.query_one<int>("select 1");
    EXPECT_THROW(c.execute("select * from no_such_table"), pq::server_error);
    EXPECT_THROW(c.execute(pq::within{50ms}, "select pg_sleep(10)"), pq::timeout);
    EXPECT_EQ(states, (std::vector<std::string>{"", "42P01", "57014"}));
    EXPECT_TRUE(c.alive());
}

}  // namespace

namespace {

SMARM_TEST(Postgres, APipelineRunsEveryStatementInOneGoAndAllOrNothing) {
    auto c = db();
    const std::string t = table(c, "pipeline", "id int primary key, body text");
    auto rs = c.pipeline({pq::statement("insert into " + t + " values ($1, $2)", 1, "one"),
                          pq::statement("insert into " + t + " values ($1, $2)", 2, "two"),
                          pq::statement("select count(*) from " + t)});
    ASSERT_EQ(rs.size(), 3u);
    EXPECT_EQ(rs[0].affected(), 1u);
    EXPECT_EQ(rs[2][0].get<std::int64_t>(0), 2);
    // A failure in the middle: none of it takes effect.
    try {
        (void)c.pipeline({pq::statement("insert into " + t + " values ($1, $2)", 3, "three"),
                          pq::statement("insert into " + t + " values ($1, $2)", 1, "dup"),
                          pq::statement("insert into " + t + " values ($1, $2)", 4, "four")});
        ADD_FAILURE() << "a duplicate key went through";
    } catch (const pq::server_error& e) {
        EXPECT_EQ(e.sqlstate(), "23505");
    }
    EXPECT_TRUE(c.ok());
    EXPECT_EQ(c.query<int>("select id from " + t + " order by id"), (std::vector<int>{1, 2}));
    EXPECT_TRUE(c.pipeline(std::span<const pq::statement>()).empty());
}

SMARM_TEST(Postgres, ALargePipelineIsSentWhileItsResultsAreRead) {
    // ~2 MB of statements each way, far past the socket buffers: the
    // server answers the first ones while the rest are still being sent,
    // so the send has to read in between (libpq's send does when it would
    // block; the flush loop parks in slices and reads too).
    auto c = db();
    const std::string t = table(c, "bigpipe", "id int, body text");
    const std::string body(2000, 'x');
    std::vector<pq::statement> sts;
    for (int i = 0; i < 1000; ++i)
        sts.emplace_back("insert into " + t + " values ($1, $2) returning id, body", i, body);
    auto rs = c.pipeline(sts);
    ASSERT_EQ(rs.size(), 1000u);
    EXPECT_EQ(rs[999][0].get<int>(0), 999);
    EXPECT_EQ(rs[0][0].get<std::string>(1), body);
    EXPECT_EQ(c.query_one<std::int64_t>("select count(*) from " + t), 1000);
}

SMARM_TEST(Postgres, APipelinePastItsDeadlineIsCancelled) {
    auto c = db();
    EXPECT_THROW((void)c.pipeline(pq::within{200ms},
                                  std::vector<pq::statement>{pq::statement("select 1"),
                                                             pq::statement("select pg_sleep(60)")}),
                 pq::timeout);
    EXPECT_TRUE(c.ok());
    EXPECT_EQ(c.query_one<int>("select 5"), 5);
}

}  // namespace
