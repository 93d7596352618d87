#pragma once
// smarm::http server settings: server_config (every limit, with safe
// defaults; the limits table is in server.hpp), tls_config, and
// request_record (what the server reports about each answered request).
// Apart from server.hpp so code that only configures or observes a server
// (the connection loop, TLS, metrics, config loading) needs no server.

#include <smarm/http/message.hpp>
#include <smarm/http/websocket.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace smarm::http {

/// TLS settings: PEM files. TLS 1.2 is the minimum; ALPN selects h2 (when
/// http2 is enabled) or http/1.1.
struct tls_config {
    std::string certificate_file;  ///< the certificate chain (PEM)
    std::string private_key_file;  ///< its key (PEM)
};

/// What the server reports about each answered request (for metrics).
struct request_record {
    std::string_view route;   ///< the matched pattern ("/kv/{key}"), "" when none matched
    std::string_view method;  ///< "GET", ...
    unsigned status = 0;
    std::uint64_t body_bytes = 0;
    std::chrono::nanoseconds duration{};  ///< first byte of the request to the response written
};

/// HTTP/2 (RFC 9113, through libnghttp2): h2 by ALPN on TLS, h2c by prior
/// knowledge on a plain listener (a connection whose first bytes are the
/// HTTP/2 preface). `Upgrade: h2c` is not offered (RFC 9113 deprecates it).
/// Every stream's handler runs in an actor of its own; the HTTP/1.1 limits
/// apply per stream (header_limit 431, body_limit 413, body_timeout,
/// write_timeout: a response that makes no progress for it is reset), the
/// connection closes after idle_timeout without an open stream.
struct http2_options {
    bool enabled = true;
    /// SETTINGS_MAX_CONCURRENT_STREAMS: streams (so handler actors) open at
    /// once per connection. Before the client acknowledged it, a stream past
    /// it is refused (RST_STREAM REFUSED_STREAM); after, a client that
    /// ignores it ends the connection (GOAWAY PROTOCOL_ERROR).
    std::uint32_t max_concurrent_streams = 100;
};

/// Server settings; every limit has a safe default.
struct server_config {
    std::string host = "0.0.0.0";
    std::uint16_t port = 8080;  ///< 0 picks a free port (see local_address())
    std::size_t max_connections = 10'000;
    std::size_t header_limit = 8 * 1024;   ///< bytes: request line + headers
    std::size_t body_limit = 1024 * 1024;  ///< bytes, after de-chunking
    std::chrono::nanoseconds header_timeout = std::chrono::seconds(10);
    std::chrono::nanoseconds body_timeout = std::chrono::seconds(30);
    std::chrono::nanoseconds idle_timeout = std::chrono::seconds(60);
    std::chrono::nanoseconds write_timeout = std::chrono::seconds(30);
    std::chrono::nanoseconds drain_timeout = std::chrono::seconds(10);
    /// During a drain, how long an idle keep-alive connection stays open for
    /// a request already on its way (capped by drain_timeout; 0 = close idle
    /// connections at once).
    std::chrono::nanoseconds drain_grace = std::chrono::seconds(1);
    /// One line per request: time, peer, method, target, status, body
    /// bytes, duration, request id.
    bool access_log = false;
    /// Where access lines go: "" = stdout (asynchronous; under overload the
    /// oldest lines are dropped rather than stall a scheduler), else this
    /// file (appended; buffered, flushed when the buffer fills and by wait()).
    std::string access_log_file;
    /// Called in the connection actor after each response (keep it cheap and
    /// thread-safe: connection actors run on every scheduler). Empty: off.
    std::function<void(const request_record&)> on_request;
    /// Called in the connection actor for each request before routing (the
    /// head and body read, the path decoded): a response it returns is sent
    /// instead of routing (a 401, a 403); nullopt lets the request through.
    /// Empty: every request is routed.
    std::function<std::optional<response>(const request&)> authorize;
    std::string server_name = "smarm";  ///< the Server header ("" to omit)
    /// Causal profiling hooks (smarm/causal.hpp): each route's handler runs
    /// inside a site named by the route ("GET /kv/{key}") and a
    /// registry-routed route's service side inside "GET /kv/{key} @kv";
    /// progress point "http.requests" counts every answered request and one
    /// named by the route each routed one; latency point "http.request"
    /// spans a request's first bytes to its response written. Names are
    /// route patterns, never raw paths. Off by default: the hooks cost a few
    /// relaxed increments per request, the sites a slot store each.
    bool causal = false;
    std::optional<tls_config> tls;
    int backlog = 1024;
    /// Linux TCP_DEFER_ACCEPT (nginx's `listen ... deferred`): the kernel
    /// hands a connection over only once its first bytes have arrived, so
    /// its actor starts with the request there (no wait, no epoll
    /// registration; ~0.8x the server's CPU per short connection, measured
    /// under wrk with Connection: close). A client that connects and sends
    /// nothing is handed over when this runs out (rounded up by the
    /// kernel's SYN-ACK retransmits), and header_timeout counts from then.
    /// Zero: off (the default).
    std::chrono::seconds defer_accept{0};
    /// Every WebSocket's limits and keep-alive (smarm/http/websocket.hpp).
    websocket_options websocket;
    /// HTTP/2 (on by default).
    http2_options http2;
};

}  // namespace smarm::http
