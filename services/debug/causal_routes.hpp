#pragma once
// The causal profiler over HTTP, on the live process (framework causal.hpp):
//
//   POST /debug/causal?speedups=0,25,50&window_ms=500&rounds=1&sites=a,b
//                     &points=p&mode=sweep|randomized&experiments=40
//                     &duration=30s&rank=a,b&format=summary|ranking|json|coz|gnuplot
//       runs the experiments while the process serves its traffic and
//       answers with the profile (200). The parameters come from the query
//       or an application/x-www-form-urlencoded body (curl -d; the body
//       wins). `duration` fits as many sweep rounds (or randomized
//       experiments) as it holds, instead of `rounds` (`experiments`).
//       `rank` orders sites by progress or latency points: the summary
//       opens with the first's ranking, `ranking` is every point's ranking
//       alone, the gnuplot script plots the first. A `duration` shorter
//       than one round (one window, randomized) is refused. The format is `format`, or
//       JSON when Accept asks for application/json first, or the summary;
//       gnuplot is a script drawing to `output` (.png or .svg). 409 while
//       another run is active (the body names it), 400 naming the bad
//       parameter (a plan the controller refuses included), 413 when the
//       planned run would take longer than `max_run`.
//   GET  /debug/causal/last?format=...&rank=...   the last finished
//       profile (404 before the first).
//
// They act on the process: mount them on the admin listener only.
// Thread safety: the routes may run on any scheduler at once; one run at
// a time per process (the controller's own rule).

#include <smarm/http/router.hpp>

#include <chrono>

namespace smarm::services {

struct causal_routes_options {
    /// The longest run a request may plan (cells x rounds x window, or
    /// experiments x window, cooldowns included).
    std::chrono::seconds max_run{600};
};

/// Adds POST /debug/causal and GET /debug/causal/last to `r`.
void add_causal_routes(http::router& r, causal_routes_options o = {});

}  // namespace smarm::services
