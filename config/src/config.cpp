#include <smarm/config/config.hpp>

#include <yaml-cpp/yaml.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <map>
#include <sstream>
#include <string>
#include <string_view>

namespace smarm::config {

namespace {

using setter = std::function<void(settings&, const std::string&)>;
using getter = std::function<std::string(const settings&)>;

struct key_def {
    std::string name, doc, allowed;
    setter set;  // throws std::invalid_argument on a bad value
    getter get;
    bool secret = false;  // its value never appears in a message or a print
};

std::string trim(std::string s) {
    auto sp = [](unsigned char c) { return std::isspace(c) != 0; };
    s.erase(s.begin(), std::find_if_not(s.begin(), s.end(), sp));
    s.erase(std::find_if_not(s.rbegin(), s.rend(), sp).base(), s.end());
    return s;
}

std::uint64_t parse_u64(const std::string& t) {
    std::uint64_t v = 0;
    auto s = trim(t);
    auto r = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || r.ec != std::errc() || r.ptr != s.data() + s.size())
        throw std::invalid_argument("not a whole number");
    return v;
}

std::string format_duration(std::chrono::nanoseconds d) {
    const std::int64_t n = d.count();
    struct unit {
        std::int64_t ns;
        const char* suffix;
    };
    for (unit u : {unit{3'600'000'000'000, "h"}, unit{60'000'000'000, "m"},
                   unit{1'000'000'000, "s"}, unit{1'000'000, "ms"}, unit{1'000, "us"}})
        if (n != 0 && n % u.ns == 0) return std::to_string(n / u.ns) + u.suffix;
    return std::to_string(n) + "ns";
}

std::string format_size(std::uint64_t v) {
    if (v != 0 && v % (1ull << 30) == 0) return std::to_string(v >> 30) + "GiB";
    if (v != 0 && v % (1ull << 20) == 0) return std::to_string(v >> 20) + "MiB";
    if (v != 0 && v % (1ull << 10) == 0) return std::to_string(v >> 10) + "KiB";
    return std::to_string(v);
}

std::string quote(const std::string& s) {
    std::string out = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') out += '\\';
        out += c;
    }
    return out + "\"";
}

key_def u64_key(std::string name, std::string doc, std::uint64_t lo, std::uint64_t hi,
                std::function<std::uint64_t&(settings&)> at) {
    std::string allowed = "a whole number in " + std::to_string(lo) + ".." + std::to_string(hi);
    return {std::move(name), std::move(doc), allowed,
            [=](settings& s, const std::string& v) {
                auto n = parse_u64(v);
                if (n < lo || n > hi) throw std::invalid_argument("out of range");
                at(s) = n;
            },
            [=](const settings& s) { return std::to_string(at(const_cast<settings&>(s))); }};
}

key_def port_key(std::string name, std::string doc, std::function<std::uint16_t&(settings&)> at) {
    return {std::move(name), std::move(doc), "a TCP port in 0..65535 (0 picks a free one)",
            [=](settings& s, const std::string& v) {
                auto n = parse_u64(v);
                if (n > 65535) throw std::invalid_argument("out of range");
                at(s) = static_cast<std::uint16_t>(n);
            },
            [=](const settings& s) { return std::to_string(at(const_cast<settings&>(s))); }};
}

key_def size_key(std::string name, std::string doc, std::uint64_t lo, std::uint64_t hi,
                 std::function<std::uint64_t&(settings&)> at) {
    std::string allowed =
        "a size in " + format_size(lo) + ".." + format_size(hi) + " (bytes, or with KiB/MiB/GiB)";
    return {std::move(name), std::move(doc), allowed,
            [=](settings& s, const std::string& v) {
                auto n = parse_size(v);
                if (n < lo || n > hi) throw std::invalid_argument("out of range");
                at(s) = n;
            },
            [=](const settings& s) { return format_size(at(const_cast<settings&>(s))); }};
}

key_def duration_key(std::string name, std::string doc, std::chrono::nanoseconds lo,
                     std::chrono::nanoseconds hi,
                     std::function<std::chrono::nanoseconds&(settings&)> at) {
    std::string allowed = "a duration in " + format_duration(lo) + ".." + format_duration(hi) +
                          " (like 250ms, 10s, 2m)";
    return {std::move(name), std::move(doc), allowed,
            [=](settings& s, const std::string& v) {
                auto d = parse_duration(v);
                if (d < lo || d > hi) throw std::invalid_argument("out of range");
                at(s) = d;
            },
            [=](const settings& s) { return format_duration(at(const_cast<settings&>(s))); }};
}

key_def bool_key(std::string name, std::string doc, std::function<bool&(settings&)> at) {
    return {std::move(name), std::move(doc), "true or false",
            [=](settings& s, const std::string& v) {
                std::string t = trim(v);
                std::transform(t.begin(), t.end(), t.begin(),
                               [](unsigned char c) { return std::tolower(c); });
                if (t == "true" || t == "yes" || t == "on" || t == "1")
                    at(s) = true;
                else if (t == "false" || t == "no" || t == "off" || t == "0")
                    at(s) = false;
                else
                    throw std::invalid_argument("not a boolean");
            },
            [=](const settings& s) { return at(const_cast<settings&>(s)) ? "true" : "false"; }};
}

key_def string_key(std::string name, std::string doc, std::vector<std::string> choices,
                   std::function<std::string&(settings&)> at) {
    std::string allowed = "any text";
    if (!choices.empty()) {
        allowed = "one of";
        for (auto& c : choices)
            allowed += " " + c;
    }
    return {
        std::move(name), std::move(doc), allowed,
        [=](settings& s, const std::string& v) {
            if (!choices.empty() && std::find(choices.begin(), choices.end(), v) == choices.end())
                throw std::invalid_argument("not a choice");
            at(s) = v;
        },
        [=](const settings& s) { return quote(at(const_cast<settings&>(s))); }};
}

/// What --print-config shows for a secret that is set.
constexpr std::string_view redacted = "<redacted>";

/// A credential: printed redacted; the placeholder itself is refused so that
/// a printed config fed back in fails loudly instead of holding a wrong
/// secret.
key_def secret_key(std::string name, std::string doc, std::function<std::string&(settings&)> at) {
    return {std::move(name),
            std::move(doc),
            "\"\" (none) or 16 to 4096 visible ASCII characters (no spaces)",
            [=](settings& s, const std::string& v) {
                if (v == redacted)
                    throw std::invalid_argument(
                        "the placeholder --print-config prints for a set secret; give the "
                        "secret itself");
                if (!v.empty() && (v.size() < 16 || v.size() > 4096))
                    throw std::invalid_argument(v.size() < 16 ? "shorter than 16 characters"
                                                              : "longer than 4096 characters");
                for (unsigned char c : v)
                    if (c <= 0x20 || c >= 0x7f)
                        throw std::invalid_argument(
                            "not visible ASCII (a space or control "
                            "character, or non-ASCII)");
                at(s) = v;
            },
            [=](const settings& s) {
                return at(const_cast<settings&>(s)).empty() ? quote("")
                                                            : quote(std::string(redacted));
            },
            true};
}

/// A database URL or conninfo with its password replaced by the
/// placeholder: "postgresql://app:<redacted>@db/app", "... password=<redacted>".
std::string redact_password(std::string v) {
    const std::string mark(redacted);
    if (auto scheme = v.find("://"); scheme != std::string::npos) {
        const auto start = scheme + 3;
        const auto at = v.find('@', start);
        const auto slash = v.find('/', start);
        if (at != std::string::npos && (slash == std::string::npos || at < slash)) {
            const auto colon = v.find(':', start);
            if (colon != std::string::npos && colon < at)
                v.replace(colon + 1, at - colon - 1, mark);
        }
        // A password given as a query parameter.
        for (auto p = v.find("password="); p != std::string::npos; p = v.find("password=", p + 1)) {
            const auto from = p + 9;
            const auto end = v.find('&', from);
            v.replace(from, (end == std::string::npos ? v.size() : end) - from, mark);
        }
        return v;
    }
    // key = value form: password = secret, or password = 'sec ret'.
    for (std::size_t p = v.find("password"); p != std::string::npos;
         p = v.find("password", p + 1)) {
        auto i = p + 8;
        while (i < v.size() && v[i] == ' ')
            ++i;
        if (i >= v.size() || v[i] != '=') continue;
        ++i;
        while (i < v.size() && v[i] == ' ')
            ++i;
        auto end = i;
        if (end < v.size() && v[end] == '\'') {
            ++end;
            while (end < v.size() && v[end] != '\'') {
                if (v[end] == '\\') ++end;
                ++end;
            }
            if (end < v.size()) ++end;
        } else {
            while (end < v.size() && v[end] != ' ')
                ++end;
        }
        v.replace(i, end - i, mark);
    }
    return v;
}

/// A database URL: printed with its password redacted, never echoed in an
/// error; the placeholder itself is refused (a printed config fed back in
/// must fail, not connect with "<redacted>" as the password).
key_def url_key(std::string name, std::string doc, std::function<std::string&(settings&)> at) {
    return {std::move(name),
            std::move(doc),
            "a libpq URI (postgresql://user:password@host:port/db) or conninfo "
            "(\"host=... dbname=...\"), or \"\"",
            [=](settings& s, const std::string& v) {
                if (v.find(redacted) != std::string::npos)
                    throw std::invalid_argument(
                        "holds the placeholder --print-config prints for a password; give the "
                        "password itself");
                at(s) = v;
            },
            [=](const settings& s) { return quote(redact_password(at(const_cast<settings&>(s)))); },
            true};
}

const std::vector<key_def>& table() {
    using namespace std::chrono_literals;
    static const std::vector<key_def> t = {
        string_key("http.host", "address to listen on (0.0.0.0, ::, 127.0.0.1, ...)", {},
                   [](settings& s) -> std::string& { return s.http.host; }),
        port_key("http.port", "port to listen on",
                 [](settings& s) -> std::uint16_t& { return s.http.port; }),
        u64_key("http.max_connections",
                "open connections at most; past it a connection gets 503 and is closed", 1,
                10'000'000, [](settings& s) -> std::uint64_t& { return s.http.max_connections; }),
        size_key("http.header_limit", "request line + headers at most (else 431)", 512, 1ull << 20,
                 [](settings& s) -> std::uint64_t& { return s.http.header_limit; }),
        size_key("http.body_limit", "request body at most, after de-chunking (else 413)", 0,
                 1ull << 34, [](settings& s) -> std::uint64_t& { return s.http.body_limit; }),
        duration_key(
            "http.header_timeout", "headers must arrive within this (else 408)", 1ms, 1h,
            [](settings& s) -> std::chrono::nanoseconds& { return s.http.header_timeout; }),
        duration_key("http.body_timeout", "a body must arrive within this (else 408)", 1ms, 24h,
                     [](settings& s) -> std::chrono::nanoseconds& { return s.http.body_timeout; }),
        duration_key("http.idle_timeout", "an idle keep-alive connection is closed after this", 1ms,
                     24h,
                     [](settings& s) -> std::chrono::nanoseconds& { return s.http.idle_timeout; }),
        duration_key("http.write_timeout", "a response must be written within this (else close)",
                     1ms, 24h,
                     [](settings& s) -> std::chrono::nanoseconds& { return s.http.write_timeout; }),
        duration_key("http.drain_timeout", "graceful stop: in-flight requests get this long", 0ns,
                     1h,
                     [](settings& s) -> std::chrono::nanoseconds& { return s.http.drain_timeout; }),
        duration_key("http.drain_grace",
                     "graceful stop: an idle keep-alive connection stays open this long for a "
                     "request on its way (answered with Connection: close; 0 = close at once)",
                     0ns, 1h,
                     [](settings& s) -> std::chrono::nanoseconds& { return s.http.drain_grace; }),
        u64_key("http.backlog", "pending connections the kernel queues for accept", 1, 65535,
                [](settings& s) -> std::uint64_t& { return s.http.backlog; }),
        duration_key(
            "http.defer_accept",
            "hand a connection over only once its request arrives (TCP_DEFER_ACCEPT; 0 = off)", 0ns,
            1h, [](settings& s) -> std::chrono::nanoseconds& { return s.http.defer_accept; }),
        bool_key("http.access_log", "one line per request",
                 [](settings& s) -> bool& { return s.http.access_log; }),
        string_key("http.access_log_file", "access log file (\"\" = stdout)", {},
                   [](settings& s) -> std::string& { return s.http.access_log_file; }),
        bool_key("http.test_routes",
                 "GET /test/throw throws; GET /test/causal runs a known bottleneck "
                 "(sites test.slow, test.fast); GET /test/sleep, POST /test/echo, GET "
                 "/test/bytes, GET /test/chunks, GET /test/file; POST /test/stop/{kv,worker,http} "
                 "on the "
                 "admin listener stops that actor (for failure tests only; keep off)",
                 [](settings& s) -> bool& { return s.http.test_routes; }),
        bool_key("http2.enabled",
                 "HTTP/2 on the HTTP listener: h2 by ALPN with TLS, h2c by prior knowledge "
                 "without",
                 [](settings& s) -> bool& { return s.http2.enabled; }),
        u64_key("http2.max_concurrent_streams",
                "HTTP/2 streams (handler actors) open at once per connection", 1, 1u << 20,
                [](settings& s) -> std::uint64_t& { return s.http2.max_concurrent_streams; }),
        string_key("http.tls_certificate", "PEM certificate chain; with tls_private_key: TLS on",
                   {}, [](settings& s) -> std::string& { return s.http.tls_certificate; }),
        string_key("http.tls_private_key", "PEM private key of tls_certificate", {},
                   [](settings& s) -> std::string& { return s.http.tls_private_key; }),
        bool_key("admin.enabled",
                 "serve /metrics and /debug/* on the admin listener (default) instead of the "
                 "main port; acting endpoints are served only here",
                 [](settings& s) -> bool& { return s.admin.enabled; }),
        string_key("admin.host", "admin listener address (keep it private: loopback)", {},
                   [](settings& s) -> std::string& { return s.admin.host; }),
        port_key("admin.port", "admin listener port",
                 [](settings& s) -> std::uint16_t& { return s.admin.port; }),
        secret_key("admin.token",
                   "bearer token every admin request must carry (\"\" = none; set it when the "
                   "admin listener faces a network; env SMARM_ADMIN_TOKEN keeps it out of files)",
                   [](settings& s) -> std::string& { return s.admin.token; }),
        u64_key("runtime.schedulers", "scheduler threads (0 = one per hardware thread)", 0, 64,
                [](settings& s) -> std::uint64_t& { return s.runtime.schedulers; }),
        u64_key("runtime.max_actors", "live actors at most", 1024, std::uint64_t{1} << 24,
                [](settings& s) -> std::uint64_t& { return s.runtime.max_actors; }),
        bool_key("runtime.share_cores",
                 "keep no more schedulers awake, and spin idle no more, than the cores "
                 "other processes leave free allow",
                 [](settings& s) -> bool& { return s.runtime.share_cores; }),
        size_key("kv.value_limit", "bytes per stored value (else 413)", 0, 1ull << 30,
                 [](settings& s) -> std::uint64_t& { return s.kv.value_limit; }),
        duration_key("kv.call_timeout", "a kv request waits this long for the service (else 504)",
                     1ms, 1h,
                     [](settings& s) -> std::chrono::nanoseconds& { return s.kv.call_timeout; }),
        string_key("kv.log_path", "append-only log of the kv service (\"\" = memory only)", {},
                   [](settings& s) -> std::string& { return s.kv.log_path; }),
        string_key("kv.sync",
                   "always: fdatasync each write before acknowledging it; group: one fdatasync "
                   "per group_commit interval, then the acknowledgements; none: write only",
                   {"always", "group", "none"},
                   [](settings& s) -> std::string& { return s.kv.sync; }),
        duration_key("kv.group_commit",
                     "sync: group - at most this long between a write and its sync", 100us, 10s,
                     [](settings& s) -> std::chrono::nanoseconds& { return s.kv.group_commit; }),
        size_key("kv.compact_bytes", "compact the kv log once it is larger than this", 4096,
                 1ull << 40, [](settings& s) -> std::uint64_t& { return s.kv.compact_bytes; }),
        u64_key("workers.count", "actors in the workers pool (POST /work/sha256)", 1, 1024,
                [](settings& s) -> std::uint64_t& { return s.workers.count; }),
        u64_key("workers.queue_limit",
                "waiting requests per worker; past it on every worker: 503 + Retry-After", 0,
                1'000'000, [](settings& s) -> std::uint64_t& { return s.workers.queue_limit; }),
        duration_key(
            "workers.call_timeout", "a work request waits this long for its answer (else 504)", 1ms,
            1h, [](settings& s) -> std::chrono::nanoseconds& { return s.workers.call_timeout; }),
        size_key("workers.upload_limit",
                 "POST /upload/sha256 hashes a body of at most this as it arrives (else 413)", 1,
                 1ull << 40, [](settings& s) -> std::uint64_t& { return s.workers.upload_limit; }),
        bool_key("causal.http",
                 "causal profiling hooks on the main listener: a site per route (named by its "
                 "pattern), progress points http.requests and one per route, latency point "
                 "http.request (experiments run only on POST /debug/causal)",
                 [](settings& s) -> bool& { return s.causal.http; }),
        bool_key("trace.flight",
                 "keep a flight recorder of scheduler and message events (the newest "
                 "trace.buffer per thread; GET /debug/trace/flight dumps it)",
                 [](settings& s) -> bool& { return s.trace.flight; }),
        size_key("trace.buffer", "trace ring per recording thread (32 bytes per event)",
                 64ull << 10, 1ull << 30,
                 [](settings& s) -> std::uint64_t& { return s.trace.buffer; }),
        size_key("trace.max_bytes", "a trace's JSON at most (the oldest events are cut)", 4096,
                 1ull << 30, [](settings& s) -> std::uint64_t& { return s.trace.max_bytes; }),
        size_key("websocket.max_message",
                 "a WebSocket message at most, reassembled and inflated (else close 1009)", 125,
                 1ull << 32, [](settings& s) -> std::uint64_t& { return s.websocket.max_message; }),
        duration_key(
            "websocket.ping_interval", "ping a WebSocket peer silent for this long (0 = never)",
            0ns, 24h,
            [](settings& s) -> std::chrono::nanoseconds& { return s.websocket.ping_interval; }),
        duration_key(
            "websocket.idle_timeout",
            "close a WebSocket (1001) after this without a byte from the peer (0 = never)", 0ns,
            24h, [](settings& s) -> std::chrono::nanoseconds& { return s.websocket.idle_timeout; }),
        duration_key(
            "websocket.message_timeout", "a WebSocket message begun must arrive whole within this",
            1ms, 24h,
            [](settings& s) -> std::chrono::nanoseconds& { return s.websocket.message_timeout; }),
        duration_key(
            "websocket.close_timeout", "a WebSocket close waits this long for the peer's close",
            1ms, 1h,
            [](settings& s) -> std::chrono::nanoseconds& { return s.websocket.close_timeout; }),
        bool_key("websocket.deflate",
                 "negotiate permessage-deflate when a client offers it (~300 KB per socket)",
                 [](settings& s) -> bool& { return s.websocket.deflate; }),
        bool_key("websocket.chat",
                 "the chat example: GET /ws/chat/{room}, every message to everyone in the room",
                 [](settings& s) -> bool& { return s.websocket.chat; }),
        url_key("postgres.url",
                "the database of the notes service (/notes/{id}; \"\" = off): its pool, its "
                "readiness in /readyz and its metrics",
                [](settings& s) -> std::string& { return s.postgres.url; }),
        u64_key("postgres.pool_size", "connections to the database at most", 1, 1000,
                [](settings& s) -> std::uint64_t& { return s.postgres.pool_size; }),
        duration_key(
            "postgres.checkout_timeout",
            "a request waits this long for a free connection (else 503)", 1ms, 1h,
            [](settings& s) -> std::chrono::nanoseconds& { return s.postgres.checkout_timeout; }),
        duration_key(
            "postgres.query_timeout",
            "a statement runs this long at most, then is cancelled on the server (504)", 1ms, 1h,
            [](settings& s) -> std::chrono::nanoseconds& { return s.postgres.query_timeout; }),
        duration_key(
            "postgres.connect_timeout", "connecting to the database gives up after this", 1ms, 1h,
            [](settings& s) -> std::chrono::nanoseconds& { return s.postgres.connect_timeout; }),
        string_key("log.level", "log level", {"trace", "debug", "info", "warn", "error", "off"},
                   [](settings& s) -> std::string& { return s.log.level; }),
    };
    return t;
}

std::string env_name(const std::string& key) {
    std::string e = "SMARM_";
    for (char c : key)
        e += c == '.' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return e;
}

const key_def* find_key(const std::string& name) {
    for (auto& k : table())
        if (k.name == name) return &k;
    return nullptr;
}

void apply(settings& s, const key_def& k, const std::string& value, const std::string& from) {
    try {
        k.set(s, value);
    } catch (const std::invalid_argument& e) {
        if (k.secret)  // the reason, never the value
            throw config_error("config: " + k.name + " (from " + from +
                               ") is not allowed: " + e.what() + "; expected " + k.allowed);
        throw config_error("config: " + k.name + ": \"" + value + "\" (from " + from +
                           ") is not allowed: expected " + k.allowed);
    }
}

void apply_yaml(settings& s, const std::string& text, const std::string& from) {
    YAML::Node root;
    try {
        root = YAML::Load(text);
    } catch (const YAML::Exception& e) {
        throw config_error("config: " + from + " is not valid YAML: " + e.what());
    }
    if (!root || root.IsNull()) return;
    if (!root.IsMap()) throw config_error("config: " + from + ": the top level must be a map");
    for (auto sec : root) {
        const std::string section = sec.first.as<std::string>();
        if (!sec.second.IsMap())
            throw config_error("config: " + from + ": section \"" + section + "\" must be a map");
        for (auto kv : sec.second) {
            const std::string name = section + "." + kv.first.as<std::string>();
            const key_def* k = find_key(name);
            if (!k) throw config_error("config: unknown key " + name + " in " + from);
            if (!kv.second.IsScalar())
                throw config_error("config: " + name + " in " + from + " must be a single value");
            apply(s, *k, kv.second.as<std::string>(), from);
        }
    }
}

void check(const settings& s) {
    if (s.http.tls_certificate.empty() != s.http.tls_private_key.empty())
        throw config_error(
            "config: http.tls_certificate and http.tls_private_key must be set together");
}

}  // namespace

namespace {

struct unit {
    std::string_view name;
    std::uint64_t mult;
};

/// "<digits>[ ]<unit>" -> digits x the unit's multiplier, at most `max`.
/// Throws std::invalid_argument: "not a <what>", "unknown unit", `too_big`.
std::uint64_t parse_scaled(const std::string& text, std::initializer_list<unit> units,
                           std::uint64_t max, const char* what, const char* too_big) {
    std::string t = trim(text);
    std::size_t i = 0;
    while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i])))
        ++i;
    if (i == 0) throw std::invalid_argument(std::string("not a ") + what);
    const std::uint64_t n = parse_u64(t.substr(0, i));
    const std::string u = trim(t.substr(i));
    for (const auto& [name, mult] : units) {
        if (u != name) continue;
        if (n > max / mult) throw std::invalid_argument(too_big);
        return n * mult;
    }
    throw std::invalid_argument("unknown unit");
}

}  // namespace

std::chrono::nanoseconds parse_duration(const std::string& text) {
    // A bare number is seconds.
    return std::chrono::nanoseconds(static_cast<std::int64_t>(
        parse_scaled(text,
                     {{"", 1'000'000'000},
                      {"s", 1'000'000'000},
                      {"ms", 1'000'000},
                      {"us", 1'000},
                      {"ns", 1},
                      {"m", 60'000'000'000},
                      {"h", 3'600'000'000'000}},
                     static_cast<std::uint64_t>(INT64_MAX), "duration", "too long")));
}

std::uint64_t parse_size(const std::string& text) {
    return parse_scaled(text,
                        {{"", 1},
                         {"B", 1},
                         {"KiB", 1ull << 10},
                         {"MiB", 1ull << 20},
                         {"GiB", 1ull << 30},
                         {"KB", 1000},
                         {"MB", 1000 * 1000},
                         {"GB", 1000 * 1000 * 1000}},
                        UINT64_MAX, "size", "too large");
}

const std::vector<key_info>& keys() {
    static const std::vector<key_info> k = [] {
        std::vector<key_info> out;
        settings d;
        for (auto& t : table())
            out.push_back({t.name, env_name(t.name), t.get(d), t.doc});
        return out;
    }();
    return k;
}

settings load_from(const std::string& yaml_text,
                   const std::vector<std::pair<std::string, std::string>>& env) {
    settings s;
    apply_yaml(s, yaml_text, "the YAML text");
    for (auto& [name, value] : env) {
        for (auto& k : table())
            if (env_name(k.name) == name) apply(s, k, value, name);
    }
    check(s);
    return s;
}

command load(int argc, const char* const* argv) {
    CLI::App app{"smarm-server: an HTTP server on the smarm actor runtime"};
    std::string file;
    command out;
    app.add_option("--config", file, "YAML config file (default: config/smarm.yaml if present)");
    app.add_flag("--print-config", out.print_config, "print the effective config and exit");
    app.add_flag("--check-config", out.check_config, "validate the config and exit");
    std::map<std::string, std::string> flags;
    for (auto& k : table())
        app.add_option("--" + k.name, flags[k.name], k.doc + " [" + env_name(k.name) + "]");
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp&) {
        throw config_error(app.help());
    } catch (const CLI::ParseError& e) {
        throw config_error("config: command line: " + std::string(e.what()));
    }

    settings& s = out.values;
    if (file.empty() && std::ifstream("config/smarm.yaml").good()) file = "config/smarm.yaml";
    if (!file.empty()) {
        std::ifstream in(file);
        if (!in) throw config_error("config: cannot read the config file " + file);
        std::stringstream text;
        text << in.rdbuf();
        apply_yaml(s, text.str(), file);
        s.source = file;
    }
    for (auto& k : table())
        if (const char* v = std::getenv(env_name(k.name).c_str())) apply(s, k, v, env_name(k.name));
    for (auto& k : table())
        if (app.count("--" + k.name) != 0) apply(s, k, flags[k.name], "--" + k.name);
    check(s);
    return out;
}

std::string to_yaml(const settings& s) {
    std::string out, section;
    for (auto& k : table()) {
        auto dot = k.name.find('.');
        std::string sec = k.name.substr(0, dot);
        if (sec != section) {
            if (!section.empty()) out += "\n";
            out += sec + ":\n";
            section = sec;
        }
        out += "  " + k.name.substr(dot + 1) + ": " + k.get(s) + "\n";
    }
    return out;
}

}  // namespace smarm::config
