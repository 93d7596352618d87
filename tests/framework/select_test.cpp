#include <smarm/channel.hpp>
#include <smarm/runtime.hpp>
#include <smarm/select.hpp>

#include <gtest/gtest.h>

#include <smarm_test/run.hpp>

using namespace std::chrono_literals;
using steady = smarm_test::steady;

namespace {

SMARM_TEST(Select, PriorityOrderWhenSeveralAreReady) {
    auto [atx, arx] = smarm::channel<int>();
    auto [btx, brx] = smarm::channel<int>();
    (void)btx.send(2);
    (void)atx.send(1);
    EXPECT_EQ(smarm::select({arx, brx}), 0u);
    EXPECT_EQ(*arx.try_recv().value, 1);
    EXPECT_EQ(smarm::select({arx, brx}), 1u);
}

SMARM_TEST(Select, ParksUntilAnArmIsReady) {
    auto [atx, arx] = smarm::channel<int>();
    auto [btx, brx] = smarm::channel<int>();
    auto h = smarm::spawn([btx = std::move(btx)] {
        smarm::sleep(5ms);
        (void)btx.send(5);
    });
    EXPECT_EQ(smarm::select({arx, brx}), 1u);
    EXPECT_EQ(*brx.try_recv().value, 5);
    h.join();
    (void)atx;
}

SMARM_TEST(Select, UntilOverArmsBuiltAtRunTime) {
    auto [atx, arx] = smarm::channel<int>();
    auto [btx, brx] = smarm::channel<int>();
    std::vector<smarm::select_arm> arms{arx, brx};
    // A deadline already past: nothing ready, no wait.
    EXPECT_FALSE(smarm::select_until(arms, steady::now() - 1s));
    (void)btx.send(2);
    EXPECT_EQ(smarm::select_until(arms, std::nullopt), 1u);
    EXPECT_EQ(*brx.try_recv().value, 2);
    const auto t0 = steady::now();
    EXPECT_FALSE(smarm::select_until(arms, t0 + 20ms));
    EXPECT_GE(steady::now() - t0, 20ms) << "never early";
    (void)atx;
}

SMARM_TEST(Select, ClosedArmIsPermanentlyReady) {
    auto [atx, arx] = smarm::channel<int>();
    auto [btx, brx] = smarm::channel<int>();
    { auto gone = std::move(atx); }
    for (int i = 0; i < 3; ++i)
        EXPECT_EQ(smarm::select({arx, brx}), 0u);
    EXPECT_EQ(arx.try_recv().status, smarm::recv_status::closed);
    (void)btx;
}

TEST(Select, LoserArmWakeAfterParkedSelectStaysPrecise) {
    // A select parks on {a, b}; a wins. Later b's sender sends while the
    // selecting actor is in an unrelated 50 ms sleep: the stale registration
    // on b must not cut that sleep short.
    smarm_test::run([] {
        auto [atx, arx] = smarm::channel<int>();
        auto [btx, brx] = smarm::channel<int>();
        auto h = smarm::spawn([atx = std::move(atx), btx = std::move(btx)] {
            smarm::sleep(5ms);
            (void)atx.send(1);
            smarm::sleep(10ms);
            (void)btx.send(2);
        });
        EXPECT_EQ(smarm::select({arx, brx}), 0u);
        auto t0 = steady::now();
        smarm::sleep(50ms);
        EXPECT_GE(steady::now() - t0, 50ms) << "a stale loser-arm wake ended the sleep";
        h.join();                                  // the sender exits: arm a closes
        EXPECT_EQ(smarm::select({arx, brx}), 0u);  // a closed arm is ready first
        EXPECT_EQ(arx.try_recv().status, smarm::recv_status::ok);
        EXPECT_EQ(arx.try_recv().status, smarm::recv_status::closed);
        EXPECT_EQ(smarm::select({brx}), 0u);
        EXPECT_EQ(*brx.try_recv().value, 2);
    });
}

SMARM_TEST(Select, TimeoutReturnsNulloptNeverEarly) {
    auto [atx, arx] = smarm::channel<int>();
    auto t0 = steady::now();
    EXPECT_FALSE(smarm::select_timeout({arx}, 15ms).has_value());
    EXPECT_GE(steady::now() - t0, 15ms);
    (void)atx.send(1);
    EXPECT_EQ(smarm::select_timeout({arx}, 10s), std::optional<std::size_t>(0));
}

SMARM_TEST(Select, StopWhileParkedInSelect) {
    auto [atx, arx] = smarm::channel<int>();
    auto h = smarm::spawn([&arx = arx] { (void)smarm::select({arx}); });
    smarm::sleep(3ms);
    smarm::request_stop(h.id());
    EXPECT_EQ(h.join().kind, smarm::exit_kind::stopped);
    (void)atx.send(1);
    EXPECT_EQ(smarm::select({arx}), 0u) << "the arm is usable by another actor";
}

}  // namespace
