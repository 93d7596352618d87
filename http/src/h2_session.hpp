#pragma once
// One HTTP/2 connection's protocol state (RFC 9113, through libnghttp2):
// the nghttp2 server session, the streams, and the stream actors. The
// socket loop around it is h2_connection.hpp (a template over the stream,
// so the fuzzer drives it from memory); this part is the same for every
// stream type and keeps nghttp2 out of the headers.
//
// Ownership: the connection actor owns the session, the socket and every
// stream record; nghttp2 is only ever called from that actor. Each
// request, once whole, runs in a stream actor of its own (run_handler, as
// HTTP/1.1 runs it in the connection actor), so a slow handler delays no
// other stream. Why an actor per stream, not a pool: a handler may park
// for as long as it likes (a registry call, a sleep, a database); a pool
// bounded below max_concurrent_streams would make one stream wait for
// another's, and an actor costs one spawn (~1 us here) that the pool would
// save only while it has idle workers.
//
// Protocol between a stream actor and its connection (h2_event over one
// channel, FIFO per sender): `head` (the response; for a file or chunked
// body with the sender of the actor's credit channel), then for streamed
// bodies `piece`s and an `end`. A streamed body is paced by credit: after
// each piece the actor waits on its credit channel, and the connection
// grants one credit when it has handed that piece to nghttp2 whole, so a
// connection holds at most one piece per stream however slowly the peer
// reads (flow control decides when nghttp2 takes bytes). The actor learns
// the stream is gone when its credit channel closes (the connection drops
// the sender when the stream closes), and a handler still running when its
// stream is reset is stopped (smarm::request_stop). Stream actors are not
// joined: they hold conn_ctx::owner, so the server's shared state outlives
// them, and an event for a stream already closed is dropped.
//
// Request bodies: a stream's body is read whole (up to body_limit) before
// its handler runs, as on HTTP/1.1, and up to max_concurrent_streams
// arrive at once, so the connection bounds what they hold together:
// windows are given back by hand (no_auto_window_update). The connection's
// window always reopens; a stream's reopens as its bytes arrive while the
// bodies held stay within 4 x body_limit, and otherwise waits until a
// stream closes and frees its body. The oldest stream still arriving is
// always given its window back, so one request always completes (no
// stall until body_timeout): a connection holds at most the budget, one
// body_limit and a stream window per stream (64 KiB).
//
// A route that streams its body (http::streamed_body) is routed when the
// request's HEADERS end without END_STREAM, and its stream actor starts
// then: the connection sends it each DATA payload as an h2_body_piece over
// a channel of its own (closed at END_STREAM; a piece with an error status
// ends it past the route's limit), and the actor's read_body reports each
// piece it takes (`consumed`), which is when the stream's window reopens.
// So a streamed body holds at most one stream window at a time; it does
// not count against the budget above, and body_timeout bounds each wait of
// the actor for a piece (the connection does not time it).
//
// No observation point inside nghttp2: receive() and output() run their
// callbacks under smarm::no_preempt, so smarm::stopped never unwinds
// through nghttp2's C frames (the callbacks spawn and send, both
// observation points); every callback catches what it may throw and fails
// the session instead.

#include <smarm/channel.hpp>
#include <smarm/http/message.hpp>
#include <smarm/runtime.hpp>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

// Included at the end of connection.hpp (it needs conn_ctx and
// profile_hooks from there): include connection.hpp, not this.

struct nghttp2_session;

namespace smarm::http::internal {

/// A piece of a streamed request body (see the header comment): `data`,
/// or an `error` status that ends the body (body_error).
struct h2_body_piece {
    std::string data;
    unsigned error = 0;
};

/// What a stream actor sends its connection (see the header comment).
struct h2_event {
    enum class kind : std::uint8_t { head, piece, end, consumed };
    kind what = kind::head;
    std::int32_t stream = 0;
    /// head: the response (its body for text; streamed bodies follow).
    std::optional<response> res;
    /// head of a streamed body: its Content-Length if known (a file's).
    std::optional<std::uint64_t> length;
    /// head of a streamed body: where credits go (see the header comment).
    smarm::sender<char> credit;
    bool streamed = false;                       ///< head: pieces and an end follow
    std::string route;                           ///< head: the pattern, for on_request
    const profile_hooks::route* hook = nullptr;  ///< head: the route's causal hooks
    std::string data;                            ///< piece: the bytes
    bool failed = false;                         ///< end: the body failed midway
    std::size_t consumed = 0;                    ///< consumed: request body bytes taken
};

/// Events travel boxed: moved by value through the channel (send, queue,
/// receive) an h2_event and its response were moved ~12 times per request
/// (callgrind); a box is one allocation and moves as a pointer.
using h2_event_ptr = std::unique_ptr<h2_event>;

class h2_session {
  public:
    explicit h2_session(conn_ctx& c);
    ~h2_session();
    h2_session(const h2_session&) = delete;
    h2_session& operator=(const h2_session&) = delete;

    /// Feeds bytes read from the peer; false when the session failed (a
    /// GOAWAY may wait in output()).
    bool receive(std::string_view bytes);
    /// Appends what the session has to send, up to about `limit` bytes;
    /// false when the session failed.
    bool output(std::string& out, std::size_t limit);
    /// Neither side has anything left: the connection may close.
    bool done() const;
    /// Applies one event from a stream actor.
    void deliver(h2_event&& ev);
    /// Where stream actors send (the connection selects on it).
    const smarm::receiver<h2_event_ptr>& events() const noexcept { return rx_; }
    /// The peer closed its side: no more input; handlers still running
    /// may finish and their responses be written. A streamed body still
    /// arriving fails at once (400), not after body_timeout.
    void peer_closed();
    /// Handlers (stream actors) still producing.
    std::size_t producing() const noexcept { return producing_; }
    /// Graceful drain: GOAWAY with the last stream id; open streams finish.
    void go_away();
    /// Applies the time limits at `now` (steady ns): resets a stream whose
    /// request did not arrive whole within body_timeout (408) or whose
    /// response made no progress for write_timeout, and says goodbye after
    /// idle_timeout without a stream. Returns the next time it must run.
    std::int64_t expire(std::int64_t now);

  private:
    struct stream;
    struct callbacks;
    stream* find(std::int32_t id);
    stream* open(std::int32_t id);
    /// What a request needs before its handler runs (Host from :authority,
    /// the decoded path); false when it was answered (400) instead.
    bool prepare(stream& st);
    /// Starts the stream's actor on its whole request.
    void dispatch(stream& st);
    /// Routes a request whose body is still to come (only with streamed
    /// routes); a streamed route's actor starts at once, another route is
    /// kept for the actor dispatch() starts (not matched twice). False
    /// when it was answered instead (400, or 413 for a declared length
    /// past the route's limit).
    bool route_early(stream& st);
    /// Spawns the stream's handler actor (`routed`/`body`: a streamed body).
    void spawn_handler(stream& st, std::optional<route_match> routed,
                       std::optional<smarm::receiver<h2_body_piece>> body);
    void answer(stream& st, http::status s);
    void submit(stream& st, response& res, std::optional<std::uint64_t> length);
    void closed(std::int32_t id, std::uint32_t code);
    void granted(stream& st);
    /// A new time limit at `t` (steady ns): expire() runs by then.
    void limit_at(std::int64_t t) noexcept;
    /// The lowest-numbered stream whose request is still arriving.
    stream* oldest_arriving();
    /// Takes a stream's request body out of the connection's count and
    /// reopens windows held back while over budget.
    void unbuffer(stream& st);
    /// Gives windows back: the oldest arriving stream's always, the others'
    /// while the bodies held are under budget.
    void refill();
    /// Whether stream `id` is one of the last ones both sides ended.
    bool ended_recently(std::int32_t id) const noexcept;

    conn_ctx& c_;
    nghttp2_session* s_ = nullptr;
    smarm::sender<h2_event_ptr> tx_;
    smarm::receiver<h2_event_ptr> rx_;
    std::vector<std::unique_ptr<stream>> streams_;  ///< open ones, unordered
    std::vector<std::unique_ptr<stream>> spare_;    ///< closed ones, for reuse
    stream* last_ = nullptr;                        ///< the last found
    std::array<std::int32_t, 16> ended_{};          ///< streams both sides ended, the last 16
    std::size_t ended_next_ = 0;
    std::uint64_t seq_ = 0;
    std::size_t producing_ = 0;
    std::size_t buffered_ = 0;  ///< request body bytes the open streams hold
    std::size_t budget_ = 0;    ///< 4 x body_limit (header comment)
    std::size_t held_ = 0;      ///< streams whose window is held back (unconsumed != 0)
    std::int64_t idle_since_ = 0;  ///< steady ns when the last stream closed
    /// Not later than the earliest time limit (expire() walks at it).
    std::int64_t next_ = 0;
    bool peer_open_ = true;
    bool failed_ = false;
    bool going_away_ = false;
};

}  // namespace smarm::http::internal
