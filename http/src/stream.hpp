#pragma once
// The stream the connection loop runs over (Beast SyncReadStream +
// SyncWriteStream): actor_stream, a tcp_stream whose reads and writes park
// the actor on the IO layer, with a deadline per phase (header, body, idle,
// write). The fuzz target and the unit tests use smarm_test's memory_stream
// (tests/support) instead; `throwing_io` is what both share.
//
// Errors come back as error codes, never exceptions, except smarm::stopped,
// which must unwind the connection actor: a timeout is
// beast::error::timeout, the peer closing is asio::error::eof. The socket
// calls are tcp_stream's error-code forms, so a closed peer costs no throw.

#include <smarm/io.hpp>
#include <smarm/net.hpp>

#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/role.hpp>

#include <time.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

namespace smarm::http::internal {

using error_code = boost::beast::error_code;
using time_point = std::chrono::steady_clock::time_point;

/// steady_clock read coarsely: CLOCK_MONOTONIC_COARSE is the same clock
/// kept at tick granularity, a ~5 ns read against ~24 ns for
/// steady_clock::now() here. It lags now() by less than coarse_slack().
/// The connection loop sets and checks its per-phase deadlines (several
/// per request) with it. Under a runtime clock_source it is that clock.
inline time_point coarse_now() noexcept {
    // A runtime clock_source (a test's manual_clock) is the time, exactly.
    if (smarm::detail::clock::overridden()) [[unlikely]]
        return smarm::detail::clock::now();
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return time_point(std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec));
}
/// The coarse clock's resolution (one kernel tick, e.g. 4 ms).
inline std::chrono::nanoseconds coarse_tick() noexcept {
    static const std::chrono::nanoseconds tick = [] {
        timespec r{};
        clock_getres(CLOCK_MONOTONIC_COARSE, &r);
        return std::chrono::seconds(r.tv_sec) + std::chrono::nanoseconds(r.tv_nsec);
    }();
    return tick;
}
/// How far coarse_now() may lag steady_clock::now(): two ticks. Not one:
/// with a 4 ms tick it lagged by up to 7.7 ms here (2,000 reads after
/// sleeps of 1-3 ms, idle or under load), and a deadline from it with one
/// tick of margin closed a stalled WebSocket frame 2 ms before
/// message_timeout (websocket.slowframe).
inline std::chrono::nanoseconds coarse_slack() noexcept {
    return 2 * coarse_tick();
}
/// A deadline `d` from now, never earlier than steady_clock::now() + d
/// (so at most two ticks late); saturates instead of overflowing.
inline time_point deadline_in(std::chrono::nanoseconds d) noexcept {
    const time_point base = coarse_now() + coarse_slack();
    return d >= time_point::max() - base ? time_point::max() : base + d;
}

/// The throwing SyncReadStream/SyncWriteStream overloads, from the
/// error-code ones the stream defines.
template <class Stream>
struct throwing_io {
    template <class Buffers>
    std::size_t read_some(const Buffers& bufs) {
        error_code ec;
        auto n = static_cast<Stream&>(*this).read_some(bufs, ec);
        if (ec) throw boost::system::system_error(ec);
        return n;
    }
    template <class Buffers>
    std::size_t write_some(const Buffers& bufs) {
        error_code ec;
        auto n = static_cast<Stream&>(*this).write_some(bufs, ec);
        if (ec) throw boost::system::system_error(ec);
        return n;
    }
};

class actor_stream : public throwing_io<actor_stream> {
  public:
    explicit actor_stream(tcp_stream& s) : s_(s) {}

    // What Asio's ssl::stream needs of its lowest layer. The executor is
    // never run: every operation here is synchronous (it parks the actor).
    using throwing_io::read_some;
    using throwing_io::write_some;
    using lowest_layer_type = actor_stream;
    using executor_type = boost::asio::io_context::executor_type;
    lowest_layer_type& lowest_layer() noexcept { return *this; }
    const lowest_layer_type& lowest_layer() const noexcept { return *this; }
    executor_type get_executor() noexcept {
        static boost::asio::io_context unused;
        return unused.get_executor();
    }

    /// The socket (its select arms).
    tcp_stream& socket() noexcept { return s_; }

    /// Reads what is there now, without waiting (deadline ignored):
    /// would_block when nothing is; eof when the peer closed.
    std::size_t read_now(void* p, std::size_t n, error_code& ec) {
        ec = {};
        std::error_code e;
        // A deadline already past reads only what need not wait for.
        const std::size_t got = s_.read_some_until(p, n, time_point::min(), e);
        if (e)
            ec = e == std::errc::timed_out
                     ? error_code(boost::asio::error::would_block)
                     : error_code(e.value(), boost::system::generic_category());
        else if (got == 0 && n != 0)
            ec = boost::asio::error::eof;
        return got;
    }

    /// Reads and writes after `t` fail with beast::error::timeout.
    void set_deadline(std::optional<time_point> t) noexcept { deadline_ = t; }

    template <class Buffers>
    std::size_t read_some(const Buffers& bufs, error_code& ec) {
        ec = {};
        for (auto it = boost::asio::buffer_sequence_begin(bufs);
             it != boost::asio::buffer_sequence_end(bufs); ++it) {
            boost::asio::mutable_buffer b = *it;
            if (b.size() == 0) continue;
            const std::size_t n = io(ec, [&](std::error_code& e) {
                return s_.read_some_until(b.data(), b.size(), deadline_, e);
            });
            if (n == 0 && !ec) ec = boost::asio::error::eof;
            return n;
        }
        return 0;
    }
    template <class Buffers>
    std::size_t write_some(const Buffers& bufs, error_code& ec) {
        ec = {};
        for (auto it = boost::asio::buffer_sequence_begin(bufs);
             it != boost::asio::buffer_sequence_end(bufs); ++it) {
            boost::asio::const_buffer b = *it;
            if (b.size() == 0) continue;
            return io(ec, [&](std::error_code& e) {
                return s_.write_some_until(b.data(), b.size(), deadline_, e);
            });
        }
        return 0;
    }

    /// Writes all of `data` before the deadline; false on any failure.
    bool write_all(std::string_view data) {
        while (!data.empty()) {
            error_code ec;
            auto n = write_some(boost::asio::buffer(data.data(), data.size()), ec);
            if (ec) return false;
            data.remove_prefix(n);
        }
        return true;
    }

    /// Half-closes and reads (discarding) what the peer still sends, for
    /// up to a second or 64 KiB, so an error response sent before the
    /// request was read whole is not destroyed by a reset.
    void linger() {
        try {
            s_.shutdown(SHUT_WR);
            char sink[4096];
            const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
            for (std::size_t total = 0; total < 64 * 1024;) {
                auto left = until - std::chrono::steady_clock::now();
                if (left <= std::chrono::nanoseconds::zero()) break;
                std::size_t n = s_.read_some(sink, sizeof sink, left);
                if (n == 0) break;
                total += n;
            }
        } catch (const std::system_error&) {
        }
    }

  private:
    template <class F>
    std::size_t io(error_code& ec, F&& f) {
        // Past the deadline nothing more is read or written, even when it
        // would not block (a peer trickling bytes that are always there
        // must still time out). Coarse: at most a tick late.
        if (deadline_ && coarse_now() >= *deadline_) {
            ec = boost::beast::error::timeout;
            return 0;
        }
        std::error_code e;
        const std::size_t n = f(e);
        if (e)
            ec = e == std::errc::timed_out
                     ? error_code(boost::beast::error::timeout)
                     : error_code(e.value(), boost::system::generic_category());
        return n;
    }

    tcp_stream& s_;
    std::optional<time_point> deadline_;
};

/// Beast's WebSocket teardown over an actor stream (found by ADL; a TLS
/// stream's teardown ends in it): half-close and drain, as a closing HTTP
/// connection does.
inline void teardown(boost::beast::role_type, actor_stream& s, error_code& ec) {
    ec = {};
    s.linger();
}

/// What a WebSocket session (websocket_session.hpp) needs of its stream
/// beyond the connection loop's contract: the arm that says a read would
/// not wait, whether the stream holds read bytes of its own (TLS), and a
/// read that does not wait. This default (memory streams: the fuzzer, the
/// white-box tests) has no arm and reads as usual: such a stream never
/// waits.
template <class Stream>
struct ws_stream_traits {
    static smarm::detail::select_source* readable(Stream&) noexcept { return nullptr; }
    static bool buffered(Stream&) noexcept { return false; }
    static std::size_t read_now(Stream& s, void* p, std::size_t n, error_code& ec) {
        return s.read_some(boost::asio::buffer(p, n), ec);
    }
};

template <>
struct ws_stream_traits<actor_stream> {
    static smarm::detail::select_source* readable(actor_stream& s) noexcept {
        return &s.socket().readable();
    }
    static bool buffered(actor_stream&) noexcept { return false; }
    static std::size_t read_now(actor_stream& s, void* p, std::size_t n, error_code& ec) {
        return s.read_now(p, n, ec);
    }
};

}  // namespace smarm::http::internal
