// smarm-load: an HTTP/1.1 load generator on the smarm runtime (one actor per
// connection). See load.hpp for what it measures and `smarm-load --help`.
//
//   smarm-load http://127.0.0.1:8080/plaintext -c 64 -t 2 -d 10s
//   smarm-load http://127.0.0.1:8080/ --scenario kv.yaml --rate 20000 --json out.json
//   smarm-load http://127.0.0.1:8080/ --scenario kv.yaml -d 60s
//       --causal http://127.0.0.1:9090 --causal-plot causal.svg
//
// Exit status: 0 when the run completed (errors are reported, not fatal),
// 2 for bad arguments or an unreadable scenario, 1 when the run could not
// start (unresolvable host) or a plot could not be written.

#include <smarm/config/config.hpp>
#include <smarm/runtime.hpp>

#include <CLI/CLI.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>

#include "causal.hpp"
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
    bool close = false, quiet = false, ws_binary = false, ws_mode = false;
    std::string ws_sizes = "32";
    app.add_option("url", url,
                   "target, http://host[:port][/path] (the path is ignored with "
                   "--scenario), or ws://host[:port]/path: WebSocket echo round trips")
        ->required();
    app.add_flag("--ws", ws_mode, "WebSocket mode on an http:// URL (as a ws:// URL is)");
    app.add_option("--ws-sizes", ws_sizes,
                   "ws:// messages: SIZE[:WEIGHT],... drawn per message (default 32)");
    app.add_flag("--ws-binary", ws_binary, "ws:// messages are binary (default text)");
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
    app.add_option(
        "--timeout", timeout,
        "per request, connect included; open loop: from its intended send, and a request whose "
        "time ran out before it could be sent is a timeout never sent (default 5s)");
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
    // --causal: the server's own causal profile of this load.
    std::string causal_url, causal_window = "500ms";
    load::causal_options co;
    if (const char* t = std::getenv("SMARM_ADMIN_TOKEN")) co.token = t;
    auto* causal_opt = app.add_option(
        "--causal", causal_url,
        "also ask the server for a causal profile of this load: its admin listener, "
        "http://host:port (smarm-server with causal.http: true); prints the sites ranked "
        "by throughput and latency, writes --causal-coz and --causal-plot");
    auto causal_flag = [&](const char* name, std::string& into, const char* help) {
        app.add_option(name, into, help)->needs(causal_opt);
    };
    causal_flag("--causal-sites", co.sites, "sites to profile, a,b (default: all)");
    causal_flag("--causal-speedups", co.speedups, "percent, with 0 (default 0,25,50)");
    causal_flag("--causal-window", causal_window, "experiment window (default 500ms)");
    causal_flag("--causal-point", co.throughput_point,
                "progress point to rank by (default http.requests)");
    causal_flag("--causal-latency-point", co.latency_point,
                "latency point to rank by (default http.request)");
    causal_flag("--causal-coz", co.coz_file,
                "write the profile for Coz's viewer here (default profile.coz; \"\": not)");
    causal_flag("--causal-plot", co.plot_file,
                "draw the speedup curves per site (.png or .svg; needs gnuplot)");
    causal_flag("--causal-token", co.token,
                "the admin listener's bearer token (default: $SMARM_ADMIN_TOKEN)");
    // --trace: the server's scheduler and message trace of this load.
    std::string trace_file, trace_admin;
    auto* trace_opt = app.add_option(
        "--trace", trace_file,
        "also record the server's trace over the load (GET /debug/trace on its admin "
        "listener) into this Chrome trace JSON file: open it in ui.perfetto.dev");
    app.add_option("--trace-admin", trace_admin,
                   "the admin listener for --trace, http://host:port (default: the --causal one)")
        ->needs(trace_opt);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? 0 : 2;
    }

    load::options o;
    try {
        o.to = load::parse_url(url);
        if (ws_mode) o.to.websocket = true;
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
        o.ws.sizes = load::parse_ws_sizes(ws_sizes);
        o.ws.binary = ws_binary;
        if (o.to.websocket && (close || !scenario_file.empty()))
            throw std::invalid_argument("a ws:// target takes neither --close nor --scenario");
        o.mix = scenario_file.empty() ? load::scenario::single(method, o.to.path, body, hs)
                                      : load::scenario::from_file(scenario_file);
        if (!causal_url.empty()) {
            co.admin = load::parse_url(causal_url);
            co.window = std::chrono::duration_cast<std::chrono::milliseconds>(
                duration_arg("--causal-window", causal_window));
            if (co.window < std::chrono::milliseconds(10))
                throw std::invalid_argument("--causal-window must be at least 10ms");
            // The profile spans the measured time less a second for its
            // reply, so every window sees the load.
            if (o.duration < std::chrono::seconds(3))
                throw std::invalid_argument("--causal needs --duration of 3s or more");
            if (!co.plot_file.ends_with(".png") && !co.plot_file.ends_with(".svg") &&
                !co.plot_file.empty())
                throw std::invalid_argument("--causal-plot \"" + co.plot_file +
                                            "\": use a .png or .svg name");
        }
        if (!trace_file.empty()) {
            if (trace_admin.empty()) trace_admin = causal_url;
            if (trace_admin.empty())
                throw std::invalid_argument(
                    "--trace needs --trace-admin (or --causal): the "
                    "server's admin listener, http://host:port");
            if (o.duration < std::chrono::seconds(2))
                throw std::invalid_argument("--trace needs --duration of 2s or more");
        }
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
    load::causal_report cr;
    std::string causal_error;
    load::admin_reply traced;
    std::string trace_error;
    try {
        smarm::runtime_config rc;
        rc.schedulers = threads;
        smarm::runtime rt(rc);
        rt.run([&] {
            smarm::join_handle profiler;
            if (!causal_url.empty())
                profiler = smarm::spawn([&] {
                    try {
                        smarm::sleep(o.warmup);
                        cr = load::profile_server(co, o.duration - std::chrono::seconds(1));
                    } catch (const std::exception& e) {
                        causal_error = e.what();
                    }
                });
            smarm::join_handle tracer;
            if (!trace_file.empty())
                tracer = smarm::spawn([&] {
                    try {
                        smarm::sleep(o.warmup);
                        // Whole seconds inside the measured time (the
                        // reply comes after them), at most the route's 60.
                        const auto secs = std::clamp<long long>(
                            std::chrono::duration_cast<std::chrono::seconds>(o.duration).count() -
                                1,
                            1, 60);
                        traced = load::admin_call(load::parse_url(trace_admin), co.token, "GET",
                                                  "/debug/trace?seconds=" + std::to_string(secs),
                                                  {}, std::chrono::seconds(secs + 60));
                    } catch (const std::exception& e) {
                        trace_error = e.what();
                    }
                });
            r = load::run(o);
            if (profiler.joinable()) profiler.join();
            if (tracer.joinable()) tracer.join();
        });
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%ssmarm-load: %s\n", !quiet && tty ? "\n" : "", e.what());
        return 1;
    }
    if (!quiet && tty) std::fputs("\n", stderr);
    std::fputs(load::format_report(o, r).c_str(), stdout);
    if (!causal_url.empty()) {
        if (!causal_error.empty()) {
            std::fprintf(stderr, "smarm-load: %s\n", causal_error.c_str());
            return 1;
        }
        std::printf("\ncausal profile of this load, from %s:\n%s", causal_url.c_str(),
                    cr.rankings.c_str());
        try {
            load::write_causal_files(co, cr);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "smarm-load: %s\n", e.what());
            return 1;
        }
        if (!co.coz_file.empty())
            std::printf("wrote %s (Coz's viewer reads it)\n", co.coz_file.c_str());
        if (!co.plot_file.empty()) std::printf("wrote %s\n", co.plot_file.c_str());
    }
    if (!trace_file.empty()) {
        if (trace_error.empty() && traced.status != 200)
            trace_error = "GET /debug/trace on " + trace_admin + ": " +
                          std::to_string(traced.status) + " " + traced.body;
        if (!trace_error.empty()) {
            std::fprintf(stderr, "smarm-load: --trace: %s\n", trace_error.c_str());
            return 1;
        }
        std::ofstream f(trace_file, std::ios::binary);
        if (!(f << traced.body)) {
            std::fprintf(stderr, "smarm-load: cannot write %s\n", trace_file.c_str());
            return 1;
        }
        std::printf("wrote %s (%zu bytes of trace from %s; open it in ui.perfetto.dev)\n",
                    trace_file.c_str(), traced.body.size(), trace_admin.c_str());
    }
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
