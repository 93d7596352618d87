// libFuzzer target over the request path: Beast's parser with our limits,
// our validation, the router and the response writer, driven by the same
// serve_connection the connection actors run, from memory.
//
// Properties checked on every input: no crash or sanitizer report, and
// everything the server wrote is a sequence of well-formed HTTP responses.
//
// Build and run: `make fuzz` (build/fuzz, clang + libFuzzer), or
// build/fuzz/tests/fuzz/smarm-http-fuzz tests/fuzz/corpus -max_total_time=60

#include <smarm/http/router.hpp>
#include <smarm/http/server.hpp>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <smarm_test/memory_stream.hpp>
#include "connection.hpp"
#include "streamed_route.hpp"

namespace http = smarm::http;

namespace {

http::internal::shared& server_state() {
    static http::internal::shared* sh = [] {
        http::server_config cfg;
        cfg.header_limit = 2048;
        cfg.body_limit = 4096;
        // HTTP/1.1 only: with h2c on, an input that begins with the HTTP/2
        // preface is answered in HTTP/2 frames, which the check below
        // rightly calls malformed (the fuzzer built the preface from a
        // comparison). h2_fuzz.cpp covers that path through this same
        // serve_connection.
        cfg.http2.enabled = false;
        http::router r;
        r.get("/", [](http::request&) { return http::response(http::status::ok, "root"); });
        r.get("/a/{x}/b/{y}", [](http::request& q) {
            return http::response(http::status::ok,
                                  std::string(*q.param("x")) + std::string(*q.param("y")));
        });
        r.get("/files/*",
              [](http::request& q) { return http::response(http::status::ok, q.wildcard()); });
        r.post("/echo",
               [](http::request& q) { return http::response(http::status::ok, q.body()); });
        r.put("/echo", [](http::request&) { return http::response(http::status::created); });
        smarm_test::add_streamed_route(r);  // POST /sum
        r.get("/chunks", [](http::request&) {
            auto n = std::make_shared<int>(0);
            return http::response::chunked([n]() -> std::optional<std::string> {
                if (*n == 2) return std::nullopt;
                return std::string(static_cast<std::size_t>(++*n) * 10, 'c');
            });
        });
        return new http::internal::shared(cfg, std::move(r));
    }();
    return *sh;
}

/// Bytes of `rest` one response takes (parsed as the answer to a HEAD
/// request when `head`), or 0 when it does not parse.
std::size_t one_response(std::string_view rest, bool head) {
    namespace bhttp = boost::beast::http;
    bhttp::response_parser<bhttp::string_body> p;
    p.body_limit(1 << 24);
    p.eager(true);
    p.skip(head);
    std::size_t used = 0;
    while (!p.is_done()) {
        boost::beast::error_code ec;
        std::size_t n = p.put(boost::asio::buffer(rest.data() + used, rest.size() - used), ec);
        used += n;
        if (ec && ec != bhttp::error::need_more) return 0;
        if (p.is_done()) break;
        if (used == rest.size()) {
            p.put_eof(ec);  // a close-delimited body ends with the stream
            return !ec && p.is_done() ? used : 0;
        }
        if (n == 0) return 0;  // stuck short of the end: not a response
    }
    return used;
}

/// True when `out` from offset `at` is a sequence of responses, each
/// either complete or an answer to HEAD (headers only). Which requests were
/// HEAD is not known here, so both readings are tried; `bad` memoizes the
/// offsets already shown not to work (keeps this linear).
bool responses_from(std::string_view out, std::size_t at, std::vector<bool>& bad) {
    if (at == out.size()) return true;
    if (bad[at]) return false;
    for (bool head : {false, true}) {
        std::size_t n = one_response(out.substr(at), head);
        if (n != 0 && responses_from(out, at + n, bad)) return true;
    }
    bad[at] = true;
    return false;
}

/// Aborts when the server wrote anything but well-formed responses.
void check_responses(std::string_view out) {
    std::vector<bool> bad(out.size() + 1, false);
    if (!responses_from(out, 0, bad)) {
        std::fprintf(stderr, "malformed response stream:\n%.*s\n", static_cast<int>(out.size()),
                     out.data());
        std::abort();
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string_view input(reinterpret_cast<const char*>(data), size);
    // Small reads make the parser see every split point.
    smarm_test::memory_stream s(input, size % 7 + 1);
    http::internal::conn_ctx c{server_state(), 1, {}, nullptr, nullptr};
    http::internal::serve_connection(s, c);
    check_responses(s.out);
    return 0;
}
