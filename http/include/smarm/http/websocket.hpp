#pragma once
// smarm::http WebSocket (RFC 6455): a routed upgrade whose handler runs in
// the connection's actor with a `websocket` to read and write.
//
//     r.websocket("/ws/echo", [](http::websocket& ws) {
//         for (;;) {
//             auto m = ws.recv();                  // parks the actor
//             if (m.is_close()) return;            // the socket is closed
//             ws.send(m.data, m.type);             // echo, text or binary
//         }
//     });
//
// A handler that also waits on its actor's own channels (a pg group's
// inbox, say) waits on both at once with recv_or:
//
//     auto ev = ws.recv_or({inbox});
//     if (auto* m = std::get_if<http::websocket::message>(&ev)) { ... }
//     else if (auto msg = inbox.try_recv()) ws.send(*msg);   // arm 0 fired
//
// Authorization before accepting: route with get() and answer with
// accept_websocket(req, handler) only once the request passes (any other
// response refuses the upgrade). A request that is not an upgrade gets 426
// (with `Upgrade: websocket`); a malformed one 400.
//
// The handler owns both directions: every read and write on the socket is
// made by the connection actor, so Beast's stream never sees two operations
// at once. Pings from the peer are answered as they arrive (also while the
// handler waits on its other arms); the server pings a silent peer every
// ping_interval and closes with 1001 after idle_timeout without a byte. A
// graceful stop closes every socket with 1001 ("going away"): recv returns
// the close and the handler should return. When the handler returns, an
// open socket is closed with 1000; a throw closes it with 1011 (logged).
// Limits (websocket_options, server_config::websocket): a message over
// max_message fails the connection with 1009, invalid UTF-8 in a text
// message with 1007, any protocol error with 1002; a message that has begun
// must arrive whole within message_timeout.

#include <smarm/http/message.hpp>
#include <smarm/select.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>

namespace smarm::http {

/// Per-socket limits and behaviour (server_config::websocket).
struct websocket_options {
    std::size_t max_message = 16 * 1024 * 1024;  ///< bytes, after reassembly (and inflation)
    /// No byte from the peer for this long: a ping (0: never ping).
    std::chrono::nanoseconds ping_interval = std::chrono::seconds(30);
    /// No byte from the peer for this long: close 1001 (0: never).
    std::chrono::nanoseconds idle_timeout = std::chrono::seconds(75);
    /// A message (or control frame) that has begun must arrive whole in this.
    std::chrono::nanoseconds message_timeout = std::chrono::seconds(30);
    /// How long a close waits for the peer's close (ours sent first).
    std::chrono::nanoseconds close_timeout = std::chrono::seconds(5);
    /// Negotiate permessage-deflate when the client offers it. Costs ~300 KB
    /// per socket that negotiates it (zlib's windows): off by default.
    bool deflate = false;
};

class websocket;
/// A WebSocket route's handler: runs in the connection actor for the
/// socket's life (see the header comment).
using websocket_handler = std::function<void(websocket&)>;

/// The one socket of an upgraded connection (see the header comment). Made
/// by the server; the handler gets it by reference for its whole run.
class websocket {
  public:
    enum class kind : std::uint8_t { text, binary, close };
    /// A received message, or the end of the socket (kind::close).
    struct message {
        kind type = kind::close;
        /// The payload; for a close, the peer's reason.
        std::string data;
        /// For a close: the peer's code (1000 normal, 1001 going away, ...),
        /// 1005 when its close carried none, 1006 when the connection ended
        /// without a close from the peer (failed, timed out, reset, our own
        /// close: the reason says which).
        std::uint16_t code = 0;
        bool is_close() const noexcept { return type == kind::close; }
    };

    /// The upgrade request (params from the route pattern, headers).
    const http::request& request() const noexcept { return req_; }

    /// Parks until a message arrives (or the socket ends: a close).
    message recv() { return read(std::span<const select_arm>{}, nullptr, true).value(); }
    /// Parks until a message arrives or one of `arms` is ready: the message,
    /// or the index of the ready arm. Arms are checked after the socket (a
    /// message already buffered comes first).
    std::variant<message, std::size_t> recv_or(std::initializer_list<select_arm> arms) {
        std::size_t arm = npos;
        auto m = read({arms.begin(), arms.size()}, &arm, true);
        if (m) return std::move(*m);
        return arm;
    }
    /// A message if one has begun arriving (it is then read whole, parking
    /// for its rest), else nullopt without waiting. For loops of one's own
    /// over `readable()`.
    std::optional<message> try_recv() { return read({}, nullptr, false); }
    /// A select arm ready when try_recv() has something (or the socket
    /// ended). Pings are answered only inside recv/recv_or/try_recv.
    virtual detail::select_source& readable() noexcept = 0;

    /// Sends one message; false when the socket is closed (or the write
    /// failed or timed out: it is then closed).
    bool send(std::string_view data, kind type = kind::text) {
        return type != kind::close && write(data, type == kind::text);
    }
    bool send_binary(std::string_view data) { return write(data, false); }
    /// Starts the closing handshake (code 1000..4999 but the reserved ones)
    /// and waits up to close_timeout for the peer's close; idempotent.
    /// Throws std::invalid_argument naming a code that may not be sent.
    void close(std::uint16_t code = 1000, std::string_view reason = {});
    /// Whether messages can still be sent and received.
    virtual bool is_open() const noexcept = 0;

    websocket(const websocket&) = delete;
    websocket& operator=(const websocket&) = delete;

  protected:
    explicit websocket(const http::request& req) noexcept : req_(req) {}
    ~websocket() = default;
    static constexpr std::size_t npos = static_cast<std::size_t>(-1);
    /// A message, or nullopt with *arm set (an arm fired) or none yet
    /// (block false).
    virtual std::optional<message> read(std::span<const select_arm> arms, std::size_t* arm,
                                        bool block) = 0;
    virtual bool write(std::string_view data, bool text) = 0;
    virtual void do_close(std::uint16_t code, std::string_view reason) = 0;

  private:
    const http::request& req_;
};

/// Whether a close code may be sent (1000-1003, 1007-1014, 3000-4999).
bool sendable_close_code(std::uint16_t code) noexcept;

/// The response that upgrades `req` to a WebSocket served by `h`, or the
/// refusal: 426 (not an upgrade; `Upgrade: websocket`, `Sec-WebSocket-
/// Version: 13`), 400 (not GET, HTTP/1.0, a bad key or version), naming
/// what is wrong in the body.
response accept_websocket(const request& req, websocket_handler h);

}  // namespace smarm::http
