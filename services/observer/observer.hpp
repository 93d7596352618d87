#pragma once
// The observer: one self-contained web page of the running process (its
// schedulers' utilisation over the last minute, the actors sortable by CPU
// share, messages/s, mailbox depth and the age of its oldest message, the
// supervision tree with restart counts, one actor's detail, stopping an
// actor, taking a trace or a causal profile). HTML, CSS and JavaScript are
// embedded in the binary (observer.html, compiled in): the page fetches
// nothing but the debug routes of the listener that served it
// (debug.hpp: /debug/schedulers, /debug/actors, /debug/tree?format=json,
// /debug/actor/{pid}; and, on the admin listener, POST
// /debug/actor/{pid}/stop, /debug/trace, /debug/causal).
//
//   GET /observer   the page (text/html). It holds no data, so a listener
//                   guarded by a bearer token may serve it unguarded
//                   (server/app.cpp does): the page asks for the token and
//                   sends it on each fetch.

#include <smarm/http/router.hpp>

#include <string_view>

namespace smarm::services {

/// The page's HTML.
std::string_view observer_page() noexcept;

/// Adds GET /observer to `r`.
void add_observer_route(http::router& r);

}  // namespace smarm::services
