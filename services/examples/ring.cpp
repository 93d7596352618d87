// smarm-ring: a runtime demo. N actors form a ring and pass a token around
// it; prints the hop rate once a second. `make run` starts it until the
// smarm-server binary exists.
//
//   smarm-ring [actors=1000] [seconds=5] [schedulers=0 (hardware)]

#include <smarm/channel.hpp>
#include <smarm/runtime.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
    const int actors = argc > 1 ? std::atoi(argv[1]) : 1000;
    const int seconds = argc > 2 ? std::atoi(argv[2]) : 5;
    smarm::runtime_config cfg;
    cfg.schedulers = argc > 3 ? static_cast<unsigned>(std::atoi(argv[3])) : 0;
    if (actors < 2 || seconds < 1) {
        std::fprintf(stderr, "usage: smarm-ring [actors>=2] [seconds>=1] [schedulers]\n");
        return 2;
    }
    smarm::runtime rt(cfg);
    std::printf("smarm-ring: %d actors, %u schedulers, %d s\n", actors, rt.config().schedulers,
                seconds);
    std::atomic<std::uint64_t> hops{0};
    rt.run([&] {
        // Build the ring: actor i receives on rx[i] and forwards to tx[i+1].
        std::vector<smarm::sender<long>> txs;
        std::vector<smarm::receiver<long>> rxs;
        for (int i = 0; i < actors; ++i) {
            auto [tx, rx] = smarm::channel<long>();
            txs.push_back(std::move(tx));
            rxs.push_back(std::move(rx));
        }
        std::vector<smarm::join_handle> ring;
        for (int i = 1; i < actors; ++i)
            ring.push_back(
                smarm::spawn([&hops, rx = std::move(rxs[i]), next = txs[(i + 1) % actors]] {
                    while (auto token = rx.recv()) {
                        if (*token < 0) {  // poison: pass it on and leave the ring
                            (void)next.send(-1);
                            return;
                        }
                        hops.fetch_add(1, std::memory_order_relaxed);
                        if (!next.send(*token + 1).ok()) return;
                    }
                }));
        // The root is actor 0: it injects the token and reports.
        auto& rx0 = rxs[0];
        (void)txs[1].send(0);
        auto start = std::chrono::steady_clock::now();
        auto last = start;
        std::uint64_t last_hops = 0;
        for (;;) {
            auto token = rx0.recv();
            if (!token) break;
            auto now = std::chrono::steady_clock::now();
            if (now - last >= std::chrono::seconds(1)) {
                std::uint64_t h = hops.load(std::memory_order_relaxed);
                double dt = std::chrono::duration<double>(now - last).count();
                std::printf("  %.2f M hops/s  (laps %ld)\n", (h - last_hops) / dt / 1e6,
                            *token / actors);
                std::fflush(stdout);
                last = now;
                last_hops = h;
            }
            if (now - start >= std::chrono::seconds(seconds)) break;
            (void)txs[1].send(*token + 1);
        }
        // Each actor holds a sender to the next, so dropping ours cannot close
        // the ring: a poison token walks it instead.
        (void)txs[1].send(-1);
        txs.clear();
        for (auto& h : ring)
            h.join();
    });
    return 0;
}
