#include <smarm/mutex.hpp>
#include <smarm/runtime.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include <smarm_test/run.hpp>

using namespace std::chrono_literals;
using steady = smarm_test::steady;

namespace {

SMARM_TEST_N(Mutex, MutualExclusionAcrossYields, 4) {
    smarm::mutex<long> m(0);
    std::atomic<int> inside{0};
    std::vector<smarm::join_handle> hs;
    for (int i = 0; i < 16; ++i)
        hs.push_back(smarm::spawn([&] {
            for (int k = 0; k < 200; ++k) {
                auto g = m.lock();
                EXPECT_EQ(inside.fetch_add(1), 0);
                long v = *g;
                smarm::yield_now();  // held across an observation point
                *g = v + 1;
                inside.fetch_sub(1);
            }
        }));
    for (auto& h : hs)
        h.join();
    EXPECT_EQ(*m.lock(), 16 * 200);
}

SMARM_TEST(Mutex, FifoHandOff) {
    smarm::mutex<std::vector<int>> m;
    auto g = m.lock();
    std::vector<smarm::join_handle> hs;
    for (int i = 0; i < 5; ++i) {
        hs.push_back(smarm::spawn([&m, i] { m.lock()->push_back(i); }));
        smarm::sleep(2ms);  // queue them in order
    }
    g.unlock();
    for (auto& h : hs)
        h.join();
    EXPECT_EQ(*m.lock(), (std::vector<int>{0, 1, 2, 3, 4}));
}

SMARM_TEST(Mutex, LockTimesOutAndTryLockNeverParks) {
    smarm::mutex<int> m(0);
    auto g = m.lock();
    EXPECT_FALSE(m.try_lock().has_value());
    auto h = smarm::spawn([&] {
        auto t0 = steady::now();
        EXPECT_FALSE(m.try_lock_for(10ms).has_value());
        EXPECT_GE(steady::now() - t0, 10ms);
        EXPECT_THROW(m.lock(5ms), smarm::lock_timeout);
    });
    h.join();
    g.unlock();
    EXPECT_TRUE(m.try_lock().has_value());
}

SMARM_TEST(Mutex, StoppedWaiterLeavesTheQueue) {
    smarm::mutex<int> m(0);
    auto g = m.lock();
    auto waiter = smarm::spawn([&] { (void)m.lock(); });
    smarm::sleep(3ms);
    smarm::request_stop(waiter.id());
    EXPECT_EQ(waiter.join().kind, smarm::exit_kind::stopped);
    g.unlock();
    EXPECT_TRUE(m.try_lock().has_value()) << "the lock must not be handed to a dead waiter";
}

}  // namespace
