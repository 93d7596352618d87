#pragma once
// The connection loop: one actor per connection runs a connection<Stream>
// over its stream until the peer goes, a limit or error closes it, or the
// server drains. The class holds one connection's state (its config, read
// and output buffers, the request being answered, its version and
// keep-alive); it is a template over the stream so the fuzz target and the
// unit tests drive the very same code from memory (smarm_test's
// memory_stream).
//
// Per request: (idle) wait for the first byte within idle_timeout (the
// header timeout for a connection's first request); read the header within
// header_timeout of its first byte (Beast's parser enforces header_limit and,
// from Content-Length, body_limit); validate what Beast leaves to us (Host,
// transfer codings); answer Expect: 100-continue; read the body within
// body_timeout; route and run the handler; format the response head into
// the output buffer. Responses to pipelined requests are batched while more
// requests are already buffered, and flushed before the connection parks.
//
// Shutdown protocol with server::stop(): stop() stores drain_until (the end
// of the lame-duck grace) and then draining=true (seq_cst, so a connection
// that sees draining sees drain_until); the connection stores idle=true
// and then reads `draining` (seq_cst). A connection that sees draining
// waits for a request only until drain_until (a request on its way is
// answered with Connection: close); one that went idle before keeps its
// read until the drainer stops the idle ones at the grace's end (stop()
// stores draining before it reads any idle flag). A busy connection
// finishes its request, answers with Connection: close, half-closes and
// leaves.
//
// Idle limits: a connection the server watches (conn_ctx::watch) waits for
// its next request without a deadline; before it goes idle it stores when
// it may be reaped (reap_at, then idle=true: the seq_cst store publishes
// it), and the server's reaper stops connections idle past that. A timer
// armed and cancelled per request was ~7% of a keep-alive request's
// user-space instructions (the shared timer heap, its lock). A request
// arriving as the reaper decides is lost with the connection, as it would
// be with a timer firing at that moment; the client sees a closed idle
// connection. Unwatched connections (tests, the fuzzer) keep a deadline.

#include <smarm/causal.hpp>
#include <smarm/http/config.hpp>
#include <smarm/http/message.hpp>
#include <smarm/http/router.hpp>
#include <smarm/io.hpp>
#include <smarm/progress.hpp>
#include <smarm/runtime.hpp>
#include <smarm/trace.hpp>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <optional>
#include <string>

#include "access_log.hpp"
#include "body_source.hpp"
#include "file_body.hpp"
#include "request_access.hpp"
#include "request_reader.hpp"
#include "response_head.hpp"
#include "stream.hpp"
#include "websocket_session.hpp"

namespace spdlog {
class logger;
}

namespace smarm::http::internal {

/// The causal profiler's sites and points of one server (server_config::
/// causal); made once, the points interned by name, so a rebuilt server
/// (a listener restarted) counts into the same ones.
struct profile_hooks {
    struct route {
        causal::site_id site = 0;     ///< around the handler
        causal::site_id service = 0;  ///< registry-routed: the server's handling
        progress_point* done = nullptr;
    };
    std::vector<route> routes;  ///< by route_match::index
    progress_point* answered = nullptr;
    latency_point* arrive = nullptr;
    latency_point* depart = nullptr;

    explicit profile_hooks(const router& r) {
        for (const route_info& info : r.routes()) {
            const std::string name = info.name();
            routes.push_back(
                {causal::register_site(name),
                 info.service.empty() ? 0 : causal::register_site(name + " @" + info.service),
                 &progress_point::named(name)});
        }
        answered = &progress_point::named("http.requests");
        arrive = &latency_point::named("http.request", latency_point::edge::begin);
        depart = &latency_point::named("http.request", latency_point::edge::end);
    }
};

/// The tracer's span names of one server's routes (smarm/trace.hpp),
/// interned once: a request's span is named by its route pattern.
struct trace_names {
    std::vector<std::uint32_t> routes;  ///< by route_match::index
    std::uint32_t unrouted = 0;
    /// Method names by verb, interned at first use (interning locks); an
    /// unknown method is "OTHER", so a client cannot grow the table.
    mutable std::array<std::atomic<std::uint32_t>, 64> methods{};
    explicit trace_names(const router& r) {
        for (const route_info& info : r.routes())
            routes.push_back(trace::intern(info.name()));
        unrouted = trace::intern("HTTP (no route)");
    }
    std::uint32_t method(verb v, std::string_view text) const {
        const auto i = static_cast<std::size_t>(v);
        if (v == verb::unknown || i >= methods.size()) return trace::intern("OTHER");
        // relaxed: two racing first uses intern the same string, same id.
        std::uint32_t id = methods[i].load(std::memory_order_relaxed);
        if (id == 0) methods[i].store(id = trace::intern(text), std::memory_order_relaxed);
        return id;
    }
};

/// What every connection of one server shares.
struct shared {
    shared(server_config c, router r)
        : cfg(std::move(c)),
          routes(std::move(r)),
          causal(cfg.causal ? std::make_unique<const profile_hooks>(routes) : nullptr),
          traced(routes) {}
    const server_config cfg;
    const router routes;
    const std::unique_ptr<const profile_hooks> causal;  ///< null unless cfg.causal
    const trace_names traced;
    std::atomic<bool> draining{false};
    /// The end of the drain's grace for idle connections (steady_clock
    /// nanoseconds since its epoch), stored before `draining`.
    std::atomic<std::int64_t> drain_until{0};
    std::atomic<std::uint64_t> accepted{0}, rejected{0}, active{0}, requests{0}, errors{0},
        accept_errors{0}, websockets{0};
    std::shared_ptr<spdlog::logger> access;  ///< null when the access log is off
};

/// What the server's drainer and reaper see of a connection.
struct conn_watch {
    std::atomic<bool> idle{false};  ///< parked between requests
    /// While idle: the steady_clock time (ns since its epoch) past which the
    /// reaper stops the connection (idle_timeout, or header_timeout before
    /// the first request).
    std::atomic<std::int64_t> reap_at{0};
    /// Set while the connection is a WebSocket: its drain notice.
    ws_notice_slot ws;
    // The registry's list (conn_registry.hpp), guarded by its lock.
    pid owner;
    conn_watch* prev = nullptr;
    conn_watch* next = nullptr;
};

/// One connection's identity.
struct conn_ctx {
    shared& sh;
    std::uint64_t id = 0;
    socket_address peer;
    conn_watch* watch = nullptr;  ///< null: nobody drains or reaps this connection
    /// Keeps `sh` alive for actors a connection starts and does not wait
    /// for (HTTP/2 stream actors); null when `sh` outlives them anyway.
    std::shared_ptr<const void> owner;
};

/// The status to answer a failed header/body read with, or nullopt to close
/// silently (peer gone, idle).
std::optional<http::status> status_for(const error_code& ec);
/// Sets the request's decoded path from its target; false when the path
/// has a bad %-escape.
bool decode_path(request& req);

/// The end of the drain's grace, as a stream deadline.
inline time_point drain_deadline(const shared& sh) {
    return time_point(time_point::duration(sh.drain_until.load(std::memory_order_relaxed)));
}

/// A connection's read buffer maximum: a whole head plus one read.
inline std::size_t read_buffer_limit(const server_config& cfg) {
    return std::max<std::size_t>(cfg.header_limit, 1024) + 64 * 1024;
}

/// Opens a request's trace span, named by its route (only while tracing).
[[gnu::cold, gnu::noinline]] inline void open_span(const shared& sh, const request& req,
                                                   const route_match& m) {
    trace::span_begin(m.target ? sh.traced.routes[m.index] : sh.traced.unrouted,
                      sh.traced.method(req.method(), req.method_string()));
}

/// Authorizes, routes and runs the handler of `req`, in the calling actor
/// (the connection's for HTTP/1.1, the stream's for HTTP/2). A throw is a
/// 500 carrying the request id (logged, counted in errors); `rid` is then
/// set. `route` gets the matched pattern when on_request wants it (before
/// the handler: a registry-routed one moves the request away), `hook` the
/// route's causal hooks when profiled, `span` whether a trace span opened.
/// `matched`: the request was already routed (to read a body its route
/// streams); it is authorized all the same before the handler runs. A
/// body_error the handler lets escape answers its status and closes.
[[gnu::always_inline]] inline response run_handler(shared& sh, request& req,
                                                   const socket_address& peer, std::string& rid,
                                                   std::string& route,
                                                   const profile_hooks::route*& hook, bool& span,
                                                   route_match* matched = nullptr) {
    const server_config& cfg = sh.cfg;
    hook = nullptr;
    std::optional<response> denied;
    if (cfg.authorize) denied = cfg.authorize(req);
    if (denied) return std::move(*denied);
    route_match m = matched != nullptr ? std::move(*matched) : sh.routes.match(req);
    if (detail::trace_active()) [[unlikely]] {
        open_span(sh, req, m);
        span = true;
    }
    if (cfg.on_request && m.target) route = req.route();
    hook = sh.causal && m.target ? &sh.causal->routes[m.index] : nullptr;
    // Built in place (a default-constructed response would allocate its
    // default Content-Type only to be assigned over).
    if (!m.target) {
        response r(m.status, std::string(boost::beast::http::obsolete_reason(m.status)) + "\n");
        if (m.status == http::status::method_not_allowed) r.set("Allow", m.allow);
        return r;
    }
    try {
        if (hook != nullptr) {
            causal::site_guard in_site(hook->site);
            causal::handoff_guard served(hook->service);
            return (*m.target)(req);
        }
        return (*m.target)(req);
    } catch (const smarm::stopped&) {
        throw;
    } catch (const body_error& e) {  // the client's fault, not the handler's
        response r(e.status(), std::string(boost::beast::http::obsolete_reason(e.status())) + "\n");
        r.close_connection();
        return r;
    } catch (const std::exception& e) {
        rid = req.id();
        log_handler_error(peer, req, e.what());
    } catch (...) {
        rid = req.id();
        log_handler_error(peer, req, "a non-standard exception");
    }
    sh.errors.fetch_add(1, std::memory_order_relaxed);
    return response(http::status::internal_server_error,
                    "Internal Server Error\nrequest id: " + rid + "\n");
}

/// A streamed request body on HTTP/1.1 (body_source.hpp): each piece is
/// what one read of the connection's socket parses through the request's
/// own parser (at most the read buffer's worth), within body_timeout.
template <class Stream>
class h1_body final : public body_source {
  public:
    h1_body(Stream& s, boost::beast::flat_buffer& buf, request_reader& p,
            const server_config& cfg)
        : s_(s), buf_(buf), p_(p), cfg_(cfg) {}
    /// Whether the handler read the body to its end.
    bool finished() const noexcept { return p_.is_done() && drained(); }

  private:
    bool next(std::string& piece) override {
        if (p_.is_done()) return false;
        p_.sink(&piece);
        s_.set_deadline(deadline_in(cfg_.body_timeout));
        error_code ec;
        boost::beast::http::read_some(s_, buf_, p_, ec);
        if (ec)
            fail(status_for(ec).value_or(http::status::bad_request),
                 "the request body could not be read: " + ec.message());
        return true;
    }

    Stream& s_;
    boost::beast::flat_buffer& buf_;
    request_reader& p_;
    const server_config& cfg_;
};

/// Serves an HTTP/2 connection (h2_connection.hpp) whose first bytes,
/// already read, are `early` (the preface, for h2c).
template <class Stream>
void serve_h2(Stream& s, conn_ctx& c, std::string_view early);

template <class Stream>
class connection {
  public:
    connection(Stream& s, conn_ctx& c)
        : s_(s), c_(c), cfg_(c.sh.cfg), buf_(read_buffer_limit(cfg_)) {}
    connection(const connection&) = delete;
    connection& operator=(const connection&) = delete;

    /// Serves requests until the connection is to close.
    void serve();

  private:
    using clock = std::chrono::steady_clock;

    // The per-request steps are forced inline into serve(): as calls they
    // cost ~117 instructions per keep-alive request (smarm-http-micro under
    // callgrind: 3,433 against 3,316 for the one-function loop before),
    // with the state reached through `this` instead of registers; inlined,
    // 3,256.

    /// (1) Parks for the first byte of the next request; false: close.
    [[gnu::always_inline]] inline bool await_request();
    /// (2)+(3) Head, the checks Beast leaves to us, 100-continue, body
    /// (or, for a route that streams it, `streamed` set up to read it);
    /// false: close (any error answer is already written).
    [[gnu::always_inline]] inline bool read_request(request_reader& parser,
                                                    std::optional<h1_body<Stream>>& streamed);
    /// Routes a request with a body before its body is read (the router
    /// has streamed routes): its limit, and `streamed` for a streamed one;
    /// false: close (the error answer is written).
    [[gnu::cold, gnu::noinline]] bool route_body(request_reader& parser,
                                                 std::optional<h1_body<Stream>>& streamed);
    /// (4) Authorizes, routes and runs the handler (a throw is a 500).
    /// `route` gets the matched pattern when on_request wants it (before
    /// the handler: a registry-routed one moves the request away).
    [[gnu::always_inline]] inline response handle(std::string& rid, std::string& route);
    /// (5) The response's head and body; false: close now.
    [[gnu::always_inline]] inline bool respond(response& res, bool head_only, std::uint64_t& bytes);
    /// Serves an accepted WebSocket upgrade until the socket ends; the
    /// connection closes after it. Returns when the 101 was written
    /// (clock::time_point{} if the handshake failed).
    clock::time_point upgrade(response& res);
    /// Whether the buffered first bytes are HTTP/2's connection preface
    /// (reading more while they are a proper prefix of it).
    bool prefaced();
    /// A file or chunked body after its head; false when the connection
    /// must close (write failed, or a close-delimited body).
    bool write_streamed(response& res, bool head_only);
    bool write_file(response& res, bool head_only);
    void head(const response& r, std::optional<std::uint64_t> content_length, bool chunked) {
        append_head(out_, cfg_, r, {content_length, chunked, keep_alive_, version_});
    }
    /// Writes `bytes` within write_timeout; false on failure.
    bool write_now(std::string_view bytes) {
        s_.set_deadline(deadline_in(cfg_.write_timeout));
        return s_.write_all(bytes);
    }
    /// Writes the output buffer (write_now) and empties it.
    bool flush() {
        if (out_.empty()) return true;
        bool ok = write_now(out_);
        out_.clear();
        return ok;
    }
    /// An error response, then close (after letting the peer read it).
    void fail(http::status st) {
        append_simple(out_, cfg_, st, false, version_);
        c_.sh.requests.fetch_add(1, std::memory_order_relaxed);
        if (c_.sh.access)
            log_access(*c_.sh.access, c_.peer, "-", "-", static_cast<unsigned>(st), 0, {}, "-");
        if (flush()) s_.linger();
    }

    Stream& s_;
    conn_ctx& c_;
    const server_config& cfg_;
    // Bounded: a line the parser has not seen the end of (a chunk size with
    // its extensions, a trailer section) stays in the buffer, and without a
    // maximum one client could grow it without end (issue 27: 400 MB of
    // chunk extension, 400 MB of RSS). A head is bounded by header_limit
    // before the buffer fills; past the maximum Beast answers
    // buffer_overflow (400).
    boost::beast::flat_buffer buf_;
    std::string out_;
    // One request object for the connection's life, reset per request: its
    // header vector keeps its storage (request_access::reset).
    request req_;
    std::uint64_t seq_ = 0;
    unsigned version_ = 11;    ///< the answered request's (11 until its head is read)
    bool keep_alive_ = false;  ///< the answered request's, then the response's
    const profile_hooks::route* route_ = nullptr;  ///< the routed request's, when profiled
    bool span_open_ = false;                       ///< the request's trace span is open
    /// Routed before its body was read (route_body); handle() uses it.
    std::optional<route_match> routed_;
};

/// Serves one connection over `s` (the connection actor's body).
template <class Stream>
void serve_connection(Stream& s, conn_ctx& c) {
    connection<Stream>(s, c).serve();
}

template <class Stream>
void connection<Stream>::serve() {
    for (;;) {
        if (buf_.size() == 0 && !await_request()) return;
        // h2c by prior knowledge: the preface as a connection's first bytes.
        if (seq_ == 0 && cfg_.http2.enabled && prefaced()) [[unlikely]] {
            const std::string_view early(static_cast<const char*>(buf_.data().data()), buf_.size());
            serve_h2(s_, c_, early);
            return;
        }
        // The request's start, for the access log and on_request (a precise
        // clock read, so only when one of them wants it).
        const bool timed = c_.sh.access || cfg_.on_request;
        const auto t0 = timed ? clock::now() : clock::time_point{};
        ++seq_;
        // Every arrival departs, whichever way the request ends.
        struct departure {
            latency_point* p;
            ~departure() {
                if (p != nullptr) p->hit();
            }
        } const leaves{c_.sh.causal ? c_.sh.causal->depart : nullptr};
        if (leaves.p != nullptr) c_.sh.causal->arrive->hit();
        request_reader parser(req_);
        std::optional<h1_body<Stream>> streamed;  // a body the handler reads
        if (!read_request(parser, streamed)) return;
        request_access::peer(req_) = c_.peer;
        request_access::set_id(req_, c_.id, seq_);
        const bool head_only = req_.method() == verb::head;
        // Kept for the log: a registry-routed handler moves the request away.
        std::string method, target, rid, route;
        if (timed) {
            method = req_.method_string();
            if (c_.sh.access) {  // on_request takes the route and method only
                target = req_.target();
                rid = req_.id();
            }
        }
        response res = handle(rid, route);
        // A streamed body the handler left unread is not drained: the
        // connection closes after this response (and lingers, so the
        // client reads it rather than a reset).
        const bool unread = streamed && !streamed->finished();
        if (unread) [[unlikely]]
            keep_alive_ = false;
        if (res.kind() == response::body_kind::websocket) [[unlikely]] {
            const auto t1 = upgrade(res);
            c_.sh.requests.fetch_add(1, std::memory_order_relaxed);
            if (c_.sh.access)
                log_access(*c_.sh.access, c_.peer, method, target, 101, 0, clock::now() - t0, rid);
            if (cfg_.on_request && t1 != clock::time_point{})
                cfg_.on_request(request_record{route, method, 101, 0, t1 - t0});
            return;
        }
        if (res.closes() || c_.sh.draining.load(std::memory_order_relaxed)) keep_alive_ = false;
        std::uint64_t bytes = 0;
        if (!respond(res, head_only, bytes)) return;
        if (span_open_) [[unlikely]] {
            trace::span_end(static_cast<unsigned>(res.status()), bytes);
            span_open_ = false;
        }
        c_.sh.requests.fetch_add(1, std::memory_order_relaxed);
        if (const profile_hooks* ch = c_.sh.causal.get()) {
            ch->answered->hit();
            if (route_ != nullptr) route_->done->hit();
        }
        if (c_.sh.access)
            log_access(*c_.sh.access, c_.peer, method, target, static_cast<unsigned>(res.status()),
                       bytes, clock::now() - t0, rid);
        if (cfg_.on_request)
            cfg_.on_request(request_record{route, method, static_cast<unsigned>(res.status()),
                                           bytes, clock::now() - t0});
        if (!keep_alive_) {
            // Draining: let the peer read the Connection: close answer
            // before the socket goes (a request it sent meanwhile would
            // otherwise turn the close into a reset).
            if (flush() && (unread || c_.sh.draining.load(std::memory_order_relaxed))) s_.linger();
            return;
        }
    }
}

template <class Stream>
bool connection<Stream>::await_request() {
    if (!flush()) return false;
    const auto limit = deadline_in(seq_ == 0 ? cfg_.header_timeout : cfg_.idle_timeout);
    if (c_.watch) {  // the reaper enforces the limit (header comment)
        c_.watch->reap_at.store(limit.time_since_epoch().count(), std::memory_order_relaxed);
        c_.watch->idle.store(true, std::memory_order_seq_cst);
        s_.set_deadline(c_.sh.draining.load(std::memory_order_seq_cst)
                            ? std::optional(drain_deadline(c_.sh))
                            : std::nullopt);
    } else {
        s_.set_deadline(c_.sh.draining.load(std::memory_order_seq_cst)
                            ? std::min(limit, drain_deadline(c_.sh))
                            : limit);
    }
    // The read buffer starts at 1 KiB (malloc's per-thread cache serves it;
    // most request heads fit) and grows as Beast needs: a connection keeps
    // what it grew to, unless a large body grew it past 16 KiB, which an
    // idle connection gives back. An idle keep-alive connection costs ~11 KB
    // (~14 KB with a 16 KiB buffer, whose boundary tags touch two more
    // pages).
    if (buf_.capacity() > 16 * 1024) buf_.shrink_to_fit();
    error_code ec;
    auto n = s_.read_some(buf_.prepare(1024), ec);
    if (ec) return false;  // peer gone or idle too long: close quietly
    buf_.commit(n);
    if (c_.watch) c_.watch->idle.store(false, std::memory_order_relaxed);
    return true;
}

template <class Stream>
bool connection<Stream>::prefaced() {
    static constexpr std::string_view preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    auto have = [&] {
        return std::string_view(static_cast<const char*>(buf_.data().data()), buf_.size());
    };
    if (have()[0] != 'P') return false;  // every HTTP/1.1 method but PRI, POST, PUT, PATCH
    s_.set_deadline(deadline_in(cfg_.header_timeout));
    while (buf_.size() < preface.size() && preface.starts_with(have())) {
        error_code ec;
        const auto n = s_.read_some(buf_.prepare(1024), ec);
        if (ec) return false;  // the HTTP/1.1 path answers or closes
        buf_.commit(n);
    }
    return have().starts_with(preface);
}

template <class Stream>
bool connection<Stream>::read_request(request_reader& parser,
                                      std::optional<h1_body<Stream>>& streamed) {
    namespace bhttp = boost::beast::http;
    version_ = 11;
    request_access::reset(req_);
    routed_.reset();
    parser.header_limit(static_cast<std::uint32_t>(
        std::min<std::size_t>(cfg_.header_limit, std::numeric_limits<std::uint32_t>::max())));
    // With streamed routes, a head declaring up to their largest limit
    // passes; route_body then holds the request to its route's limit.
    const std::uint64_t stream_limit = c_.sh.routes.stream_limit();
    parser.body_limit(std::max<std::uint64_t>(cfg_.body_limit, stream_limit));
    parser.framing_limit(cfg_.header_limit);
    s_.set_deadline(deadline_in(cfg_.header_timeout));
    error_code ec;
    bhttp::read_header(s_, buf_, parser, ec);
    if (ec) {
        if (auto st = status_for(ec)) fail(*st);
        return false;
    }
    version_ = req_.version();
    // What Beast leaves to us: exactly one Host in HTTP/1.1, and no transfer
    // coding but chunked (a body we would mis-frame is how requests get
    // smuggled).
    if ((version_ >= 11 && parser.host_count() != 1) || parser.host_count() > 1 ||
        (parser.has_transfer_encoding() && !parser.chunked())) {
        fail(http::status::bad_request);
        return false;
    }
    if (const std::string* ex = parser.expect()) {
        if (!iequals(*ex, "100-continue")) {
            fail(http::status::expectation_failed);
            return false;
        }
        if (version_ >= 11 && !parser.is_done()) {
            out_ += "HTTP/1.1 100 Continue\r\n\r\n";
            if (!flush()) return false;
        }
    }
    if (stream_limit != 0 && !parser.is_done()) [[unlikely]] {
        if (!route_body(parser, streamed)) return false;
        if (streamed) {
            keep_alive_ = parser.keep_alive();
            return true;  // the handler reads the body
        }
    }
    if (!parser.is_done()) {
        s_.set_deadline(deadline_in(cfg_.body_timeout));
        bhttp::read(s_, buf_, parser, ec);
        if (ec) {
            if (auto st = status_for(ec)) fail(*st);
            return false;
        }
    }
    keep_alive_ = parser.keep_alive();
    if (!routed_ && !decode_path(req_)) {
        fail(http::status::bad_request);
        return false;
    }
    return true;
}

template <class Stream>
bool connection<Stream>::route_body(request_reader& parser,
                                    std::optional<h1_body<Stream>>& streamed) {
    if (!decode_path(req_)) {
        fail(http::status::bad_request);
        return false;
    }
    routed_ = c_.sh.routes.match(req_);
    const std::uint64_t limit = routed_->streamed ? routed_->streamed->limit : cfg_.body_limit;
    if (auto length = parser.content_length(); length && *length > limit) {
        fail(http::status::payload_too_large);
        return false;
    }
    parser.body_limit(limit);  // chunked: counted down as chunks come
    if (routed_->streamed) {
        streamed.emplace(s_, buf_, parser, cfg_);
        request_access::source(req_) = &*streamed;
    }
    return true;
}

template <class Stream>
response connection<Stream>::handle(std::string& rid, std::string& route) {
    return run_handler(c_.sh, req_, c_.peer, rid, route, route_, span_open_,
                       routed_ ? &*routed_ : nullptr);
}

template <class Stream>
bool connection<Stream>::respond(response& res, bool head_only, std::uint64_t& bytes) {
    if (res.kind() != response::body_kind::text) {
        if (!flush()) return false;
        if (!write_streamed(res, head_only)) keep_alive_ = false;
        return true;
    }
    const unsigned code = static_cast<unsigned>(res.status());
    const bool no_body = code < 200 || code == 204 || code == 304;
    const std::optional<std::uint64_t> length =
        no_body ? std::nullopt : std::optional<std::uint64_t>(res.body().size());
    if (out_.empty() && (buf_.size() == 0 || !keep_alive_)) {
        // Answered alone (nothing batched, nothing pipelined behind it): a
        // small response goes out from the stack, so a connection that
        // answers once and closes never allocates its output buffer.
        const std::string_view body = head_only || no_body ? std::string_view() : res.body();
        char local[1024];
        if (body.size() < sizeof local) {
            if (char* end = put_head(local, sizeof local - body.size(), cfg_, res,
                                     {length, false, keep_alive_, version_})) {
                std::memcpy(end, body.data(), body.size());
                bytes = body.size();
                return write_now(std::string_view(local, end - local + body.size()));
            }
        }
    }
    head(res, length, false);
    if (!head_only && !no_body) {
        out_ += res.body();
        bytes = res.body().size();
    }
    // Batch pipelined responses while more requests are buffered.
    if (buf_.size() == 0 || out_.size() >= 64 * 1024 || !keep_alive_) return flush();
    return true;
}

template <class Stream>
typename connection<Stream>::clock::time_point connection<Stream>::upgrade(response& res) {
    namespace bhttp = boost::beast::http;
    if (!flush()) return {};
    // Beast's handshake takes its own request type: the fields it reads.
    bhttp::request<bhttp::empty_body> up;
    up.method(bhttp::verb::get);
    up.version(11);
    up.target(req_.target());
    for (const http::header& h : req_.headers())
        up.insert(h.name, h.value);
    const std::string_view early(static_cast<const char*>(buf_.data().data()), buf_.size());
    ws_session<Stream> ws(s_, early, req_, cfg_.websocket, cfg_.server_name,
                          c_.watch != nullptr ? &c_.watch->ws : nullptr, &c_.sh.draining);
    buf_.consume(buf_.size());
    buf_.shrink_to_fit();  // the session reads through its own buffer
    out_.clear();
    out_.shrink_to_fit();
    keep_alive_ = false;
    // Counted before the 101 goes out: a client that has its 101 finds
    // itself in smarm_http_websockets_active (a count after it raced a
    // client reading the gauge at once).
    c_.sh.websockets.fetch_add(1, std::memory_order_relaxed);
    struct open_count {
        std::atomic<std::uint64_t>& n;
        ~open_count() { n.fetch_sub(1, std::memory_order_relaxed); }
    } const counted{c_.sh.websockets};
    if (!ws.accept(up)) return {};
    const auto upgraded = clock::now();
    std::string error;
    ws.run(res.upgrade(), error);
    if (!error.empty()) {  // counted before the 1011 goes out
        c_.sh.errors.fetch_add(1, std::memory_order_relaxed);
        log_handler_error(c_.peer, req_, error.c_str());
    }
    ws.finish(error);
    return upgraded;
}

template <class Stream>
bool connection<Stream>::write_file(response& res, bool head_only) {
    const std::string path = res.file_path();
    file_open_result f = smarm::block_on_io([path] { return open_file(path); });
    if (f.fd < 0) {
        append_simple(out_, cfg_, f.err, keep_alive_, version_);
        return flush() && keep_alive_;
    }
    struct closer {
        int fd;
        ~closer() { close_file(fd); }
    } guard{f.fd};
    head(res, f.size, false);
    if (!flush()) return false;
    if (head_only) return keep_alive_;
    std::string chunk;
    for (std::uint64_t off = 0; off < f.size;) {
        const std::size_t want =
            static_cast<std::size_t>(std::min<std::uint64_t>(256 * 1024, f.size - off));
        chunk.resize(want);
        long n = smarm::block_on_io(
            [fd = f.fd, p = chunk.data(), want, off] { return read_file(fd, p, want, off); });
        if (n <= 0) return false;  // the file shrank: the length was a lie, close
        chunk.resize(static_cast<std::size_t>(n));
        if (!write_now(chunk)) return false;
        off += static_cast<std::uint64_t>(n);
    }
    return keep_alive_;
}

template <class Stream>
bool connection<Stream>::write_streamed(response& res, bool head_only) {
    if (res.kind() == response::body_kind::file) return write_file(res, head_only);
    // Chunked (HTTP/1.1) or close-delimited (HTTP/1.0).
    const bool chunked = version_ >= 11;
    keep_alive_ = keep_alive_ && chunked;
    head(res, std::nullopt, chunked);
    if (!flush()) return false;
    if (head_only) return keep_alive_;
    try {
        while (auto piece = res.chunks()()) {
            if (piece->empty()) continue;
            if (chunked) append_chunk_size(out_, piece->size());
            out_ += *piece;
            if (chunked) out_ += "\r\n";
            if (!flush()) return false;
        }
    } catch (const smarm::stopped&) {
        throw;
    } catch (const std::exception& e) {
        log_stream_error(e.what());
        return false;  // the head is gone: cutting the body short is all we can do
    }
    if (chunked) {
        out_ += "0\r\n\r\n";
        if (!flush()) return false;
    }
    return keep_alive_;
}

}  // namespace smarm::http::internal

// HTTP/2 needs the above (conn_ctx, run_handler); serve() needs serve_h2.
#include "h2_connection.hpp"  // IWYU pragma: export
