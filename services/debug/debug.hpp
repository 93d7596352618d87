#pragma once
// Debug endpoints over the runtime's introspection:
//   GET /debug/actors  every live actor and the runtime counters, as JSON
//                      (format version in "version"; fields are only added)
//   GET /debug/schedulers  the runtime counters alone (no actor walk): per
//                      scheduler pops, parks, yields and utilisation since
//                      the run began (running_ns = busy_ns + spinning_ns +
//                      parked_ns); two reads give the interval's
//   GET /debug/actor/{pid}  one actor (INDEX.GENERATION or <0.INDEX.GENERATION>,
//                      percent-encoded): its /debug/actors entry; 404 when
//                      it is not live, 400 naming a malformed pid
//   GET /debug/tree    the parentage forest, indented text; JSON with
//                      ?format=json or Accept: application/json, each node
//                      its actor, its supervisor record if it supervises
//                      and its child record (spec id, restarts, last exit)
//                      if a supervisor lists it
//   GET /debug/supervisors  every running supervisor: strategy, restarts,
//                      children with their restarts and last exit, JSON
// They expose internals: mount them on an admin listener or loopback only.
// The causal profiler's routes, which act on the process, are
// causal_routes.hpp (admin listener only).

#include <smarm/http/router.hpp>
#include <smarm/http/server.hpp>
#include <smarm/introspect.hpp>

#include <functional>
#include <optional>
#include <string>

namespace smarm::services {

/// The JSON document /debug/actors serves.
std::string actors_json(const introspect::snapshot& s);

/// What the debug routes report besides the runtime.
struct debug_sources {
    /// The public listener's connection counters, for /debug/schedulers'
    /// "process" object (absent when unset or nullopt).
    std::function<std::optional<http::server_stats>()> connections;
};

/// Adds GET /debug/actors, /debug/actor/{pid}, /debug/schedulers,
/// /debug/supervisors and /debug/tree to `r`.
void add_debug_routes(http::router& r, debug_sources src = {});

/// The response format a request asks for: ?format= (query or form body)
/// wins; else "json" when its Accept header names application/json before
/// (or without) a text type; else `fallback`.
std::string format_of(const http::request& q, std::string fallback);

/// Adds POST /debug/actor/{pid}/stop: request_stop() on a live actor (202
/// naming it; 404 when it is not live, 400 for a malformed pid). It acts on
/// the process: mount it on the admin listener only.
void add_debug_actions(http::router& r);

}  // namespace smarm::services
