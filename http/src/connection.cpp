// Non-template pieces of the connection loop: response heads, the Date
// cache, error mapping, request conversion, file access, logging.

#include "connection.hpp"

#include <spdlog/spdlog.h>
#include <boost/beast/http/status.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

namespace smarm::http::detail {

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
                 std::optional<std::uint64_t> content_length, bool chunked, bool keep_alive,
                 unsigned request_version) {
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
    if (!keep_alive)
        put("Connection: close\r\n"sv);
    else if (request_version < 11)
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

}  // namespace

void append_head(std::string& out, const server_config& cfg, const response& r,
                 std::optional<std::uint64_t> content_length, bool chunked, bool keep_alive,
                 unsigned request_version) {
    // The head is written in place, not appended piece by piece (a capacity
    // check and an out-of-line call each were most of this function): on
    // the stack when it is small, else in room made at the end of `out`.
    // 192 covers every fixed piece and both numbers.
    const std::string_view reason = boost::beast::http::obsolete_reason(r.status());
    std::size_t room = 192 + reason.size() + cfg.server_name.size() + r.content_type().size();
    for (auto& h : r.headers())
        room += h.name.size() + h.value.size() + 4;
    char local[512];
    if (room <= sizeof local) {
        char* end =
            write_head(local, cfg, r, reason, content_length, chunked, keep_alive, request_version);
        out.append(local, static_cast<std::size_t>(end - local));
        return;
    }
    const std::size_t start = out.size();
    out.resize(start + room);
    char* end = write_head(out.data() + start, cfg, r, reason, content_length, chunked, keep_alive,
                           request_version);
    out.resize(static_cast<std::size_t>(end - out.data()));
}

void append_simple(std::string& out, const server_config& cfg, http::status s, bool keep_alive,
                   unsigned request_version, std::string_view) {
    response r(s, std::string(boost::beast::http::obsolete_reason(s)) + "\n");
    append_head(out, cfg, r, r.body().size(), false, keep_alive, request_version);
    out += r.body();
}

std::optional<http::status> status_for(const error_code& ec) {
    namespace bhttp = boost::beast::http;
    if (ec == bhttp::error::header_limit) return http::status::request_header_fields_too_large;
    if (ec == bhttp::error::body_limit) return http::status::payload_too_large;
    if (ec == boost::beast::error::timeout) return http::status::request_timeout;
    if (ec == bhttp::error::end_of_stream || ec == bhttp::error::partial_message)
        return std::nullopt;
    if (&ec.category() == &bhttp::make_error_code(bhttp::error::bad_target).category())
        return http::status::bad_request;
    return std::nullopt;  // a socket error: the peer is gone
}

bool decode_path(request& req) {
    return percent_decode(raw_path(req.target()), request_access::path(req));
}

void log_access(const conn_ctx& c, std::string_view method, std::string_view target,
                unsigned status, std::uint64_t bytes, std::chrono::nanoseconds took,
                std::string_view request_id) {
    if (!c.sh.access) return;
    c.sh.access->info("{} \"{} {}\" {} {} {:.3f}ms {}", c.peer.to_string(), method, target, status,
                      bytes, static_cast<double>(took.count()) / 1e6, request_id);
}

void log_handler_error(const conn_ctx& c, const request& req, std::string_view what) {
    spdlog::error("http: request {} ({} {} from {}) failed: {}", req.id(), req.method_string(),
                  req.target(), c.peer.to_string(), what);
}

void log_stream_error(std::string_view what) {
    spdlog::error("http: a streamed response body failed: {}", what);
}

file_open_result open_file(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return {-1,
                e == ENOENT || e == ENOTDIR ? http::status::not_found
                : e == EACCES               ? http::status::forbidden
                                            : http::status::internal_server_error,
                0};
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        return {-1, http::status::not_found, 0};
    }
    return {fd, http::status::ok, static_cast<std::uint64_t>(st.st_size)};
}

long read_file(int fd, char* p, std::size_t n, std::uint64_t off) {
    for (;;) {
        ssize_t r = ::pread(fd, p, n, static_cast<off_t>(off));
        if (r < 0 && errno == EINTR) continue;
        return static_cast<long>(r);
    }
}

void close_file(int fd) noexcept {
    if (fd >= 0) ::close(fd);
}

void append_chunk_size(std::string& out, std::size_t n) {
    char b[24];
    auto r = std::to_chars(b, b + sizeof b, n, 16);
    out.append(b, r.ptr);
    out += "\r\n";
}

}  // namespace smarm::http::detail
