// Runtime microbenchmarks, shaped like ../shared/peers/go_bench so the two
// can be compared as ratios (compare.sh runs both in interleaved rounds).
//
// Each benchmark first runs its workload once untimed on the same runtime
// (go_bench likewise reports its cold run apart from the timed reps), then
// performs it once per iteration and reports the peer-comparable figure as a
// counter:
//   skynet_1M          ms per skynet (1,111,111 actors)
//   spawn_join_200k    actors spawned and joined per second
//   pingpong_1M        ns per round trip between two actors
//   mem_park_100k      RSS bytes per actor parked on its own channel
//   yield_1M           ns per yield_now (two actors alternating)
//   timer_churn_100k   ns per sleep(0..50us) (arm + fire + wake)
//   ring_scaling/S     channel hops per second with S schedulers (1000-actor ring)

#include <smarm/channel.hpp>
#include <smarm/gen_server.hpp>
#include <smarm/registry.hpp>
#include <smarm/runtime.hpp>
#include <smarm/supervisor.hpp>
#include <smarm/trace.hpp>

#include <benchmark/benchmark.h>

#include <smarm_test/workloads.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace {

using steady = std::chrono::steady_clock;

smarm::runtime_config cfg(unsigned schedulers) {
    smarm::runtime_config c;
    c.schedulers = schedulers;
    c.max_actors = std::size_t{1} << 21;
    return c;
}

double ms_since(steady::time_point t0) {
    return std::chrono::duration<double, std::milli>(steady::now() - t0).count();
}

void BM_skynet_1M(benchmark::State& state) {
    smarm::runtime rt(cfg(2));
    rt.run([] { (void)smarm_test::skynet(0, 1'000'000); });  // warm-up: stacks, slots
    double ms = 0;
    for (auto _ : state) {
        auto t0 = steady::now();
        long long sum = 0;
        rt.run([&] { sum = smarm_test::skynet(0, 1'000'000); });
        ms = ms_since(t0);
        if (sum != 499999500000LL) state.SkipWithError("skynet: wrong sum");
    }
    state.counters["ms"] = ms;
}

void BM_spawn_join_200k(benchmark::State& state) {
    smarm::runtime rt(cfg(2));
    constexpr int n = 200'000;
    double per_s = 0;
    auto workload = [] {
        std::vector<smarm::join_handle> hs;
        hs.reserve(n);
        for (int i = 0; i < n; ++i)
            hs.push_back(smarm::spawn([] {}));
        for (auto& h : hs)
            h.join();
    };
    rt.run(workload);  // warm-up
    for (auto _ : state) {
        auto t0 = steady::now();
        rt.run(workload);
        per_s = n / (ms_since(t0) / 1000.0);
    }
    state.counters["per_s"] = per_s;
}

/// One run of `n` ping-pong round trips on `rt`: ns per round trip.
double pingpong_ns(smarm::runtime& rt, int n) {
    double ns = 0;
    rt.run([&] {
        auto [ptx, prx] = smarm::channel<int>();
        auto [qtx, qrx] = smarm::channel<int>();
        auto echo = smarm::spawn([prx = std::move(prx), qtx = std::move(qtx)] {
            while (auto v = prx.recv())
                (void)qtx.send(*v);
        });
        auto t0 = steady::now();
        for (int i = 0; i < n; ++i) {
            (void)ptx.send(i);
            (void)qrx.recv();
        }
        ns = ms_since(t0) * 1e6 / n;
        { auto close = std::move(ptx); }
        echo.join();
    });
    return ns;
}

void BM_pingpong_1M(benchmark::State& state) {
    smarm::runtime rt(cfg(2));
    double ns = 0;
    for (int round = 0; round < 2; ++round)  // round 0 is the warm-up
        ns = pingpong_ns(rt, 1'000'000);
    for (auto _ : state)
        benchmark::DoNotOptimize(ns);
    state.counters["ns_per_rt"] = ns;
}

// The tracer's cost (smarm/trace.hpp): the ping-pong above with a flight
// recorder on and off, interleaved in pairs in one process; reports the
// median on/off ratio of the round trip and the recording's cost per event
// (each round trip records its sends, receives, switches out and resumes).
void BM_pingpong_traced(benchmark::State& state) {
    smarm::runtime rt(cfg(2));
    constexpr int n = 300'000;
    auto once = [&](bool traced, std::uint64_t& events) {
        if (traced) smarm::trace::start({.buffer_bytes = std::size_t{8} << 20, .flight = true});
        const double ns = pingpong_ns(rt, n);
        if (traced) {
            smarm::trace::stop();
            smarm::trace::summary s;
            (void)smarm::trace::to_json({.max_bytes = 4096}, &s);
            events = s.records + s.dropped;
        }
        return ns;
    };
    std::uint64_t events = 0;
    (void)once(false, events);  // warm-up
    (void)once(true, events);
    std::vector<double> ratios, per_event;
    double off_ns = 0, on_ns = 0;
    for (int pair = 0; pair < 6; ++pair) {
        const bool on_first = pair % 2 == 1;
        double a = 0, b = 0;
        if (on_first) b = once(true, events);
        a = once(false, events);
        if (!on_first) b = once(true, events);
        ratios.push_back(b / a);
        per_event.push_back((b - a) * n / static_cast<double>(events));
        off_ns += a / 6;
        on_ns += b / 6;
    }
    std::sort(ratios.begin(), ratios.end());
    std::sort(per_event.begin(), per_event.end());
    for (auto _ : state)
        benchmark::DoNotOptimize(ratios);
    state.counters["off_ns_per_rt"] = off_ns;
    state.counters["on_ns_per_rt"] = on_ns;
    state.counters["on_off_median"] = (ratios[2] + ratios[3]) / 2;
    state.counters["on_off_min"] = ratios.front();
    state.counters["on_off_max"] = ratios.back();
    state.counters["ns_per_event"] = (per_event[2] + per_event[3]) / 2;
    state.counters["events_per_rt"] = static_cast<double>(events) / n;
}

long rss_bytes() {
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6)) * 1024;
    return -1;
}

void BM_mem_park_100k(benchmark::State& state) {
    constexpr int n = 100'000;
    double per = 0;
    for (auto _ : state) {
        smarm::runtime rt(cfg(2));
        rt.run([&] {
            std::vector<smarm::sender<int>> inboxes;
            inboxes.reserve(n);
            std::vector<smarm::join_handle> hs;
            hs.reserve(n);
            std::atomic<int> parked{0};
            long r0 = rss_bytes();
            for (int i = 0; i < n; ++i) {
                auto [tx, rx] = smarm::channel<int>();
                inboxes.push_back(std::move(tx));
                hs.push_back(smarm::spawn([rx = std::move(rx), &parked] {
                    parked.fetch_add(1, std::memory_order_relaxed);
                    (void)rx.recv();
                }));
            }
            while (parked.load() < n)
                smarm::yield_now();
            smarm::sleep(std::chrono::milliseconds(5));
            per = static_cast<double>(rss_bytes() - r0) / n;
            inboxes.clear();
            for (auto& h : hs)
                h.join();
        });
    }
    state.counters["rss_per_actor"] = per;
}

void BM_yield_1M(benchmark::State& state) {
    smarm::runtime rt(cfg(1));
    constexpr int n = 500'000;
    double ns = 0;
    for (auto _ : state) {
        rt.run([&] {
            auto other = smarm::spawn([] {
                for (int i = 0; i < n; ++i)
                    smarm::yield_now();
            });
            auto t0 = steady::now();
            for (int i = 0; i < n; ++i)
                smarm::yield_now();
            ns = ms_since(t0) * 1e6 / (2.0 * n);
            other.join();
        });
    }
    state.counters["ns_per_yield"] = ns;
}

void BM_timer_churn_100k(benchmark::State& state) {
    smarm::runtime rt(cfg(2));
    constexpr int actors = 100, per = 1000;
    double ns = 0;
    for (auto _ : state) {
        auto t0 = steady::now();
        rt.run([] {
            std::vector<smarm::join_handle> hs;
            for (int a = 0; a < actors; ++a)
                hs.push_back(smarm::spawn([a] {
                    for (int i = 0; i < per; ++i)
                        smarm::sleep(std::chrono::microseconds((a * 7 + i) % 50));
                }));
            for (auto& h : hs)
                h.join();
        });
        ns = ms_since(t0) * 1e6 / (actors * per);
    }
    state.counters["ns_per_sleep"] = ns;
}

void BM_ring_scaling(benchmark::State& state) {
    const auto schedulers = static_cast<unsigned>(state.range(0));
    smarm::runtime rt(cfg(schedulers));
    constexpr int actors = 1000, tokens = 100, hops_per_token = 20'000;
    double hops_per_s = 0;
    for (auto _ : state) {
        std::atomic<long> hops{0};
        auto t0 = steady::now();
        rt.run([&] {
            std::vector<smarm::sender<int>> txs;
            std::vector<smarm::receiver<int>> rxs;
            for (int i = 0; i < actors; ++i) {
                auto [tx, rx] = smarm::channel<int>();
                txs.push_back(std::move(tx));
                rxs.push_back(std::move(rx));
            }
            auto [done_tx, done_rx] = smarm::channel<int>();
            std::vector<smarm::join_handle> hs;
            for (int i = 0; i < actors; ++i)
                hs.push_back(smarm::spawn(
                    [&hops, rx = std::move(rxs[i]), next = txs[(i + 1) % actors], done = done_tx] {
                        while (auto t = rx.recv()) {
                            if (*t < 0) {  // poison: pass it on and leave the ring
                                (void)next.send(-1);
                                return;
                            }
                            hops.fetch_add(1, std::memory_order_relaxed);
                            if (*t == 0) {
                                (void)done.send(1);
                                continue;
                            }
                            (void)next.send(*t - 1);
                        }
                    }));
            for (int k = 0; k < tokens; ++k)
                (void)txs[(k * 10) % actors].send(hops_per_token);
            for (int k = 0; k < tokens; ++k)
                (void)done_rx.recv();
            // Every actor holds a sender to the next one, so closing our
            // senders cannot end the ring: a poison token does.
            (void)txs[0].send(-1);
            txs.clear();
            for (auto& h : hs)
                h.join();
        });
        hops_per_s = static_cast<double>(hops.load()) / (ms_since(t0) / 1000.0);
    }
    state.counters["hops_per_s"] = hops_per_s;
}

struct bench_counter : smarm::gen_server<int, int> {
    int total = 0;
    int handle_call(int add) override { return total += add; }
};

void BM_gen_server_call(benchmark::State& state) {
    smarm::runtime rt(cfg(2));
    constexpr int n = 300'000;
    double ns = 0;
    for (auto _ : state) {
        rt.run([&] {
            auto ref = smarm::start<bench_counter>();
            for (int i = 0; i < 10'000; ++i)
                (void)smarm::call(ref, 1, std::chrono::seconds(5));
            auto t0 = steady::now();
            for (int i = 0; i < n; ++i)
                (void)smarm::call(ref, 1, std::chrono::seconds(5));
            ns = ms_since(t0) * 1e6 / n;
            smarm::request_stop(ref.id);
        });
    }
    state.counters["ns_per_call"] = ns;
}

// Send + receive through a held sender vs through the registry (resolved on
// every send): the overhead of naming.
void BM_send_direct_vs_named(benchmark::State& state) {
    smarm::runtime rt(cfg(1));
    constexpr int n = 500'000;
    double direct = 0, named = 0;
    for (auto _ : state) {
        rt.run([&] {
            constexpr smarm::name<int> target{"bench_target"};
            auto [tx, rx] = smarm::channel<int>();
            smarm::register_name(target, tx);
            auto t0 = steady::now();
            for (int i = 0; i < n; ++i) {
                (void)tx.send(i);
                (void)rx.recv();
            }
            direct = ms_since(t0) * 1e6 / n;
            t0 = steady::now();
            for (int i = 0; i < n; ++i) {
                (void)smarm::send(target, i);
                (void)rx.recv();
            }
            named = ms_since(t0) * 1e6 / n;
        });
    }
    state.counters["direct_ns"] = direct;
    state.counters["named_ns"] = named;
}

// A dynamic supervisor's per-child cost (start_child, the child ends, its
// down is handled) with `range(0)` long-lived siblings: what a connection
// supervisor pays per connection with that many connections open.
void BM_supervisor_churn(benchmark::State& state) {
    smarm::runtime rt(cfg(1));
    const auto siblings = static_cast<int>(state.range(0));
    constexpr int n = 20'000;
    double ns = 0;
    for (auto _ : state) {
        rt.run([&] {
            auto sup = smarm::start_supervisor({}, {});
            auto park = [] {
                for (;;)
                    smarm::sleep(std::chrono::hours(1));
            };
            for (int i = 0; i < siblings; ++i)
                (void)smarm::start_child(sup, {"idle", park, smarm::restart_policy::temporary});
            auto brief = smarm::child_spec{"brief", [] {}, smarm::restart_policy::temporary};
            auto t0 = steady::now();
            for (int i = 0; i < n; ++i)
                (void)smarm::start_child(sup, brief);
            // Every brief child's down handled: only the siblings remain.
            while (smarm::count_children(sup).specs != static_cast<std::size_t>(siblings))
                smarm::yield_now();
            ns = ms_since(t0) * 1e6 / n;
            smarm::request_stop(sup.id);
        });
    }
    state.counters["ns_per_child"] = ns;
}

}  // namespace

BENCHMARK(BM_supervisor_churn)->Arg(0)->Arg(4096)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_gen_server_call)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_send_direct_vs_named)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_skynet_1M)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_spawn_join_200k)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_pingpong_1M)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_pingpong_traced)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_mem_park_100k)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_yield_1M)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_timer_churn_100k)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_ring_scaling)->Arg(2)->Arg(8)->Unit(benchmark::kMillisecond)->Iterations(1);

BENCHMARK_MAIN();
