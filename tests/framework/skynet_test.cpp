// skynet with a million leaves: the runtime at its actor-count scale. Its own
// executable, labelled `nosan`: sanitizers cap live fibers (TSan: 8128).

#include <smarm/channel.hpp>
#include <smarm/runtime.hpp>

#include <gtest/gtest.h>

#include <smarm_test/run.hpp>
#include <smarm_test/workloads.hpp>

namespace {

TEST(Runtime, SkynetMillionActorsComputesTheRightSum) {
    smarm::runtime_config c = smarm_test::config(2, std::size_t{1} << 21);
    c.stack_size = 64 * 1024;
    smarm::runtime rt(c);
    long long sum = 0;
    rt.run([&] { sum = smarm_test::skynet(0, 1'000'000); });
    EXPECT_EQ(sum, 499999500000LL);
}

}  // namespace
