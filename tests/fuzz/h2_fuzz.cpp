// libFuzzer target over the HTTP/2 path: the fuzzer's bytes follow the
// connection preface into the very serve_connection the connection actors
// run (h2c detection, nghttp2's session, the stream records, stream actors
// running the router's handlers, streamed bodies paced by credit), from
// memory, inside a one-scheduler runtime.
//
// Properties checked on every input: no crash or sanitizer report, and the
// server wrote only well-formed HTTP/2 frames: the first a SETTINGS on
// stream 0, none longer than the default SETTINGS_MAX_FRAME_SIZE, no frame
// type the server never sends, stream frames on client (odd) streams.
//
// Build and run: scripts/fuzz.sh SECONDS h2 (build/fuzz, clang + libFuzzer).

#include <smarm/http/router.hpp>
#include <smarm/http/server.hpp>
#include <smarm/runtime.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

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
        cfg.http2.max_concurrent_streams = 8;
        http::router r;
        r.get("/", [](http::request&) { return http::response(http::status::ok, "root"); });
        r.get("/a/{x}", [](http::request& q) {
            return http::response(http::status::ok, std::string(*q.param("x")));
        });
        r.post("/echo",
               [](http::request& q) { return http::response(http::status::ok, q.body()); });
        r.get("/yield", [](http::request&) {  // finishes after streams dispatched later
            for (int i = 0; i < 3; ++i)
                smarm::yield_now();
            return http::response(http::status::ok, std::string(40'000, 'y'));
        });
        r.get("/chunks", [](http::request&) {
            auto n = std::make_shared<int>(0);
            return http::response::chunked([n]() -> std::optional<std::string> {
                if (*n == 3) return std::nullopt;
                return std::string(static_cast<std::size_t>(++*n) * 9000, 'c');
            });
        });
        r.get("/throw", [](http::request&) -> http::response { throw std::runtime_error("x"); });
        smarm_test::add_streamed_route(r);  // POST /sum
        return new http::internal::shared(cfg, std::move(r));
    }();
    return *sh;
}

smarm::runtime& runtime() {
    static smarm::runtime* rt = [] {
        smarm::runtime_config cfg;
        cfg.schedulers = 1;
        cfg.max_actors = 4096;
        cfg.stack_size = 128 * 1024;
        return new smarm::runtime(cfg);
    }();
    return *rt;
}

[[noreturn]] void bad(const char* why, std::string_view out) {
    std::fprintf(stderr, "bad server output (%s), %zu bytes\n", why, out.size());
    std::abort();
}

/// The server's bytes: whole HTTP/2 frames (see the header comment).
void check_frames(std::string_view out) {
    bool first = true;
    while (!out.empty()) {
        if (out.size() < 9) bad("a cut frame header", out);
        const auto* p = reinterpret_cast<const unsigned char*>(out.data());
        const std::size_t len = (std::size_t{p[0]} << 16) | (std::size_t{p[1]} << 8) | p[2];
        const unsigned type = p[3];
        const std::uint32_t sid =
            ((std::uint32_t{p[5]} << 24) | (p[6] << 16) | (p[7] << 8) | p[8]) & 0x7fffffffu;
        if (len > 16384) bad("a frame past the default max frame size", out);
        if (out.size() < 9 + len) bad("a cut frame payload", out);
        if (first && (type != 4 || sid != 0)) bad("not SETTINGS first", out);
        first = false;
        if (type > 9 || type == 5 /* PUSH_PROMISE */) bad("a frame type never sent", out);
        const bool stream_frame = type == 0 || type == 1 || type == 3 || type == 9;
        if (stream_frame && (sid == 0 || sid % 2 == 0))
            bad("a stream frame off a client stream", out);
        if ((type == 4 || type == 6 || type == 7) && sid != 0)
            bad("a connection frame on a stream", out);
        out.remove_prefix(9 + len);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string input = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    input.append(reinterpret_cast<const char*>(data), size);
    // Small reads make nghttp2 see every split point.
    smarm_test::memory_stream s(input, size % 17 + 1);
    runtime().run([&] {
        http::internal::conn_ctx c{server_state(), 1, {}, nullptr, nullptr};
        http::internal::serve_connection(s, c);
    });
    check_frames(s.out);
    return 0;
}
