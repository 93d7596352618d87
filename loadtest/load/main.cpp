// smarm-load: an HTTP/1.1 load generator on the smarm runtime (one actor per
// connection). See load.hpp for what it measures and `smarm-load --help`.
//
//   smarm-load http://127.0.0.1:8080/plaintext -c 64 -t 2 -d 10s
//   smarm-load http://127.0.0.1:8080/ --scenario kv.yaml --rate 20000 --json out.json
//
// Exit status: 0 when the run completed (errors are reported, not fatal),
// 2 for bad arguments or an unreadable scenario, 1 when the run could not
// start (unresolvable host) or a plot could not be written.

#include <smarm/config/config.hpp>
#include <smarm/runtime.hpp>

#include <CLI/CLI.hpp>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>

#include "load.hpp"

namespace load = smarm::load;

namespace {

std::chrono::nanoseconds duration_arg(const std::string& flag, const std::string& v) {
    try {
        return smarm::config::parse_duration(v);
    } catch (const std::invalid_argument&) {
        throw CLI::ValidationError(flag, "\"" + v + "\" is not a duration (e.g. 500ms, 10s, 2m)");
    }
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"smarm-load: HTTP/1.1 load generator (closed or open loop)"};
    std::string url, scenario_file, method = "GET", json_out, plot_out, duration = "10s",
                                    warmup = "0s", timeout = "5s";
    std::vector<std::string> headers;
    unsigned connections = 64, threads = 2;
    double rate = 0;
    std::uint64_t body = 0, seed = 1;
    bool close = false, quiet = false;
    app.add_option("url", url,
                   "target, http://host[:port][/path] (the path is ignored with "
                   "--scenario)")
        ->required();
    app.add_option("-c,--connections", connections, "concurrent connections (default 64)")
        ->check(CLI::Range(1u, 1000000u));
    app.add_option("-t,--threads", threads, "runtime schedulers (default 2)")
        ->check(CLI::Range(1u, 64u));
    app.add_option("-d,--duration", duration, "measured time (default 10s)");
    app.add_option("-w,--warmup", warmup, "time before measuring (default 0s)");
    app.add_option("-R,--rate", rate,
                   "open loop: requests per second over all connections, latency corrected "
                   "for coordinated omission (default: closed loop)")
        ->check(CLI::NonNegativeNumber);
    app.add_flag("--close", close, "a new connection per request (Connection: close)");
    app.add_option("--timeout", timeout, "per request, connect included (default 5s)");
    app.add_option("-m,--method", method, "request method (default GET)");
    app.add_option("-b,--body", body, "request body size in bytes (default 0)");
    app.add_option("-H,--header", headers, "extra header \"Name: value\" (repeatable)");
    app.add_option("-s,--scenario", scenario_file, "request mix file (YAML; see scenario.hpp)");
    app.add_option("--seed", seed, "random seed for scenario paths and bodies (default 1)");
    app.add_option("--json", json_out, "write the report as JSON to this file (\"-\": stdout)");
    app.add_option("--plot", plot_out,
                   "write a latency-by-percentile plot (.png or .svg; "
                   "needs gnuplot)");
    app.add_flag("-q,--quiet", quiet, "no progress line");
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? 0 : 2;
    }

    load::options o;
    try {
        o.to = load::parse_url(url);
        o.duration = duration_arg("--duration", duration);
        o.warmup = duration_arg("--warmup", warmup);
        o.timeout = duration_arg("--timeout", timeout);
        if (o.duration.count() <= 0) throw std::invalid_argument("--duration must be positive");
        if (o.timeout.count() <= 0) throw std::invalid_argument("--timeout must be positive");
        std::vector<std::pair<std::string, std::string>> hs;
        for (auto& h : headers) {
            auto colon = h.find(':');
            if (colon == std::string::npos || colon == 0)
                throw std::invalid_argument("--header \"" + h + "\": expected \"Name: value\"");
            auto v = h.substr(colon + 1);
            v.erase(0, v.find_first_not_of(' '));
            hs.emplace_back(h.substr(0, colon), v);
        }
        o.mix = scenario_file.empty() ? load::scenario::single(method, o.to.path, body, hs)
                                      : load::scenario::from_file(scenario_file);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "smarm-load: %s\n", e.what());
        return 2;
    }
    o.connections = connections;
    o.threads = threads;
    o.rate = rate;
    o.keep_alive = !close;
    o.seed = seed;
    const bool tty = ::isatty(STDERR_FILENO) != 0;
    if (!quiet)
        o.progress = [tty](const std::string& line) {
            std::fprintf(stderr, tty ? "\r%s\033[K" : "%s\n", line.c_str());
            std::fflush(stderr);
        };

    load::report r;
    try {
        smarm::runtime_config rc;
        rc.schedulers = threads;
        smarm::runtime rt(rc);
        rt.run([&] { r = load::run(o); });
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%ssmarm-load: %s\n", !quiet && tty ? "\n" : "", e.what());
        return 1;
    }
    if (!quiet && tty) std::fputs("\n", stderr);
    std::fputs(load::format_report(o, r).c_str(), stdout);
    if (!json_out.empty()) {
        auto j = load::format_json(o, r);
        if (json_out == "-") {
            std::fputs(j.c_str(), stdout);
        } else {
            std::ofstream f(json_out);
            if (!(f << j)) {
                std::fprintf(stderr, "smarm-load: cannot write %s\n", json_out.c_str());
                return 1;
            }
        }
    }
    if (!plot_out.empty()) {
        try {
            load::write_plot(r, plot_out, "smarm-load: " + url);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "smarm-load: %s\n", e.what());
            return 1;
        }
    }
    return 0;
}
