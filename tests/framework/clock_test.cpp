// The runtime's clock hook (clock.hpp): under a manual_clock every timer
// and timeout fires exactly when time reaches it, and advance() returns
// once what came due has fired.

#include <smarm/channel.hpp>
#include <smarm/clock.hpp>
#include <smarm/gen_server.hpp>
#include <smarm/runtime.hpp>
#include <smarm/select.hpp>
#include <smarm/timer.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>

#include <smarm_test/run.hpp>

using namespace std::chrono_literals;

namespace {

SMARM_TEST_CLOCK(ManualClock, SendAfterFiresExactlyAtItsDeadline) {
    auto [tx, rx] = smarm::channel<int>();
    (void)smarm::send_after(10ms, tx, 1);
    clock.advance(9ms);
    EXPECT_FALSE(rx.try_recv()) << "due at 10 ms, not at 9";
    clock.advance(1ms);
    auto r = rx.try_recv();  // fired before advance returned
    ASSERT_TRUE(r);
    EXPECT_EQ(*r.value, 1);
}

SMARM_TEST_CLOCK(ManualClock, SleepEndsExactlyAtItsDeadline) {
    auto [tx, rx] = smarm::channel<int>();
    const auto start = clock.now();
    auto h = smarm::spawn([&, tx = tx] {
        smarm::sleep(50ms);
        EXPECT_EQ(clock.now() - start, 50ms);
        (void)tx.send(1);
    });
    smarm_test::await_parked(h.id());
    clock.advance(49ms);
    smarm_test::await_parked(h.id());
    EXPECT_FALSE(rx.try_recv());
    clock.advance(1ms);
    EXPECT_EQ(*rx.recv(), 1);
    h.join();
}

SMARM_TEST_CLOCK(ManualClock, RecvTimeoutTimesOutExactly) {
    auto [tx, rx] = smarm::channel<int>();
    auto [done_tx, done_rx] = smarm::channel<smarm::recv_status>();
    auto h = smarm::spawn([&, rx = std::move(rx), done_tx = done_tx]() mutable {
        (void)done_tx.send(rx.recv_timeout(20ms).status);
    });
    smarm_test::await_parked(h.id());
    clock.advance(19ms);
    smarm_test::await_parked(h.id());
    EXPECT_FALSE(done_rx.try_recv());
    clock.advance(1ms);
    EXPECT_EQ(*done_rx.recv(), smarm::recv_status::timeout);
    h.join();
    (void)tx;
}

struct slow : smarm::gen_server<int, int> {
    int handle_call(int n) override {
        smarm::sleep(std::chrono::milliseconds(n));
        return n;
    }
};

SMARM_TEST_CLOCK(ManualClock, CallTimeoutIsExactAndTheServerLivesOn) {
    auto ref = smarm::start<slow>();
    auto [tx, rx] = smarm::channel<smarm::call_result<int>>();
    auto caller = smarm::spawn([&, tx = tx] { (void)tx.send(smarm::call(ref, 200, 20ms)); });
    smarm_test::await_parked(caller.id());
    clock.advance(19ms);
    smarm_test::await_parked(caller.id());
    EXPECT_FALSE(rx.try_recv());
    clock.advance(1ms);
    EXPECT_EQ(rx.recv()->error, smarm::call_error::timeout);
    caller.join();
    clock.advance(180ms);  // the server's sleep ends; it answers the next call
    auto again = smarm::spawn([&, tx = tx] { (void)tx.send(smarm::call(ref, 0, 1s)); });
    auto r = rx.recv();
    ASSERT_TRUE(r->value);
    EXPECT_EQ(*r->value, 0);
    again.join();
    smarm::request_stop(ref.id);
}

SMARM_TEST_CLOCK(ManualClock, TimersDueTogetherFireInDeadlineOrder) {
    auto [tx, rx] = smarm::channel<int>();
    for (int i = 4; i >= 0; --i)
        (void)smarm::send_after(std::chrono::milliseconds(1 + i), tx, i);
    clock.advance(10ms);  // all due in one step
    for (int i = 0; i < 5; ++i)
        EXPECT_EQ(*rx.try_recv().value, i);
}

SMARM_TEST_CLOCK(ManualClock, AdvanceToThePastChangesNothing) {
    const auto t = clock.now();
    clock.advance_to(t - 1s);
    EXPECT_EQ(clock.now(), t);
    clock.advance_to(t + 5ms);
    EXPECT_EQ(clock.now(), t + 5ms);
    EXPECT_THROW(clock.advance(-1ns), std::invalid_argument);
}

TEST(ManualClock, TheRealClockComesBackAfterTheRun) {
    smarm::manual_clock frozen(std::chrono::steady_clock::time_point{});  // the epoch
    smarm::runtime_config c = smarm_test::config(1);
    c.clock = &frozen;
    smarm::runtime rt(c);
    rt.run([] { EXPECT_EQ(smarm::detail::clock::now().time_since_epoch().count(), 0); });
    EXPECT_GT(smarm::detail::clock::now().time_since_epoch().count(), 0);
    // A run without a clock is on steady time: its sleep ends by itself.
    smarm_test::run([] { smarm::sleep(1ms); }, 1);
}

TEST(ManualClock, OnlyOneRunAtATimeUsesAClock) {
    smarm::manual_clock a, b;
    smarm::runtime_config ca = smarm_test::config(1), cb = smarm_test::config(1);
    ca.clock = &a;
    cb.clock = &b;
    smarm::runtime ra(ca), rb(cb);
    ra.run([&] {
        // rb runs on another thread while ra holds the clock hook.
        std::thread t([&] {
            try {
                rb.run([] {});
                ADD_FAILURE() << "a second run with a clock started";
            } catch (const std::logic_error& e) {
                EXPECT_NE(std::string(e.what()).find("clock_source"), std::string::npos);
            }
        });
        t.join();
    });
    rb.run([] {});  // free again once ra's run is over
}

}  // namespace
