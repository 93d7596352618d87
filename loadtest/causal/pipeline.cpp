// smarm-causal-pipeline: the causal profiler checked against programs whose
// answer is known.
//
// Two shapes, each on two schedulers:
//
// - compute: `serialize` (200 us of arithmetic per item) hands each item to
//   `reserve` (400 us), which counts it (progress point pipeline.items) and
//   returns a credit; four credits circulate, so serialize waits on reserve
//   half of the time. Making a stage p faster changes the rate by
//   R / max(S, R (1 - p)) - 1 for reserve (+33% at 25%, +100% at 50%) and
//   by nothing for serialize: it is hot (a third of the CPU) but overlapped.
// - blocking: `fetch` asks an outside thread for each item over a pipe (the
//   answer comes ~500 us later: the world, not slowed by experiments), then
//   computes 100 us and hands the item to `parse` (150 us) on a channel.
//   fetch is the bottleneck: at p its rate is 1 / (1 - p x 100 us x rate0)
//   of the baseline; parse, which waits on its channel most of the time, is
//   0%. Getting parse right needs the rule that a wait on IO keeps its debt:
//   forgiven, fetch would skip parse's injected delay and parse would look
//   like a speedup.
//
// Stages burn a calibrated chain of dependent multiplications with an
// observation point every microsecond, never a timed busy-wait (a timed
// wait absorbs the injected delay and hides what it should show).
//
// - crowd: six actors on the two schedulers, each looping over `hot` (150 us)
//   then `cold` (50 us) and counting an item: more actors than cores inside
//   one site at once. Every core is busy all the time, so making a site p
//   faster changes the rate by 200 / (200 - p x its cost) - 1 (hot: +60% at
//   50%; cold: +14% at 50%). Getting it right needs the ledger to be the
//   core's, not the actor's: credited per actor, in-site actors never paid
//   for each other and hot@50 read +264%.
//
// Modes: a profile (default), --validate N (N profiles, measured vs theory
// with the spread), --predict (compute: make reserve really 25% cheaper in
// the same run and compare with what the profile of the unchanged program
// predicted), --smoke (a short profile; exit 1 unless the ranking holds
// within generous bounds; what ctest runs).

#include <smarm/causal.hpp>
#include <smarm/channel.hpp>
#include <smarm/io.hpp>
#include <smarm/progress.hpp>
#include <smarm/runtime.hpp>
#include <smarm/timer.hpp>

#include <CLI/CLI.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace causal = smarm::causal;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr const char* items_point = "pipeline.items";

// ---- calibrated work ----

std::uint64_t chain(std::uint64_t n, std::uint64_t x) noexcept {
    for (std::uint64_t i = 0; i < n; ++i) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        asm volatile("" : "+r"(x));  // keep the chain dependent and unvectorized
    }
    return x;
}

double g_iters_per_us = 0;          // set once before the runtime starts
std::atomic<std::uint64_t> g_sink;  // keeps the result alive

/// The fastest of several timed runs: the machine's rate when nothing else
/// interrupts it.
void calibrate() {
    constexpr std::uint64_t n = 2'000'000;
    double best = 1e18;
    for (int i = 0; i < 7; ++i) {
        const auto t0 = clock_type::now();
        g_sink.fetch_add(chain(n, static_cast<std::uint64_t>(i)), std::memory_order_relaxed);
        const double us = std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
        best = std::min(best, us);
    }
    g_iters_per_us = static_cast<double>(n) / best;
}

/// About `us` microseconds of arithmetic, an observation point each
/// microsecond.
void work(double us) {
    const auto chunk = static_cast<std::uint64_t>(g_iters_per_us);
    auto left = static_cast<std::uint64_t>(us * g_iters_per_us);
    std::uint64_t x = left;
    while (left > 0) {
        const std::uint64_t n = std::min(left, chunk);
        x = chain(n, x);
        left -= n;
        smarm::check();
    }
    g_sink.fetch_add(x, std::memory_order_relaxed);
}

// ---- the two shapes ----

struct options {
    std::string shape = "compute";
    unsigned window_ms = 500;
    unsigned rounds = 3;
    std::vector<unsigned> speedups{0, 25, 50};
    unsigned validate = 0;
    bool predict = false;
    bool smoke = false;
    std::string coz, json, plot;
};

struct shape_model {
    std::vector<std::string> sites;
    // Theory for (site, speedup) given the measured baseline rate (items/s).
    std::function<double(const std::string&, unsigned, double)> theory;
};

constexpr double serialize_us = 200, reserve_us = 400;
constexpr double fetch_wait_us = 500, fetch_us = 100, parse_us = 150;
constexpr double hot_us = 150, cold_us = 50;
constexpr int crowd_actors = 6;

shape_model compute_model() {
    return {{"serialize", "reserve"}, [](const std::string& site, unsigned pct, double) {
                const double p = pct / 100.0;
                const double s = site == "serialize" ? serialize_us * (1 - p) : serialize_us;
                const double r = site == "reserve" ? reserve_us * (1 - p) : reserve_us;
                return 100.0 * (std::max(serialize_us, reserve_us) / std::max(s, r) - 1);
            }};
}

shape_model blocking_model() {
    return {{"fetch", "parse"}, [](const std::string& site, unsigned pct, double rate0) {
                if (site != "fetch") return 0.0;
                const double saved = pct / 100.0 * fetch_us * 1e-6 * rate0;  // of each second
                return 100.0 * (1 / (1 - saved) - 1);
            }};
}

shape_model crowd_model() {
    return {{"hot", "cold"}, [](const std::string& site, unsigned pct, double) {
                const double cost = site == "hot" ? hot_us : cold_us;
                const double total = hot_us + cold_us;
                return 100.0 * (total / (total - pct / 100.0 * cost) - 1);
            }};
}

shape_model model_of(const std::string& shape) {
    if (shape == "compute") return compute_model();
    if (shape == "blocking") return blocking_model();
    return crowd_model();
}

void crowd(std::atomic<bool>& stop) {
    std::vector<smarm::join_handle> actors;
    for (int i = 0; i < crowd_actors; ++i)
        actors.push_back(smarm::spawn([&stop] {
            while (!stop.load(std::memory_order_relaxed)) {
                {
                    auto g = SMARM_CAUSAL_SITE("hot");
                    work(hot_us);
                }
                {
                    auto g = SMARM_CAUSAL_SITE("cold");
                    work(cold_us);
                }
                SMARM_PROGRESS(items_point);
            }
        }));
    for (auto& a : actors)
        a.join();
}

/// Runs the compute pipeline until `stop`; `reserve_cost` scales reserve.
void compute_pipeline(std::atomic<bool>& stop, std::atomic<double>& reserve_cost) {
    auto [credit_tx, credit_rx] = smarm::channel<int>();
    auto [item_tx, item_rx] = smarm::channel<int>();
    for (int i = 0; i < 4; ++i)
        (void)credit_tx.send(0);
    auto serialize =
        smarm::spawn([&stop, credits = std::move(credit_rx), items = std::move(item_tx)]() mutable {
            while (!stop.load(std::memory_order_relaxed)) {
                if (!credits.recv()) return;
                SMARM_LATENCY_BEGIN("pipeline.item");
                {
                    auto g = SMARM_CAUSAL_SITE("serialize");
                    work(serialize_us);
                }
                (void)items.send(0);
            }
        });
    auto reserve = smarm::spawn(
        [&reserve_cost, items = std::move(item_rx), credits = std::move(credit_tx)]() mutable {
            while (items.recv()) {
                {
                    auto g = SMARM_CAUSAL_SITE("reserve");
                    work(reserve_us * reserve_cost.load(std::memory_order_relaxed));
                }
                SMARM_PROGRESS(items_point);
                SMARM_LATENCY_END("pipeline.item");
                (void)credits.send(0);
            }
        });
    serialize.join();
    reserve.join();
}

/// The outside world: answers each byte on `in` with a byte on `out` after
/// fetch_wait_us, until `in` closes.
void echo_world(int in, int out) {
    char b = 0;
    while (::read(in, &b, 1) == 1) {
        std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int>(fetch_wait_us)));
        if (::write(out, &b, 1) != 1) return;
    }
}

void blocking_pipeline(std::atomic<bool>& stop) {
    int ask[2], answer[2];
    if (::pipe(ask) != 0 || ::pipe2(answer, O_NONBLOCK | O_CLOEXEC) != 0)
        throw std::system_error(errno, std::generic_category(), "pipe");
    std::thread world(echo_world, ask[0], answer[1]);
    auto [tx, rx] = smarm::channel<int>();
    auto fetch = smarm::spawn([&stop, &ask, &answer, tx = std::move(tx)] {
        char b = 1;
        while (!stop.load(std::memory_order_relaxed)) {
            SMARM_LATENCY_BEGIN("pipeline.item");
            if (::write(ask[1], &b, 1) != 1)
                throw std::system_error(errno, std::generic_category());
            while (::read(answer[0], &b, 1) != 1) {
                if (errno != EAGAIN) throw std::system_error(errno, std::generic_category());
                smarm::wait_readable(answer[0]);
            }
            {
                auto g = SMARM_CAUSAL_SITE("fetch");
                work(fetch_us);
            }
            (void)tx.send(0);
        }
    });
    auto parse = smarm::spawn([rx = std::move(rx)] {
        while (rx.recv()) {
            {
                auto g = SMARM_CAUSAL_SITE("parse");
                work(parse_us);
            }
            SMARM_PROGRESS(items_point);
            SMARM_LATENCY_END("pipeline.item");
        }
    });
    fetch.join();
    parse.join();
    ::close(ask[1]);
    world.join();
    for (int fd : {ask[0], answer[0], answer[1]})
        ::close(fd);
}

// ---- reporting ----

struct stat3 {
    double median = 0, min = 0, max = 0;
};
stat3 spread(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    if (v.empty()) return {};
    const std::size_t n = v.size();
    const double med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    return {med, v.front(), v.back()};
}

void write_file(const std::string& path, const std::string& text) {
    std::ofstream f(path);
    f << text;
    if (!f) throw std::runtime_error("cannot write " + path);
}

causal::plan make_plan(const options& o, const shape_model& m) {
    causal::plan p;
    p.sites = m.sites;
    p.speedups = o.speedups;
    p.rounds = o.rounds;
    p.window = std::chrono::milliseconds(o.window_ms);
    p.points = {items_point};
    return p;
}

/// measured[site][speedup] over every profile, against theory.
int report(const std::vector<causal::profile>& profiles, const options& o, const shape_model& m) {
    int failures = 0;
    std::printf("\n%-10s %7s %9s %9s %19s\n", "site", "speedup", "theory", "measured",
                "(min..max)");
    for (const auto& site : m.sites) {
        for (unsigned pct : o.speedups) {
            if (pct == 0) continue;
            std::vector<double> measured, theory;
            for (const auto& pr : profiles) {
                const auto base = pr.find(site, 0);
                const auto imp = pr.impact(site, pct, items_point);
                if (!base || !imp) continue;
                measured.push_back(*imp);
                theory.push_back(m.theory(site, pct, base->rate(items_point).value_or(0)));
            }
            if (measured.empty()) {
                std::printf("%-10s %6u%% %9s %9s\n", site.c_str(), pct, "-", "no data");
                ++failures;
                continue;
            }
            const stat3 s = spread(measured);
            const double th = spread(theory).median;
            std::printf("%-10s %6u%% %+8.1f%% %+8.1f%% %+8.1f..%+.1f%%\n", site.c_str(), pct, th,
                        s.median, s.min, s.max);
        }
    }
    return failures;
}

/// The generous bounds ctest holds the profiler to (theory in the comment
/// at the top; the CI machine shares its two cores with other tests).
int check_smoke(const causal::profile& pr, const std::string& shape) {
    int bad = 0;
    auto expect = [&](const char* site, unsigned pct, double lo, double hi) {
        const auto imp = pr.impact(site, pct, items_point);
        if (!imp) {
            std::fprintf(stderr, "smoke: %s@%u%%: no measurement\n", site, pct);
            ++bad;
        } else if (*imp < lo || *imp > hi) {
            std::fprintf(stderr, "smoke: %s@%u%% = %+.1f%%, expected in [%+.0f%%, %+.0f%%]\n", site,
                         pct, *imp, lo, hi);
            ++bad;
        }
    };
    if (shape == "compute") {
        expect("reserve", 25, 15, 60);     // theory +33%
        expect("serialize", 25, -10, 10);  // theory 0%
    } else if (shape == "blocking") {
        expect("fetch", 50, 2, 25);  // theory about +6..+9%
        // Theory 0%; 6 rounds of 300 ms read -6.1..+0.8% in 6 runs on the
        // 2-core machine: the bound is that spread with a margin.
        expect("parse", 50, -9, 9);
    } else {
        expect("hot", 50, 40, 85);  // theory +60%
        expect("cold", 50, 3, 30);  // theory +14%
    }
    return bad;
}

/// Real throughput (items/s) over `d` with no experiment running.
double measure_rate(std::chrono::milliseconds d) {
    const auto before = smarm::progress_point::snapshot()[items_point];
    const auto t0 = clock_type::now();
    smarm::sleep_wall(d);
    const double s = std::chrono::duration<double>(clock_type::now() - t0).count();
    return static_cast<double>(smarm::progress_point::snapshot()[items_point] - before) / s;
}

int predict(const options& o, std::atomic<double>& reserve_cost) {
    // The profile of the unchanged program predicts reserve@25...
    options po = o;
    po.speedups = {0, 25};
    causal::plan p = make_plan(po, compute_model());
    p.sites = {"reserve"};
    const auto pr = causal::run(p);
    const auto predicted = pr.impact("reserve", 25, items_point);
    // ...and the changed program, interleaved with the unchanged one in the
    // same run, says what really happens.
    std::vector<double> real;
    const auto len = std::chrono::milliseconds(o.window_ms);
    for (unsigned r = 0; r < std::max(3u, o.rounds); ++r) {
        reserve_cost = 1.0;
        smarm::sleep_wall(20ms);
        const double a = measure_rate(len);
        reserve_cost = 0.75;
        smarm::sleep_wall(20ms);
        const double b = measure_rate(len);
        real.push_back(100.0 * (b / a - 1));
    }
    reserve_cost = 1.0;
    const stat3 s = spread(real);
    if (!predicted) {
        std::fprintf(stderr, "predict: the profile has no reserve@25%% measurement\n");
        return 1;
    }
    std::printf(
        "prediction vs reality, reserve 25%% cheaper:\n"
        "  predicted by the profile  %+.1f%%\n"
        "  real (median of %zu pairs)  %+.1f%% (%+.1f..%+.1f)\n"
        "  difference                %.1f percentage points (goal: within 5)\n",
        *predicted, real.size(), s.median, s.min, s.max, std::fabs(*predicted - s.median));
    return 0;
}

int run_root(const options& o) {
    std::atomic<bool> stop{false};
    std::atomic<double> reserve_cost{1.0};
    const shape_model model = model_of(o.shape);
    auto workload = smarm::spawn([&] {
        if (o.shape == "compute")
            compute_pipeline(stop, reserve_cost);
        else if (o.shape == "blocking")
            blocking_pipeline(stop);
        else
            crowd(stop);
    });
    int rc = 0;
    try {
        smarm::sleep_wall(200ms);  // warm up: every site and point registered
        if (o.predict) {
            rc = predict(o, reserve_cost);
        } else {
            const unsigned n = std::max(1u, o.validate);
            std::vector<causal::profile> profiles;
            for (unsigned i = 0; i < n; ++i)
                profiles.push_back(causal::run(make_plan(o, model)));
            const auto& last = profiles.back();
            std::cout << causal::render_summary(last);
            if (!o.coz.empty()) write_file(o.coz, causal::render_coz(last));
            if (!o.json.empty()) write_file(o.json, causal::render_json(last));
            if (!o.plot.empty()) {
                const std::string script = o.plot + ".gp";
                write_file(script, causal::render_gnuplot(last, o.plot, items_point));
                if (std::system(("gnuplot '" + script + "'").c_str()) != 0)
                    throw std::runtime_error("gnuplot failed on " + script);
            }
            rc = report(profiles, o, model) ? 1 : 0;
            if (o.smoke) rc |= check_smoke(last, o.shape) ? 1 : 0;
        }
    } catch (...) {
        stop = true;
        workload.join();
        throw;
    }
    stop = true;
    workload.join();
    return rc;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{
        "smarm-causal-pipeline: the causal profiler against pipelines with a known answer"};
    options o;
    app.add_option("--shape", o.shape,
                   "compute (serialize -> reserve), blocking (fetch -> parse) or crowd (six "
                   "actors through hot then cold)")
        ->check(CLI::IsMember({"compute", "blocking", "crowd"}));
    app.add_option("--window", o.window_ms, "shortest experiment window, ms (default 500)")
        ->check(CLI::Range(20u, 60000u));
    app.add_option("--rounds", o.rounds, "sweep passes over every cell (default 3)")
        ->check(CLI::Range(1u, 100u));
    app.add_option("--speedups", o.speedups, "percent, with 0 (default 0 25 50)")
        ->check(CLI::Range(0u, 100u));
    app.add_option("--validate", o.validate, "profiles to take; reports measured vs theory");
    app.add_flag("--predict", o.predict,
                 "compute: profile, then make reserve really 25% cheaper and compare");
    app.add_flag("--smoke", o.smoke, "exit 1 unless the ranking holds (what ctest runs)");
    app.add_option("--coz", o.coz, "write the last profile as profile.coz lines to this file");
    app.add_option("--json", o.json, "write the last profile as JSON to this file");
    app.add_option("--plot", o.plot, "draw the last profile with gnuplot (.png or .svg)");
    CLI11_PARSE(app, argc, argv);
    if (o.predict && o.shape != "compute") {
        std::cerr << "--predict needs --shape compute\n";
        return 2;
    }
    if (o.smoke && o.speedups != std::vector<unsigned>{0, 25, 50}) {
        std::cerr << "--smoke checks the default speedups (0 25 50)\n";
        return 2;
    }

    calibrate();
    int rc = 0;
    smarm::runtime_config cfg;
    cfg.schedulers = 2;
    try {
        smarm::run([&] { rc = run_root(o); }, cfg);
    } catch (const std::exception& e) {
        std::cerr << "smarm-causal-pipeline: " << e.what() << "\n";
        return 1;
    }
    return rc;
}
