#pragma once
// smarm-load's engine: connection actors driving HTTP/1.1 requests at a
// target, closed or open loop, with per-connection histograms merged into
// one report. main.cpp wraps it in a command line; tests drive it directly.
//
// Closed loop: each connection sends its next request as soon as the
// previous response is read. Open loop (rate > 0): each connection has a
// schedule (rate / connections requests per second, staggered across
// connections) and a request's latency is measured from the moment the
// schedule intended to send it, not from when it was sent, so a stalled
// server is charged for the requests it kept from being sent (coordinated
// omission, corrected as wrk2 does). The timeout runs from that moment too,
// and a request whose timeout has passed before its connection is free to
// send it is counted as a timeout and never sent: its user gave up. Sending
// it would only make the server do work nobody waits for, and a connection
// lost to it; after a stall of the timeout or longer, the run would never
// catch up (found by the soak with a 6 s SIGSTOP: 500 req/s after it).
//
// Latency is measured from the write (closed loop) or the intended send
// time (open loop) to the last byte of the response; with a connection per
// request it includes the connect. Responses completing during the warm-up
// are not counted; requests in flight when the run ends are dropped.
//
// WebSocket mode (a ws:// URL): each connection upgrades once (GET path)
// and then sends messages of sizes drawn from `ws.sizes`, each a "request"
// timed to its echo's last byte; the server must echo (smarm-server's GET
// /ws/echo). Frames are masked with the all-zero key (RFC 6455 allows any
// key; a load generator has no proxy to protect), so the client spends no
// CPU masking. A server's ping is answered; a close or a lost connection is
// an error and the connection upgrades again.

#include <smarm/runtime.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "histogram.hpp"
#include "scenario.hpp"

namespace smarm::load {

/// http://host[:port]/path split up.
struct target {
    std::string host;
    std::uint16_t port = 80;
    std::string path = "/";
    std::string host_header;  ///< "host:port" as sent
    bool websocket = false;   ///< ws:// (WebSocket mode)
};
/// WebSocket mode's messages (see the header comment).
struct ws_options {
    /// Message sizes in bytes and their weights (drawn per message).
    std::vector<std::pair<std::size_t, double>> sizes = {{32, 1.0}};
    bool binary = false;  ///< binary messages (else text: ASCII payloads)
};
/// Parses "SIZE[:WEIGHT],..." ("32", "32:9,4096:1"; sizes take K/KiB, M/MiB);
/// throws std::invalid_argument naming the bad item.
std::vector<std::pair<std::size_t, double>> parse_ws_sizes(const std::string& text);

/// Parses "http://host[:port][/path]" or "ws://..." (WebSocket mode);
/// throws std::invalid_argument naming the URL and what is wrong (https
/// and wss are not supported).
target parse_url(const std::string& url);

struct options {
    target to;
    scenario mix = scenario::single("GET", "/", 0, {});
    unsigned connections = 64;
    unsigned threads = 2;                                          ///< schedulers
    std::chrono::nanoseconds duration = std::chrono::seconds(10);  ///< measured part
    std::chrono::nanoseconds warmup = std::chrono::seconds(0);     ///< before it
    std::chrono::nanoseconds timeout = std::chrono::seconds(5);    ///< per request
    double rate = 0;         ///< requests/s over all connections; 0 = closed loop
    bool keep_alive = true;  ///< false: a connection per request
    ws_options ws;           ///< with a ws:// target
    std::uint64_t seed = 1;  ///< random paths and bodies
    /// Called about once a second with a one-line progress report.
    std::function<void(const std::string&)> progress;
};

enum class error_kind : std::size_t { connect, timeout, write, read, parse, count };
const char* error_name(error_kind k);

struct report {
    std::uint64_t requests = 0;  ///< responses counted (after the warm-up)
    std::uint64_t bytes = 0;     ///< response bytes read (counted requests)
    double seconds = 0;          ///< the measured window
    histogram latency;           ///< nanoseconds
    std::map<unsigned, std::uint64_t> statuses;
    std::array<std::uint64_t, static_cast<std::size_t>(error_kind::count)> errors{};
    std::map<std::string, std::uint64_t> by_request;  ///< scenario entry name -> count
    std::uint64_t connects = 0;                       ///< TCP connections opened
    double rate() const { return seconds > 0 ? static_cast<double>(requests) / seconds : 0; }
    std::uint64_t error_total() const;
    /// Responses with status >= 400.
    std::uint64_t bad_statuses() const;
};

/// Runs the load. Call from an actor (main.cpp runs it as the root actor of
/// a runtime with `threads` schedulers).
report run(const options& o);

/// The human-readable report.
std::string format_report(const options& o, const report& r);
/// The report as JSON (latency in microseconds).
std::string format_json(const options& o, const report& r);
/// Writes a latency-by-percentile plot with gnuplot: PNG or SVG by the
/// file's extension. Throws std::runtime_error when gnuplot is missing or
/// fails.
void write_plot(const report& r, const std::string& file, const std::string& title);
/// Runs gnuplot on the script file `script`; std::runtime_error with its
/// output when it fails or is missing.
void run_gnuplot(const std::string& script);

}  // namespace smarm::load
