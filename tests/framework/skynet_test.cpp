// skynet with a million leaves: the runtime at its actor-count scale. Its own
// executable, labelled `nosan`: sanitizers cap live fibers (TSan: 8128).

#include <smarm/channel.hpp>
#include <smarm/runtime.hpp>

#include <gtest/gtest.h>

#include <smarm_test/run.hpp>

namespace {

// skynet: a 10-ary tree of actors, 1,000,000 leaves; each leaf reports its
// number, each node sums its children.
long long skynet(long long num, long long size) {
    if (size == 1) return num;
    auto [tx, rx] = smarm::channel<long long>();
    long long child = size / 10;
    for (long long i = 0; i < 10; ++i)
        smarm::spawn([tx = tx, n = num + i * child, child] {
            (void)tx.send(skynet(n, child));
        }).detach();
    long long sum = 0;
    for (int i = 0; i < 10; ++i)
        sum += *rx.recv();
    return sum;
}

TEST(Runtime, SkynetMillionActorsComputesTheRightSum) {
    smarm::runtime_config c = smarm_test::config(2, std::size_t{1} << 21);
    c.stack_size = 64 * 1024;
    smarm::runtime rt(c);
    long long sum = 0;
    rt.run([&] { sum = skynet(0, 1'000'000); });
    EXPECT_EQ(sum, 499999500000LL);
}

}  // namespace
