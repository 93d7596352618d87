#include "state_word.hpp"

#include <gtest/gtest.h>

using smarm::internal::actor_state;
using smarm::internal::state_word;

namespace {

actor_state state(const state_word& w) {
    return state_word::state_of(w.load());
}

TEST(StateWord, UnparkOnlyMatchesTheOpenEpoch) {
    state_word w;
    w.spawn(7);
    w.start_running();
    std::uint32_t e = w.begin_wait();
    EXPECT_FALSE(w.unpark_at(7, e + 1)) << "future epoch must be inert";
    EXPECT_FALSE(w.unpark_at(6, e)) << "stale generation must be inert";
    EXPECT_TRUE(w.park_return());
    EXPECT_EQ(state(w), actor_state::parked);
    EXPECT_FALSE(w.unpark_at(7, e - 1)) << "stale epoch must be inert";
    EXPECT_TRUE(w.unpark_at(7, e));
    EXPECT_EQ(state(w), actor_state::queued);
    EXPECT_FALSE(w.unpark_at(7, e)) << "enqueued at most once";
}

TEST(StateWord, EveryResumeOpensAFreshEpoch) {
    state_word w;
    w.spawn(2);
    w.start_running();
    std::uint32_t e = w.begin_wait();
    EXPECT_EQ(w.begin_wait(), e) << "reading the epoch does not change it";
    EXPECT_TRUE(w.park_return());
    EXPECT_TRUE(w.unpark_at(2, e));
    w.start_running();
    EXPECT_NE(w.begin_wait(), e);
    EXPECT_FALSE(w.unpark_at(2, e)) << "a waker of the finished wait must be inert";
    EXPECT_EQ(state(w), actor_state::running);
}

TEST(StateWord, WakeWhileRunningMakesParkReturnRequeue) {
    state_word w;
    w.spawn(1);
    w.start_running();
    std::uint32_t e = w.begin_wait();
    EXPECT_FALSE(w.unpark_at(1, e));  // Running -> RunningNotified, no enqueue
    EXPECT_EQ(state(w), actor_state::running_notified);
    EXPECT_FALSE(w.unpark_at(1, e)) << "a second wake coalesces";
    EXPECT_FALSE(w.park_return()) << "the wake raced the park: requeue";
    EXPECT_EQ(state(w), actor_state::queued);
}

TEST(StateWord, RetireWaitMakesOldWakersInertAndEatsNotification) {
    state_word w;
    w.spawn(1);
    w.start_running();
    std::uint32_t e = w.begin_wait();
    EXPECT_FALSE(w.unpark_at(1, e));
    w.retire_wait();
    EXPECT_EQ(state(w), actor_state::running);
    EXPECT_FALSE(w.unpark_at(1, e));
    EXPECT_EQ(state(w), actor_state::running);
}

TEST(StateWord, StopWakeIgnoresEpochButNotGeneration) {
    state_word w;
    w.spawn(3);
    w.start_running();
    (void)w.begin_wait();
    EXPECT_TRUE(w.park_return());
    EXPECT_FALSE(w.stop_wake(2));
    EXPECT_TRUE(w.stop_wake(3));
    EXPECT_EQ(state(w), actor_state::queued);
}

TEST(StateWord, ReclaimBumpsGeneration) {
    state_word w;
    w.spawn(9);
    w.start_running();
    w.finish();
    EXPECT_EQ(state(w), actor_state::done);
    EXPECT_EQ(w.reclaim(), 10u);
    EXPECT_EQ(state(w), actor_state::vacant);
    EXPECT_FALSE(w.stop_wake(9));
}

}  // namespace
