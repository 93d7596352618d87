#include <smarm/detail/thread_shards.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

namespace {

struct counts {
    std::atomic<std::uint64_t> n{0};
};

std::uint64_t total(const smarm::detail::thread_shards<counts>& s, std::size_t* shards = nullptr) {
    std::uint64_t sum = 0;
    std::size_t k = 0;
    s.each([&](const counts& c) {
        sum += c.n.load(std::memory_order_relaxed);
        ++k;
    });
    if (shards != nullptr) *shards = k;
    return sum;
}

// Four threads bump their own shard while a reader sums: no count is lost
// (each shard has one writer), and each thread made exactly one shard.
TEST(ThreadShards, EachThreadCountsIntoItsOwnShard) {
    smarm::detail::thread_shards<counts> s([] { return std::make_unique<counts>(); });
    constexpr int per_thread = 200'000;
    std::atomic<bool> done{false};
    std::thread reader([&] {
        std::uint64_t last = 0;
        while (!done.load()) {
            const std::uint64_t now = total(s);
            EXPECT_GE(now, last) << "a count went down";
            last = now;
        }
    });
    std::vector<std::thread> writers;
    for (int t = 0; t < 4; ++t)
        writers.emplace_back([&] {
            for (int i = 0; i < per_thread; ++i)
                smarm::detail::bump(s.mine().n);
        });
    for (auto& w : writers)
        w.join();
    done = true;
    reader.join();
    std::size_t shards = 0;
    EXPECT_EQ(total(s, &shards), 4u * per_thread);
    EXPECT_EQ(shards, 4u);
}

// Two instances used on one thread take turns in the thread's cache and
// still each keep their own shard; a new instance never finds an old one's.
TEST(ThreadShards, InstancesOnOneThreadKeepTheirOwnShards) {
    auto make = [] { return std::make_unique<counts>(); };
    smarm::detail::thread_shards<counts> a(make), b(make);
    for (int i = 0; i < 1000; ++i) {
        smarm::detail::bump(a.mine().n);
        smarm::detail::bump(b.mine().n, 2);
    }
    std::size_t na = 0, nb = 0;
    EXPECT_EQ(total(a, &na), 1000u);
    EXPECT_EQ(total(b, &nb), 2000u);
    EXPECT_EQ(na, 1u);
    EXPECT_EQ(nb, 1u);
    for (int round = 0; round < 3; ++round) {
        smarm::detail::thread_shards<counts> fresh(make);
        EXPECT_EQ(fresh.mine().n.load(), 0u) << "a destroyed instance's shard was reused";
        smarm::detail::bump(fresh.mine().n);
    }
}

}  // namespace
