// Concurrent waits, wakes, timeouts and stops on sockets, under TSan in
// `make test-tsan`: many connections, readers with short timeouts, writers,
// and a stopper that stops random readers mid-wait.

#include <smarm/net.hpp>
#include <smarm/runtime.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <vector>

#include <smarm_test/run.hpp>

using namespace std::chrono_literals;

namespace {

TEST(IoStress, WaitsWakesTimeoutsAndStops) {
    std::atomic<long> bytes_in{0}, timeouts{0};
    smarm_test::run(
        [&] {
            auto l = smarm::tcp_listener::bind("127.0.0.1", 0);
            const auto port = l.local_address().port();
            constexpr int pairs = 40;
            std::vector<smarm::tcp_stream> a, b;
            for (int i = 0; i < pairs; ++i) {
                a.push_back(smarm::tcp_stream::connect("127.0.0.1", port, 5s));
                b.push_back(l.accept(5s));
            }
            std::vector<smarm::join_handle> readers, writers;
            for (int i = 0; i < pairs; ++i) {
                readers.push_back(smarm::spawn([&, i] {
                    char buf[256];
                    for (;;) {
                        try {
                            std::size_t n = b[i].read_some(buf, sizeof buf, 1ms);
                            if (n == 0) return;
                            bytes_in.fetch_add(static_cast<long>(n));
                        } catch (const smarm::io_timeout&) {
                            timeouts.fetch_add(1);
                        }
                    }
                }));
                writers.push_back(smarm::spawn([&, i] {
                    std::mt19937 rng(static_cast<unsigned>(i));
                    for (int k = 0; k < 200; ++k) {
                        a[i].write_all("0123456789", 1 + rng() % 10, 5s);
                        if (rng() % 4 == 0) smarm::sleep(std::chrono::microseconds(rng() % 500));
                    }
                    a[i].shutdown(SHUT_WR);
                }));
            }
            std::mt19937 rng(7);
            for (int k = 0; k < 10; ++k) {
                smarm::sleep(1ms);
                smarm::request_stop(readers[rng() % pairs].id());
            }
            for (auto& w : writers)
                w.join();
            for (auto& r : readers)
                r.join();
            a.clear();
            b.clear();
        },
        4);
    EXPECT_GT(bytes_in.load(), 0);
}

}  // namespace
