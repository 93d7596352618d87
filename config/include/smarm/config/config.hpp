#pragma once
// smarm::config — the server's settings: one YAML file, every key
// overridable by an environment variable and by a command-line flag.
//
//     auto s = smarm::config::load(argc, argv);   // throws config_error
//
// Precedence, lowest first: built-in defaults, the YAML file (--config FILE,
// default config/smarm.yaml when it exists), environment variables
// SMARM_<SECTION>_<KEY> (upper case: SMARM_HTTP_PORT), flags
// --<section>.<key>=VALUE (--http.port=9090).
//
// Values: integers, booleans (true/false/yes/no/on/off/1/0), strings,
// durations ("250ms", "10s", "2m", "1h"; a bare number is seconds) and sizes
// ("512", "8KiB", "1MiB", "1GiB"; a bare number is bytes). Every problem is a
// config_error whose one-line message names the key, the bad value and what
// is allowed; unknown keys in the file are errors (typos do not pass
// silently). The documented default file is config/smarm.yaml; keys() lists
// every key with its default and doc line.
//
// Thread safety: load() and to_yaml() are plain functions over values.

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace smarm::config {

/// A bad file, key or value; what() is one line naming it.
class config_error : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

struct http_settings {
    std::string host = "0.0.0.0";
    std::uint16_t port = 8080;
    std::uint64_t max_connections = 10'000;
    std::uint64_t header_limit = 8 * 1024;
    std::uint64_t body_limit = 1024 * 1024;
    std::chrono::nanoseconds header_timeout = std::chrono::seconds(10);
    std::chrono::nanoseconds body_timeout = std::chrono::seconds(30);
    std::chrono::nanoseconds idle_timeout = std::chrono::seconds(60);
    std::chrono::nanoseconds write_timeout = std::chrono::seconds(30);
    std::chrono::nanoseconds drain_timeout = std::chrono::seconds(10);
    std::chrono::nanoseconds drain_grace = std::chrono::seconds(1);
    std::uint64_t backlog = 1024;              ///< listen() queue length
    std::chrono::nanoseconds defer_accept{0};  ///< TCP_DEFER_ACCEPT; 0 = off
    bool access_log = false;
    std::string access_log_file;
    bool test_routes = false;     ///< /test/throw, admin /test/stop/* (failure tests only)
    std::string tls_certificate;  ///< both set: TLS on
    std::string tls_private_key;
};

/// HTTP/2 on the HTTP listener (smarm::http::http2_options).
struct http2_settings {
    bool enabled = true;  ///< h2 by ALPN (TLS), h2c by prior knowledge (plain)
    std::uint64_t max_concurrent_streams = 100;
};

struct admin_settings {
    bool enabled = true;  ///< serve /metrics and /debug/* here instead of the main port
    std::string host = "127.0.0.1";
    std::uint16_t port = 9090;
    /// "" = none; else every admin request needs `Authorization: Bearer
    /// <token>` (16..4096 visible ASCII characters). Printed redacted.
    std::string token;
};

struct runtime_settings {
    std::uint64_t schedulers = 0;  ///< 0 = one per hardware thread
    std::uint64_t max_actors = std::uint64_t{1} << 20;
    bool share_cores = true;  ///< runtime_config::share_cores
};

struct kv_settings {
    std::uint64_t value_limit = 1024 * 1024;  ///< bytes per value (else 413)
    std::chrono::nanoseconds call_timeout = std::chrono::seconds(2);  ///< else 504
    std::string log_path;         ///< append-only log ("" = memory only)
    std::string sync = "always";  ///< always (fdatasync per write), group or none
    std::chrono::nanoseconds group_commit = std::chrono::milliseconds(5);  ///< sync: group
    std::uint64_t compact_bytes = 64ull << 20;  ///< compact a log past this size
};

struct workers_settings {
    std::uint64_t count = 2;         ///< actors in the "workers" pool
    std::uint64_t queue_limit = 16;  ///< waiting requests per worker before 503
    std::chrono::nanoseconds call_timeout = std::chrono::seconds(10);  ///< else 504
    std::uint64_t upload_limit = std::uint64_t{1} << 30;  ///< POST /upload/sha256's body
};

struct causal_settings {
    /// Causal profiling hooks in the HTTP front end (a site per route, the
    /// http.requests / per-route progress points, the http.request latency
    /// point); experiments run only when asked (POST /debug/causal).
    bool http = false;
};

struct trace_settings {
    /// Keep a flight recorder of scheduler and message events running
    /// (GET /debug/trace/flight dumps it).
    bool flight = false;
    std::uint64_t buffer = std::uint64_t{8} << 20;      ///< ring bytes per thread
    std::uint64_t max_bytes = std::uint64_t{64} << 20;  ///< JSON per trace at most
};

/// WebSocket limits (smarm::http::websocket_options) and the chat example.
struct websocket_settings {
    std::uint64_t max_message = std::uint64_t{16} << 20;
    std::chrono::nanoseconds ping_interval = std::chrono::seconds(30);  ///< 0 = never
    std::chrono::nanoseconds idle_timeout = std::chrono::seconds(75);   ///< 0 = never
    std::chrono::nanoseconds message_timeout = std::chrono::seconds(30);
    std::chrono::nanoseconds close_timeout = std::chrono::seconds(5);
    bool deflate = false;  ///< negotiate permessage-deflate
    bool chat = false;     ///< the chat example on /ws/chat/{room}
};

struct postgres_settings {
    /// libpq URI or conninfo ("" = no database: the notes service is off).
    /// Printed with its password redacted.
    std::string url;
    std::uint64_t pool_size = 10;
    std::chrono::nanoseconds checkout_timeout = std::chrono::seconds(1);  ///< else 503
    std::chrono::nanoseconds query_timeout = std::chrono::seconds(5);     ///< else 504
    std::chrono::nanoseconds connect_timeout = std::chrono::seconds(5);
};

struct log_settings {
    std::string level = "info";  ///< trace, debug, info, warn, error, off
};

/// Every setting of smarm-server.
struct settings {
    http_settings http;
    http2_settings http2;
    admin_settings admin;
    runtime_settings runtime;
    kv_settings kv;
    workers_settings workers;
    causal_settings causal;
    trace_settings trace;
    websocket_settings websocket;
    postgres_settings postgres;
    log_settings log;
    std::string source;  ///< the YAML file read ("" when none)
};

/// One documented key.
struct key_info {
    std::string name;           ///< "http.port"
    std::string env;            ///< "SMARM_HTTP_PORT"
    std::string default_value;  ///< as written in YAML
    std::string doc;
};

/// What the command line asked for besides settings.
struct command {
    settings values;
    bool print_config = false;  ///< --print-config
    bool check_config = false;  ///< --check-config
};

/// Loads defaults, file, environment and flags (see the header comment).
/// `env` is consulted through getenv. Throws config_error.
command load(int argc, const char* const* argv);
/// Same, from a YAML text (tests; "" = no file) and explicit environment
/// pairs, without flags.
settings load_from(const std::string& yaml_text,
                   const std::vector<std::pair<std::string, std::string>>& env = {});

/// The effective settings as YAML (loadable again, except that a set secret
/// such as admin.token prints as "<redacted>", which loading refuses).
std::string to_yaml(const settings& s);
/// Every key, in file order.
const std::vector<key_info>& keys();

/// "250ms" / "10s" / "2m" / "1h" / "3" (seconds); throws std::invalid_argument.
std::chrono::nanoseconds parse_duration(const std::string& text);
/// "512" / "8KiB" / "1MiB" / "1GiB" (also KB/MB/GB as powers of 1000).
std::uint64_t parse_size(const std::string& text);

}  // namespace smarm::config
