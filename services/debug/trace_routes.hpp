#pragma once
// The tracer over HTTP, on the live process (framework trace.hpp):
//
//   GET /debug/trace?seconds=N&max_bytes=SIZE
//       records the next N seconds (1..max_seconds, default 5) and answers
//       with the Chrome trace-event JSON (open it in ui.perfetto.dev or
//       chrome://tracing). A running flight recorder is replaced for the
//       interval (the interval holds what it would have) and restarted
//       after. 409 while another interval records (the body says since
//       when), 400 naming a bad parameter.
//   GET /debug/trace/flight?max_bytes=SIZE
//       the flight recorder's events now: what led up to this moment. 409
//       when no flight recorder runs (trace.flight=false) or an interval
//       recording has it replaced.
//
// `max_bytes` (default the route's option) caps the JSON; the oldest
// events are cut and the file says so. Mount on the admin listener only:
// recording costs every request a little.
// Thread safety: the routes may run on any scheduler at once; one
// interval at a time per process.

#include <smarm/http/router.hpp>

#include <chrono>
#include <cstdint>

namespace smarm::services {

struct trace_routes_options {
    /// The flight recorder to keep running (restarted after an interval).
    bool flight = false;
    std::uint64_t buffer = std::uint64_t{8} << 20;      ///< ring bytes per thread
    std::uint64_t max_bytes = std::uint64_t{64} << 20;  ///< default JSON cap
    std::chrono::seconds max_seconds{60};               ///< the longest interval
};

/// Starts the flight recorder when `o.flight` (once per process: later
/// calls only note the options) and adds the two routes to `r`.
void add_trace_routes(http::router& r, trace_routes_options o = {});

}  // namespace smarm::services
