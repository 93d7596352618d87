#include <smarm/channel.hpp>
#include <smarm/introspect.hpp>
#include <smarm/runtime.hpp>
#include <smarm/timer.hpp>

#include <gtest/gtest.h>

#include <vector>

#include <smarm_test/run.hpp>

using namespace std::chrono_literals;
using steady = smarm_test::steady;

namespace {

// Manual clock: delivered exactly at 20 ms, not a moment before.
SMARM_TEST_CLOCK(Timer, SendAfterDeliversNotEarly) {
    auto [tx, rx] = smarm::channel<int>();
    (void)smarm::send_after(20ms, tx, 42);
    clock.advance(19ms);
    EXPECT_FALSE(rx.try_recv());
    clock.advance(1ms);
    EXPECT_EQ(*rx.try_recv().value, 42);
}

// The real clock still works: a timer fires on its own in steady time.
SMARM_TEST(Timer, SendAfterFiresOnTheRealClock) {
    auto [tx, rx] = smarm::channel<int>();
    auto t0 = steady::now();
    (void)smarm::send_after(20ms, tx, 42);
    EXPECT_EQ(*rx.recv(), 42);
    EXPECT_GE(steady::now() - t0, 20ms);
}

SMARM_TEST_CLOCK(Timer, CancelledSendNeverArrives) {
    auto [tx, rx] = smarm::channel<int>();
    auto id = smarm::send_after(20ms, tx, 1);
    EXPECT_TRUE(smarm::cancel_timer(id));
    EXPECT_FALSE(smarm::cancel_timer(id));
    clock.advance(1h);
    EXPECT_FALSE(rx.try_recv());
}

SMARM_TEST(Timer, CancelAfterFireIsFalse) {
    auto [tx, rx] = smarm::channel<int>();
    auto id = smarm::send_after_wall(1ms, tx, 1);
    EXPECT_EQ(*rx.recv(), 1);
    EXPECT_FALSE(smarm::cancel_timer(id));
}

SMARM_TEST(Timer, SendAfterToDroppedReceiverIsSilent) {
    auto [tx, rx] = smarm::channel<int>();
    (void)smarm::send_after(2ms, tx, 1);
    { auto gone = std::move(rx); }
    smarm::sleep(10ms);
}

// Spawned latest-deadline first, so the heap (not arming order) decides.
// The deadlines are absolute: with relative sleeps, a spawn loop slowed by
// more than the 5 ms spacing (TSan, a loaded machine) armed sleeper i-1's
// timer after i's deadline and they swapped (found under make test-tsan).
SMARM_TEST_N(Timer, ManySleepersWakeInOrder, 1) {
    auto [tx, rx] = smarm::channel<int>();
    // Every sleeper arms long before the first deadline.
    const auto base = steady::now() + 200ms;
    for (int i = 9; i >= 0; --i)
        smarm::spawn([tx = tx, i, base] {
            smarm::sleep_until(base + std::chrono::milliseconds(5 * i));
            (void)tx.send(i);
        }).detach();
    for (int i = 0; i < 10; ++i)
        EXPECT_EQ(*rx.recv(), i);
}

// Timers that come due together (here: the only scheduler is held by a busy
// root past all their deadlines) wake their actors in deadline order. Found
// under TSan load: the wake slot is LIFO, so the last timer of a batch ran
// first.
SMARM_TEST_N(Timer, TimersDueTogetherWakeInDeadlineOrder, 1) {
    auto [tx, rx] = smarm::channel<int>();
    std::vector<smarm::pid> sleepers;
    for (int i = 0; i < 5; ++i) {
        auto h = smarm::spawn([tx = tx, i] {
            smarm::sleep(std::chrono::milliseconds(1 + i));
            (void)tx.send(i);
        });
        sleepers.push_back(h.id());
        h.detach();
    }
    // Each must be parked on its timer first: a sleeper spawned late
    // in a spent timeslice (TSan) yields at sleep's observation point
    // before arming, and would wake past its deadline without a timer.
    for (auto p : sleepers)
        while (smarm::introspect::info(p) && smarm::introspect::info(p)->state != "parked")
            smarm::yield_now();
    // Hold the scheduler (no observation point) until all are due.
    const auto until = steady::now() + 30ms;
    while (steady::now() < until) {
    }
    for (int i = 0; i < 5; ++i)
        EXPECT_EQ(*rx.recv(), i);
}

TEST(Timer, PendingTimersDoNotKeepTheRuntimeAlive) {
    auto t0 = steady::now();
    smarm_test::run([] {
        auto [tx, rx] = smarm::channel<int>();
        (void)smarm::send_after(60s, tx, 1);
    });
    EXPECT_LT(steady::now() - t0, 10s);
}

}  // namespace
