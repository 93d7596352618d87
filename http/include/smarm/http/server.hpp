#pragma once
// smarm::http::server — an HTTP/1.1 server made of actors.
//
// clang-format off
//     smarm::run([] {
//         http::router r;
//         r.get("/plaintext", [](http::request&) {
//             return http::response(http::status::ok, "Hello, World!");
//         });
//         http::server srv({.port = 8080}, std::move(r));
//         srv.start();            // listening when this returns
//         srv.stop_on_signals();  // SIGTERM / SIGINT: graceful stop
//         srv.wait();             // until stopped
//     });
// clang-format on
//
// A listener actor accepts; each connection becomes an actor started under
// a dynamic supervisor (temporary children) capped at max_connections. Past
// the cap a connection is answered "503 Service Unavailable" with
// Connection: close at once and counted in stats().rejected.
//
// The connection actor parses with Beast over a stream whose reads and
// writes park on the IO layer, so handlers are plain blocking code. It
// serves HTTP/1.1 keep-alive and pipelined requests (answered in order),
// chunked request bodies, HEAD, Expect: 100-continue and HTTP/1.0, and
// enforces:
//
// clang-format off
// | limit | status | config key |
// |---|---|---|
// | request line + headers larger than header_limit | 431, close | header_limit |
// | body larger than body_limit (Content-Length checked before reading; chunked while reading) | 413, close | body_limit |
// | a streamed route's body (http::streamed_body) larger than its limit (Content-Length before the handler; otherwise read_body throws) | 413, close | streamed_body::limit |
// | a streamed body the handler leaves unread | the response, then close | - |
// | chunk extensions of one request larger than header_limit in all, or one chunk-size line past the read buffer (header_limit + 64 KiB) | 400, close | header_limit |
// | trailer fields of one request larger than header_limit (trailers are read and dropped, never merged into the headers) | 431, close | header_limit |
// | no request within header_timeout of the connection's start | close | header_timeout |
// | headers not complete within header_timeout of their first byte | 408, close | header_timeout |
// | no new request within idle_timeout on a kept-alive connection | close | idle_timeout |
// | body not complete within body_timeout (a streamed body: no bytes for body_timeout while the handler waits in read_body) | 408, close | body_timeout |
// | malformed request, Content-Length with Transfer-Encoding, conflicting Content-Lengths, a transfer coding other than chunked, a bad chunk size, HTTP/1.1 without exactly one Host | 400, close | - |
// | response not written within write_timeout | close | write_timeout |
// clang-format on
//
// No limit fires early. The two waits for a request (before the first and
// between requests) carry no timer of their own: a reaper actor per server
// closes connections idle past their limit, waking every eighth of the
// shorter of header_timeout and idle_timeout (5 ms to 1 s), so those two
// close up to that much late. The others are at most two kernel ticks late
// (deadlines come from the coarse monotonic clock).
//
// Shutdown: stop() (or the first SIGTERM/SIGINT after stop_on_signals())
// closes the listener (new connects are refused) and drains for up to
// drain_timeout: in-flight requests finish and every response from then on
// says Connection: close. An idle keep-alive connection is a lame duck for
// drain_grace: a request already on its way is answered (with Connection:
// close) rather than met by a close, which is the race that costs a
// closed-loop client one error per connection; idle ones still silent at
// the end of the grace are closed. Whatever is left at the deadline is
// stopped, and then wait() returns. A second signal stops everything at
// once. Open WebSockets are closed with 1001 ("going away") when the drain
// begins and have until drain_timeout to finish their closing handshake.
//
// Thread safety: start() once, from an actor; stop(), stats() and
// local_address() from any actor.

#include <smarm/http/config.hpp>
#include <smarm/http/message.hpp>
#include <smarm/http/router.hpp>
#include <smarm/net.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace smarm::http {

/// Counters since start() (monotonic except `active`).
struct server_stats {
    std::uint64_t accepted = 0;       ///< connections taken by a connection actor
    std::uint64_t rejected = 0;       ///< connections refused past max_connections
    std::uint64_t active = 0;         ///< connections open now
    std::uint64_t requests = 0;       ///< responses sent
    std::uint64_t errors = 0;         ///< 500s from handler exceptions
    std::uint64_t accept_errors = 0;  ///< failed accepts (EMFILE, ENFILE, ...)
    std::uint64_t websockets = 0;     ///< upgraded connections open now (part of `active`)
};

class server {
  public:
    server(server_config cfg, router r);
    ~server();
    server(const server&) = delete;
    server& operator=(const server&) = delete;

    /// Binds and starts accepting. Throws std::system_error naming the
    /// address when the port cannot be bound, std::runtime_error when the
    /// TLS files cannot be loaded. Call from an actor.
    void start();
    /// The bound address (useful with port 0).
    socket_address local_address() const;
    /// Graceful stop (see the header comment); returns at once. `drain`
    /// overrides drain_timeout; 0 stops every connection immediately.
    void stop(std::optional<std::chrono::nanoseconds> drain = std::nullopt);
    /// Parks the calling actor until the server has stopped and every
    /// connection actor has ended.
    void wait();
    /// Installs SIGTERM/SIGINT handling: first signal -> stop(), second ->
    /// stop(0). Several servers may watch at once (a restarted listener
    /// beside its draining predecessor): a signal reaches each. The
    /// handlers stay while any watching server has not finished its drain,
    /// then the defaults come back.
    void stop_on_signals();

    server_stats stats() const noexcept;
    /// True from the first stop() on (readiness probes answer 503 then).
    bool draining() const noexcept;
    const server_config& config() const noexcept;

    struct state;  // shared with the listener and the connection actors

  private:
    /// stop() on the shared state: the signal watcher holds the state, not
    /// the server object, which may be gone before the signal comes.
    static void stop_state(const std::shared_ptr<state>& st,
                           std::optional<std::chrono::nanoseconds> drain);

    std::shared_ptr<state> st_;
};

}  // namespace smarm::http
