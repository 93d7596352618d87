#pragma once
// The HTTP/2 connection loop (h2_session.hpp has the protocol state): the
// connection actor writes what the session has to send, then waits at once
// on the socket, its stream actors' events and its notice slot, and feeds
// whatever came to the session. Included at the end of connection.hpp.
//
// Limits: a connection the server watches arms no timer per wait: it
// stores the session's next time limit in its notice slot's `due` and the
// reaper ticks it (conn_registry.cpp), as a WebSocket does; unwatched ones
// (tests, the fuzzer) wait with that limit as a deadline. Drain: the slot
// is opened and then `draining` read (both under the protocol of
// websocket_session.hpp's header), so a drain posted at any point reaches
// the loop, which answers with GOAWAY and serves the open streams to their
// end. Writes happen within write_timeout each, and reading stops while a
// write waits (the peer's own reading paces it).

#include <smarm/select.hpp>

#include "h2_session.hpp"

#include <array>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace smarm::http::internal {

template <class Stream>
void serve_h2(Stream& s, conn_ctx& c, std::string_view early) {
    using traits = ws_stream_traits<Stream>;
    const server_config& cfg = c.sh.cfg;
    h2_session h(c);
    ws_notice_slot* notice = c.watch != nullptr ? &c.watch->ws : nullptr;
    struct slot_guard {
        ws_notice_slot* n;
        ~slot_guard() {
            if (n != nullptr) n->close();
        }
    } const closes{notice};
    if (notice != nullptr) notice->open();
    if (c.sh.draining.load(std::memory_order_seq_cst)) h.go_away();
    bool alive = early.empty() || h.receive(early);
    bool reading = true;
    bool more = false;  // the last read filled the buffer
    std::string out;
    std::vector<char> in(16 * 1024);
    for (;;) {
        // Every event already queued first: the responses of streams that
        // finished together go out in one write (delivering one and writing
        // it cost a send per response).
        while (auto ev = h.events().try_recv())
            h.deliver(std::move(**ev.value));
        // The time limits (they may queue frames), then everything the
        // session has to say, before waiting.
        const std::int64_t next = h.expire(coarse_now().time_since_epoch().count());
        for (;;) {
            if (!h.output(out, 64 * 1024)) alive = false;
            if (out.empty()) break;
            s.set_deadline(deadline_in(cfg.write_timeout));
            const bool ok = s.write_all(out);
            out.clear();
            if (!ok) return;
        }
        if (!alive || h.done() || (!reading && h.producing() == 0)) return;
        smarm::detail::select_source* readable = reading ? traits::readable(s) : nullptr;
        if (!reading || (readable != nullptr && !more && !traits::buffered(s))) {
            std::array<select_arm, 3> arms{select_arm(h.events()), select_arm(h.events()),
                                           select_arm(h.events())};
            std::size_t n = 1, socket_arm = 3, notice_arm = 3;
            if (readable != nullptr) {
                socket_arm = n;
                arms[n++] = select_arm(*readable);
            }
            if (notice != nullptr) {
                notice_arm = n;
                arms[n++] = select_arm(*notice);
                notice->due.store(next, std::memory_order_relaxed);
            }
            std::optional<time_point> deadline;
            if (notice == nullptr && next != std::numeric_limits<std::int64_t>::max())
                deadline = time_point(time_point::duration(next));
            const auto got = select_until(std::span<const select_arm>(arms.data(), n), deadline);
            if (got && *got == notice_arm && (notice->take() & ws_notice_slot::drain) != 0)
                h.go_away();
            if (!got || *got != socket_arm) continue;
        }
        // A TLS record cut short waits for its rest, within header_timeout.
        s.set_deadline(deadline_in(cfg.header_timeout));
        error_code ec;
        const std::size_t got = traits::read_now(s, in.data(), in.size(), ec);
        // A full buffer may have left bytes behind, and the socket's arm
        // only says when more arrive: read again before waiting.
        more = !ec && got == in.size();
        if (ec == boost::asio::error::would_block) continue;
        if (ec) {
            reading = false;  // the peer is gone or closed its side
            h.peer_closed();
            continue;
        }
        if (!h.receive(std::string_view(in.data(), got))) alive = false;
    }
}

}  // namespace smarm::http::internal
