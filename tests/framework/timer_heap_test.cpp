#include "timer_heap.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <random>

using smarm::internal::timer_heap;
using namespace std::chrono_literals;

namespace {

TEST(TimerHeap, PopsInDeadlineThenInsertionOrder) {
    timer_heap h;
    auto t0 = std::chrono::steady_clock::now();
    h.insert_wake(t0 + 3ms, smarm::pid{3, 0}, 0);
    h.insert_wake(t0 + 1ms, smarm::pid{1, 0}, 0);
    h.insert_wake(t0 + 1ms, smarm::pid{2, 0}, 0);
    h.insert_wake(t0 + 9ms, smarm::pid{9, 0}, 0);
    std::vector<timer_heap::fired> out;
    h.pop_due(t0 + 5ms, out);
    ASSERT_EQ(out.size(), 3u);
    EXPECT_EQ(out[0].target.index, 1u);
    EXPECT_EQ(out[1].target.index, 2u);
    EXPECT_EQ(out[2].target.index, 3u);
    EXPECT_EQ(h.size(), 1u);
    EXPECT_EQ(*h.peek(), t0 + 9ms);
}

TEST(TimerHeap, CancelRemovesAndStaleIdsAreInert) {
    timer_heap h;
    auto t0 = std::chrono::steady_clock::now();
    auto a = h.insert_wake(t0 + 1ms, smarm::pid{1, 0}, 0);
    EXPECT_TRUE(h.cancel(a));
    EXPECT_FALSE(h.cancel(a)) << "double cancel";
    auto b = h.insert_wake(t0 + 2ms, smarm::pid{2, 0}, 0);  // reuses a's slab entry
    EXPECT_FALSE(h.cancel(a)) << "a stale id must not cancel the new timer";
    EXPECT_EQ(h.size(), 1u);
    EXPECT_TRUE(h.cancel(b));
    EXPECT_TRUE(h.empty());
}

TEST(TimerHeap, RandomInsertCancelKeepsHeapOrder) {
    timer_heap h;
    std::mt19937 rng(42);
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::uint64_t> ids;
    for (int i = 0; i < 5000; ++i) {
        ids.push_back(h.insert_wake(t0 + std::chrono::microseconds(rng() % 100000),
                                    smarm::pid{static_cast<std::uint32_t>(i), 0}, 0));
        if (rng() % 3 == 0) {
            std::size_t k = rng() % ids.size();
            h.cancel(ids[k]);
        }
    }
    std::vector<timer_heap::fired> out;
    h.pop_due(t0 + 1s, out);
    EXPECT_TRUE(h.empty());
    EXPECT_GT(out.size(), 2000u);
}

TEST(TimerHeap, CallTimersCarryTheirThunk) {
    timer_heap h;
    int fired = 0;
    auto t0 = std::chrono::steady_clock::now();
    h.insert_call(t0, [&] { ++fired; });
    std::vector<timer_heap::fired> out;
    h.pop_due(t0, out);
    ASSERT_EQ(out.size(), 1u);
    ASSERT_TRUE(out[0].call);
    out[0].call();
    EXPECT_EQ(fired, 1);
}

}  // namespace
