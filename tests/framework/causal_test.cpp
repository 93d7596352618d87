// The causal profiler's rules (smarm/causal.hpp), each on its own: site
// nesting, the core's ledger paid at observation points off the slice and
// forgiven while idle, an actor's own debt only from a wait on IO (kept over
// a yield, waived by a park on an actor, none at birth), the tail flushed at
// site exit, the sample clock re-armed at site
// entry, timers shifted into virtual time and wall timers exempt; latency
// points' arithmetic; the controller's plan checks, thin windows and output.

#include <smarm/causal.hpp>
#include <smarm/channel.hpp>
#include <smarm/introspect.hpp>
#include <smarm/io.hpp>
#include <smarm/progress.hpp>
#include <smarm/registry.hpp>
#include <smarm/runtime.hpp>
#include <smarm/timer.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <x86intrin.h>

#include <atomic>
#include <chrono>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>

#include <smarm_test/coz_grammar.hpp>
#include <smarm_test/run.hpp>

using namespace std::chrono_literals;
namespace causal = smarm::causal;

namespace {

/// Compute with no observation point in it (the loop never yields).
void burn(std::chrono::nanoseconds d) {
    const auto until = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < until) {
    }
}

double ms(std::uint64_t ticks) {
    return causal::ticks_to_ns(ticks) / 1e6;
}

/// A few milliseconds of debt, in ticks.
std::uint64_t debt_ticks(double ms_) {
    std::uint64_t t = 1;
    while (causal::ticks_to_ns(t) < ms_ * 1e6)
        t *= 2;
    return t;
}

}  // namespace

TEST(Causal, GuardsAreInertOutsideAnActorAndBadExperimentsAreRefused) {
    const auto s = causal::register_site("outside");
    {
        auto g = SMARM_CAUSAL_SITE("outside");
        EXPECT_EQ(causal::current_site(), 0u);
    }
    EXPECT_EQ(causal::register_site("outside"), s);
    EXPECT_EQ(causal::site_name(s), "outside");
    EXPECT_THROW(causal::begin(0, 10), std::invalid_argument);
    EXPECT_THROW(causal::begin(s, 101), std::invalid_argument);
    EXPECT_THROW(causal::begin(987654, 10), std::invalid_argument);
    EXPECT_FALSE(causal::running());
}

SMARM_TEST(Causal, SitesNestAndSurviveYields) {
    EXPECT_EQ(causal::current_site(), 0u);
    {
        auto outer = SMARM_CAUSAL_SITE("outer");
        const auto o = causal::current_site();
        EXPECT_EQ(causal::site_name(o), "outer");
        {
            auto inner = SMARM_CAUSAL_SITE("inner");
            EXPECT_EQ(causal::site_name(causal::current_site()), "inner");
            smarm::yield_now();  // may resume on the other scheduler
            EXPECT_EQ(causal::site_name(causal::current_site()), "inner");
        }
        EXPECT_EQ(causal::current_site(), o);
    }
    EXPECT_EQ(causal::current_site(), 0u);
}

/// Parks the calling actor on `fd` until it is readable while `debt` ticks
/// are injected: it then owes them itself.
void wait_on_io_while_injected(std::uint64_t debt) {
    int fds[2];
    ASSERT_EQ(::pipe2(fds, O_NONBLOCK | O_CLOEXEC), 0);
    const smarm::pid me = smarm::self_pid();
    std::thread world([&] {
        // After the park (a sleep was not enough under TSan's load).
        for (;;) {
            auto a = smarm::introspect::info(me);
            if (a && a->state == "parked" && a->wait == "io read") break;
            std::this_thread::sleep_for(1ms);
        }
        causal::inject_for_test(debt);
        ASSERT_EQ(::write(fds[1], "x", 1), 1);
    });
    (void)smarm::wait_readable(fds[0]);
    world.join();
    ::close(fds[0]);
    ::close(fds[1]);
}

SMARM_TEST(Causal, ANewActorOwesNothing) {
    // The slot of an actor that died owing is reused: the debt is not.
    for (int i = 0; i < 20; ++i) {
        smarm::spawn([] {
            wait_on_io_while_injected(debt_ticks(1));
            EXPECT_GT(causal::my_debt(), 0u);
        }).join();
        smarm::spawn([] { EXPECT_EQ(causal::my_debt(), 0u); }).join();
    }
}

SMARM_TEST(Causal, AYieldKeepsAnActorsOwnDebtAParkOnAnActorWaivesIt) {
    auto [tx, rx] = smarm::channel<int>();
    auto [ready_tx, ready_rx] = smarm::channel<int>();
    auto h = smarm::spawn([rx = std::move(rx), ready = std::move(ready_tx)]() mutable {
        wait_on_io_while_injected(debt_ticks(1));
        const std::uint64_t owed = causal::my_debt();
        EXPECT_GT(owed, 0u);
        smarm::yield_now();  // runnable all along: keeps the debt
        EXPECT_EQ(causal::my_debt(), owed);
        (void)ready.send(1);
        (void)rx.recv();  // woken by an actor of the same timeline
        EXPECT_EQ(causal::my_debt(), 0u);
    });
    ASSERT_TRUE(ready_rx.recv());
    smarm_test::await_parked(h.id());  // in recv
    (void)tx.send(1);
    h.join();
}

SMARM_TEST_N(Causal, AnIdleCoreIsForgiven, 1) {
    causal::inject_for_test(debt_ticks(2));
    EXPECT_LT(causal::core_delay(), causal::global_delay());
    smarm::sleep(2ms);  // the only actor sleeps: the core idles
    EXPECT_EQ(causal::core_delay(), causal::global_delay());
}

SMARM_TEST_N(Causal, DebtIsPaidAtObservationPointsOffTheSlice, 1) {
    const auto site = causal::register_site("elsewhere");
    // Nobody is in the site: the window injects nothing, but what the core
    // owes from within it is paid by spinning at observation points (one
    // scheduler, and this actor keeps it busy: never idle, never forgiven).
    const auto before = causal::totals();
    causal::begin(site, 0);
    const std::uint64_t owed = debt_ticks(3);  // what the core lagged before is waived
    causal::inject_for_test(owed);
    const auto t0 = std::chrono::steady_clock::now();
    while (causal::core_delay() < causal::global_delay() &&
           std::chrono::steady_clock::now() - t0 < 10s)
        smarm::check();
    causal::end();
    const auto d = causal::totals() - before;
    EXPECT_EQ(causal::core_delay(), causal::global_delay());
    EXPECT_GE(d.absorbed, owed);
    EXPECT_EQ(d.injected, 0u);
}

SMARM_TEST_N(Causal, DebtFromAnEarlierWindowIsForgivenNotPaid, 1) {
    // Paid inside the next window, an earlier window's debt slowed it
    // without being subtracted (a live profile's 0% window after a 50% one
    // ran at 8% of its rate).
    const auto site = causal::register_site("elsewhere");
    causal::begin(site, 0);
    causal::inject_for_test(debt_ticks(50));  // owed at the window's end
    causal::end();
    const auto before = causal::totals();
    causal::begin(site, 0);
    for (int i = 0; i < 1000; ++i)
        smarm::check();
    causal::end();
    const auto d = causal::totals() - before;
    EXPECT_EQ(d.absorbed, 0u);
    EXPECT_GE(d.forgiven, debt_ticks(50));
    EXPECT_EQ(causal::core_delay(), causal::global_delay());
}

SMARM_TEST(Causal, TheTailIsFlushedAtSiteExitAndEntryReArms) {
    const auto site = causal::register_site("hot");
    causal::begin(site, 50);
    // Entry re-arms: 60 ms of compute before the site is never its time
    // (without the re-arm it would inject >= 30 ms). An interval the OS
    // stretched past the sanity bound is discarded, not lost: both count.
    burn(60ms);
    auto before = causal::totals();
    { auto g = SMARM_CAUSAL_SITE("hot"); }
    auto d = causal::totals() - before;
    EXPECT_LT(ms(d.injected + d.discarded), 30.0);
    // Exit flushes: 4 ms in the site with no observation point inside is
    // at least 2 ms of injected delay at 50%, credited to this core.
    before = causal::totals();
    const std::uint64_t mine = causal::core_delay();
    {
        auto g = SMARM_CAUSAL_SITE("hot");
        burn(4ms);
    }
    d = causal::totals() - before;
    causal::end();
    EXPECT_GE(ms(d.injected + d.discarded), 2.0 * 0.999);
    EXPECT_EQ(causal::core_delay() - mine, d.injected);
}

SMARM_TEST(Causal, AnInSiteSwitchOutFlushesItsTail) {
    const auto site = causal::register_site("parks");
    causal::begin(site, 100);
    auto [tx, rx] = smarm::channel<int>();
    auto h = smarm::spawn([tx = std::move(tx)]() mutable {
        smarm::sleep(50ms);  // long after the receiver parked
        (void)tx.send(1);
    });
    const auto before = causal::totals();
    {
        auto g = SMARM_CAUSAL_SITE("parks");
        burn(3ms);
        (void)rx.recv();  // parks inside the site
    }
    const auto d = causal::totals() - before;
    causal::end();
    h.join();
    EXPECT_EQ(d.tail_park_n + d.discarded_n, 1u);
    EXPECT_GE(ms(d.tail_park + d.discarded), 3.0 * 0.999);
}

SMARM_TEST_N(Causal, AYieldInTheSiteCountsItsRunQueueWaitOffCpu, 1) {
    // One scheduler: while the in-site actor waits in the run queue after
    // its yield, `other` computes 3 ms. That wait is counted (measure-only)
    // at the speedup's share; a park inside the site is not.
    const auto site = causal::register_site("yields");
    std::atomic<bool> go{false};
    auto other = smarm::spawn([&go] {
        while (!go.load())
            smarm::yield_now();
        burn(3ms);
    });
    causal::begin(site, 50);
    const auto before = causal::totals();
    {
        auto g = SMARM_CAUSAL_SITE("yields");
        go = true;
        smarm::yield_now();  // runnable: other runs its 3 ms first
    }
    const auto d = causal::totals() - before;
    causal::end();
    other.join();
    EXPECT_EQ(d.offcpu_n, 1u);  // one yield in the site, one gap
    EXPECT_GE(ms(d.offcpu), 3.0 * 0.5 * 0.999);
}

// ---- the blocked-thread rule for the world outside ----

SMARM_TEST(Causal, AWaitOnIoOwesTheDelayAWaitOnAnActorDoesNot) {
    int fds[2];
    ASSERT_EQ(::pipe2(fds, O_NONBLOCK | O_CLOEXEC), 0);
    const std::uint64_t debt = debt_ticks(20);
    auto h = smarm::spawn([fd = fds[0], debt] {
        (void)smarm::wait_readable(fd);  // woken by the kernel, not an actor
        EXPECT_GE(causal::my_debt(), debt);
    });
    smarm_test::await_parked(h.id());
    // Injected after the park began, no experiment running: the wait is
    // marked external all the same (and nothing pays outside a window).
    causal::inject_for_test(debt);
    ASSERT_EQ(::write(fds[1], "x", 1), 1);
    h.join();
    ::close(fds[0]);
    ::close(fds[1]);
}

SMARM_TEST(Causal, AWaitOnTheWorldOutsideInsideTheSiteIsTheSitesTime) {
    // ~20 ms on a pipe inside the site at 50%: half of it attributed ("if
    // that IO were 50% faster"), as it passes, and not owed by the waiter;
    // the same wait on an actor inside the site attributes nothing.
    const auto site = causal::register_site("waits_outside");
    int fds[2];
    ASSERT_EQ(::pipe2(fds, O_NONBLOCK | O_CLOEXEC), 0);
    causal::begin(site, 50);
    auto before = causal::totals();
    double waited_ms = 0;
    {
        auto g = SMARM_CAUSAL_SITE("waits_outside");
        std::thread world([&] {
            std::this_thread::sleep_for(20ms);
            ASSERT_EQ(::write(fds[1], "x", 1), 1);
        });
        const auto t0 = std::chrono::steady_clock::now();
        (void)smarm::wait_readable(fds[0]);
        waited_ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count();
        world.join();
        EXPECT_EQ(causal::my_debt(), 0u);  // nobody else injected
    }
    auto d = causal::totals() - before;
    EXPECT_EQ(d.outside_n, 1u);
    // Half the wait as measured around it, less what entering and leaving
    // the wait took (a millisecond is generous, sanitizers included).
    ASSERT_GT(waited_ms, 10.0);
    EXPECT_GE(ms(d.outside), 0.5 * (waited_ms - 1.0));
    EXPECT_LE(ms(d.outside), 0.5 * waited_ms);
    EXPECT_GE(d.injected, d.outside);

    auto [tx, rx] = smarm::channel<int>();
    auto h = smarm::spawn([tx = std::move(tx)]() mutable {
        smarm::sleep(20ms);
        (void)tx.send(1);
    });
    before = causal::totals();
    {
        auto g = SMARM_CAUSAL_SITE("waits_outside");
        (void)rx.recv();  // an actor of the same timeline
    }
    d = causal::totals() - before;
    causal::end();
    h.join();
    EXPECT_EQ(d.outside_n, 0u);
    EXPECT_LT(ms(d.injected), 5.0);
    ::close(fds[0]);
    ::close(fds[1]);
}

SMARM_TEST(Causal, AnIoWaitOverLeavesNoMarkOnTheNextPark) {
    // The IO wait ends while no experiment runs; the actor's next park, on
    // an actor, must still owe nothing.
    int fds[2];
    ASSERT_EQ(::pipe2(fds, O_NONBLOCK | O_CLOEXEC), 0);
    ASSERT_EQ(::write(fds[1], "x", 1), 1);
    auto [tx, rx] = smarm::channel<int>();
    auto [done_tx, done_rx] = smarm::channel<int>();
    auto h = smarm::spawn([fd = fds[0], rx = std::move(rx), done = std::move(done_tx)]() mutable {
        (void)smarm::wait_readable(fd);
        (void)done.send(1);
        (void)rx.recv();  // woken by an actor
        EXPECT_EQ(causal::my_debt(), 0u);
    });
    ASSERT_TRUE(done_rx.recv());
    smarm_test::await_parked(h.id());  // in recv
    causal::inject_for_test(debt_ticks(20));
    (void)tx.send(1);
    h.join();
    ::close(fds[0]);
    ::close(fds[1]);
}

// ---- virtual time ----

SMARM_TEST_CLOCK(Causal, ATimerShiftsByTheDelayInjectedSinceItWasArmed) {
    auto [tx, rx] = smarm::channel<int>();
    auto [wtx, wrx] = smarm::channel<int>();
    (void)smarm::send_after(20ms, tx, 1);
    (void)smarm::send_after_wall(20ms, wtx, 2);
    const std::uint64_t d = debt_ticks(5);
    const auto shift = std::chrono::nanoseconds(static_cast<std::int64_t>(causal::ticks_to_ns(d)));
    causal::inject_for_test(d);  // as if 5+ ms of delay was injected meanwhile
    clock.advance(20ms);
    EXPECT_EQ(*wrx.try_recv().value, 2);  // wall-anchored: on time
    EXPECT_FALSE(rx.try_recv());          // virtual: not due yet
    // More delay while it waits moves it again.
    causal::inject_for_test(d);
    clock.advance(shift);
    EXPECT_FALSE(rx.try_recv());
    clock.advance(shift - 1us);
    EXPECT_FALSE(rx.try_recv());
    clock.advance(2us);
    EXPECT_EQ(*rx.try_recv().value, 1);
}

SMARM_TEST_CLOCK(Causal, SleepIsVirtualSleepWallIsNot) {
    const std::uint64_t d = debt_ticks(5);
    const auto shift = std::chrono::nanoseconds(static_cast<std::int64_t>(causal::ticks_to_ns(d)));
    auto [tx, rx] = smarm::channel<int>();
    auto a = smarm::spawn([tx] {
        smarm::sleep(10ms);
        (void)tx.send(1);
    });
    auto b = smarm::spawn([tx] {
        smarm::sleep_wall(10ms);
        (void)tx.send(2);
    });
    smarm_test::await_parked(a.id());
    smarm_test::await_parked(b.id());
    causal::inject_for_test(d);
    clock.advance(10ms);
    EXPECT_EQ(*rx.recv(), 2);
    EXPECT_FALSE(rx.try_recv());
    clock.advance(shift + 1us);
    EXPECT_EQ(*rx.recv(), 1);
    a.join();
    b.join();
}

SMARM_TEST_CLOCK(Causal, SendAfterByNameResolvesWhenItFires) {
    constexpr smarm::name<int> target("causal_test.target");
    (void)smarm::send_after(5ms, target, 7);  // nobody holds the name yet
    auto [tx, rx] = smarm::channel<int>();
    ASSERT_TRUE(smarm::register_name(target, tx));
    clock.advance(5ms);
    EXPECT_EQ(*rx.recv(), 7);
    (void)smarm::send_after_wall(5ms, target, 8);
    clock.advance(5ms);
    EXPECT_EQ(*rx.recv(), 8);
}

// ---- latency points ----

TEST(CausalLatency, LittlesLawOverAWindowIsExactAndWrapsSafely) {
    for (const std::uint64_t base : {std::uint64_t{0}, std::uint64_t{0xffff'ffff'ffff'f000}}) {
        // Two in flight before t0 = base+1000; arrivals at +1100, +1200,
        // departures at +1300, +1500; t1 = +2000. Integral of N(t):
        // 2*1000 + 900 + 800 - 700 - 500 = 2500 over 2 arrivals.
        smarm::latency_point::totals b{2, 0, base * 2 + 300, 0};
        smarm::latency_point::totals a{4, 2, b.arrival_ticks + (base + 1100) + (base + 1200),
                                       (base + 1300) + (base + 1500)};
        const auto w = smarm::latency_point::between(b, a, base + 1000, base + 2000);
        EXPECT_EQ(w.arrivals, 2u);
        EXPECT_EQ(w.departures, 2u);
        EXPECT_EQ(w.in_flight_end, 2);
        EXPECT_DOUBLE_EQ(w.occupancy_ticks, 2500.0);
        EXPECT_DOUBLE_EQ(w.mean_ticks(), 1250.0);
    }
}

TEST(CausalLatency, EdgesSumByName) {
    const auto before = smarm::latency_point::snapshot()["causal_test.lat"];
    for (int i = 0; i < 3; ++i)
        SMARM_LATENCY_BEGIN("causal_test.lat");
    SMARM_LATENCY_END("causal_test.lat");
    const auto after = smarm::latency_point::snapshot()["causal_test.lat"];
    EXPECT_EQ(after.arrivals - before.arrivals, 3u);
    EXPECT_EQ(after.departures - before.departures, 1u);
    EXPECT_EQ(after.in_flight(), 2u);
}

// A writer hits one edge as fast as it can while a reader takes windows:
// the window's hits must have ticks inside it, Sum(t1 - t_i) in
// [0, hits x (t1 - t0 + slack)]. A hit whose count the reader saw without
// its tick would put that sum off by the machine's uptime in ticks.
TEST(CausalLatency, AWindowReadDuringHitsIsConsistent) {
    std::atomic<bool> stop{false}, started{false};
    std::thread writer([&] {
        while (!stop.load(std::memory_order_relaxed)) {
            SMARM_LATENCY_BEGIN("causal_test.torn");
            started.store(true, std::memory_order_relaxed);
        }
    });
    while (!started.load())  // the reader must overlap the writer
        std::this_thread::yield();
    constexpr std::uint64_t mask = (std::uint64_t{1} << smarm::latency_point::tick_bits) - 1;
    const double slack = 50e6 / smarm::causal::ticks_to_ns(1'000'000) * 1e6;  // 50 ms
    std::uint64_t t0 = smarm::detail::ticks();
    auto before = smarm::latency_point::snapshot()["causal_test.torn"];
    unsigned windows_with_hits = 0;
    // 20000 windows, and more until 200 of them saw hits (a writer
    // descheduled by a loaded machine only makes the test take longer).
    for (int i = 0; i < 20000 || windows_with_hits < 200; ++i) {
        const auto after = smarm::latency_point::snapshot()["causal_test.torn"];
        // rdtsc is not ordered after earlier loads: without the lfence it
        // can read the clock before the snapshot's loads complete, and a
        // hit counted by the snapshot then carries a tick a few ticks past
        // t1 (seen: -7 under ctest -j2).
        _mm_lfence();
        const std::uint64_t t1 = smarm::detail::ticks();
        const std::uint64_t hits = after.arrivals - before.arrivals;
        std::uint64_t v = (hits * t1 - (after.arrival_ticks - before.arrival_ticks)) & mask;
        const auto to_t1 = static_cast<double>(static_cast<std::int64_t>(v << 8) >> 8);
        ASSERT_GE(to_t1, 0.0) << "window " << i << ", " << hits << " hits";
        ASSERT_LE(to_t1, static_cast<double>(hits) * (static_cast<double>(t1 - t0) + slack))
            << "window " << i << ", " << hits << " hits";
        windows_with_hits += hits > 0;
        before = after;
        t0 = t1;
    }
    stop = true;
    writer.join();
    EXPECT_GE(windows_with_hits, 200u);
}

// ---- the controller ----

TEST(CausalRun, BadPlansAreRefusedByName) {
    (void)causal::register_site("plan_site");
    auto refused = [](causal::plan p, const char* what) {
        try {
            (void)causal::run(p);
            ADD_FAILURE() << "accepted: " << what;
        } catch (const std::invalid_argument& e) {
            EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
        }
    };
    causal::plan p;
    p.speedups = {25, 50};
    refused(p, "no 0% baseline");
    p.speedups = {0, 120};
    refused(p, "120%");
    p = {};
    p.sites = {"no_such_site"};
    refused(p, "\"no_such_site\"");
    p = {};
    p.max_window = 10ms;
    refused(p, "max_window");
    p = {};
    p.mode = causal::plan::schedule::randomized;
    p.experiments = 0;
    refused(p, "experiments");
}

SMARM_TEST(CausalRun, ThinWindowsDoubleUpToTheLongestAndAreNotCounted) {
    (void)causal::register_site("thin_site");
    causal::plan p;
    p.sites = {"thin_site"};
    p.speedups = {0};
    p.window = 20ms;
    p.max_window = 80ms;
    p.cooldown = 0ms;
    p.points = {"causal_test.never_visited"};
    const auto pr = causal::run(p);
    ASSERT_EQ(pr.windows.size(), 3u);  // 20, 40, 80 ms: thin each time
    EXPECT_GE(pr.windows[0].wall, 20ms);
    EXPECT_GE(pr.windows[1].wall, 40ms);
    EXPECT_GE(pr.windows[2].wall, 80ms);
    for (const auto& w : pr.windows)
        EXPECT_TRUE(w.thin);
    EXPECT_TRUE(pr.cells().empty());
    EXPECT_EQ(causal::render_coz(pr).find("experiment\t"), std::string::npos);
}

namespace {
/// Compute in small steps with an observation point between them.
void work(std::chrono::microseconds d) {
    const auto until = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < until)
        smarm::check();
}
}  // namespace

SMARM_TEST(CausalRun, ASweepMeasuresEveryCellAndRendersCozLines) {
    std::atomic<bool> stop{false};
    auto worker = smarm::spawn([&stop] {
        while (!stop.load(std::memory_order_relaxed)) {
            {
                auto g = SMARM_CAUSAL_SITE("sweep_site");
                work(200us);
            }
            SMARM_PROGRESS("causal_test.items");
            SMARM_LATENCY_BEGIN("causal_test.item");
            work(50us);
            SMARM_LATENCY_END("causal_test.item");
        }
    });
    causal::plan p;
    p.sites = {"sweep_site"};
    p.speedups = {0, 50};
    p.window = 100ms;
    p.points = {"causal_test.items"};
    const auto pr = causal::run(p);
    stop = true;
    worker.join();
    ASSERT_EQ(pr.windows.size(), 2u);
    EXPECT_EQ(pr.windows[0].speedup, 0u);
    EXPECT_EQ(pr.windows[0].injected, 0ns);
    EXPECT_GT(pr.windows[1].injected, 0ns);
    EXPECT_GT(pr.windows[1].samples, 0u);
    EXPECT_TRUE(pr.impact("sweep_site", 50, "causal_test.items").has_value());
    EXPECT_TRUE(pr.impact("sweep_site", 0, "causal_test.items").has_value());
    EXPECT_DOUBLE_EQ(*pr.impact("sweep_site", 0, "causal_test.items"), 0.0);
    const auto cell = pr.find("sweep_site", 0);
    ASSERT_TRUE(cell.has_value());
    ASSERT_TRUE(cell->latency.count("causal_test.item"));
    EXPECT_GT(cell->latency.at("causal_test.item").mean_ns, 0.0);

    // Coz's viewer format: tab-separated key=value fields.
    const std::string coz = causal::render_coz(pr);
    EXPECT_EQ(coz.rfind("startup\ttime=", 0), 0u);
    EXPECT_NE(coz.find("experiment\tselected=sweep_site\tspeedup=0.50\tduration="),
              std::string::npos);
    EXPECT_NE(coz.find("\tselected-samples="), std::string::npos);
    EXPECT_NE(coz.find("throughput-point\tname=causal_test.items\tdelta="), std::string::npos);
    EXPECT_NE(coz.find("latency-point\tname=causal_test.item\tarrivals="), std::string::npos);
    EXPECT_NE(coz.find("\nruntime\ttime="), std::string::npos);
    EXPECT_EQ(smarm_test::coz_grammar_errors(coz), "");
    const std::string sum = causal::render_summary(pr);
    EXPECT_NE(sum.find("site sweep_site"), std::string::npos);
    EXPECT_NE(sum.find("throughput causal_test.items"), std::string::npos);
    const std::string js = causal::render_json(pr);
    EXPECT_EQ(js.front(), '{');
    EXPECT_NE(js.find("\"cells\":["), std::string::npos);
    const std::string gp = causal::render_gnuplot(pr, "x.svg", "causal_test.items");
    EXPECT_NE(gp.find("set terminal svg"), std::string::npos);
    EXPECT_NE(gp.find("title 'sweep_site'"), std::string::npos);
    EXPECT_THROW((void)causal::render_gnuplot(pr, "x.gif"), std::invalid_argument);
}

SMARM_TEST(CausalRun, ARandomizedRunFromAnOsThreadSteps5PercentWithExtraBaselines) {
    std::atomic<bool> stop{false};
    auto worker = smarm::spawn([&stop] {
        while (!stop.load(std::memory_order_relaxed)) {
            {
                auto g = SMARM_CAUSAL_SITE("random_site");
                work(100us);
            }
            SMARM_PROGRESS("causal_test.random_items");
        }
    });
    causal::profile pr;
    std::thread controller([&] {  // not an actor: the controller sleeps the thread
        causal::plan p;
        p.mode = causal::plan::schedule::randomized;
        p.sites = {"random_site"};
        p.experiments = 24;
        p.window = 10ms;
        p.cooldown = 0ms;
        p.seed = 7;
        p.points = {"causal_test.random_items"};
        pr = causal::run(p);
    });
    smarm::block_on_io([&] { controller.join(); });  // not holding a scheduler
    stop = true;
    worker.join();
    ASSERT_EQ(pr.windows.size(), 24u);
    std::set<unsigned> speedups;
    unsigned zero = 0;
    for (const auto& w : pr.windows) {
        EXPECT_EQ(w.site, "random_site");
        EXPECT_EQ(w.speedup % 5, 0u);
        EXPECT_LE(w.speedup, 100u);
        speedups.insert(w.speedup);
        zero += w.speedup == 0 ? 1 : 0;
    }
    // 21 steps, 7 extra weights on 0%: about a quarter of windows are
    // baselines (seed 7 fixes the draw, so this cannot flake).
    EXPECT_GE(zero, 2u);
    EXPECT_GE(speedups.size(), 6u);
}

TEST(CozGrammar, TheCheckerRefusesWhatTheViewerCannotRead) {
    using smarm_test::coz_grammar_errors;
    const std::string ok =
        "startup\ttime=1\nexperiment\tselected=a\tspeedup=0.25\tduration=9\n"
        "throughput-point\tname=p\tdelta=3\nruntime\ttime=10\n";
    EXPECT_EQ(coz_grammar_errors(ok), "");
    for (const char* bad : {
             "startup\ttime=1\nexperiment\tselected=a\tspeedup=1.5\tduration=9\n",
             "startup\ttime=1\nexperiment\tselected=a\tduration=9\n",
             "startup\ttime=1\nthroughput-point\tname=p\tdelta=3\n",
             "startup\ttime=1\nexperiment\tselected=a\tspeedup=0\tduration=-4\n",
             "startup\ttime=1\nexperiment\tselected=a\tspeedup=0\tduration=4\tbare\n",
             "startup\ttime=1\nwhatever\tx=1\n",
             "experiment\tselected=a\tspeedup=0\tduration=4\n",
         })
        EXPECT_NE(coz_grammar_errors(bad), "") << bad;
}

TEST(CozGrammar, NamesWithTabsAndEqualsSignsStayOneField) {
    causal::profile pr;
    causal::window w;
    w.site = "GET /a\tb=c";
    w.speedup = 50;
    w.wall = std::chrono::milliseconds(10);
    w.throughput["x=y"] = 7;
    w.latency["l\tm"] = causal::latency_sample{3, 3, 0, 1000.0};
    pr.windows.push_back(w);
    const std::string coz = causal::render_coz(pr);
    EXPECT_EQ(smarm_test::coz_grammar_errors(coz), "") << coz;
    EXPECT_NE(coz.find("selected=GET /a_b_c\t"), std::string::npos) << coz;
    EXPECT_NE(coz.find("name=x_y\tdelta=7"), std::string::npos) << coz;
}
