#include "coordinator.hpp"
#include "core_share.hpp"

#include <smarm/runtime.hpp>

#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

using clk = smarm::detail::clock;
using smarm::internal::coordinator;
using smarm::internal::park_result;
using namespace std::chrono_literals;

namespace {

template <class Pred>
void wait_for(Pred p, const char* what) {
    auto t0 = clk::now();
    while (!p()) {
        ASSERT_LT(clk::now() - t0, 10s) << what;
        std::this_thread::yield();
    }
}

TEST(Coordinator, PermitBeforeParkReturnsAtOnce) {
    coordinator c(1);
    c.wake_all();  // permits every parker, parked or not
    auto t0 = clk::now();
    EXPECT_EQ(c.park(0, std::nullopt, [] { return false; }), park_result::woken);
    EXPECT_LT(clk::now() - t0, 2s);
}

TEST(Coordinator, SubMillisecondDeadlineIsHonoured) {
    coordinator c(1);
    auto t0 = clk::now();
    EXPECT_EQ(c.park(0, t0 + 500us, [] { return false; }), park_result::timed_out);
    auto dt = clk::now() - t0;
    EXPECT_GE(dt, 500us) << "woke before the deadline";
    EXPECT_LT(dt, 100ms) << "deadline truncated or overslept";
}

TEST(Coordinator, TrueRecheckAbortsParkAndClearsBit) {
    coordinator c(2);
    EXPECT_EQ(c.park(1, std::nullopt, [] { return true; }), park_result::work_found);
    EXPECT_EQ(c.idle_mask(), 0u);
}

TEST(Coordinator, BitIsPublishedBeforeRecheck) {
    coordinator c(2);
    std::uint64_t seen = 0;
    c.park(1, std::nullopt, [&] {
        seen = c.idle_mask();
        return true;
    });
    EXPECT_EQ(seen & 0b10u, 0b10u);
}

TEST(Coordinator, WakeOneWakesExactlyOneOfFour) {
    constexpr unsigned n = 4;
    coordinator c(n);
    std::atomic<unsigned> woken{0};
    std::vector<std::thread> ts;
    for (unsigned id = 0; id < n; ++id)
        ts.emplace_back([&, id] {
            EXPECT_EQ(c.park(id, std::nullopt, [] { return false; }), park_result::woken);
            woken.fetch_add(1);
        });
    wait_for([&] { return c.idle_mask() == 0b1111u; }, "threads never parked");
    EXPECT_TRUE(c.wake_one());
    wait_for([&] { return woken.load() == 1; }, "wake_one woke nobody");
    std::this_thread::sleep_for(100ms);  // give a wrong extra wake time to show
    EXPECT_EQ(woken.load(), 1u) << "wake_one woke more than one";
    EXPECT_EQ(std::popcount(c.idle_mask()), 3);
    c.wake_all();
    for (auto& t : ts)
        t.join();
    EXPECT_EQ(woken.load(), n);
    EXPECT_EQ(c.idle_mask(), 0u);
}

TEST(Coordinator, WakeOnePrefersHighestBit) {
    coordinator c(3);
    std::atomic<int> first{-1};
    std::vector<std::thread> ts;
    for (int id = 0; id < 3; ++id)
        ts.emplace_back([&, id] {
            if (c.park(static_cast<unsigned>(id), std::nullopt, [] { return false; }) ==
                park_result::woken) {
                int none = -1;
                first.compare_exchange_strong(none, id);
            }
        });
    wait_for([&] { return c.idle_mask() == 0b111u; }, "threads never parked");
    EXPECT_TRUE(c.wake_one());
    wait_for([&] { return first.load() != -1; }, "nobody woke");
    EXPECT_EQ(first.load(), 2);
    c.wake_all();
    for (auto& t : ts)
        t.join();
}

TEST(Coordinator, WakeOneOnEmptyMaskIsNoop) {
    coordinator c(2);
    EXPECT_FALSE(c.wake_one());
    EXPECT_FALSE(c.wake_one_if_idle());
    EXPECT_EQ(c.idle_mask(), 0u);
}

TEST(Coordinator, WakeOneIfIdleWakesParked) {
    coordinator c(1);
    std::thread t(
        [&] { EXPECT_EQ(c.park(0, std::nullopt, [] { return false; }), park_result::woken); });
    wait_for([&] { return c.idle_mask() != 0; }, "never parked");
    EXPECT_TRUE(c.wake_one_if_idle());
    t.join();
}

TEST(Coordinator, AwakeCapSkipsWakesWhileEnoughSchedulersAreAwake) {
    coordinator c(4, 2);  // at most 2 kept awake by producers
    std::atomic<int> woken{0};
    std::vector<std::thread> ts;
    auto park = [&](unsigned id) {
        ts.emplace_back([&, id] {
            if (c.park(id, std::nullopt, [] { return false; }) == park_result::woken) woken++;
        });
    };
    park(3);
    park(2);
    wait_for([&] { return c.idle_mask() == 0b1100u; }, "never parked");
    EXPECT_FALSE(c.wake_one_if_idle()) << "two schedulers are awake: no wake";
    park(1);
    wait_for([&] { return c.idle_mask() == 0b1110u; }, "never parked");
    EXPECT_TRUE(c.wake_one_if_idle()) << "only one awake: wake one";
    wait_for([&] { return woken.load() == 1; }, "nobody woke");
    EXPECT_TRUE(c.wake_one()) << "wake_one itself is not capped";
    c.wake_all();
    for (auto& t : ts)
        t.join();
}

TEST(Coordinator, TimekeeperRoleIsExclusiveAndRetakeable) {
    coordinator c(2);
    auto d2 = clk::now() + 10s;
    auto d1 = clk::now() + 1s;
    EXPECT_EQ(c.armed_deadline_nanos(), coordinator::no_deadline);
    EXPECT_TRUE(c.try_arm_timer(0, d2));
    EXPECT_FALSE(c.try_arm_timer(1, d1)) << "second arm must fail while held";
    EXPECT_EQ(c.armed_deadline_nanos(), c.nanos(d2));
    c.disarm_timer(0);
    EXPECT_EQ(c.armed_deadline_nanos(), coordinator::no_deadline);
    EXPECT_TRUE(c.try_arm_timer(1, d1)) << "role must be re-takeable";
    c.disarm_timer(1);
}

TEST(Coordinator, EarlierInsertWakesTimekeeper) {
    coordinator c(2);
    auto far = clk::now() + 60s;
    ASSERT_TRUE(c.try_arm_timer(0, far));
    c.timer_inserted(clk::now() + 1ms);  // holder not parked yet: lands as a permit
    auto t0 = clk::now();
    EXPECT_EQ(c.park(0, far, [] { return false; }), park_result::woken);
    EXPECT_LT(clk::now() - t0, 10s);
    c.disarm_timer(0);
}

TEST(Coordinator, EarlierInsertWakesParkedTimekeeper) {
    coordinator c(2);
    auto far = clk::now() + 60s;
    ASSERT_TRUE(c.try_arm_timer(0, far));
    std::atomic<bool> back{false};
    std::thread t([&] {
        EXPECT_EQ(c.park(0, far, [] { return false; }), park_result::woken);
        back = true;
    });
    wait_for([&] { return c.idle_mask() != 0; }, "never parked");
    c.note_deadline(clk::now() + 1ms);
    t.join();
    EXPECT_TRUE(back.load());
    c.disarm_timer(0);
}

TEST(Coordinator, LaterInsertDoesNotWakeTimekeeper) {
    coordinator c(2);
    auto near = clk::now() + 20ms;
    ASSERT_TRUE(c.try_arm_timer(0, near));
    c.timer_inserted(clk::now() + 60s);
    EXPECT_EQ(c.park(0, near, [] { return false; }), park_result::timed_out);
    c.disarm_timer(0);
}

TEST(Coordinator, MoreThan64SchedulersIsRefused) {
    EXPECT_THROW(coordinator(65), std::invalid_argument);
    EXPECT_THROW(coordinator(0), std::invalid_argument);
    try {
        coordinator c(65);
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("65"), std::string::npos) << e.what();
    }
    coordinator ok(64);
    EXPECT_EQ(ok.schedulers(), 64u);
}

TEST(Coordinator, DeadlineSnapshotKeepsMinimumAndDueCheckWorks) {
    coordinator c(1);
    EXPECT_FALSE(c.deadline_due());
    EXPECT_FALSE(c.next_deadline().has_value());
    auto far = clk::now() + 60s;
    auto near = clk::now() + 1ms;
    c.note_deadline(far);
    EXPECT_FALSE(c.deadline_due());
    c.note_deadline(near);
    ASSERT_TRUE(c.next_deadline().has_value());
    EXPECT_LE(*c.next_deadline(), near);
    c.note_deadline(far);  // a later insert must not raise the snapshot
    EXPECT_LE(*c.next_deadline(), near);
    std::this_thread::sleep_for(2ms);
    EXPECT_TRUE(c.deadline_due());
    c.refresh_deadline(far);
    EXPECT_FALSE(c.deadline_due());
    c.refresh_deadline(std::nullopt);
    EXPECT_FALSE(c.next_deadline().has_value());
    c.note_deadline(clk::now() - 1s);  // before the origin encodes as 0: due
    EXPECT_TRUE(c.deadline_due());
}

TEST(Coordinator, NoteDeadlineCarriesTheTimekeeperWake) {
    coordinator c(2);
    auto far = clk::now() + 60s;
    ASSERT_TRUE(c.try_arm_timer(0, far));
    c.note_deadline(clk::now() + 1ms);
    EXPECT_EQ(c.park(0, far, [] { return false; }), park_result::woken);
    c.disarm_timer(0);
}

// Many producers and consumers hammering the protocol: every published item
// is consumed and nobody sleeps past one (a lost wake hangs this test).
TEST(Coordinator, NoLostWakeUnderStress) {
    constexpr unsigned consumers = 3;
    constexpr int items = 20000;
    coordinator c(consumers);
    std::atomic<int> queue{0}, consumed{0};
    std::vector<std::thread> ts;
    for (unsigned id = 0; id < consumers; ++id)
        ts.emplace_back([&, id] {
            while (consumed.load() < items) {
                int q = queue.load();
                if (q > 0 && queue.compare_exchange_strong(q, q - 1)) {
                    consumed.fetch_add(1);
                    if (queue.load() > 0) c.wake_one_if_idle();  // chain rule
                    continue;
                }
                c.park(id, std::nullopt,
                       [&] { return queue.load() > 0 || consumed.load() >= items; });
            }
            c.wake_all();
        });
    for (int i = 0; i < items; ++i) {
        queue.fetch_add(1);
        c.wake_one_if_idle();
    }
    for (auto& t : ts)
        t.join();
    EXPECT_EQ(consumed.load(), items);
}

}  // namespace

namespace {

TEST(CoreShare, CapIsTheCoresOthersLeaveRoundedToAWholeCore) {
    using smarm::internal::core_share;
    EXPECT_EQ(core_share::cap_for(0.0, 2, 2), 2u);
    EXPECT_EQ(core_share::cap_for(0.4, 2, 2), 2u);
    EXPECT_EQ(core_share::cap_for(0.6, 2, 2), 1u);
    EXPECT_EQ(core_share::cap_for(1.0, 2, 2), 1u);
    EXPECT_EQ(core_share::cap_for(3.0, 2, 2), 1u) << "never below one";
    EXPECT_EQ(core_share::cap_for(-0.2, 2, 2), 2u) << "a negative estimate is none";
    EXPECT_EQ(core_share::cap_for(0.0, 8, 4), 4u) << "never above the ceiling";
    EXPECT_EQ(core_share::cap_for(2.4, 8, 8), 6u);
}

TEST(CoreShare, SpinningNeedsHalfACoreIdleCountingOurSpinningAsIdle) {
    using smarm::internal::core_share;
    EXPECT_TRUE(core_share::spin_for(0.0, 0.6, 2)) << "an idle machine";
    EXPECT_TRUE(core_share::spin_for(1.0, 0.5, 2)) << "half a core left";
    EXPECT_FALSE(core_share::spin_for(1.0, 0.6, 2)) << "a load generator and us fill the cores";
    EXPECT_FALSE(core_share::spin_for(0.0, 1.9, 2)) << "our own work fills them";
    EXPECT_FALSE(core_share::spin_for(1.8, 0.0, 2)) << "others fill them";
    EXPECT_TRUE(core_share::spin_for(-0.3, 1.0, 2)) << "a negative estimate is none";
    EXPECT_TRUE(core_share::spin_for(6.0, 1.0, 8));
}

TEST(Coordinator, AMovedAwakeCapHoldsBackOrAllowsWakes) {
    coordinator c(2, 2);
    EXPECT_EQ(c.awake_cap(), 2u);
    EXPECT_FALSE(c.set_awake_cap(0)) << "clamped to 1: a fall";
    EXPECT_EQ(c.awake_cap(), 1u);
    EXPECT_TRUE(c.over_cap()) << "two awake, cap one";
    std::atomic<bool> back{false};
    std::thread t([&] {
        c.park(1, std::nullopt, [] { return false; });
        back = true;
    });
    wait_for([&] { return c.idle_mask() == 2u; }, "scheduler 1 never parked");
    EXPECT_FALSE(c.over_cap());
    EXPECT_FALSE(c.wake_one_if_idle()) << "one awake already fills a cap of one";
    EXPECT_FALSE(back.load());
    EXPECT_TRUE(c.set_awake_cap(5)) << "clamped to 2: a rise";
    EXPECT_EQ(c.awake_cap(), 2u);
    EXPECT_TRUE(c.wake_one_if_idle());
    t.join();
    EXPECT_TRUE(back.load());
}

unsigned usable_cores() {
    cpu_set_t set;
    CPU_ZERO(&set);
    return sched_getaffinity(0, sizeof set, &set) == 0 ? static_cast<unsigned>(CPU_COUNT(&set)) : 1;
}

// Other processes spinning on every core but one: the epoll thread's
// sampler must cap the awake schedulers at one within a few windows, and
// with our busy actor on that one core no idle core is left to spin on.
TEST(ShareCores, ProcessesHoldingTheOtherCoresCapTheAwakeSchedulersAtOne) {
    const unsigned cores = usable_cores();
    if (cores < 2) GTEST_SKIP() << "one usable core: the cap is one already";
    std::vector<pid_t> hogs;
    for (unsigned i = 0; i + 1 < cores; ++i) {
        const pid_t p = fork();
        ASSERT_GE(p, 0);
        if (p == 0) {
            for (;;)
                asm volatile("" ::: "memory");  // spin until killed
        }
        hogs.push_back(p);
    }
    smarm::runtime_config rc;
    rc.schedulers = 2;
    smarm::runtime rt(rc);
    std::uint64_t cap = 0;
    bool spin = true;
    rt.run([&] {
        // A yielding actor keeps a scheduler awake, so the epoll thread
        // rests and samples.
        const auto end = std::chrono::steady_clock::now() + 20s;
        while (std::chrono::steady_clock::now() < end) {
            const smarm::runtime_stats st = rt.stats();
            cap = st.awake_cap;
            spin = st.idle_spin;
            if (cap == 1 && !spin) break;
            smarm::yield_now();
        }
    });
    for (pid_t p : hogs) {
        kill(p, SIGKILL);
        waitpid(p, nullptr, 0);
    }
    EXPECT_EQ(cap, 1u) << "the awake cap never followed the cores the other processes took";
    EXPECT_FALSE(spin) << "idle schedulers still spin on cores the other processes want";
}

TEST(ShareCores, OffKeepsEveryUsableSchedulerAwakeable) {
    smarm::runtime_config rc;
    rc.schedulers = 2;
    rc.share_cores = false;
    smarm::runtime rt(rc);
    std::uint64_t cap = 0;
    bool spin = false;
    rt.run([&] {
        cap = rt.stats().awake_cap;
        spin = rt.stats().idle_spin;
    });
    EXPECT_EQ(cap, std::min(2u, usable_cores()));
    EXPECT_TRUE(spin);
}

TEST(ShareCores, NoIdleSpinConfiguredReportsNoSpinning) {
    smarm::runtime_config rc;
    rc.idle_spin = std::chrono::nanoseconds::zero();
    smarm::runtime rt(rc);
    bool spin = true;
    rt.run([&] { spin = rt.stats().idle_spin; });
    EXPECT_FALSE(spin);
}

}  // namespace
