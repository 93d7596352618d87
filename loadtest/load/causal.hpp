#pragma once
// smarm-load --causal: while the load runs, ask the server under it for a
// causal profile of the same interval (POST /debug/causal on its admin
// listener, smarm-server's services/debug/causal_routes.hpp), then fetch
// the rankings, profile.coz and the profile's JSON, from which the plot of
// the speedup curves is drawn here.
//
// The load generator is another process, so the profiler counts its
// requests as the world outside (what the profile needs; a client inside
// the profiled process would hide the gain). Everything here runs in one
// actor of smarm-load's runtime, beside the connection actors.

#include <chrono>
#include <string>

#include "load.hpp"

namespace smarm::load {

struct causal_options {
    target admin;       ///< the server's admin listener (http://host:port)
    std::string token;  ///< its bearer token ("" = none)
    std::string sites;  ///< "a,b"; "" = every site the server has
    std::string speedups = "0,25,50";
    std::chrono::milliseconds window{500};
    /// Points the rankings are by: throughput first (the plot's), latency
    /// second; smarm-server's causal.http adds these two.
    std::string throughput_point = "http.requests";
    std::string latency_point = "http.request";
    std::string coz_file = "profile.coz";  ///< "" = not written
    std::string plot_file;                 ///< .png or .svg; "" = none
};

/// What came back.
struct causal_report {
    std::string rankings;     ///< text tables, one per point
    std::string coz;          ///< profile.coz lines
    std::string plot_script;  ///< gnuplot, drawing to plot_file (made here)
};

/// One HTTP/1.1 exchange on a fresh connection (Connection: close).
struct admin_reply {
    unsigned status = 0;
    std::string body;
};
/// Sends `method path` with an optional form body and bearer token;
/// std::runtime_error naming the address when it cannot connect or the
/// answer is not HTTP. Call from an actor.
admin_reply admin_call(const target& t, const std::string& token, const std::string& method,
                       const std::string& path, const std::string& form,
                       std::chrono::nanoseconds timeout);

/// Asks for a profile lasting `length` and fetches its renderings; throws
/// std::runtime_error with the server's answer when it refuses the plan.
/// Call from an actor while the load runs.
causal_report profile_server(const causal_options& o, std::chrono::nanoseconds length);

/// A gnuplot script drawing the speedup curves of every site (throughput
/// point left, latency point right) to o.plot_file, from the profile's
/// JSON; std::runtime_error naming what is wrong with either.
std::string plot_script(const causal_options& o, const std::string& profile_json);

/// Writes what the options ask for (profile.coz, the plot via gnuplot);
/// std::runtime_error when a file cannot be written or gnuplot fails.
void write_causal_files(const causal_options& o, const causal_report& r);

}  // namespace smarm::load
