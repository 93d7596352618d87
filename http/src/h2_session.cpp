// The HTTP/2 session: nghttp2's callbacks, the stream records and the
// stream actors (h2_session.hpp has the design and the protocols).

#include "connection.hpp"
#include "body_source.hpp"

#include <smarm/http/router.hpp>

#include <nghttp2/nghttp2.h>

#include <boost/beast/http/verb.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>
#include <limits>
#include <new>
#include <utility>
#include <vector>

namespace smarm::http::internal {

namespace {

using clock = std::chrono::steady_clock;

std::int64_t now_ns() {
    return coarse_now().time_since_epoch().count();
}

/// A limit `d` after a coarse stamp, as nanoseconds: with the coarse
/// clock's slack, so a limit never fires early (stream.hpp).
std::int64_t ns(std::chrono::nanoseconds d) {
    return d.count() > std::numeric_limits<std::int64_t>::max() / 4
               ? std::numeric_limits<std::int64_t>::max() / 2
               : d.count() + coarse_slack().count();
}

/// Header names HTTP/2 forbids (RFC 9113 §8.2.2): a handler's response
/// header of these is not sent.
bool connection_specific(std::string_view lower) {
    return lower == "connection" || lower == "keep-alive" || lower == "proxy-connection" ||
           lower == "transfer-encoding" || lower == "upgrade";
}

/// The value of a content-length field, when it is a number.
std::optional<std::uint64_t> content_length(std::string_view v) {
    std::uint64_t n = 0;
    const auto r = std::from_chars(v.data(), v.data() + v.size(), n);
    if (r.ec != std::errc() || r.ptr != v.data() + v.size()) return std::nullopt;
    return n;
}

/// The piece size a file body is read in.
constexpr std::size_t file_piece = 64 * 1024;

/// Sends a streamed body (the file `fd` of `size` bytes, or `source`'s
/// pieces), each piece after the previous one's credit; false when the
/// stream went away.
bool stream_body(chunk_source& source, int fd, std::uint64_t size, std::int32_t id,
                 const smarm::sender<h2_event_ptr>& tx, const smarm::receiver<char>& credits) {
    auto send_piece = [&](std::string data) {
        auto ev = std::make_unique<h2_event>();
        ev->what = h2_event::kind::piece;
        ev->stream = id;
        ev->data = std::move(data);
        return tx.send(std::move(ev)).ok() && credits.recv().has_value();
    };
    if (fd >= 0) {
        for (std::uint64_t off = 0; off < size;) {
            const std::size_t want =
                static_cast<std::size_t>(std::min<std::uint64_t>(file_piece, size - off));
            std::string chunk(want, '\0');
            long n = smarm::block_on_io(
                [fd, p = chunk.data(), want, off] { return read_file(fd, p, want, off); });
            if (n <= 0) throw std::runtime_error("the file shrank while it was sent");
            chunk.resize(static_cast<std::size_t>(n));
            off += static_cast<std::uint64_t>(n);
            if (!send_piece(std::move(chunk))) return false;
        }
        return true;
    }
    while (auto piece = source()) {
        if (piece->empty()) continue;
        if (!send_piece(std::move(*piece))) return false;
    }
    return true;
}

/// A streamed request body in its stream actor (body_source.hpp): pieces
/// from the connection, each reported taken so the connection reopens the
/// stream's window; each wait within body_timeout.
class h2_body final : public body_source {
  public:
    h2_body(smarm::receiver<h2_body_piece> rx, const smarm::sender<h2_event_ptr>& tx,
            std::int32_t id, std::chrono::nanoseconds timeout)
        : rx_(std::move(rx)), tx_(tx), id_(id), timeout_(timeout) {}

  private:
    bool next(std::string& piece) override {
        auto got = rx_.recv_timeout(timeout_);
        if (got.status == smarm::recv_status::closed) return false;
        if (got.status == smarm::recv_status::timeout)
            fail(http::status::request_timeout, "no request body bytes within body_timeout");
        if (got.value->error != 0) {
            const auto s = static_cast<http::status>(got.value->error);
            fail(s, s == http::status::payload_too_large ? "the request body passed the route's limit"
                                                         : "the peer closed before the body's end");
        }
        piece = std::move(got.value->data);
        auto taken = std::make_unique<h2_event>();
        taken->what = h2_event::kind::consumed;
        taken->stream = id_;
        taken->consumed = piece.size();
        (void)tx_.send(std::move(taken));
        return true;
    }

    smarm::receiver<h2_body_piece> rx_;
    const smarm::sender<h2_event_ptr>& tx_;
    std::int32_t id_;
    std::chrono::nanoseconds timeout_;
};

/// A stream actor's body: the handler, then its response to the
/// connection (and a streamed body, paced by credits). Whatever way it
/// ends, the connection hears that it did: the head of a text body, or an
/// `end` (failed unless the body was sent whole).
/// Its arguments are the spawning closure's captures, taken by reference
/// (each move of a request is ~7 strings).
void run_stream(shared& sh, request& req, std::int32_t id, bool head_only,
                const smarm::sender<h2_event_ptr>& tx, std::optional<route_match>& routed,
                std::optional<smarm::receiver<h2_body_piece>>& body_rx) {
    struct finish {
        const smarm::sender<h2_event_ptr>& tx;
        std::int32_t id;
        bool told = false, failed = true;
        ~finish() {
            if (told) return;
            auto end = std::make_unique<h2_event>();
            end->what = h2_event::kind::end;
            end->stream = id;
            end->failed = failed;
            (void)tx.send(std::move(end));
        }
    } fin{tx, id};
    auto head = std::make_unique<h2_event>();
    head->stream = id;
    std::string rid;
    bool span = false;
    const socket_address peer = req.peer();
    std::optional<h2_body> body;
    if (body_rx) {
        body.emplace(std::move(*body_rx), tx, id, sh.cfg.body_timeout);
        request_access::source(req) = &*body;
    }
    response res = run_handler(sh, req, peer, rid, head->route, head->hook, span,
                               routed ? &*routed : nullptr);
    request_access::source(req) = nullptr;
    if (span) trace::span_end(static_cast<unsigned>(res.status()), res.body().size());
    if (res.kind() == response::body_kind::websocket)  // RFC 8441 is not offered
        res = response(http::status::not_implemented, "WebSocket over HTTP/2 is not offered\n");
    if (head_only && res.kind() == response::body_kind::file) {
        // HEAD: the file's length (or its 404/403), as GET would answer.
        const std::string path = res.file_path();
        file_open_result f = smarm::block_on_io([path] { return open_file(path); });
        if (f.fd < 0) {
            res = response(f.err, std::string(boost::beast::http::obsolete_reason(f.err)) + "\n");
        } else {
            head->length = f.size;
            close_file(f.fd);
        }
    }
    if (res.kind() == response::body_kind::text || head_only) {
        head->res = std::move(res);
        fin.told = true;
        (void)tx.send(std::move(head));
        return;
    }
    int fd = -1;
    std::uint64_t size = 0;
    if (res.kind() == response::body_kind::file) {
        const std::string path = res.file_path();
        file_open_result f = smarm::block_on_io([path] { return open_file(path); });
        if (f.fd < 0) {
            head->res =
                response(f.err, std::string(boost::beast::http::obsolete_reason(f.err)) + "\n");
            fin.told = true;
            (void)tx.send(std::move(head));
            return;
        }
        fd = f.fd;
        size = f.size;
        head->length = f.size;
    }
    struct closer {
        int fd;
        ~closer() {
            if (fd >= 0) close_file(fd);
        }
    } guard{fd};
    chunk_source source = std::move(res.chunks());
    auto [credit_tx, credits] = smarm::channel<char>();
    head->credit = std::move(credit_tx);
    head->streamed = true;
    head->res = std::move(res);
    if (!tx.send(std::move(head)).ok()) return;
    try {
        if (!stream_body(source, fd, size, id, tx, credits)) return;
        fin.failed = false;
    } catch (const smarm::stopped&) {
        throw;
    } catch (const std::exception& e) {
        log_stream_error(e.what());
    }
}

}  // namespace

/// One stream's state, from its HEADERS to its close.
struct h2_session::stream {
    std::int32_t id = 0;
    request req;
    std::size_t header_bytes = 0;
    std::string authority;
    bool header_overflow = false;  ///< the header list passed header_limit
    bool headers_done = false;     ///< the request's header block ended
    bool remote_done = false;      ///< END_STREAM received
    bool dispatched = false;       ///< handed to a stream actor
    bool answered = false;         ///< a response was submitted
    bool head_only = false;
    bool reset_sent = false;  ///< we reset it (its peer's late frames are fine)
    bool streams_body = false;        ///< its handler reads the body (h2_body_piece)
    std::uint64_t body_limit = 0;     ///< streams_body: the route's limit
    std::uint64_t received = 0;       ///< streams_body: DATA bytes so far
    /// The content-length field's value, kept as the field arrives (a
    /// declared length past the limit is refused before the body).
    std::optional<std::uint64_t> declared;
    smarm::sender<h2_body_piece> body_tx;  ///< streams_body: open until END_STREAM
    std::optional<route_match> routed;     ///< routed at HEADERS, read whole: for its actor
    std::size_t buffered = 0;    ///< request body bytes held (in h2_session::buffered_)
    std::size_t unconsumed = 0;  ///< received but not yet given back to its window
    smarm::pid actor;  ///< while its handler runs
    std::int64_t opened = 0;
    clock::time_point t0{};  ///< for the access log and on_request
    // The response:
    unsigned status = 0;
    std::string body;      ///< text body, or the streamed piece being sent
    std::size_t sent = 0;  ///< of body
    std::uint64_t bytes = 0;
    bool streamed = false;      ///< file or chunked: pieces follow
    bool ended = false;         ///< streamed: the end came
    bool credit_owed = false;   ///< streamed: a piece is being sent
    std::int64_t progress = 0;  ///< when nghttp2 last took bytes of it
    smarm::sender<char> credit;
    std::string method, target, rid, route;
    const profile_hooks::route* hook = nullptr;
};

struct h2_session::callbacks {
    static h2_session& self(void* p) { return *static_cast<h2_session*>(p); }

    static int begin_headers(nghttp2_session*, const nghttp2_frame* f, void* user) try {
        if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
        h2_session& h = self(user);
        stream* st = h.open(f->hd.stream_id);
        st->opened = now_ns();
        h.limit_at(st->opened + ns(h.c_.sh.cfg.body_timeout));
        shared& sh = h.c_.sh;
        if (sh.access || sh.cfg.on_request) st->t0 = clock::now();
        if (sh.causal) sh.causal->arrive->hit();
        request_access::version(st->req) = 20;
        return 0;
    } catch (...) {
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }

    static int header(nghttp2_session*, const nghttp2_frame* f, const std::uint8_t* name,
                      std::size_t namelen, const std::uint8_t* value, std::size_t valuelen,
                      std::uint8_t, void* user) try {
        h2_session& h = self(user);
        stream* st = h.find(f->hd.stream_id);
        if (st == nullptr) return 0;
        // RFC 9113 §6.5.2's size: name + value + 32 per field.
        st->header_bytes += namelen + valuelen + 32;
        if (st->header_bytes > h.c_.sh.cfg.header_limit) st->header_overflow = true;
        if (st->header_overflow || st->headers_done) return 0;  // past the limit, or trailers
        const std::string_view n(reinterpret_cast<const char*>(name), namelen);
        std::string_view v(reinterpret_cast<const char*>(value), valuelen);
        request& r = st->req;
        if (!n.empty() && n[0] == ':') {
            if (n == ":method") {
                request_access::method_string(r) = v;
                request_access::method(r) = boost::beast::http::string_to_verb(v);
            } else if (n == ":path") {
                request_access::target(r) = v;
            } else if (n == ":authority") {
                st->authority = v;
            }
            return 0;  // :scheme, :protocol: nothing to keep
        }
        auto& hs = request_access::headers(r);
        if (n == "cookie") {  // §8.2.3: one field again for the handler
            for (http::header& x : hs)
                if (x.name == "cookie") {
                    x.value.append("; ").append(v);
                    return 0;
                }
        }
        if (n == "content-length" && !st->declared) st->declared = content_length(v);
        if (hs.empty()) hs.reserve(8);  // most requests: one allocation, no regrowth
        hs.push_back({std::string(n), std::string(v)});
        return 0;
    } catch (...) {
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }

    static int frame_recv(nghttp2_session*, const nghttp2_frame* f, void* user) try {
        h2_session& h = self(user);
        if (f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA) return 0;
        stream* st = h.find(f->hd.stream_id);
        if (st == nullptr) return 0;
        if (f->hd.type == NGHTTP2_HEADERS && !st->headers_done) {
            st->headers_done = true;
            if (st->header_overflow) {
                h.answer(*st, http::status::request_header_fields_too_large);
                return 0;
            }
            const bool body_follows = (f->hd.flags & NGHTTP2_FLAG_END_STREAM) == 0;
            if (body_follows && h.c_.sh.routes.stream_limit() != 0 && !h.route_early(*st))
                return 0;
            // A declared length past the limit is refused before its body.
            if (body_follows && !st->streams_body && st->declared &&
                *st->declared > h.c_.sh.cfg.body_limit) {
                h.answer(*st, http::status::payload_too_large);
                return 0;
            }
        }
        if ((f->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0) {
            st->remote_done = true;
            if (st->streams_body)
                st->body_tx = {};  // the body's end: read_body returns ""
            else if (!st->answered)
                h.dispatch(*st);
            h.refill();  // another stream may be the oldest arriving now
        }
        return 0;
    } catch (...) {
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }

    static int data_chunk(nghttp2_session* s, std::uint8_t, std::int32_t id,
                          const std::uint8_t* data, std::size_t len, void* user) try {
        h2_session& h = self(user);
        // The connection's window always reopens; a stream's only while the
        // connection's buffered bodies are within budget (header comment).
        nghttp2_session_consume_connection(s, len);
        stream* st = h.find(id);
        if (st == nullptr || st->answered) {
            nghttp2_session_consume_stream(s, id, len);  // dropped: not buffered
            return 0;
        }
        if (st->streams_body) {  // to its actor; the window reopens as it reads
            st->received += len;
            bool sent = false;
            if (st->received > st->body_limit) {  // a default sender sends nowhere
                (void)st->body_tx.send(
                    h2_body_piece{{}, static_cast<unsigned>(http::status::payload_too_large)});
                st->body_tx = {};
            } else {
                sent = st->body_tx
                           .send(h2_body_piece{
                               std::string(reinterpret_cast<const char*>(data), len), 0})
                           .ok();
            }
            if (!sent) nghttp2_session_consume_stream(s, id, len);  // nobody reads it
            return 0;
        }
        std::string& body = st->req.body();
        if (body.size() + len > h.c_.sh.cfg.body_limit) {
            std::string().swap(body);
            nghttp2_session_consume_stream(s, id, len);
            h.unbuffer(*st);
            h.answer(*st, http::status::payload_too_large);
            return 0;
        }
        body.append(reinterpret_cast<const char*>(data), len);
        st->buffered += len;
        h.buffered_ += len;
        if (h.buffered_ <= h.budget_ || h.oldest_arriving() == st) {
            nghttp2_session_consume_stream(s, id, len);
        } else {
            if (st->unconsumed == 0) ++h.held_;
            st->unconsumed += len;
        }
        return 0;
    } catch (...) {
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }

    // With RFC 7540's priorities off, nghttp2 skips PRIORITY frames unread
    // and forgets closed streams; two checks of RFC 9113 come back here,
    // on the frame's header: PRIORITY on stream 0 (6.3) and DATA or
    // HEADERS on a stream both sides ended (5.1, "closed").
    static int begin_frame(nghttp2_session* s, const nghttp2_frame_hd* hd, void* user) {
        h2_session& h = self(user);
        if (hd->type == NGHTTP2_PRIORITY && hd->stream_id == 0)
            nghttp2_session_terminate_session(s, NGHTTP2_PROTOCOL_ERROR);
        else if ((hd->type == NGHTTP2_DATA || hd->type == NGHTTP2_HEADERS) &&
                 h.ended_recently(hd->stream_id))
            nghttp2_session_terminate_session(s, NGHTTP2_STREAM_CLOSED);
        return 0;
    }

    static int frame_send(nghttp2_session* s, const nghttp2_frame* f, void* user) try {
        // A response sent whole before its request was (an early 413/431/
        // 408): the rest of the request is not wanted (§8.1).
        if ((f->hd.type != NGHTTP2_DATA && f->hd.type != NGHTTP2_HEADERS) ||
            (f->hd.flags & NGHTTP2_FLAG_END_STREAM) == 0)
            return 0;
        stream* st = self(user).find(f->hd.stream_id);
        if (st != nullptr && !st->remote_done) {
            st->reset_sent = true;
            nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_NO_ERROR);
        }
        return 0;
    } catch (...) {
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }

    static int stream_close(nghttp2_session*, std::int32_t id, std::uint32_t code, void* user) try {
        self(user).closed(id, code);
        return 0;
    } catch (...) {
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }

    static ssize_t read_body(nghttp2_session*, std::int32_t id, std::uint8_t* buf, std::size_t len,
                             std::uint32_t* flags, nghttp2_data_source*, void* user) {
        h2_session& h = self(user);
        stream* st = h.find(id);
        if (st == nullptr) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        const std::size_t n = std::min(len, st->body.size() - st->sent);
        if (n == 0 && st->streamed && !st->ended) return NGHTTP2_ERR_DEFERRED;
        std::memcpy(buf, st->body.data() + st->sent, n);
        st->sent += n;
        st->bytes += n;
        st->progress = now_ns();
        if (st->sent == st->body.size()) {
            if (!st->streamed || st->ended)
                *flags |= NGHTTP2_DATA_FLAG_EOF;
            else
                h.granted(*st);
        }
        return static_cast<ssize_t>(n);
    }
};

h2_session::h2_session(conn_ctx& c) : c_(c) {
    auto [tx, rx] = smarm::channel<h2_event_ptr>();
    tx_ = std::move(tx);
    rx_ = std::move(rx);
    idle_since_ = now_ns();
    budget_ = std::max<std::size_t>(4 * c.sh.cfg.body_limit, 256 * 1024);
    nghttp2_session_callbacks* cb = nullptr;
    nghttp2_option* opt = nullptr;
    if (nghttp2_session_callbacks_new(&cb) != 0 || nghttp2_option_new(&opt) != 0) {
        nghttp2_session_callbacks_del(cb);
        throw std::bad_alloc();
    }
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb, callbacks::begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, callbacks::header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, callbacks::frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, callbacks::data_chunk);
    nghttp2_session_callbacks_set_on_frame_send_callback(cb, callbacks::frame_send);
    nghttp2_session_callbacks_set_on_begin_frame_callback(cb, callbacks::begin_frame);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, callbacks::stream_close);
    // The hardening is nghttp2's, on by default in this build and set here
    // so it does not depend on the library's defaults: RST_STREAM rate
    // (CVE-2023-44487, rapid reset: a burst of 1000, then 33/s; past it
    // GOAWAY), CONTINUATION frames per header block (CVE-2024-28182),
    // SETTINGS entries per frame, queued SETTINGS/PING acknowledgements
    // (a flood the peer does not read: past 1000, ENHANCE_YOUR_CALM).
    nghttp2_option_set_stream_reset_rate_limit(opt, 1000, 33);
    nghttp2_option_set_max_continuations(opt, 8);
    nghttp2_option_set_max_settings(opt, 32);
    nghttp2_option_set_max_outbound_ack(opt, 1000);
    nghttp2_option_set_no_auto_window_update(opt, 1);  // data_chunk consumes
    const int rv = nghttp2_session_server_new2(&s_, cb, this, opt);
    nghttp2_session_callbacks_del(cb);
    nghttp2_option_del(opt);
    if (rv != 0) throw std::bad_alloc();
    const std::uint32_t header_list = static_cast<std::uint32_t>(
        std::min<std::size_t>(c.sh.cfg.header_limit, std::numeric_limits<std::uint32_t>::max()));
    const nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, c.sh.cfg.http2.max_concurrent_streams},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, header_list},
        {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
        // RFC 9113 deprecates RFC 7540's priority tree; without it nghttp2
        // schedules streams round robin (the tree cost it per stream).
        {NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, 1},
    };
    nghttp2_submit_settings(s_, NGHTTP2_FLAG_NONE, iv, sizeof iv / sizeof iv[0]);
}

h2_session::~h2_session() {
    for (auto& st : streams_)
        if (st->actor.valid()) smarm::request_stop(st->actor);
    nghttp2_session_del(s_);
}

// At most max_concurrent_streams are open, and the callbacks ask for the
// same stream many times in a row: the last one found, then a scan (a hash
// map's node per stream and its lookups were ~3% of a request's CPU).
h2_session::stream* h2_session::find(std::int32_t id) {
    if (last_ != nullptr && last_->id == id) return last_;
    for (auto& st : streams_)
        if (st->id == id) return last_ = st.get();
    return nullptr;
}

h2_session::stream* h2_session::open(std::int32_t id) {
    std::unique_ptr<stream> st;
    if (spare_.empty()) {
        st = std::make_unique<stream>();
    } else {
        st = std::move(spare_.back());
        spare_.pop_back();
    }
    st->id = id;
    streams_.push_back(std::move(st));
    return last_ = streams_.back().get();
}

bool h2_session::receive(std::string_view bytes) {
    smarm::no_preempt in_nghttp2;
    const auto n = nghttp2_session_mem_recv(s_, reinterpret_cast<const std::uint8_t*>(bytes.data()),
                                            bytes.size());
    if (n < 0) failed_ = true;
    return !failed_;
}

bool h2_session::output(std::string& out, std::size_t limit) {
    smarm::no_preempt in_nghttp2;
    while (out.size() < limit) {
        const std::uint8_t* p = nullptr;
        const auto n = nghttp2_session_mem_send(s_, &p);
        if (n < 0) {
            failed_ = true;
            return false;
        }
        if (n == 0) break;
        out.append(reinterpret_cast<const char*>(p), static_cast<std::size_t>(n));
    }
    return !failed_;
}

void h2_session::peer_closed() {
    peer_open_ = false;
    for (auto& st : streams_)
        if (st->streams_body && !st->remote_done) {
            (void)st->body_tx.send(h2_body_piece{{}, static_cast<unsigned>(http::status::bad_request)});
            st->body_tx = {};
        }
}

bool h2_session::done() const {
    if (failed_) return !nghttp2_session_want_write(s_);
    if (!peer_open_) return producing_ == 0 && !nghttp2_session_want_write(s_);
    return !nghttp2_session_want_read(s_) && !nghttp2_session_want_write(s_);
}

void h2_session::go_away() {
    if (going_away_) return;
    going_away_ = true;
    nghttp2_submit_goaway(s_, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(s_),
                          NGHTTP2_NO_ERROR, nullptr, 0);
}

bool h2_session::prepare(stream& st) {
    request& r = st.req;
    if (!st.authority.empty() && !r.header("host"))
        request_access::headers(r).push_back({"host", st.authority});
    st.method = r.method_string();
    st.head_only = r.method() == verb::head;
    if (!decode_path(r)) {
        answer(st, http::status::bad_request);
        return false;
    }
    return true;
}

bool h2_session::route_early(stream& st) {
    if (!prepare(st)) return false;
    route_match m = c_.sh.routes.match(st.req);
    if (!m.streamed) {  // read whole; its actor takes this route
        st.routed = std::move(m);
        return true;
    }
    if (st.declared && *st.declared > m.streamed->limit) {
        answer(st, http::status::payload_too_large);
        return false;
    }
    st.streams_body = true;
    st.body_limit = m.streamed->limit;
    auto [tx, rx] = smarm::channel<h2_body_piece>();
    st.body_tx = std::move(tx);
    spawn_handler(st, std::move(m), std::move(rx));
    return true;
}

void h2_session::dispatch(stream& st) {
    if (!st.routed && !prepare(st)) return;  // routed: prepared by route_early
    spawn_handler(st, std::move(st.routed), std::nullopt);
}

void h2_session::spawn_handler(stream& st, std::optional<route_match> routed,
                               std::optional<smarm::receiver<h2_body_piece>> body) {
    st.dispatched = true;
    request& r = st.req;
    request_access::peer(r) = c_.peer;
    request_access::set_id(r, c_.id, ++seq_);
    if (c_.sh.access) {
        st.target = r.target();
        st.rid = r.id();
    }
    smarm::join_handle h =
        smarm::spawn([owner = c_.owner, &sh = c_.sh, req = std::move(r), id = st.id,
                      head_only = st.head_only, tx = tx_, routed = std::move(routed),
                      body = std::move(body)]() mutable {
            (void)owner;  // keeps sh alive while the stream runs
            run_stream(sh, req, id, head_only, tx, routed, body);
        });
    st.actor = h.id();
    h.detach();
    ++producing_;
}

void h2_session::answer(stream& st, http::status s) {
    response r(s, std::string(boost::beast::http::obsolete_reason(s)) + "\n");
    st.dispatched = true;
    submit(st, r, std::nullopt);
}

void h2_session::submit(stream& st, response& res, std::optional<std::uint64_t> length) {
    st.answered = true;
    st.status = static_cast<unsigned>(res.status());
    st.progress = now_ns();
    limit_at(st.progress + ns(c_.sh.cfg.write_timeout));
    const server_config& cfg = c_.sh.cfg;
    const bool no_body = st.status < 200 || st.status == 204 || st.status == 304;
    st.streamed = res.kind() != response::body_kind::text && !st.head_only && !no_body;
    if (res.kind() == response::body_kind::text) {
        length = res.body().size();
        st.body = std::move(res.body());
    }
    // nghttp2 copies the fields when it takes them; the managed ones are
    // built on the stack (a string per field was ~1% of a request's CPU).
    char status[12], length_text[24], date[32];
    const char* status_end = std::to_chars(status, status + sizeof status, st.status).ptr;
    const char* date_end = write_date(date);
    // Up to 16 fields on the stack; a vector only for a response with more.
    nghttp2_nv fixed[16];
    std::vector<nghttp2_nv> spill;
    const std::size_t fields = 5 + res.headers().size();
    if (fields > std::size(fixed)) spill.resize(fields);
    nghttp2_nv* nv = fields > std::size(fixed) ? spill.data() : fixed;
    std::size_t nfields = 0;
    auto add = [&](std::string_view name, std::string_view value) {
        nv[nfields++] = {
            const_cast<std::uint8_t*>(reinterpret_cast<const std::uint8_t*>(name.data())),
            const_cast<std::uint8_t*>(reinterpret_cast<const std::uint8_t*>(value.data())),
            name.size(), value.size(), NGHTTP2_NV_FLAG_NONE};
    };
    add(":status", std::string_view(status, static_cast<std::size_t>(status_end - status)));
    if (!cfg.server_name.empty()) add("server", cfg.server_name);
    add("date", std::string_view(date, static_cast<std::size_t>(date_end - date)));
    if (!no_body) {
        add("content-type", res.content_type());
        if (length) {
            auto r = std::to_chars(length_text, length_text + sizeof length_text, *length);
            add("content-length", std::string_view(length_text, r.ptr));
        }
    }
    // A handler's names may have capitals (HTTP/2 wants them lower case).
    std::vector<std::string> lowered;
    lowered.reserve(res.headers().size());
    for (const http::header& hd : res.headers()) {
        std::string name = hd.name;
        std::transform(name.begin(), name.end(), name.begin(),
                       [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
        if (connection_specific(name)) continue;
        lowered.push_back(std::move(name));
        add(lowered.back(), hd.value);
    }
    nghttp2_data_provider body{};
    body.read_callback = callbacks::read_body;
    const bool has_body = !st.head_only && !no_body && (st.streamed || !st.body.empty());
    nghttp2_submit_response(s_, st.id, nv, nfields, has_body ? &body : nullptr);
}

void h2_session::granted(stream& st) {
    st.body.clear();
    st.sent = 0;
    if (st.credit_owed) {
        st.credit_owed = false;
        (void)st.credit.send('+');
    }
}

void h2_session::deliver(h2_event&& ev) {
    if (ev.what == h2_event::kind::consumed) {
        // Its handler took request body bytes: the stream's window reopens.
        if (find(ev.stream) != nullptr) {
            smarm::no_preempt in_nghttp2;
            nghttp2_session_consume_stream(s_, ev.stream, ev.consumed);
        }
        return;
    }
    if (ev.what != h2_event::kind::piece) {
        // A head for a text or head-only body, or an end: the actor is done.
        const bool finishes = ev.what == h2_event::kind::end || !ev.streamed;
        if (finishes && producing_ > 0) --producing_;
    }
    stream* st = find(ev.stream);
    if (st == nullptr) return;  // reset or closed meanwhile
    smarm::no_preempt in_nghttp2;
    switch (ev.what) {
        case h2_event::kind::head:
            if (!ev.streamed) st->actor = smarm::pid{};
            st->route = std::move(ev.route);
            st->hook = ev.hook;
            st->credit = std::move(ev.credit);
            submit(*st, *ev.res, ev.length);
            break;
        case h2_event::kind::piece:
            st->body = std::move(ev.data);
            st->sent = 0;
            st->credit_owed = true;
            st->progress = now_ns();
            limit_at(st->progress + ns(c_.sh.cfg.write_timeout));
            nghttp2_session_resume_data(s_, st->id);
            break;
        case h2_event::kind::consumed:
            break;  // handled above
        case h2_event::kind::end:
            st->actor = smarm::pid{};
            st->ended = true;
            if (ev.failed) {
                st->reset_sent = true;
                nghttp2_submit_rst_stream(s_, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_INTERNAL_ERROR);
            } else
                nghttp2_session_resume_data(s_, st->id);
            break;
    }
}

void h2_session::closed(std::int32_t id, std::uint32_t code) {
    auto it = std::find_if(streams_.begin(), streams_.end(),
                           [id](const std::unique_ptr<stream>& x) { return x->id == id; });
    if (it == streams_.end()) return;
    std::unique_ptr<stream> st = std::move(*it);
    *it = std::move(streams_.back());
    streams_.pop_back();
    if (last_ == st.get()) last_ = nullptr;
    // Both sides ended it (not a reset, not an early answer whose request
    // was cut): a frame on it now is the peer's error (begin_frame).
    if (code == NGHTTP2_NO_ERROR && st->remote_done && !st->reset_sent) {
        ended_[ended_next_] = id;
        ended_next_ = (ended_next_ + 1) % ended_.size();
    }
    // Kept for the next stream, a few (a record is ~500 bytes).
    struct recycle {
        std::vector<std::unique_ptr<stream>>& spare;
        std::unique_ptr<stream>& st;
        ~recycle() {
            if (spare.size() >= 16) return;
            std::destroy_at(st.get());  // in place: no temporary to move from
            std::construct_at(st.get());
            spare.push_back(std::move(st));
        }
    } const keep{spare_, st};
    if (streams_.empty()) {
        idle_since_ = now_ns();
        limit_at(idle_since_ + ns(c_.sh.cfg.idle_timeout));
    }
    shared& sh = c_.sh;
    if (st->actor.valid()) smarm::request_stop(st->actor);  // reset while its handler ran
    if (sh.causal) sh.causal->depart->hit();
    unbuffer(*st);  // answered or reset mid-upload alike: its body is gone
    if (!st->answered) return;  // reset or cut before an answer: not a request answered
    sh.requests.fetch_add(1, std::memory_order_relaxed);
    if (const profile_hooks* ch = sh.causal.get()) {
        ch->answered->hit();
        if (st->hook != nullptr) st->hook->done->hit();
    }
    // A response cut by a reset still logs, with the bytes that went.
    if (sh.access)
        log_access(*sh.access, c_.peer, st->method, st->target, st->status, st->bytes,
                   clock::now() - st->t0, st->rid);
    if (sh.cfg.on_request)
        sh.cfg.on_request(
            request_record{st->route, st->method, st->status, st->bytes, clock::now() - st->t0});
}

std::int64_t h2_session::expire(std::int64_t now) {
    // next_ is never later than the earliest limit (every new limit lowers
    // it), so before it nothing can be due and the streams are not walked.
    if (now < next_) return next_;
    const server_config& cfg = c_.sh.cfg;
    std::int64_t next = std::numeric_limits<std::int64_t>::max();
    smarm::no_preempt in_nghttp2;
    std::vector<std::pair<std::int32_t, bool>> late;  // (stream, request still arriving)
    for (auto& st : streams_) {
        const std::int32_t id = st->id;
        std::int64_t limit = std::numeric_limits<std::int64_t>::max();
        if (!st->remote_done && !st->answered && !st->streams_body)  // its actor times a streamed one
            limit = st->opened + ns(cfg.body_timeout);
        else if (st->answered && st->sent < st->body.size())  // held by flow control
            limit = st->progress + ns(cfg.write_timeout);
        if (limit <= now)
            late.emplace_back(id, !st->answered);
        else
            next = std::min(next, limit);
    }
    for (auto [id, arriving] : late) {
        stream* st = find(id);
        st->reset_sent = true;
        if (arriving)
            answer(*st, http::status::request_timeout);
        else
            nghttp2_submit_rst_stream(s_, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
    }
    if (streams_.empty() && producing_ == 0) {
        const std::int64_t idle = idle_since_ + ns(cfg.idle_timeout);
        if (idle <= now) {
            going_away_ = true;
            nghttp2_submit_goaway(s_, NGHTTP2_FLAG_NONE,
                                  nghttp2_session_get_last_proc_stream_id(s_), NGHTTP2_NO_ERROR,
                                  nullptr, 0);
        } else {
            next = std::min(next, idle);
        }
    }
    return next_ = next;
}

void h2_session::limit_at(std::int64_t t) noexcept {
    next_ = std::min(next_, t);
}

h2_session::stream* h2_session::oldest_arriving() {
    stream* oldest = nullptr;
    for (auto& st : streams_)
        if (!st->remote_done && !st->answered && !st->streams_body &&
            (oldest == nullptr || st->id < oldest->id))
            oldest = st.get();
    return oldest;
}

void h2_session::unbuffer(stream& st) {
    buffered_ -= st.buffered;
    st.buffered = 0;
    if (st.unconsumed != 0) --held_;
    st.unconsumed = 0;  // a closed or answered stream's window no longer matters
    refill();
}

void h2_session::refill() {
    if (held_ == 0) return;  // no window held back (the usual case: no walk)
    // The oldest stream still arriving always gets its window back, even
    // what it was held to while it was not the oldest.
    if (stream* oldest = oldest_arriving(); oldest != nullptr && oldest->unconsumed != 0) {
        nghttp2_session_consume_stream(s_, oldest->id, oldest->unconsumed);
        oldest->unconsumed = 0;
        --held_;
    }
    // Room again: reopen the windows held back, oldest stream first.
    while (buffered_ < budget_) {
        stream* next = nullptr;
        for (auto& x : streams_)
            if (x->unconsumed != 0 && (next == nullptr || x->id < next->id)) next = x.get();
        if (next == nullptr) break;
        nghttp2_session_consume_stream(s_, next->id, next->unconsumed);
        next->unconsumed = 0;
        --held_;
    }
}

bool h2_session::ended_recently(std::int32_t id) const noexcept {
    return id != 0 && std::find(ended_.begin(), ended_.end(), id) != ended_.end();
}

}  // namespace smarm::http::internal
