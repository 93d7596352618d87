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
//   GET /debug/tree    the parentage forest, indented text
// They expose internals: mount them on an admin listener or loopback only.
// The causal profiler's routes, which act on the process, are
// causal_routes.hpp (admin listener only).

#include <smarm/http/router.hpp>
#include <smarm/introspect.hpp>

#include <string>

namespace smarm::services {

/// The JSON document /debug/actors serves.
std::string actors_json(const introspect::snapshot& s);

/// Adds GET /debug/actors, /debug/actor/{pid}, /debug/schedulers and
/// /debug/tree to `r`.
void add_debug_routes(http::router& r);

/// Adds POST /debug/actor/{pid}/stop: request_stop() on a live actor (202
/// naming it; 404 when it is not live, 400 for a malformed pid). It acts on
/// the process: mount it on the admin listener only.
void add_debug_actions(http::router& r);

}  // namespace smarm::services
