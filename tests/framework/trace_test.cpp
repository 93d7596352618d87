#include <smarm/channel.hpp>
#include <smarm/gen_server.hpp>
#include <smarm/introspect.hpp>
#include <smarm/io.hpp>
#include <smarm/mutex.hpp>
#include <smarm/registry.hpp>
#include <smarm/runtime.hpp>
#include <smarm/select.hpp>
#include <smarm/supervisor.hpp>
#include <smarm/timer.hpp>
#include <smarm/trace.hpp>

#include <gtest/gtest.h>

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <smarm_test/run.hpp>
#include <smarm_test/trace_check.hpp>

using namespace std::chrono_literals;
using smarm_test::trace_file;

namespace {

std::string pid_str(smarm::pid p) {
    return p.to_string();
}

/// Waits (in an actor) until `p` is parked waiting for `reason`: a sleep
/// before acting on a waiter was not enough under TSan's load.
void until_parked(smarm::pid p, const char* reason) {
    for (;;) {
        auto a = smarm::introspect::info(p);
        if (a && a->state == "parked" && a->wait == reason) return;
        smarm::sleep(1ms);
    }
}

/// Records `body` (in an actor) and returns the parsed export.
trace_file record(const std::function<void()>& body, smarm::trace::options o = {}) {
    std::string json;
    smarm_test::run([&] {
        smarm::trace::start(o);
        body();
        smarm::trace::stop();
        json = smarm::trace::to_json();
    });
    return trace_file(json);
}

// A ping-pong: every message is a flow from one actor's run to the other's,
// every wait of the two is a channel receive, and the slices nest.
TEST(Trace, PingPongIsAFlowPerMessageAndChannelWaits) {
    constexpr int rounds = 100;
    std::string ping_pid, pong_pid;
    trace_file t = record([&] {
        auto [to_pong, pong_rx] = smarm::channel<int>();
        auto [to_ping, ping_rx] = smarm::channel<int>();
        auto pong = smarm::spawn([rx = std::move(pong_rx), tx = to_ping]() mutable {
            while (auto v = rx.recv())
                if (!tx.send(*v + 1).ok()) return;
        });
        pong_pid = pid_str(pong.id());
        ping_pid = pid_str(smarm::self_pid());
        for (int i = 0; i < rounds; ++i) {
            ASSERT_TRUE(to_pong.send(i).ok());
            ASSERT_EQ(*ping_rx.recv(), i + 1);
        }
        { auto drop = std::move(to_pong); }
        (void)pong.join();
    });
    ASSERT_EQ(t.check_all(), "");
    EXPECT_EQ(t.flows_between(ping_pid, pong_pid), rounds);
    EXPECT_EQ(t.flows_between(pong_pid, ping_pid), rounds);
    const auto waits = t.waits_of(pong_pid);
    EXPECT_GE(waits.size(), 1u);
    for (const auto& w : waits)
        EXPECT_EQ(w, "channel");
    // One track per recording thread, named.
    EXPECT_GE(t.phase("M").size(), 2u);
    EXPECT_GT(t.phase("X").size(), 0u);
    EXPECT_EQ(t.other("dropped_events"), 0);
    EXPECT_EQ(t.other("cut_events"), 0);
}

struct adder : smarm::gen_server<int, int> {
    int total = 0;
    int handle_call(int n) override { return total += n; }
};

// A call is a flow to the server (the request through its inbox) and one
// back (the reply); the caller waits for "call reply".
TEST(Trace, AGenServerCallFlowsThereAndBack) {
    std::string caller, server;
    trace_file t = record([&] {
        auto ref = smarm::start<adder>();
        caller = pid_str(smarm::self_pid());
        server = pid_str(ref.id);
        for (int i = 0; i < 10; ++i)
            ASSERT_TRUE(smarm::call(ref, 1, 5s));
        smarm::request_stop(ref.id);
    });
    ASSERT_EQ(t.check_all(), "");
    EXPECT_EQ(t.flows_between(caller, server), 10);
    EXPECT_EQ(t.flows_between(server, caller), 10);
    std::set<std::string> reasons;
    for (const auto& w : t.waits_of(caller))
        reasons.insert(w);
    // The caller waits only for replies (it may not wait at all when the
    // server runs on the other scheduler and answers first, so not == 10).
    EXPECT_TRUE(reasons.empty() || reasons == std::set<std::string>{"call reply"});
    for (const auto& w : t.waits_of(server))
        EXPECT_EQ(w, "channel");
}

// Each primitive names its wait: timer, mutex, join, select, IO with the fd,
// the blocking pool.
TEST(Trace, EveryParkNamesItsReason) {
    std::string sleeper, locker, joiner, selector, reader, blocker;
    int rfd = -1;
    trace_file t = record([&] {
        // timer
        auto s = smarm::spawn([] { smarm::sleep(2ms); });
        sleeper = pid_str(s.id());
        (void)s.join();
        // mutex: held by us while the other waits for it
        smarm::mutex<int> m(0);
        auto g = m.lock();
        auto l = smarm::spawn([&] { *m.lock() += 1; });
        locker = pid_str(l.id());
        until_parked(l.id(), "mutex");
        { auto release = std::move(g); }
        (void)l.join();
        // join
        auto [go_tx, go_rx] = smarm::channel<int>();
        auto child = smarm::spawn([rx = std::move(go_rx)]() mutable { (void)rx.recv(); });
        auto j = smarm::spawn([&child] { (void)child.join(); });
        joiner = pid_str(j.id());
        until_parked(j.id(), "join");
        (void)go_tx.send(1);
        (void)j.join();
        // select over two channels
        auto [a_tx, a_rx] = smarm::channel<int>();
        auto [b_tx, b_rx] = smarm::channel<int>();
        auto sel = smarm::spawn([&a_rx, &b_rx] {
            const std::size_t i = smarm::select({a_rx, b_rx});
            EXPECT_EQ(i, 1u);
            (void)b_rx.try_recv();
        });
        selector = pid_str(sel.id());
        until_parked(sel.id(), "select");
        (void)b_tx.send(1);
        (void)sel.join();
        // IO read on a socket pair
        int sv[2];
        ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
        rfd = sv[0];
        auto r = smarm::spawn([fd = sv[0]] { (void)smarm::wait_readable(fd, 5s); });
        reader = pid_str(r.id());
        until_parked(r.id(), "io read");
        ASSERT_EQ(::write(sv[1], "x", 1), 1);
        (void)r.join();
        ::close(sv[0]);
        ::close(sv[1]);
        // the blocking pool
        auto b = smarm::spawn([] {
            (void)smarm::block_on_io([] {
                std::this_thread::sleep_for(2ms);
                return 1;
            });
        });
        blocker = pid_str(b.id());
        (void)b.join();
    });
    ASSERT_EQ(t.check_all(), "");
    auto has = [&](const std::string& pid, const std::string& reason) {
        for (const auto& w : t.waits_of(pid))
            if (w == reason) return true;
        return false;
    };
    EXPECT_TRUE(has(sleeper, "timer"));
    EXPECT_TRUE(has(locker, "mutex"));
    EXPECT_TRUE(has(joiner, "join"));
    EXPECT_TRUE(has(selector, "select"));
    EXPECT_TRUE(has(reader, "io read"));
    EXPECT_TRUE(has(blocker, "blocking pool"));
    // The IO wait names its fd, and its readiness was delivered.
    bool fd_named = false, ready = false;
    for (const auto& e : t.phase("b"))
        if (trace_file::str(e, "name") == "wait: io read" &&
            trace_file::arg(e, "fd") == std::to_string(rfd))
            fd_named = true;
    for (const auto& e : t.phase("i"))
        if (trace_file::str(e, "name") == "io ready" && trace_file::arg(e, "pid") == reader)
            ready = true;
    EXPECT_TRUE(fd_named);
    EXPECT_TRUE(ready);
    // The blocking job ran as a slice on a pool thread's own track.
    std::set<std::int64_t> pool_tracks;
    for (const auto& e : t.phase("M"))
        if (trace_file::str(e, "name") == "thread_name" &&
            trace_file::arg(e, "name").rfind("smarm-pool-", 0) == 0)
            pool_tracks.insert(e.at("tid").to_number<std::int64_t>());
    bool job = false;
    for (const auto& e : t.phase("X"))
        if (trace_file::arg(e, "for") == blocker)
            job = pool_tracks.count(e.at("tid").to_number<std::int64_t>()) &&
                  trace_file::num(e, "dur") >= 1000;  // it slept 2 ms
    EXPECT_TRUE(job);
    // The sleeper's wake was a timer firing for it.
    bool fired = false;
    for (const auto& e : t.phase("i"))
        fired |=
            trace_file::str(e, "name") == "timer fired" && trace_file::arg(e, "pid") == sleeper;
    EXPECT_TRUE(fired);
}

// Spawn gives the parent, a name registered later labels the actor, an
// exit says how it ended, a restart is an instant naming the child.
TEST(Trace, LifetimesNamesExitsAndRestarts) {
    std::string named, crasher_parent;
    trace_file t = record([&] {
        auto [tx, rx] = smarm::channel<int>();
        auto n = smarm::spawn([rx = std::move(rx)]() mutable {
            static constexpr smarm::name<int> me{"trace-test-named"};
            auto [mtx, mrx] = smarm::channel<int>();
            (void)smarm::register_name(me, mtx);
            (void)rx.recv();
        });
        named = pid_str(n.id());
        smarm::sleep(1ms);
        (void)tx.send(1);
        (void)n.join();
        auto crashes = std::make_shared<std::atomic<int>>(0);
        auto sup = smarm::start_supervisor(
            {}, {smarm::child_spec{"flaky", [crashes] {
                                       if (crashes->fetch_add(1) == 0)
                                           throw std::runtime_error("first run fails");
                                       smarm::sleep(1h);
                                   }}});
        crasher_parent = pid_str(sup.id);
        while (crashes->load() < 2)
            smarm::sleep(1ms);
        auto mon = smarm::monitor(sup.id);
        smarm::request_stop(sup.id);
        (void)mon.rx.recv();
    });
    ASSERT_EQ(t.check_all(), "");
    bool labelled = false, restart = false, exception_exit = false, stopped_exit = false;
    for (const auto& e : t.phase("b"))
        if (trace_file::arg(e, "pid") == named)
            labelled = trace_file::str(e, "name") == "trace-test-named " + named;
    for (const auto& e : t.phase("i"))
        if (trace_file::str(e, "name") == "restart flaky" &&
            trace_file::arg(e, "supervisor") == crasher_parent)
            restart = true;
    for (const auto& e : t.phase("e")) {
        exception_exit |= trace_file::arg(e, "exit") == "exception";
        stopped_exit |= trace_file::arg(e, "exit") == "stopped";
    }
    // The name came after the spawn: the export labels the actor by it.
    EXPECT_TRUE(labelled);
    EXPECT_TRUE(restart);
    EXPECT_TRUE(exception_exit);
    EXPECT_TRUE(stopped_exit);
    // Every spawn names its parent.
    int with_parent = 0;
    for (const auto& e : t.phase("b"))
        with_parent += !trace_file::arg(e, "parent").empty();
    EXPECT_GE(with_parent, 3);
}

/// Sends and receives `pairs` flows on this (non-actor) thread: two events
/// each, and nothing else records here.
void flows_on_a_thread(int pairs) {
    std::thread([pairs] {
        for (int i = 0; i < pairs; ++i)
            smarm::detail::trace_recv(smarm::detail::trace_send());
    }).join();
}

// A full ring in an interval recording keeps its first events and counts
// every refused one; a flight recorder keeps the newest and counts the
// overwritten. Both exactly.
TEST(Trace, TheDroppedCountIsExactWhenTheRingOverflows) {
    const std::size_t ring_events = (64 << 10) / 32;  // 2048
    const int pairs = 1074;                           // 2148 events: 100 too many
    for (bool flight : {false, true}) {
        smarm::trace::start({.buffer_bytes = 64 << 10, .flight = flight});
        flows_on_a_thread(pairs);
        smarm::trace::stop();
        smarm::trace::summary sum;
        const std::string json = smarm::trace::to_json({}, &sum);
        trace_file t(json);
        ASSERT_EQ(t.check_all(), "") << flight;
        EXPECT_EQ(sum.records, ring_events) << flight;
        EXPECT_EQ(sum.dropped, 100u) << flight;
        EXPECT_EQ(t.other("dropped_events"), 100) << flight;
        EXPECT_EQ(t.phase("s").size(), ring_events / 2) << flight;
        // The flight recorder's kept flows are the newest ones: their ids
        // run to the last one sent.
        std::uint64_t lo = UINT64_MAX, hi = 0;
        for (const auto& e : t.phase("s")) {
            const auto id = e.at("id").to_number<std::uint64_t>();
            lo = std::min(lo, id);
            hi = std::max(hi, id);
        }
        EXPECT_EQ(hi - lo + 1, ring_events / 2) << flight;
    }
}

// Recording while a writer runs: every event read is whole (a torn event
// would be a flow id without its pair or a bad kind), across many exports.
TEST(Trace, AFlightRecorderReadWhileWrittenKeepsOnlyWholeEvents) {
    // 8192 events; the writer records a pair, then sleeps (~20k events/s:
    // it laps the ring in ~0.4 s, a read copies it in well under that even
    // under TSan, so most reads keep most of the window while the writer
    // still overwrites during them).
    constexpr std::size_t ring_events = (256 << 10) / 32;
    smarm::trace::start({.buffer_bytes = 256 << 10, .flight = true});
    std::atomic<bool> stop{false};
    std::atomic<std::uint64_t> written{0};
    std::thread writer([&] {
        while (!stop.load(std::memory_order_relaxed)) {
            smarm::detail::trace_recv(smarm::detail::trace_send());
            written.fetch_add(2, std::memory_order_relaxed);
            std::this_thread::sleep_for(50us);
        }
    });
    // The ring has wrapped before the first read.
    while (written.load() < 2 * ring_events)
        std::this_thread::sleep_for(1ms);
    int full_reads = 0;
    for (int i = 0; i < 10; ++i) {
        smarm::trace::summary sum;
        trace_file t(smarm::trace::to_json({}, &sum));
        ASSERT_EQ(t.error, "");
        ASSERT_EQ(t.check_fields(), "");
        EXPECT_GT(sum.dropped, 0u);
        full_reads += sum.records > ring_events / 2;
        // Every kept event is whole: each send's receive is its next event,
        // so all but the two ends of the window pair up (a torn event
        // would break its pair).
        const auto starts = t.phase("s").size(), ends = t.phase("f").size();
        EXPECT_EQ(starts, ends);
        EXPECT_GE(2 * starts + 2, sum.records) << "records " << sum.records;
    }
    EXPECT_GE(full_reads, 5);  // most reads keep most of the window
    stop = true;
    writer.join();
    smarm::trace::stop();
}

// The size cap keeps the newest events and says so in the file.
TEST(Trace, TheSizeCapCutsTheOldestAndSaysSo) {
    smarm::trace::start();
    flows_on_a_thread(2000);
    smarm::trace::stop();
    smarm::trace::summary sum;
    const std::string json = smarm::trace::to_json({.max_bytes = 16 << 10}, &sum);
    EXPECT_LE(json.size(), std::size_t{16} << 10);
    trace_file t(json);
    ASSERT_EQ(t.error, "");
    EXPECT_EQ(t.check_fields(), "");
    EXPECT_GT(sum.cut, 0u);
    EXPECT_EQ(t.other("cut_events"), static_cast<std::int64_t>(sum.cut));
    EXPECT_NE(json.find("were left out to stay under 16384 bytes"), std::string::npos);
    EXPECT_THROW((void)smarm::trace::to_json({.max_bytes = 100}), std::invalid_argument);
}

TEST(Trace, OffRecordsNothingAndBadSizesAreRefused) {
    smarm::trace::start();
    smarm::trace::stop();
    EXPECT_FALSE(smarm::trace::recording());
    flows_on_a_thread(100);
    smarm::trace::summary sum;
    (void)smarm::trace::to_json({}, &sum);
    EXPECT_EQ(sum.records, 0u);
    try {
        smarm::trace::start({.buffer_bytes = 1000});
        FAIL() << "a 1000-byte ring was accepted";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("buffer_bytes 1000"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(smarm::trace::recording());
}

TEST(Trace, DumpWritesTheFileAndNamesAPathItCannotWrite) {
    smarm::trace::start();
    flows_on_a_thread(10);
    smarm::trace::stop();
    const std::string path =
        ::testing::TempDir() + "trace_test_" + std::to_string(::getpid()) + ".json";
    const auto sum = smarm::trace::dump(path);
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    EXPECT_EQ(ss.str().size(), sum.bytes);
    EXPECT_EQ(trace_file(ss.str()).check_all(), "");
    std::remove(path.c_str());
    try {
        (void)smarm::trace::dump("/nonexistent-dir/t.json");
        FAIL() << "no error";
    } catch (const std::system_error& e) {
        EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/t.json"), std::string::npos);
    }
}

}  // namespace
