#pragma once
// One upgraded connection: Beast's websocket::stream over a frame gate over
// the connection's stream, serving the handler in the connection actor.
//
// Ownership: the connection actor makes every read and write (the handler's
// recv/send/close, the pongs, the keep-alive pings), so no two operations on
// Beast's stream ever overlap; nothing else holds the session.
//
// The gate (ws_gate) is Beast's next layer. It keeps bytes read from the
// socket in a buffer of its own and hands Beast at most the rest of the
// frame Beast is reading (it parses each frame's length from its head), so
// when Beast returns a message, the bytes after it are still in the gate.
// That is what lets the session know, without asking Beast, whether a
// message is waiting: the gate holds bytes, or the socket is readable. Two
// consequences, both relied on:
// - Between messages the session itself answers pings and swallows pongs
//   (well-formed ones, whole in the gate: FIN, no RSV bit, masked, <= 125
//   bytes). Beast sees only data frames, closes and malformed control
//   frames (which it fails with the right code). So Beast never waits for a
//   message: every Beast read starts on a head the gate already holds, and
//   its waits are inside one message, bounded by message_timeout. A wait for
//   the next message is the session's select (socket, drain notice, the
//   handler's arms, the ping/idle timer), never a Beast read that would end
//   the stream on a timeout.
// - Inside a message (between fragments) Beast answers pings itself.
// - The common message skips Beast (it was ~40% of an echo's instructions):
//   one whole data frame in the gate, unfragmented, no RSV bit, masked, its
//   length in the shortest form and within max_message, and for a text one
//   valid UTF-8 (checked with Beast's own checker) is unmasked and taken by
//   the session (take_whole). Anything else, an invalid text included, is
//   left where it is for Beast, which fails it with its exact close code.
//   Beast is between messages then, so skipping one is invisible to it.
//   Writes without permessage-deflate build the server's frame (unmasked,
//   one frame per message, as Beast's with auto_fragment off) and go out
//   through the gate, head and payload in one send.
//
// Drain: a session opens the connection's ws_notice_slot (under its lock),
// then reads `draining` (seq_cst); server::stop stores draining (seq_cst)
// and then posts `drain` to every slot (under each slot's lock). Either the
// slot was open when the stop locked it (the notice is pending) or the
// session locked it after the stop did and so reads draining as true: no
// socket misses the 1001.
//
// Ping and idle limits: a session the server watches arms no timer per
// wait (that was a timer-heap insert and cancel per message, as it was per
// request for HTTP): it stores its next limit in the slot's `due` and the
// server's reaper (conn_registry.cpp) sends it a tick once that has
// passed, so a ping or an idle close is up to one reaper period late (at
// most 1 s). Unwatched sessions (tests without a server) select with the
// limit as a deadline.

#include <smarm/http/message.hpp>
#include <smarm/http/websocket.hpp>
#include <smarm/pid.hpp>
#include <smarm/runtime.hpp>
#include <smarm/select.hpp>

#include <smarm/detail/spinlock.hpp>
#include <smarm/detail/wait.hpp>

#include <boost/asio/buffer.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/role.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/websocket/detail/utf8_checker.hpp>
#include <boost/beast/websocket/stream.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "stream.hpp"

namespace smarm::http::internal {

namespace beast_ws = boost::beast::websocket;

/// A WebSocket's notices (conn_watch holds one): the server's stop posts
/// `drain`, the reaper `tick` once `due` has passed. A select arm of its
/// own (no channel: one lock on the session's own stack, nothing to
/// allocate), ready while a notice is pending.
class ws_notice_slot final : public smarm::detail::select_source {
  public:
    enum : std::uint8_t { drain = 1, tick = 2 };
    /// When the session next wants a tick (steady_clock ns since its
    /// epoch; max: none): its ping or idle limit. Stored by the session
    /// before it parks, exchanged to max by the reaper that posts the tick.
    /// Relaxed both ways: a tick read late is one reaper period late, and
    /// the session re-reads the clock when it wakes.
    std::atomic<std::int64_t> due{std::numeric_limits<std::int64_t>::max()};

    /// The notifiers' side: `what` is pending (if a session is open) and
    /// the session parked on the arm, if any, is woken.
    void post(std::uint8_t what) noexcept {
        pid waiter;
        std::uint32_t epoch = 0;
        {
            std::lock_guard g(mu_);
            if (!open_) return;
            pending_ |= what;
            waiter = std::exchange(waiter_, pid{});
            epoch = epoch_;
        }
        if (waiter.valid()) smarm::detail::unpark_at(waiter, epoch);
    }
    /// The session's side: notices are taken from open() to close().
    void open() noexcept {
        std::lock_guard g(mu_);
        open_ = true;
    }
    void close() noexcept {
        std::lock_guard g(mu_);
        open_ = false;
        pending_ = 0;
        waiter_ = pid{};
    }
    /// The pending notices, cleared.
    std::uint8_t take() noexcept {
        std::lock_guard g(mu_);
        return std::exchange(pending_, std::uint8_t{0});
    }
    bool ready_or_register(pid self, std::uint32_t epoch) override {
        std::lock_guard g(mu_);
        if (pending_ != 0) return true;
        waiter_ = self;
        epoch_ = epoch;
        return false;
    }

  private:
    smarm::detail::spinlock mu_;
    bool open_ = false;         // guarded by mu_
    std::uint8_t pending_ = 0;  // guarded by mu_
    pid waiter_;                // guarded by mu_ (a stale one is inert: its epoch)
    std::uint32_t epoch_ = 0;   // guarded by mu_
};

/// The io_context Beast's stream asks its next layer for. Never run: every
/// operation here is synchronous (it parks the actor).
boost::asio::io_context& ws_unused_context() noexcept;

/// A frame's head as it sits at the front of the gate's buffer.
struct ws_frame_head {
    std::size_t size = 0;       ///< bytes of the head (2..14)
    std::uint64_t payload = 0;  ///< payload length as declared
    std::uint8_t b0 = 0, b1 = 0;
};

/// The head at `p[0..n)`, if it is there whole.
inline std::optional<ws_frame_head> parse_frame_head(const unsigned char* p,
                                                     std::size_t n) noexcept {
    if (n < 2) return std::nullopt;
    ws_frame_head h{2, static_cast<std::uint64_t>(p[1] & 0x7f), p[0], p[1]};
    const std::size_t ext = h.payload == 126 ? 2 : h.payload == 127 ? 8 : 0;
    h.size += ext + ((p[1] & 0x80) ? 4 : 0);
    if (n < h.size) return std::nullopt;
    if (ext != 0) {
        h.payload = 0;
        for (std::size_t i = 0; i < ext; ++i)
            h.payload = (h.payload << 8) | p[2 + i];
    }
    return h;
}

/// Beast's next layer (see the header comment).
template <class Stream>
class ws_gate : public throwing_io<ws_gate<Stream>> {
  public:
    using executor_type = boost::asio::io_context::executor_type;
    using throwing_io<ws_gate>::read_some;
    using throwing_io<ws_gate>::write_some;

    /// `early`: bytes the HTTP reader took past the upgrade request.
    ws_gate(Stream& s, std::string_view early) : s_(s) {
        if (!early.empty()) {
            reserve(early.size());
            std::memcpy(buf_.get(), early.data(), early.size());
            end_ = early.size();
        }
    }
    executor_type get_executor() noexcept { return ws_unused_context().get_executor(); }
    Stream& stream() noexcept { return s_; }

    void set_read_deadline(std::optional<time_point> t) noexcept { rd_deadline_ = t; }
    void set_write_deadline(std::optional<time_point> t) noexcept { wr_deadline_ = t; }

    // The session's side.
    std::size_t buffered() const noexcept { return end_ - begin_; }
    const unsigned char* data() const noexcept { return buf_.get() + begin_; }
    bool at_boundary() const noexcept { return frame_left_ == 0; }
    std::optional<ws_frame_head> head() const noexcept {
        return parse_frame_head(data(), buffered());
    }
    void consume(std::size_t n) noexcept {
        begin_ += n;
        if (begin_ == end_) begin_ = end_ = 0;
    }
    /// Gives the buffers back while they are empty (before an idle wait:
    /// an idle socket holds none; the next fill allocates again, which
    /// keeps the few hot chunks in cache: a buffer kept per socket cost
    /// 1,024 sockets ~3% CPU per message against the allocation per message).
    void release_if_empty() noexcept {
        if (buffered() == 0 && buf_) {
            buf_.reset();
            cap_ = begin_ = end_ = 0;
        }
        if (out_.capacity() > 4096) std::string().swap(out_);
    }
    /// Reads more into the buffer: `now` without waiting (would_block when
    /// nothing is there), else by the read deadline. False on any error.
    bool fill(bool now, error_code& ec) {
        reserve(buffered() + 1);
        const std::size_t room = cap_ - end_;
        s_.set_deadline(rd_deadline_);
        const std::size_t n =
            now ? ws_stream_traits<Stream>::read_now(s_, buf_.get() + end_, room, ec)
                : s_.read_some(boost::asio::buffer(buf_.get() + end_, room), ec);
        if (!ec && n == 0) ec = boost::asio::error::eof;
        // A read that filled the buffer: this socket's messages are larger
        // than the small buffer, so allocate for a 4 KiB one from now on.
        if (n == room) capacity_ = large_capacity;
        end_ += n;
        return !ec;
    }

    // Beast's side: SyncReadStream / SyncWriteStream.
    template <class Buffers>
    std::size_t read_some(const Buffers& bufs, error_code& ec) {
        ec = {};
        boost::asio::mutable_buffer b;
        for (auto it = boost::asio::buffer_sequence_begin(bufs);
             it != boost::asio::buffer_sequence_end(bufs) && b.size() == 0; ++it)
            b = *it;
        if (b.size() == 0) return 0;
        if (frame_left_ == 0) {
            // A new frame: its head must be here whole to know its end.
            std::optional<ws_frame_head> h;
            while (!(h = head()))
                if (!fill(false, ec)) return 0;
            frame_left_ = h->payload > (std::uint64_t{1} << 62) ? std::uint64_t{1} << 62
                                                                : h->size + h->payload;
        }
        const std::size_t want =
            static_cast<std::size_t>(std::min<std::uint64_t>(b.size(), frame_left_));
        std::size_t n;
        if (buffered() > 0) {
            n = std::min(want, buffered());
            std::memcpy(b.data(), data(), n);
            consume(n);
        } else {
            // Nothing buffered: straight into Beast's buffer, never past the
            // frame's end.
            s_.set_deadline(rd_deadline_);
            n = s_.read_some(boost::asio::buffer(b.data(), want), ec);
            if (ec) return 0;
            if (n == 0) {
                ec = boost::asio::error::eof;
                return 0;
            }
        }
        frame_left_ -= n;
        return n;
    }
    template <class Buffers>
    std::size_t write_some(const Buffers& bufs, error_code& ec) {
        s_.set_deadline(wr_deadline_);
        // Beast writes a frame as its head and its payload, two buffers,
        // and the stream sends one buffer per call: a small head goes out
        // together with up to 64 KiB of what follows (one send per message,
        // not two: the echo's syscalls were 2 sends per receive).
        auto it = boost::asio::buffer_sequence_begin(bufs);
        const auto end = boost::asio::buffer_sequence_end(bufs);
        while (it != end && boost::asio::const_buffer(*it).size() == 0)
            ++it;
        if (it == end) return 0;
        const boost::asio::const_buffer first = *it;
        auto next = std::next(it);
        if (first.size() >= 1024 || next == end) return s_.write_some(bufs, ec);
        constexpr std::size_t coalesce_max = 64 * 1024;
        out_.clear();
        for (; it != end && out_.size() < coalesce_max; ++it) {
            const boost::asio::const_buffer b = *it;
            out_.append(static_cast<const char*>(b.data()),
                        std::min(b.size(), coalesce_max - out_.size()));
        }
        return s_.write_some(boost::asio::buffer(out_.data(), out_.size()), ec);
    }

  private:
    /// The buffer a socket starts with: small enough for malloc's
    /// per-thread cache (a 4 KiB one went through malloc's bins, ~370
    /// instructions a message to allocate and free again, as the buffer is
    /// given back before each idle wait). A read that fills it moves the
    /// socket to the large one: a 4 KiB message and its head arrive in one
    /// read (with 2 KiB, the rest of one took a second recv straight into
    /// Beast's buffer).
    static constexpr std::size_t small_capacity = 1024;
    static constexpr std::size_t large_capacity = 4096 + 16;
    /// Room for `need` buffered bytes: the unread ones moved to the front,
    /// or a larger buffer.
    void reserve(std::size_t need) {
        if (buf_ && need <= cap_) {
            if (end_ + (need - buffered()) > cap_) {
                std::memmove(buf_.get(), data(), buffered());
                end_ -= begin_;
                begin_ = 0;
            }
            return;
        }
        const std::size_t cap = std::max(capacity_, need);
        auto next = std::make_unique_for_overwrite<unsigned char[]>(cap);
        if (buffered() > 0) std::memcpy(next.get(), data(), buffered());
        end_ = buffered();
        begin_ = 0;
        buf_ = std::move(next);
        cap_ = cap;
    }

    Stream& s_;
    std::unique_ptr<unsigned char[]> buf_;
    std::size_t cap_ = 0, begin_ = 0, end_ = 0;
    std::size_t capacity_ = small_capacity;  ///< what the next buffer is allocated with
    std::uint64_t frame_left_ = 0;  ///< bytes of the frame Beast reads not yet handed to it
    std::string out_;               ///< a write's head and payload, coalesced
    std::optional<time_point> rd_deadline_, wr_deadline_;
};

/// Beast's teardown for the gate (found by ADL): half-close and drain what
/// the peer still sends, as a closing HTTP connection does.
template <class Stream>
void teardown(boost::beast::role_type, ws_gate<Stream>& g, error_code& ec) {
    ec = {};
    g.stream().linger();
}

/// One socket (see the header comment).
template <class Stream>
class ws_session final : public websocket {
  public:
    /// `notice`: the connection's notice slot (null: no drain and a timer
    /// per wait, tests); `draining`: the server's flag.
    ws_session(Stream& s, std::string_view early, const http::request& req,
               const websocket_options& opts, std::string_view server_name, ws_notice_slot* notice,
               const std::atomic<bool>* draining)
        : websocket(req),
          s_(s),
          ws_(s, early),
          opts_(opts),
          notice_(notice),
          draining_(draining),
          src_(*this) {
        ws_.read_message_max(opts.max_message);
        ws_.auto_fragment(false);
        std::string name(server_name);
        ws_.set_option(beast_ws::stream_base::decorator([name](beast_ws::response_type& res) {
            if (name.empty())
                res.erase(boost::beast::http::field::server);
            else
                res.set(boost::beast::http::field::server, name);
        }));
        if (opts.deflate) {
            beast_ws::permessage_deflate pmd;
            pmd.server_enable = true;
            ws_.set_option(pmd);
        }
    }
    ~ws_session() {
        if (notice_ != nullptr) notice_->close();
    }

    /// The handshake: writes the 101 (false: the socket is unusable).
    bool accept(const boost::beast::http::request<boost::beast::http::empty_body>& up) {
        ws_.next_layer().set_write_deadline(deadline_in(opts_.message_timeout));
        error_code ec;
        ws_.accept(up, ec);
        if (ec) return false;
        open_ = true;
        last_rx_ = last_ping_ = coarse_now();
        if (notice_ != nullptr) notice_->open();
        return true;
    }

    /// Runs the handler; a throw's text goes to `error` (the socket is
    /// left as the handler left it: finish() closes it).
    void run(const websocket_handler& h, std::string& error) {
        try {
            h(*this);
        } catch (const smarm::stopped&) {
            throw;
        } catch (const std::exception& e) {
            error = e.what();
        } catch (...) {
            error = "a non-standard exception";
        }
    }
    /// Closes what the handler left open: 1011 after a throw (`error`), else
    /// 1000. Separate from run() so the caller counts a failure before the
    /// peer can see its close.
    void finish(const std::string& error) {
        if (open_) do_close(error.empty() ? 1000 : 1011, error.empty() ? "" : "internal error");
    }

    detail::select_source& readable() noexcept override { return src_; }
    bool is_open() const noexcept override { return open_; }

  private:
    enum class wait_end { frame, none, arm, closed };

    std::optional<message> read(std::span<const select_arm> arms, std::size_t* arm,
                                bool block) override {
        if (!open_) return closed_;
        switch (await_frame(arms, arm, block)) {
            case wait_end::none:
            case wait_end::arm:
                return std::nullopt;
            case wait_end::closed:
                return closed_;
            case wait_end::frame:
                break;
        }
        message m;
        if (take_whole(m)) return m;
        const time_point limit = deadline_in(opts_.message_timeout);
        ws_.next_layer().set_read_deadline(limit);
        ws_.next_layer().set_write_deadline(limit);
        // Beast's read_message_max must be what fails a message too large
        // (1009): the buffer's own maximum (whose overflow Beast turns into
        // a close without a code) sits past it by more than one read, which
        // is as far as an inflated message gets before Beast's check. The
        // maximum still bounds what Beast prepares for a compressed frame
        // whose declared length is absurd (the fuzzer's first find: a
        // 2^56-byte allocation; await_frame fails those with 1009 first).
        auto buf = boost::asio::dynamic_buffer(m.data, 2 * opts_.max_message + 64 * 1024);
        error_code ec;
        ws_.read(buf, ec);
        last_rx_ = coarse_now();
        if (ec) return end(ec);
        m.type = ws_.got_text() ? kind::text : kind::binary;
        return m;
    }

    bool write(std::string_view data, bool text) override {
        if (!open_) return false;
        auto& g = ws_.next_layer();
        g.set_write_deadline(deadline_in(opts_.message_timeout));
        error_code ec;
        if (!opts_.deflate) {
            // The frame Beast would write (header comment), built on the
            // stack and sent as one buffer when small; else head and
            // payload, which the gate coalesces.
            unsigned char frame[10 + small_message];
            const std::size_t n = server_frame_head(frame, data.size(), text);
            if (data.size() <= small_message) {
                std::memcpy(frame + n, data.data(), data.size());
                boost::asio::write(g, boost::asio::buffer(frame, n + data.size()), ec);
            } else {
                const std::array<boost::asio::const_buffer, 2> parts{
                    boost::asio::buffer(frame, n), boost::asio::buffer(data.data(), data.size())};
                boost::asio::write(g, parts, ec);
            }
        } else {
            ws_.text(text);
            ws_.write(boost::asio::buffer(data.data(), data.size()), ec);
        }
        if (ec) {
            (void)end(ec);
            return false;
        }
        return true;
    }

    void do_close(std::uint16_t code, std::string_view reason) override {
        if (!open_) return;
        open_ = false;
        auto& g = ws_.next_layer();
        g.set_read_deadline(deadline_in(opts_.close_timeout));
        g.set_write_deadline(deadline_in(opts_.close_timeout));
        beast_ws::close_reason cr(static_cast<beast_ws::close_code>(code),
                                  boost::beast::string_view(reason.data(), reason.size()));
        error_code ec;
        ws_.close(cr, ec);
        closed_ = message{kind::close, std::string(reason), 1006};
        if (!ec) {  // the peer's close came back
            const auto& r = ws_.reason();
            closed_.code = r.code == beast_ws::close_code::none ? 1005 : r.code;
            closed_.data.assign(r.reason.data(), r.reason.size());
        }
    }

    /// The socket ended inside Beast: the peer's close, or a failure (Beast
    /// has already sent the close code a protocol error calls for).
    const message& end(const error_code& ec) {
        open_ = false;
        if (ec == beast_ws::error::closed) {
            const auto& r = ws_.reason();
            closed_ =
                message{kind::close, std::string(r.reason.data(), r.reason.size()),
                        r.code == beast_ws::close_code::none ? std::uint16_t{1005}
                                                             : static_cast<std::uint16_t>(r.code)};
        } else {
            closed_ = message{kind::close, "connection failed: " + ec.message(), 1006};
        }
        return closed_;
    }

    /// Closes because of us (going away, idle): our close, the peer's reply
    /// awaited; the handler then sees a close with `code`.
    void go_away(std::uint16_t code, std::string_view why) {
        do_close(code, why);
        closed_.code = code;
        closed_.data = why;
    }

    /// The common message without Beast (header comment): true when the
    /// frame at the gate's front was one and is now `m`; false leaves the
    /// gate as it was, for Beast.
    bool take_whole(message& m) {
        auto& g = ws_.next_layer();
        const std::optional<ws_frame_head> h = g.head();
        if (!h) return false;
        const unsigned op = h->b0 & 0x0f;
        const unsigned len7 = h->b1 & 0x7f;
        if (!final_plain_masked(*h) || (op != 0x1 && op != 0x2) ||
            (len7 == 126 && h->payload < 126) || (len7 == 127 && h->payload <= 0xffff) ||
            h->payload > opts_.max_message || g.buffered() - h->size < h->payload)
            return false;
        const auto n = static_cast<std::size_t>(h->payload);
        m.data.resize(n);
        unmask(reinterpret_cast<unsigned char*>(m.data.data()), g.data() + h->size, n,
               g.data() + h->size - 4);
        if (op == 0x1 && !beast_ws::detail::check_utf8(m.data.data(), n)) {
            m.data.clear();  // Beast reads into it from empty
            return false;
        }
        g.consume(h->size + n);
        m.type = op == 0x1 ? kind::text : kind::binary;
        return true;
    }

    /// `to[0..n)` = `from[0..n)` unmasked with the frame's 4-byte key.
    static void unmask(unsigned char* to, const unsigned char* from, std::size_t n,
                       const unsigned char* key) noexcept {
        std::uint32_t k4;
        std::memcpy(&k4, key, 4);
        const std::uint64_t k8 = (std::uint64_t{k4} << 32) | k4;
        std::size_t i = 0;
        for (; i + 8 <= n; i += 8) {
            std::uint64_t w;
            std::memcpy(&w, from + i, 8);
            w ^= k8;
            std::memcpy(to + i, &w, 8);
        }
        for (; i < n; ++i)
            to[i] = from[i] ^ key[i % 4];
    }

    /// A message written from a frame built on the stack (beyond it, the
    /// gate coalesces head and payload).
    static constexpr std::size_t small_message = 512;

    /// A server's head for one whole data frame of `n` bytes (FIN, no
    /// mask, the shortest length form) into `out` (10 bytes); its size.
    static std::size_t server_frame_head(unsigned char* out, std::uint64_t n, bool text) noexcept {
        out[0] = static_cast<unsigned char>(0x80 | (text ? 0x1 : 0x2));
        if (n < 126) {
            out[1] = static_cast<unsigned char>(n);
            return 2;
        }
        const std::size_t ext = n <= 0xffff ? 2 : 8;
        out[1] = ext == 2 ? 126 : 127;
        for (std::size_t i = 0; i < ext; ++i)
            out[2 + i] = static_cast<unsigned char>(n >> (8 * (ext - 1 - i)));
        return 2 + ext;
    }

    /// FIN set, no RSV bit, masked: what both of the session's own paths
    /// (take_whole, plain_control) ask of a frame before its opcode.
    static bool final_plain_masked(const ws_frame_head& h) noexcept {
        return (h.b0 & 0xf0) == 0x80 && (h.b1 & 0x80) != 0;
    }

    /// A well-formed ping or pong: what the session answers itself.
    static bool plain_control(const ws_frame_head& h) noexcept {
        const unsigned op = h.b0 & 0x0f;
        return final_plain_masked(h) && (op == 0x9 || op == 0xa) && h.payload <= 125;
    }

    /// A whole close frame whose code no endpoint may send: 5000 and above
    /// (Beast accepts those; RFC 6455 7.4 leaves them undefined, so they
    /// fail the connection with 1002 as Autobahn's 7.9 cases expect).
    bool bad_close_code(const ws_frame_head& h) const noexcept {
        const auto& g = ws_.next_layer();
        if ((h.b0 & 0x0f) != 0x8 || !(h.b1 & 0x80) || h.payload < 2 || g.buffered() < h.size + 2)
            return false;
        const unsigned char* key = g.data() + h.size - 4;
        const unsigned code = ((g.data()[h.size] ^ key[0]) << 8) | (g.data()[h.size + 1] ^ key[1]);
        return code >= 5000;
    }

    /// Answers the whole ping (a pong with its payload) or swallows the pong
    /// at the gate's front; false when the pong could not be written.
    bool answer_control(const ws_frame_head& h) {
        auto& g = ws_.next_layer();
        const unsigned char* key = g.data() + h.size - 4;
        const bool ping = (h.b0 & 0x0f) == 0x9;
        beast_ws::ping_data payload;
        for (std::size_t i = 0; i < h.payload; ++i)
            payload.push_back(static_cast<char>(g.data()[h.size + i] ^ key[i % 4]));
        g.consume(h.size + static_cast<std::size_t>(h.payload));
        if (!ping) return true;
        g.set_write_deadline(deadline_in(opts_.message_timeout));
        error_code ec;
        ws_.pong(payload, ec);
        if (ec) {
            (void)end(ec);
            return false;
        }
        return true;
    }

    /// Reads into the gate; false (the socket closed) on an error but
    /// would_block.
    bool fill(bool now) {
        error_code ec;
        auto& g = ws_.next_layer();
        const std::size_t before = g.buffered();
        if (!g.fill(now, ec) && !(now && ec == boost::asio::error::would_block)) {
            (void)end(ec);
            return false;
        }
        if (g.buffered() != before) last_rx_ = coarse_now();
        return true;
    }

    /// Parks until a data, close or malformed frame's head is in the gate
    /// (frame), answering pings meanwhile; or an arm fires (arm, *arm set);
    /// or, not blocking, nothing has begun (none); or the socket ends.
    wait_end await_frame(std::span<const select_arm> arms, std::size_t* arm, bool block) {
        auto& g = ws_.next_layer();
        for (;;) {
            if (!open_) return wait_end::closed;
            while (auto h = g.head()) {
                if (!plain_control(*h)) {
                    if (bad_close_code(*h)) {
                        go_away(1002, "invalid close code");
                        return wait_end::closed;
                    }
                    // A data frame longer than a whole message may be: 1009
                    // now (Beast checks an uncompressed one itself, but a
                    // compressed one only as it inflates).
                    if ((h->b0 & 0x0f) <= 0x2 && h->payload > opts_.max_message) {
                        go_away(1009, "message too big");
                        return wait_end::closed;
                    }
                    return wait_end::frame;
                }
                if (g.buffered() < h->size + h->payload) break;  // its payload is on its way
                if (!answer_control(*h)) return wait_end::closed;
            }
            if (g.buffered() > 0 || ws_stream_traits<Stream>::buffered(s_)) {
                // A frame has begun: its rest within message_timeout.
                g.set_read_deadline(deadline_in(opts_.message_timeout));
                if (!fill(false)) return wait_end::closed;
                continue;
            }
            if (!block) {
                const std::size_t before = g.buffered();
                if (!fill(true)) return wait_end::closed;
                if (g.buffered() == before) return wait_end::none;
                continue;
            }
            smarm::detail::select_source* sock = ws_stream_traits<Stream>::readable(s_);
            if (sock == nullptr && arms.empty()) {  // a memory stream: it never waits
                g.set_read_deadline(std::nullopt);
                if (!fill(false)) return wait_end::closed;
                continue;
            }
            if (notice_ != nullptr && draining_ != nullptr &&
                draining_->load(std::memory_order_seq_cst)) {
                go_away(1001, "going away");
                return wait_end::closed;
            }
            g.release_if_empty();
            arms_.clear();
            if (notice_ != nullptr) arms_.emplace_back(*notice_);
            const std::size_t first_socket = arms_.size();
            if (sock != nullptr) arms_.emplace_back(*sock);
            const std::size_t first_user = arms_.size();
            arms_.insert(arms_.end(), arms.begin(), arms.end());
            // With the coarse clock's slack, as the checks below (never early).
            std::optional<time_point> due;
            if (opts_.ping_interval.count() > 0)
                due = std::max(last_rx_, last_ping_) + opts_.ping_interval + coarse_slack();
            if (opts_.idle_timeout.count() > 0)
                due = std::min(due.value_or(time_point::max()),
                               last_rx_ + opts_.idle_timeout + coarse_slack());
            std::optional<std::size_t> fired;
            if (notice_ != nullptr) {  // the reaper ticks (header comment)
                notice_->due.store(due ? due->time_since_epoch().count()
                                       : std::numeric_limits<std::int64_t>::max(),
                                   std::memory_order_relaxed);
                fired = smarm::select_until(arms_, std::nullopt);
                if (*fired == 0) {
                    const std::uint8_t what = notice_->take();
                    if (!(what & ws_notice_slot::drain) &&
                        (draining_ == nullptr || !draining_->load(std::memory_order_seq_cst)))
                        fired.reset();  // a tick: the limits below
                }
            } else {
                fired = smarm::select_until(arms_, due);
            }
            if (!fired) {
                const auto now = coarse_now();
                const auto slack = coarse_slack();  // so neither limit fires early
                if (opts_.idle_timeout.count() > 0 &&
                    now >= last_rx_ + opts_.idle_timeout + slack) {
                    go_away(1001, "idle timeout");
                    return wait_end::closed;
                }
                if (opts_.ping_interval.count() > 0 &&
                    now >= std::max(last_rx_, last_ping_) + opts_.ping_interval + slack) {
                    last_ping_ = now;
                    g.set_write_deadline(deadline_in(opts_.message_timeout));
                    error_code ec;
                    ws_.ping({}, ec);
                    if (ec) {
                        (void)end(ec);
                        return wait_end::closed;
                    }
                }
                continue;
            }
            if (*fired >= first_user) {
                *arm = *fired - first_user;
                return wait_end::arm;
            }
            if (*fired >= first_socket) {
                if (!fill(true)) return wait_end::closed;
                continue;
            }
            go_away(1001, "going away");
            return wait_end::closed;
        }
    }

    /// readable(): the gate or the stream holds bytes, or the socket is
    /// readable (or the session ended: try_recv answers at once).
    class source final : public smarm::detail::select_source {
      public:
        explicit source(ws_session& s) noexcept : s_(s) {}
        bool ready_or_register(pid self, std::uint32_t epoch) override {
            if (!s_.open_ || s_.ws_.next_layer().buffered() > 0 ||
                ws_stream_traits<Stream>::buffered(s_.s_))
                return true;
            auto* sock = ws_stream_traits<Stream>::readable(s_.s_);
            return sock == nullptr || sock->ready_or_register(self, epoch);
        }
        void unregister(pid self, std::uint32_t epoch) noexcept override {
            if (auto* sock = ws_stream_traits<Stream>::readable(s_.s_))
                sock->unregister(self, epoch);
        }

      private:
        ws_session& s_;
    };

    Stream& s_;
    beast_ws::stream<ws_gate<Stream>> ws_;
    const websocket_options& opts_;
    ws_notice_slot* notice_;
    const std::atomic<bool>* draining_;
    source src_;
    bool open_ = false;
    message closed_{kind::close, "not open", 1006};
    time_point last_rx_{}, last_ping_{};
    std::vector<select_arm> arms_;
};

}  // namespace smarm::http::internal
