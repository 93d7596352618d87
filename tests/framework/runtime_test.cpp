#include <smarm/channel.hpp>
#include <smarm/introspect.hpp>
#include <smarm/runtime.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include <smarm_test/run.hpp>

using namespace std::chrono_literals;
using steady = smarm_test::steady;

namespace {

SMARM_TEST(Runtime, SpawnJoinReportsExitPanicAndStopped) {
    auto ok = smarm::spawn([] {});
    auto bad = smarm::spawn([] { throw std::runtime_error("boom"); });
    auto stop = smarm::spawn([] { throw smarm::stopped{}; });
    EXPECT_EQ(ok.join().kind, smarm::exit_kind::exit);
    auto o = bad.join();
    ASSERT_EQ(o.kind, smarm::exit_kind::panic);
    EXPECT_THROW(o.rethrow_if_panic(), std::runtime_error);
    EXPECT_EQ(stop.join().kind, smarm::exit_kind::stopped);
}

SMARM_TEST(Runtime, SelfPidIsStableAndDistinct) {
    smarm::pid me = smarm::self_pid();
    EXPECT_TRUE(me.valid());
    std::atomic<bool> distinct{false};
    smarm::spawn([&] { distinct = smarm::self_pid() != me; }).join();
    EXPECT_TRUE(distinct.load());
    EXPECT_EQ(smarm::self_pid(), me);
}

TEST(Runtime, ActorOnlyCallsOutsideRunAreClearErrors) {
    try {
        (void)smarm::self_pid();
        FAIL() << "self_pid outside run must throw";
    } catch (const std::logic_error& e) {
        EXPECT_NE(std::string(e.what()).find("smarm::self_pid"), std::string::npos) << e.what();
    }
    EXPECT_THROW(smarm::spawn([] {}), std::logic_error);
    EXPECT_THROW(smarm::yield_now(), std::logic_error);
    EXPECT_THROW(smarm::sleep(1ms), std::logic_error);
    auto [tx, rx] = smarm::channel<int>();
    EXPECT_THROW((void)rx.recv(), std::logic_error);
    smarm::check();  // an observation point is a no-op outside actors
}

TEST(Runtime, ConfigValidationNamesFieldAndValue) {
    auto expect_bad = [](smarm::runtime_config c, const std::string& needle) {
        try {
            smarm::runtime rt(c);
            ADD_FAILURE() << "accepted a bad config: " << needle;
        } catch (const std::invalid_argument& e) {
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
    };
    smarm::runtime_config c;
    c.schedulers = 65;
    expect_bad(c, "schedulers = 65");
    c = {};
    c.max_actors = 0;
    expect_bad(c, "max_actors = 0");
    c = {};
    c.stack_size = 1024;
    expect_bad(c, "stack_size = 1024");
    c = {};
    c.timeslice = 1ns;
    expect_bad(c, "timeslice");
    c = {};
    c.schedulers = 0;
    smarm::runtime rt(c);
    EXPECT_GE(rt.config().schedulers, 1u);
    EXPECT_LE(rt.config().schedulers, 64u);
}

TEST(Runtime, RootExceptionEscapesRunAndRuntimeIsReusable) {
    smarm::runtime rt(smarm_test::config(2));
    EXPECT_THROW(rt.run([] { throw std::runtime_error("root boom"); }), std::runtime_error);
    bool ran = false;
    rt.run([&] {
        smarm::spawn([] { smarm::sleep(1ms); }).join();
        ran = true;
    });
    EXPECT_TRUE(ran);
}

TEST(Runtime, RunTwiceSequentially) {
    smarm::runtime rt(smarm_test::config(2));
    for (int round = 0; round < 3; ++round) {
        std::atomic<int> n{0};
        rt.run([&] {
            std::vector<smarm::join_handle> hs;
            for (int i = 0; i < 100; ++i)
                hs.push_back(smarm::spawn([&] { n.fetch_add(1); }));
            for (auto& h : hs)
                h.join();
        });
        EXPECT_EQ(n.load(), 100);
    }
}

SMARM_TEST_N(Runtime, SleepFiresUnderSaturation, 4) {
    std::atomic<bool> stop{false};
    std::vector<smarm::join_handle> spinners;
    for (int i = 0; i < 8; ++i)
        spinners.push_back(smarm::spawn([&] {
            auto t0 = steady::now();
            while (!stop.load(std::memory_order_relaxed) && steady::now() - t0 < 5s)
                smarm::yield_now();
        }));
    auto t0 = steady::now();
    smarm::sleep(10ms);
    auto dt = steady::now() - t0;
    stop = true;
    for (auto& s : spinners)
        s.join();
    EXPECT_GE(dt, 10ms);
    EXPECT_LT(dt, 500ms) << "busy-path timer firing is broken";
}

SMARM_TEST(Runtime, SubMillisecondSleepIsPrompt) {
    smarm::sleep(500us);  // warm
    auto t0 = steady::now();
    smarm::sleep(500us);
    auto dt = steady::now() - t0;
    EXPECT_GE(dt, 400us);
    EXPECT_LT(dt, 100ms);
}

SMARM_TEST(Runtime, RequestStopParkedActor) {
    auto [tx, rx] = smarm::channel<int>();
    auto h = smarm::spawn([rx = std::move(rx)] { (void)rx.recv(); });
    smarm::sleep(5ms);
    EXPECT_TRUE(smarm::request_stop(h.id()));
    EXPECT_EQ(h.join().kind, smarm::exit_kind::stopped);
    (void)tx;
}

SMARM_TEST(Runtime, RequestStopSleepingActor) {
    auto h = smarm::spawn([] { smarm::sleep(60s); });
    smarm::sleep(2ms);
    auto t0 = steady::now();
    EXPECT_TRUE(smarm::request_stop(h.id()));
    EXPECT_EQ(h.join().kind, smarm::exit_kind::stopped);
    EXPECT_LT(steady::now() - t0, 5s);
}

SMARM_TEST(Runtime, RequestStopSpinningActorAtCheck) {
    std::atomic<bool> spinning{false};
    auto h = smarm::spawn([&] {
        spinning = true;
        for (;;)
            SMARM_CHECK();
    });
    while (!spinning)
        smarm::yield_now();
    EXPECT_TRUE(smarm::request_stop(h.id()));
    EXPECT_EQ(h.join().kind, smarm::exit_kind::stopped);
}

SMARM_TEST(Runtime, SwallowedStopIsThrownAgain) {
    std::atomic<int> caught{0};
    std::atomic<bool> ready{false};
    auto h = smarm::spawn([&] {
        ready = true;
        try {
            for (;;)
                smarm::check();
        } catch (...) {
            caught.fetch_add(1);  // swallowed
        }
        for (;;)
            smarm::check();  // the next observation point throws again
    });
    while (!ready)
        smarm::yield_now();
    smarm::request_stop(h.id());
    EXPECT_EQ(h.join().kind, smarm::exit_kind::stopped);
    EXPECT_EQ(caught.load(), 1);
}

TEST(Runtime, StoppedIsNotAStdException) {
    static_assert(!std::is_base_of_v<std::exception, smarm::stopped>);
    smarm_test::run([] {
        std::atomic<bool> ready{false};
        auto h = smarm::spawn([&] {
            ready = true;
            try {
                for (;;)
                    smarm::check();
            } catch (const std::exception&) {
                ADD_FAILURE() << "stopped caught as std::exception";
            }
        });
        while (!ready)
            smarm::yield_now();
        smarm::request_stop(h.id());
        EXPECT_EQ(h.join().kind, smarm::exit_kind::stopped);
    });
}

SMARM_TEST(Runtime, RequestStopOfStalePidIsFalse) {
    auto h = smarm::spawn([] {});
    smarm::pid p = h.id();
    h.join();
    EXPECT_FALSE(smarm::request_stop(p));
    // The slot is reused with a new generation; the stale pid must not
    // stop the new tenant.
    std::atomic<bool> finished{false};
    auto h2 = smarm::spawn([&] {
        smarm::sleep(5ms);
        finished = true;
    });
    EXPECT_FALSE(smarm::request_stop(p));
    EXPECT_EQ(h2.join().kind, smarm::exit_kind::exit);
    EXPECT_TRUE(finished.load());
}

SMARM_TEST(Runtime, NoPreemptDefersStop) {
    std::atomic<bool> ready{false}, passed_region{false};
    auto h = smarm::spawn([&] {
        {
            smarm::no_preempt np;
            ready = true;
            auto t0 = steady::now();
            while (steady::now() - t0 < 20ms)
                smarm::check();  // must not throw
            passed_region = true;
        }
        for (;;)
            smarm::check();
    });
    while (!ready)
        smarm::yield_now();
    smarm::request_stop(h.id());
    EXPECT_EQ(h.join().kind, smarm::exit_kind::stopped);
    EXPECT_TRUE(passed_region.load());
}

TEST(Runtime, TimeslicePreemptsSpinnerAtCheck) {
    // One scheduler: the spinner only ever gives way at SMARM_CHECK().
    smarm_test::run(
        [] {
            std::atomic<bool> other_ran{false};
            auto spinner = smarm::spawn([&] {
                while (!other_ran.load())
                    SMARM_CHECK();
            });
            auto other = smarm::spawn([&] { other_ran = true; });
            other.join();
            spinner.join();
            EXPECT_TRUE(other_ran.load());
        },
        1);
}

TEST(Runtime, SparseObservationPointsYieldNearTheSliceEnd) {
    // One scheduler, a 2 ms slice: `sparse` observes every 0.8 ms (a busy
    // wait on the clock), `dense` in a tight loop. Reading the clock only at
    // every 8th observation point let `sparse` run 8 points (6.4 ms) per
    // slice; an observation period carried along by the scheduler handed it
    // dense's long period. Learned per actor, sparse reads the clock at every
    // point once its pace is known, so after its first slice it yields at
    // the first point past the slice: the 3rd. Counted in observation
    // points, not time, so a loaded machine can only make the runs shorter.
    smarm::runtime_config c = smarm_test::config(1);
    c.timeslice = 2ms;
    smarm::runtime rt(c);
    std::vector<int> runs{0};  // sparse's observation points per slice
    rt.run([&] {
        std::atomic<bool> done{false};
        std::atomic<std::uint64_t> dense_turns{0};
        auto dense = smarm::spawn([&] {
            while (!done.load(std::memory_order_relaxed)) {
                dense_turns.fetch_add(1, std::memory_order_relaxed);
                SMARM_CHECK();
            }
        });
        auto sparse = smarm::spawn([&] {
            for (int i = 0; i < 40; ++i) {
                const auto until = steady::now() + 800us;
                while (steady::now() < until) {
                }
                ++runs.back();
                const auto seen = dense_turns.load(std::memory_order_relaxed);
                SMARM_CHECK();
                // One scheduler: dense ran only if this point yielded.
                if (dense_turns.load(std::memory_order_relaxed) != seen) runs.push_back(0);
            }
        });
        sparse.join();
        done = true;
        dense.join();
    });
    ASSERT_GE(runs.size(), 6u);
    // The first slice is spent learning the pace; the last run is cut short.
    for (std::size_t i = 1; i + 1 < runs.size(); ++i)
        EXPECT_LE(runs[i], 3) << "slice " << i;
}

TEST(Runtime, AnIdleSchedulerTakesOverAWokenActorFromABusyOne) {
    // `busy` wakes `waiter` and keeps computing: the waiter sits in busy's
    // scheduler's wake slot, and the other scheduler is idle. With a 5 s
    // slice busy never yields, so only an idle sibling taking the waiter
    // over lets it run before busy gives up. Before: a two-stage pipeline
    // (loadtest/causal --predict) ran its stages one after the other.
    smarm::runtime_config c = smarm_test::config(2);
    c.timeslice = 5s;
    smarm::runtime rt(c);
    std::atomic<bool> ran{false};
    bool ran_while_busy = false;
    rt.run([&] {
        auto [tx, rx] = smarm::channel<int>();
        auto waiter = smarm::spawn([&ran, rx = std::move(rx)]() mutable {
            (void)rx.recv();
            ran = true;
        });
        smarm_test::await_parked(waiter.id());
        auto busy = smarm::spawn([&, tx = std::move(tx)]() mutable {
            (void)tx.send(1);
            const auto until = steady::now() + 3s;
            while (!ran.load() && steady::now() < until)
                SMARM_CHECK();
            ran_while_busy = ran.load();
        });
        busy.join();
        waiter.join();
    });
    EXPECT_TRUE(ran_while_busy);
}

TEST(Runtime, RootDrainStopsParkedForeverActors) {
    std::atomic<int> stopped_count{0};
    smarm_test::run([&] {
        for (int i = 0; i < 10; ++i) {
            auto [tx, rx] = smarm::channel<int>();
            // Keeps its own sender: can never be woken by closure.
            smarm::spawn([&, tx = std::move(tx), rx = std::move(rx)] {
                try {
                    (void)rx.recv();
                } catch (const smarm::stopped&) {
                    stopped_count.fetch_add(1);
                    throw;
                }
            }).detach();
        }
    });
    EXPECT_EQ(stopped_count.load(), 10);
}

TEST(Runtime, ExceptionStateTravelsWithTheActor) {
    // An actor parks inside a catch block and resumes (possibly on another
    // thread) before rethrowing: the caught exception must still be its own.
    smarm_test::run(
        [] {
            std::vector<smarm::join_handle> hs;
            std::atomic<int> good{0};
            for (int i = 0; i < 64; ++i)
                hs.push_back(smarm::spawn([&, i] {
                    try {
                        try {
                            throw std::runtime_error(std::to_string(i));
                        } catch (...) {
                            for (int k = 0; k < 20; ++k)
                                smarm::yield_now();
                            EXPECT_EQ(std::uncaught_exceptions(), 0);
                            throw;
                        }
                    } catch (const std::runtime_error& e) {
                        if (std::string(e.what()) == std::to_string(i)) good.fetch_add(1);
                    }
                }));
            for (auto& h : hs)
                h.join();
            EXPECT_EQ(good.load(), 64);
        },
        4);
}

TEST(Runtime, StatsCountSpawns) {
    smarm::runtime rt(smarm_test::config(2));
    rt.run([] {
        for (int i = 0; i < 10; ++i)
            smarm::spawn([] {}).join();
    });
    EXPECT_EQ(rt.stats().spawns, 11u);  // + the root
    EXPECT_EQ(rt.stats().live_actors, 0u);
}

}  // namespace
