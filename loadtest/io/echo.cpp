// smarm-echo: loopback TCP echo benchmark (the smarm side of compare_echo.py).
// One process runs an echo server (an actor per connection) and N client
// actors, each doing request/response round trips of a fixed-size message.
//
//   smarm-echo [conns=64] [seconds=5] [size=64] [persistent|oneshot] [schedulers=2]

#include <smarm/channel.hpp>
#include <smarm/net.hpp>
#include <smarm/runtime.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

int main(int argc, char** argv) {
    const int conns = argc > 1 ? std::atoi(argv[1]) : 64;
    const double seconds = argc > 2 ? std::atof(argv[2]) : 5;
    const std::size_t size = argc > 3 ? static_cast<std::size_t>(std::atoi(argv[3])) : 64;
    const bool oneshot = argc > 4 && std::strcmp(argv[4], "oneshot") == 0;
    smarm::runtime_config cfg;
    cfg.schedulers = argc > 5 ? static_cast<unsigned>(std::atoi(argv[5])) : 2;
    cfg.max_actors = 1 << 16;
    cfg.sockets =
        oneshot ? smarm::socket_registration::oneshot : smarm::socket_registration::persistent;
    if (conns < 1 || seconds <= 0 || size < 1 || size > 4096) {
        std::fprintf(stderr, "usage: smarm-echo [conns] [seconds] [size<=4096] [mode] [sched]\n");
        return 2;
    }
    std::atomic<long> total{0};
    std::atomic<bool> stop{false};
    double elapsed = 0;
    smarm::runtime rt(cfg);
    rt.run([&] {
        auto listener = smarm::tcp_listener::bind("127.0.0.1", 0);
        const auto port = listener.local_address().port();
        auto server = smarm::spawn([&] {
            for (;;) {
                auto c = listener.accept();
                smarm::spawn([c = std::move(c)]() mutable {
                    char buf[4096];
                    try {
                        while (std::size_t n = c.read_some(buf, sizeof buf))
                            c.write_all(buf, n);
                    } catch (const std::system_error&) {
                    }
                }).detach();
            }
        });
        std::vector<smarm::tcp_stream> streams;
        for (int i = 0; i < conns; ++i)
            streams.push_back(smarm::tcp_stream::connect("127.0.0.1", port));
        auto [go_tx, go_rx] = smarm::channel<int>();
        std::vector<smarm::join_handle> clients;
        for (int i = 0; i < conns; ++i)
            clients.push_back(smarm::spawn([&, i] {
                std::string msg(size, 'x'), back(size, '\0');
                long n = 0;
                while (!stop.load(std::memory_order_relaxed)) {
                    streams[i].write_all(msg.data(), size);
                    streams[i].read_exact(back.data(), size);
                    ++n;
                }
                total.fetch_add(n);
            }));
        auto t0 = std::chrono::steady_clock::now();
        smarm::sleep(std::chrono::duration_cast<std::chrono::nanoseconds>(
            std::chrono::duration<double>(seconds)));
        stop = true;
        for (auto& c : clients)
            c.join();
        elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        streams.clear();  // server connection actors see EOF and end
        smarm::request_stop(server.id());
        server.join();
        listener.close();
    });
    std::printf("smarm_echo conns=%d size=%zu mode=%s rt_per_s=%.0f\n", conns, size,
                oneshot ? "oneshot" : "persistent", static_cast<double>(total.load()) / elapsed);
    if (std::getenv("SMARM_ECHO_STATS")) {
        for (auto& st : rt.stats().schedulers)
            std::printf("  scheduler: pops=%lu parks=%lu wakes=%lu\n",
                        static_cast<unsigned long>(st.pops), static_cast<unsigned long>(st.parks),
                        static_cast<unsigned long>(st.wakes));
    }
    return 0;
}
