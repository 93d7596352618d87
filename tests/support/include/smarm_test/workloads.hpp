#pragma once
// Workloads shared by tests and benchmarks.

#include <smarm/channel.hpp>
#include <smarm/runtime.hpp>

namespace smarm_test {

/// skynet: a 10-ary tree of actors with `size` leaves; each leaf reports its
/// number and each node the sum of its children. skynet(0, 1'000'000) spawns
/// 1,111,111 actors and returns 499999500000.
inline long long skynet(long long num, long long size) {
    if (size == 1) return num;
    auto [tx, rx] = smarm::channel<long long>();
    const long long child = size / 10;
    for (long long i = 0; i < 10; ++i)
        smarm::spawn([tx = tx, n = num + i * child, child] {
            (void)tx.send(skynet(n, child));
        }).detach();
    long long sum = 0;
    for (int i = 0; i < 10; ++i)
        sum += *rx.recv();
    return sum;
}

}  // namespace smarm_test
