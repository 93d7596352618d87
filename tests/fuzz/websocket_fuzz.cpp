// libFuzzer target over the WebSocket frame path: a fixed upgrade request,
// then the fuzzer's bytes as the client's frames, through the same
// serve_connection (router, upgrade, session, frame gate, Beast's parser,
// permessage-deflate when the first byte is odd) from memory, with an echo
// handler.
//
// Properties checked on every input: no crash or sanitizer report, and the
// server wrote the 101 and then only well-formed server frames (unmasked,
// known opcodes, control frames short and final, RSV1 only on a compressed
// data frame's first frame, nothing after its close).
//
// Build and run: scripts/fuzz.sh SECONDS ws (build/fuzz, clang + libFuzzer).

#include <smarm/http/router.hpp>
#include <smarm/http/server.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <smarm_test/memory_stream.hpp>
#include "connection.hpp"

namespace http = smarm::http;

namespace {

http::internal::shared& server_state(bool deflate) {
    auto make = [](bool d) {
        http::server_config cfg;
        cfg.websocket.max_message = 4096;
        cfg.websocket.deflate = d;
        http::router r;
        r.websocket("/ws", [](http::websocket& ws) {
            for (auto m = ws.recv(); !m.is_close(); m = ws.recv())
                if (!ws.send(m.data, m.type)) return;
        });
        return new http::internal::shared(cfg, std::move(r));
    };
    static http::internal::shared* plain = make(false);
    static http::internal::shared* compressed = make(true);
    return deflate ? *compressed : *plain;
}

[[noreturn]] void bad(const char* why, std::string_view out) {
    std::fprintf(stderr, "bad server output (%s):\n%.*s\n", why, static_cast<int>(out.size()),
                 out.data());
    std::abort();
}

/// The server's bytes after the 101: frames only, as the header says.
void check_frames(std::string_view out, bool deflate) {
    const auto head_end = out.find("\r\n\r\n");
    if (out.rfind("HTTP/1.1 101", 0) != 0 || head_end == std::string_view::npos) bad("no 101", out);
    std::string_view f = out.substr(head_end + 4);
    bool closed = false, in_message = false;
    while (!f.empty()) {
        if (closed) bad("bytes after the close", out);
        if (f.size() < 2) bad("a cut frame head", out);
        const auto b0 = static_cast<unsigned char>(f[0]), b1 = static_cast<unsigned char>(f[1]);
        const unsigned op = b0 & 0x0f, rsv = (b0 >> 4) & 7;
        const bool fin = b0 & 0x80;
        if (b1 & 0x80) bad("a masked server frame", out);
        std::uint64_t len = b1 & 0x7f;
        std::size_t off = 2;
        if (len >= 126) {
            off += len == 126 ? 2 : 8;
            if (f.size() < off) bad("a cut length", out);
            len = 0;
            for (std::size_t i = 2; i < off; ++i)
                len = (len << 8) | static_cast<unsigned char>(f[i]);
        }
        if (f.size() - off < len) bad("a cut payload", out);
        const bool control = op >= 8;
        if (control) {
            if (op != 8 && op != 9 && op != 10) bad("an unknown control opcode", out);
            if (!fin || len > 125 || rsv != 0) bad("a malformed control frame", out);
            if (op == 8) closed = true;
        } else {
            if (op > 2) bad("an unknown data opcode", out);
            if ((op == 0) != in_message) bad("a continuation out of place", out);
            if (rsv != 0 && !(deflate && rsv == 4 && op != 0)) bad("a reserved bit", out);
            in_message = !fin;
        }
        f.remove_prefix(off + static_cast<std::size_t>(len));
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const bool deflate = size > 0 && (data[0] & 1);
    std::string input =
        "GET /ws HTTP/1.1\r\nHost: f\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n";
    if (deflate) input += "Sec-WebSocket-Extensions: permessage-deflate\r\n";
    input += "\r\n";
    input.append(reinterpret_cast<const char*>(data), size);
    // Small reads make the gate and Beast see every split point.
    smarm_test::memory_stream s(input, size % 13 + 1);
    http::internal::conn_ctx c{server_state(deflate), 1, {}, nullptr, nullptr};
    http::internal::serve_connection(s, c);
    check_frames(s.out, deflate);
    return 0;
}
