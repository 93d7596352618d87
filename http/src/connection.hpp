#pragma once
// The connection loop: one actor per connection runs serve_connection over
// its stream until the peer goes, a limit or error closes it, or the server
// drains. It is a template over the stream so the fuzz target and the unit
// tests drive the very same code from memory (memory_stream).
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

#include <smarm/http/message.hpp>
#include <smarm/http/router.hpp>
#include <smarm/http/server.hpp>
#include <smarm/io.hpp>
#include <smarm/runtime.hpp>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <optional>
#include <string>

#include "request_access.hpp"
#include "request_reader.hpp"
#include "stream.hpp"

namespace spdlog {
class logger;
}

namespace smarm::http::detail {

/// What every connection of one server shares.
struct shared {
    shared(server_config c, router r) : cfg(std::move(c)), routes(std::move(r)) {}
    const server_config cfg;
    const router routes;
    std::atomic<bool> draining{false};
    /// The end of the drain's grace for idle connections (steady_clock
    /// nanoseconds since its epoch), stored before `draining`.
    std::atomic<std::int64_t> drain_until{0};
    std::atomic<std::uint64_t> accepted{0}, rejected{0}, active{0}, requests{0}, errors{0},
        accept_errors{0};
    std::shared_ptr<spdlog::logger> access;  ///< null when the access log is off
};

/// What the server's drainer and reaper see of a connection.
struct conn_watch {
    std::atomic<bool> idle{false};  ///< parked between requests
    /// While idle: the steady_clock time (ns since its epoch) past which the
    /// reaper stops the connection (idle_timeout, or header_timeout before
    /// the first request).
    std::atomic<std::int64_t> reap_at{0};
};

/// One connection's identity.
struct conn_ctx {
    shared& sh;
    std::uint64_t id = 0;
    socket_address peer;
    conn_watch* watch = nullptr;  ///< null: nobody drains or reaps this connection
};

/// Appends the status line and the managed headers (Server, Date,
/// Content-Type, Content-Length or Transfer-Encoding, Connection), the
/// response's own headers and the blank line.
void append_head(std::string& out, const server_config& cfg, const response& r,
                 std::optional<std::uint64_t> content_length, bool chunked, bool keep_alive,
                 unsigned request_version);
/// A complete short response with a text body ("413 Payload Too Large\n").
void append_simple(std::string& out, const server_config& cfg, http::status s, bool keep_alive,
                   unsigned request_version, std::string_view extra_header = {});
/// The status to answer a failed header/body read with, or nullopt to close
/// silently (peer gone, idle).
std::optional<http::status> status_for(const error_code& ec);
/// Logs one access line (no-op when the log is off).
void log_access(const conn_ctx& c, std::string_view method, std::string_view target,
                unsigned status, std::uint64_t bytes, std::chrono::nanoseconds took,
                std::string_view request_id);
/// Logs a handler failure.
void log_handler_error(const conn_ctx& c, const request& req, std::string_view what);
/// Sets the request's decoded path from its target; false when the path
/// has a bad %-escape.
bool decode_path(request& req);
/// File access for file bodies (run on the blocking pool): the fd, or -1
/// and the status to answer (404 missing, 403 unreadable, 500 otherwise).
struct file_open_result {
    int fd;
    http::status err;
    std::uint64_t size;
};
file_open_result open_file(const std::string& path);
long read_file(int fd, char* p, std::size_t n, std::uint64_t off);
void close_file(int fd) noexcept;
void append_chunk_size(std::string& out, std::size_t n);
void log_stream_error(std::string_view what);
/// Streams a file or chunked body after its head; false when the
/// connection must close (write failed, or a close-delimited body).
template <class Stream>
bool write_streamed(Stream& s, std::string& out, const server_config& cfg, response& res,
                    bool head_only, bool keep_alive, unsigned version);

/// The end of the drain's grace, as a stream deadline.
inline time_point drain_deadline(const shared& sh) {
    return time_point(time_point::duration(sh.drain_until.load(std::memory_order_relaxed)));
}

/// A connection's read buffer maximum: a whole head plus one read.
inline std::size_t read_buffer_limit(const server_config& cfg) {
    return std::max<std::size_t>(cfg.header_limit, 1024) + 64 * 1024;
}

template <class Stream>
void serve_connection(Stream& s, conn_ctx& c) {
    namespace bhttp = boost::beast::http;
    using clock = std::chrono::steady_clock;
    const server_config& cfg = c.sh.cfg;
    // Bounded: a line the parser has not seen the end of (a chunk size with
    // its extensions, a trailer section) stays in the buffer, and without a
    // maximum one client could grow it without end (issue 27: 400 MB of
    // chunk extension, 400 MB of RSS). A head is bounded by header_limit
    // before the buffer fills; past the maximum Beast answers
    // buffer_overflow (400).
    boost::beast::flat_buffer buf(read_buffer_limit(cfg));
    std::string out;
    std::uint64_t seq = 0;
    // One request object for the connection's life, reset per request: its
    // header vector keeps its storage (request_access::reset).
    request req;

    auto flush = [&]() -> bool {
        if (out.empty()) return true;
        s.set_deadline(deadline_in(cfg.write_timeout));
        bool ok = s.write_all(out);
        out.clear();
        return ok;
    };
    // An error response, then close (after letting the peer read it).
    auto fail = [&](http::status st, unsigned version) {
        append_simple(out, cfg, st, false, version);
        c.sh.requests.fetch_add(1, std::memory_order_relaxed);
        log_access(c, "-", "-", static_cast<unsigned>(st), 0, {}, "-");
        if (flush()) s.linger();
    };

    for (;;) {
        // (1) Wait for the first byte of the next request.
        if (buf.size() == 0) {
            if (!flush()) return;
            const auto limit = deadline_in(seq == 0 ? cfg.header_timeout : cfg.idle_timeout);
            if (c.watch) {  // the reaper enforces the limit (header comment)
                c.watch->reap_at.store(limit.time_since_epoch().count(), std::memory_order_relaxed);
                c.watch->idle.store(true, std::memory_order_seq_cst);
                s.set_deadline(c.sh.draining.load(std::memory_order_seq_cst)
                                   ? std::optional(drain_deadline(c.sh))
                                   : std::nullopt);
            } else {
                s.set_deadline(c.sh.draining.load(std::memory_order_seq_cst)
                                   ? std::min(limit, drain_deadline(c.sh))
                                   : limit);
            }
            // The read buffer starts at 1 KiB (malloc's per-thread cache
            // serves it; most request heads fit) and grows as Beast needs:
            // a connection keeps what it grew to, unless a large body grew
            // it past 16 KiB, which an idle connection gives back. An idle
            // keep-alive connection costs ~11 KB (~14 KB with a 16 KiB
            // buffer, whose boundary tags touch two more pages).
            if (buf.capacity() > 16 * 1024) buf.shrink_to_fit();
            error_code ec;
            auto n = s.read_some(buf.prepare(1024), ec);
            if (ec) return;  // peer gone or idle too long: close quietly
            buf.commit(n);
            if (c.watch) c.watch->idle.store(false, std::memory_order_relaxed);
        }
        // The request's start, for the access log and on_request (a precise
        // clock read, so only when one of them wants it).
        const bool timed = c.sh.access || cfg.on_request;
        const auto t0 = timed ? clock::now() : clock::time_point{};
        ++seq;

        // (2) The header.
        request_access::reset(req);
        request_reader parser(req);
        parser.header_limit(static_cast<std::uint32_t>(
            std::min<std::size_t>(cfg.header_limit, std::numeric_limits<std::uint32_t>::max())));
        parser.body_limit(cfg.body_limit);
        parser.framing_limit(cfg.header_limit);
        s.set_deadline(deadline_in(cfg.header_timeout));
        error_code ec;
        bhttp::read_header(s, buf, parser, ec);
        if (ec) {
            if (auto st = status_for(ec)) fail(*st, 11);
            return;
        }
        const unsigned version = req.version();
        // What Beast leaves to us: exactly one Host in HTTP/1.1, and no
        // transfer coding but chunked (a body we would mis-frame is how
        // requests get smuggled).
        if ((version >= 11 && parser.host_count() != 1) || parser.host_count() > 1 ||
            (parser.has_transfer_encoding() && !parser.chunked())) {
            fail(http::status::bad_request, version);
            return;
        }
        if (const std::string* ex = parser.expect()) {
            if (!iequals(*ex, "100-continue")) {
                fail(http::status::expectation_failed, version);
                return;
            }
            if (version >= 11 && !parser.is_done()) {
                out += "HTTP/1.1 100 Continue\r\n\r\n";
                if (!flush()) return;
            }
        }

        // (3) The body.
        if (!parser.is_done()) {
            s.set_deadline(deadline_in(cfg.body_timeout));
            bhttp::read(s, buf, parser, ec);
            if (ec) {
                if (auto st = status_for(ec)) fail(*st, version);
                return;
            }
        }
        bool keep_alive = parser.keep_alive();

        // (4) Route and handle.
        if (!decode_path(req)) {
            fail(http::status::bad_request, version);
            return;
        }
        request_access::peer(req) = c.peer;
        request_access::set_id(req, c.id, seq);
        const bool head_only = req.method() == verb::head;
        // Kept for the log: a registry-routed handler moves the request away.
        std::string method, target, rid, route;
        if (timed) {
            method = req.method_string();
            target = req.target();
            rid = req.id();
        }

        std::optional<response> denied;
        if (cfg.authorize) denied = cfg.authorize(req);
        route_match m = denied ? route_match{} : c.sh.routes.match(req);
        if (cfg.on_request && m.target) route = req.route();
        // Built in place (a default-constructed response would allocate its
        // default Content-Type only to be assigned over).
        response res = [&] {
            if (denied) return std::move(*denied);
            if (!m.target) {
                response r(m.status, std::string(bhttp::obsolete_reason(m.status)) + "\n");
                if (m.status == http::status::method_not_allowed) r.set("Allow", m.allow);
                return r;
            }
            try {
                return (*m.target)(req);
            } catch (const smarm::stopped&) {
                throw;
            } catch (const std::exception& e) {
                rid = req.id();
                log_handler_error(c, req, e.what());
            } catch (...) {
                rid = req.id();
                log_handler_error(c, req, "a non-standard exception");
            }
            c.sh.errors.fetch_add(1, std::memory_order_relaxed);
            return response(http::status::internal_server_error,
                            "Internal Server Error\nrequest id: " + rid + "\n");
        }();
        if (res.closes() || c.sh.draining.load(std::memory_order_relaxed)) keep_alive = false;

        // (5) The response.
        std::uint64_t bytes = 0;
        if (res.kind() == response::body_kind::text) {
            const unsigned code = static_cast<unsigned>(res.status());
            const bool no_body = code < 200 || code == 204 || code == 304;
            append_head(out, cfg, res,
                        no_body ? std::nullopt : std::optional<std::uint64_t>(res.body().size()),
                        false, keep_alive, version);
            if (!head_only && !no_body) {
                out += res.body();
                bytes = res.body().size();
            }
            // Batch pipelined responses while more requests are buffered.
            if (buf.size() == 0 || out.size() >= 64 * 1024 || !keep_alive)
                if (!flush()) return;
        } else {
            if (!flush()) return;
            if (!write_streamed(s, out, cfg, res, head_only, keep_alive, version))
                keep_alive = false;
        }
        c.sh.requests.fetch_add(1, std::memory_order_relaxed);
        if (c.sh.access) {
            log_access(c, method, target, static_cast<unsigned>(res.status()), bytes,
                       clock::now() - t0, rid);
        }
        if (cfg.on_request)
            cfg.on_request(request_record{route, method, static_cast<unsigned>(res.status()), bytes,
                                          clock::now() - t0});
        if (!keep_alive) {
            // Draining: let the peer read the Connection: close answer
            // before the socket goes (a request it sent meanwhile would
            // otherwise turn the close into a reset).
            if (flush() && c.sh.draining.load(std::memory_order_relaxed)) s.linger();
            return;
        }
    }
}

template <class Stream>
bool write_streamed(Stream& s, std::string& out, const server_config& cfg, response& res,
                    bool head_only, bool keep_alive, unsigned version) {
    auto flush = [&]() -> bool {
        s.set_deadline(deadline_in(cfg.write_timeout));
        bool ok = s.write_all(out);
        out.clear();
        return ok;
    };
    if (res.kind() == response::body_kind::file) {
        const std::string path = res.file_path();
        file_open_result f = smarm::block_on_io([path] { return open_file(path); });
        if (f.fd < 0) {
            append_simple(out, cfg, f.err, keep_alive, version);
            return flush() && keep_alive;
        }
        struct closer {
            int fd;
            ~closer() { close_file(fd); }
        } guard{f.fd};
        append_head(out, cfg, res, f.size, false, keep_alive, version);
        if (!flush()) return false;
        if (head_only) return keep_alive;
        std::string chunk;
        for (std::uint64_t off = 0; off < f.size;) {
            const std::size_t want =
                static_cast<std::size_t>(std::min<std::uint64_t>(256 * 1024, f.size - off));
            chunk.resize(want);
            long n = smarm::block_on_io(
                [fd = f.fd, p = chunk.data(), want, off] { return read_file(fd, p, want, off); });
            if (n <= 0) return false;  // the file shrank: the length was a lie, close
            chunk.resize(static_cast<std::size_t>(n));
            s.set_deadline(deadline_in(cfg.write_timeout));
            if (!s.write_all(chunk)) return false;
            off += static_cast<std::uint64_t>(n);
        }
        return keep_alive;
    }
    // Chunked (HTTP/1.1) or close-delimited (HTTP/1.0).
    const bool chunked = version >= 11;
    keep_alive = keep_alive && chunked;
    append_head(out, cfg, res, std::nullopt, chunked, keep_alive, version);
    if (!flush()) return false;
    if (head_only) return keep_alive;
    try {
        while (auto piece = res.chunks()()) {
            if (piece->empty()) continue;
            if (chunked) append_chunk_size(out, piece->size());
            out += *piece;
            if (chunked) out += "\r\n";
            if (!flush()) return false;
        }
    } catch (const smarm::stopped&) {
        throw;
    } catch (const std::exception& e) {
        log_stream_error(e.what());
        return false;  // the head is gone: cutting the body short is all we can do
    }
    if (chunked) {
        out += "0\r\n\r\n";
        if (!flush()) return false;
    }
    return keep_alive;
}

}  // namespace smarm::http::detail
