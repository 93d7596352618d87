// With smarm::alloc_preempt linked and alloc_check_interval set, an actor
// that only allocates (never calls the runtime) is still preempted.

#include <smarm/runtime.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>

using namespace std::chrono_literals;

namespace {

// Spins allocating until `flag` is set or `limit` passes; returns whether the
// flag was seen.
bool allocate_until(std::atomic<bool>& flag, std::chrono::milliseconds limit) {
    auto t0 = std::chrono::steady_clock::now();
    while (!flag.load(std::memory_order_relaxed)) {
        auto p = std::make_unique<int>(1);
        asm volatile("" : : "r"(p.get()) : "memory");
        if (std::chrono::steady_clock::now() - t0 > limit) return false;
    }
    return true;
}

TEST(AllocPreempt, AllocatingSpinnerIsPreempted) {
    smarm::runtime_config c;
    c.schedulers = 1;
    c.max_actors = 1024;
    c.alloc_check_interval = 16;
    smarm::runtime rt(c);
    bool saw = false;
    rt.run([&] {
        std::atomic<bool> other_ran{false};
        auto spinner = smarm::spawn([&] { saw = allocate_until(other_ran, 10s); });
        // Work-first spawn ran the spinner first; we only get here if an
        // allocation yielded it.
        other_ran = true;
        spinner.join();
    });
    EXPECT_TRUE(saw) << "the allocating actor was never preempted";
}

TEST(AllocPreempt, OffWhenIntervalIsZero) {
    smarm::runtime_config c;
    c.schedulers = 1;
    c.max_actors = 1024;
    smarm::runtime rt(c);
    bool saw = true;
    rt.run([&] {
        std::atomic<bool> other_ran{false};
        auto spinner = smarm::spawn([&] { saw = allocate_until(other_ran, 200ms); });
        other_ran = true;
        spinner.join();
    });
    EXPECT_FALSE(saw) << "allocations must not be observation points by default";
}

}  // namespace
