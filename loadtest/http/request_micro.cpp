// smarm-http-micro: the HTTP request path's user-space cost, without the
// network or the runtime. serve_connection (the loop every connection actor
// runs) is driven from memory over a batch of pipelined requests, so what
// is measured is Beast's parser with our limits, validation, the router, the
// handler call and the response writer.
//
//   build/release/loadtest/http/smarm-http-micro
//   valgrind --tool=callgrind build/release/loadtest/http/smarm-http-micro
//       --once=plaintext   (one batch of 256 requests, no Google Benchmark:
//                           divide serve_connection's inclusive count by 256)
//       --once=plaintext --causal   (the same with server_config::causal:
//                           the causal.http hooks' cost per request)
//       --once=plaintext --trace    (the same with a flight recorder on:
//                           the tracer's cost per request)
//
// Counters: ns_per_req (wall time) and the bytes written per request (a
// check that every request was answered).

#include <smarm/http/router.hpp>
#include <smarm/http/server.hpp>
#include <smarm/trace.hpp>

#include <benchmark/benchmark.h>

#include <cstdio>
#include <string>
#include <string_view>

#include <smarm_test/memory_stream.hpp>
#include "connection.hpp"

namespace http = smarm::http;

namespace {

bool g_causal = false;  // --causal, set before the first request

http::internal::shared& server_state() {
    static http::internal::shared sh = [] {
        http::router r;
        r.get("/plaintext", [](http::request&) {
            return http::response(http::status::ok, std::string("Hello, World!", 13),
                                  std::string("text/plain", 10));
        });
        r.get("/kv/{key}", [](http::request& q) {
            return http::response(http::status::ok, std::string(*q.param("key")));
        });
        r.post("/kv/{key}", [](http::request& q) {
            return http::response(http::status::created, std::move(q.body()));
        });
        http::server_config cfg;
        cfg.causal = g_causal;
        return http::internal::shared(std::move(cfg), std::move(r));
    }();
    return sh;
}

constexpr int batch = 256;

std::string repeat(std::string_view one) {
    std::string s;
    for (int i = 0; i < batch; ++i)
        s += one;
    return s;
}

/// Serves `input` as one connection's bytes; returns what was written.
/// Reads return one request at a time, like a keep-alive client that waits
/// for each response (so every response is flushed on its own).
std::size_t serve_once(const std::string& input) {
    smarm_test::memory_stream s(input, input.size() / batch);
    http::internal::conn_ctx c{server_state(), 1, {}, nullptr, nullptr};
    http::internal::serve_connection(s, c);
    benchmark::DoNotOptimize(s.out.data());
    return s.out.size();
}

void run(benchmark::State& state, const std::string& input) {
    std::size_t bytes = 0;
    for (auto _ : state)
        bytes = serve_once(input);
    const double reqs = static_cast<double>(state.iterations()) * batch;
    state.counters["ns_per_req"] =
        benchmark::Counter(reqs, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
    state.counters["bytes_per_req"] = static_cast<double>(bytes) / batch;
}

// wrk's request (the plaintext benchmark).
const std::string& plaintext_input() {
    static const std::string in =
        repeat("GET /plaintext HTTP/1.1\r\nHost: 127.0.0.1:18090\r\n\r\n");
    return in;
}

// A browser-like request: ten headers, a route parameter.
const std::string& browser_input() {
    static const std::string in = repeat(
        "GET /kv/some-key HTTP/1.1\r\n"
        "Host: api.example.com\r\n"
        "User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0\r\n"
        "Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8\r\n"
        "Accept-Language: en-US,en;q=0.5\r\n"
        "Accept-Encoding: gzip, deflate, br\r\n"
        "Connection: keep-alive\r\n"
        "Cookie: session=0123456789abcdef0123456789abcdef; theme=dark\r\n"
        "Upgrade-Insecure-Requests: 1\r\n"
        "Sec-Fetch-Dest: document\r\n"
        "Cache-Control: max-age=0\r\n\r\n");
    return in;
}

// A small POST with a Content-Length body.
const std::string& post_input() {
    static const std::string in = repeat(
        "POST /kv/k HTTP/1.1\r\nHost: h\r\nContent-Type: text/plain\r\n"
        "Content-Length: 64\r\n\r\n" +
        std::string(64, 'x'));
    return in;
}

void BM_plaintext(benchmark::State& state) {
    run(state, plaintext_input());
}
void BM_browser_get(benchmark::State& state) {
    run(state, browser_input());
}
void BM_post_body(benchmark::State& state) {
    run(state, post_input());
}

}  // namespace

BENCHMARK(BM_plaintext);
BENCHMARK(BM_browser_get);
BENCHMARK(BM_post_body);

int main(int argc, char** argv) {
    const bool causal_arg = argc == 3 && std::string_view(argv[2]) == "--causal";
    const bool trace_arg = argc == 3 && std::string_view(argv[2]) == "--trace";
    if ((argc == 2 || causal_arg || trace_arg) && std::string_view(argv[1]).starts_with("--once=")) {
        g_causal = causal_arg;
        if (trace_arg) smarm::trace::start({.flight = true});
        const std::string_view which = std::string_view(argv[1]).substr(7);
        const std::string& in = which == "plaintext" ? plaintext_input()
                                : which == "browser" ? browser_input()
                                : which == "post"    ? post_input()
                                                     : std::string();
        if (in.empty()) {
            std::fprintf(stderr, "smarm-http-micro: --once= takes plaintext, browser or post\n");
            return 2;
        }
        std::printf("%zu bytes written\n", serve_once(in));
        return 0;
    }
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
