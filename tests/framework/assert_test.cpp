// SMARM_ASSERT / SMARM_INVARIANT (detail/assert.hpp): a failed check names
// itself on stderr and aborts; spinlock::is_held backs "caller holds X".

#define SMARM_ENABLE_ASSERTS 1  // on in this TU whatever the build type
#include <smarm/detail/assert.hpp>
#include <smarm/detail/spinlock.hpp>

#include <gtest/gtest.h>

#include <mutex>

TEST(Contracts, AHoldingInvariantCostsNothingVisible) {
    int n = 0;
    SMARM_INVARIANT(++n == 1, "test: evaluated once");
    EXPECT_EQ(n, 1);
    SMARM_ASSERT(n == 1);
}

TEST(ContractsDeathTest, AFailedInvariantNamesItselfAndAborts) {
    EXPECT_DEATH(
        SMARM_INVARIANT(1 + 1 == 3, "arith: two is not three"),
        "smarm: invariant failed: arith: two is not three \\(1 \\+ 1 == 3\\) at .*assert_test.cpp");
}

TEST(ContractsDeathTest, AFailedAssertionNamesItsCondition) {
    EXPECT_DEATH(SMARM_ASSERT(sizeof(int) == 1), "smarm: assertion failed: sizeof\\(int\\) == 1");
}

TEST(ContractsDeathTest, CallerHoldsChecksTheLock) {
    smarm::detail::spinlock mu;
    EXPECT_FALSE(mu.is_held());
    {
        std::lock_guard g(mu);
        EXPECT_TRUE(mu.is_held());
        SMARM_ASSERT(mu.is_held());
    }
    EXPECT_FALSE(mu.is_held());
    EXPECT_DEATH(SMARM_ASSERT(mu.is_held()), "assertion failed: mu.is_held\\(\\)");
}
