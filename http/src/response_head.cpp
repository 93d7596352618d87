// Response heads: the status line and managed headers written in place,
// the cached Date value, chunk-size lines.

#include "response_head.hpp"

#include <boost/beast/http/status.hpp>

#include <time.h>

#include <atomic>
#include <charconv>
#include <cstdio>
#include <cstring>

namespace smarm::http::internal {

namespace {

// The Date header changes once a second: a seqlock-protected cache so a
// response copies 29 bytes instead of formatting a time. `seq` is odd while
// a writer updates `second` and `text`; every field is an atomic (no data
// race for the reader that loses). A reader that finds `seq` odd or
// changed, or another second cached, formats its own copy (and stores it
// when no other writer is at it).
struct date_cache {
    std::atomic<std::uint64_t> seq{0};
    std::atomic<std::int64_t> second{-1};
    std::atomic<std::uint64_t> text[4]{};  // 29 characters, padded
};
date_cache g_date;

void format_date(std::int64_t sec, char (&out)[32]) {
    static const char* const days[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
    static const char* const months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                         "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    time_t t = static_cast<time_t>(sec);
    tm g{};
    gmtime_r(&t, &g);
    std::memset(out, 0, sizeof out);
    std::snprintf(out, sizeof out, "%s, %02d %s %04d %02d:%02d:%02d GMT", days[g.tm_wday % 7],
                  g.tm_mday, months[g.tm_mon % 12], g.tm_year + 1900, g.tm_hour, g.tm_min,
                  g.tm_sec);
}

/// Writes the 29-character Date value at `p`; returns the end.
char* put_date(char* p) {
    timespec ts{};
    clock_gettime(CLOCK_REALTIME_COARSE, &ts);
    const std::int64_t now = ts.tv_sec;
    char local[32];
    std::uint64_t s1 = g_date.seq.load(std::memory_order_acquire);
    if ((s1 & 1) == 0 && g_date.second.load(std::memory_order_acquire) == now) {
        std::uint64_t w[4];
        for (int i = 0; i < 4; ++i)
            w[i] = g_date.text[i].load(std::memory_order_acquire);
        if (g_date.seq.load(std::memory_order_relaxed) == s1) {
            std::memcpy(p, w, 29);
            return p + 29;
        }
    }
    format_date(now, local);
    if ((s1 & 1) == 0 &&
        g_date.seq.compare_exchange_strong(s1, s1 + 1, std::memory_order_acq_rel)) {
        std::uint64_t w[4];
        std::memcpy(w, local, sizeof w);
        for (int i = 0; i < 4; ++i)
            g_date.text[i].store(w[i], std::memory_order_relaxed);
        g_date.second.store(now, std::memory_order_relaxed);
        g_date.seq.store(s1 + 2, std::memory_order_release);
    }
    std::memcpy(p, local, 29);
    return p + 29;
}

/// Writes the head at `p` (room for it was made: see append_head); returns
/// the end.
char* write_head(char* p, const server_config& cfg, const response& r, std::string_view reason,
                 const framing& f) {
    const std::optional<std::uint64_t>& content_length = f.content_length;
    const bool chunked = f.chunked;
    using namespace std::string_view_literals;
    auto put = [&p](std::string_view s) {
        std::memcpy(p, s.data(), s.size());
        p += s.size();
    };
    auto number = [&p](std::uint64_t n) { p = std::to_chars(p, p + 20, n).ptr; };
    const unsigned code = static_cast<unsigned>(r.status());
    put("HTTP/1.1 "sv);
    number(code);
    *p++ = ' ';
    put(reason);
    if (!cfg.server_name.empty()) {
        put("\r\nServer: "sv);
        put(cfg.server_name);
    }
    put("\r\nDate: "sv);
    p = put_date(p);
    put("\r\n"sv);
    if ((chunked || (content_length && *content_length != 0) ||
         (!content_length && !chunked && code >= 200 && code != 204 && code != 304)) &&
        !r.content_type().empty()) {
        put("Content-Type: "sv);
        put(r.content_type());
        put("\r\n"sv);
    }
    if (content_length) {
        put("Content-Length: "sv);
        number(*content_length);
        put("\r\n"sv);
    }
    if (chunked) put("Transfer-Encoding: chunked\r\n"sv);
    if (!f.keep_alive)
        put("Connection: close\r\n"sv);
    else if (f.request_version < 11)
        put("Connection: keep-alive\r\n"sv);
    for (auto& h : r.headers()) {
        put(h.name);
        put(": "sv);
        put(h.value);
        put("\r\n"sv);
    }
    put("\r\n"sv);
    return p;
}

/// The most a head can take: 192 covers every fixed piece and both numbers.
std::size_t head_room(const server_config& cfg, const response& r, std::string_view reason) {
    std::size_t room = 192 + reason.size() + cfg.server_name.size() + r.content_type().size();
    for (auto& h : r.headers())
        room += h.name.size() + h.value.size() + 4;
    return room;
}

}  // namespace

char* put_head(char* p, std::size_t cap, const server_config& cfg, const response& r,
               const framing& f) {
    const std::string_view reason = boost::beast::http::obsolete_reason(r.status());
    if (head_room(cfg, r, reason) > cap) return nullptr;
    return write_head(p, cfg, r, reason, f);
}

void append_head(std::string& out, const server_config& cfg, const response& r, const framing& f) {
    // The head is written in place, not appended piece by piece (a capacity
    // check and an out-of-line call each were most of this function): on
    // the stack when it is small, else in room made at the end of `out`.
    const std::string_view reason = boost::beast::http::obsolete_reason(r.status());
    const std::size_t room = head_room(cfg, r, reason);
    char local[512];
    if (room <= sizeof local) {
        char* end = write_head(local, cfg, r, reason, f);
        out.append(local, static_cast<std::size_t>(end - local));
        return;
    }
    const std::size_t start = out.size();
    out.resize(start + room);
    char* end = write_head(out.data() + start, cfg, r, reason, f);
    out.resize(static_cast<std::size_t>(end - out.data()));
}

void append_simple(std::string& out, const server_config& cfg, http::status s, bool keep_alive,
                   unsigned request_version) {
    response r(s, std::string(boost::beast::http::obsolete_reason(s)) + "\n");
    append_head(out, cfg, r, {r.body().size(), false, keep_alive, request_version});
    out += r.body();
}

char* write_date(char* p) {
    return put_date(p);
}

void append_chunk_size(std::string& out, std::size_t n) {
    char b[24];
    auto r = std::to_chars(b, b + sizeof b, n, 16);
    out.append(b, r.ptr);
    out += "\r\n";
}

}  // namespace smarm::http::internal
