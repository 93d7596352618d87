#pragma once
// smarm::http::router — maps method + path to a handler.
//
//     http::router r;
//     r.get("/plaintext", [](http::request&) { return http::response(http::status::ok, "Hi"); });
//     r.get("/users/{id}", show_user);                 // req.param("id")
//     r.get("/static/*", serve_static);                // req.wildcard()
//     r.route<kv_server>(http::verb::put, "/kv/{key}", kv_name, 2s);
//
// Patterns are matched segment by segment against the percent-decoded path
// ("%2F" inside a segment stays part of that segment). A segment is a
// literal, a parameter "{name}" (one non-empty segment), or, last only, "*"
// (the rest of the path, possibly empty). When several patterns match, the
// most specific wins: at the first segment where they differ, a literal
// beats a parameter, which beats the wildcard; "/a" beats "/a/*" for the
// path "/a". A GET route also answers HEAD. A path no pattern matches is
// 404; a path that matches only under other methods is 405 with an Allow
// header.
//
// Two kinds of handlers:
// - inline: a function run in the connection actor (it may park: call
//   other actors, sleep, do IO);
// - registry-routed: the route names a registered gen_server whose call type
//   is constructible from http::request and whose reply converts to
//   http::response. The connection actor calls it by name with the route's
//   deadline: server not running -> 503, deadline passed -> 504.
//
// A route's request body is read whole before its handler runs (up to
// server_config::body_limit, else 413), unless the route is added with
// http::streamed_body: its handler reads the body as it arrives
// (request::read_body) up to the route's own limit, so an upload of any
// size costs one read buffer, not its size. Streamed routes are inline
// handlers only (the body is read from the handler's actor).
//
// A handler that throws gets a 500 carrying the request id (logged with the
// exception); the connection carries on.
//
// Thread safety: build the router before the server starts; afterwards it
// is only read (by every connection actor at once).

#include <smarm/gen_server.hpp>
#include <smarm/http/message.hpp>
#include <smarm/http/websocket.hpp>
#include <smarm/registry.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace smarm::http {

using handler = std::function<response(request&)>;

/// A route whose handler reads its request body itself (see the header
/// comment and request::read_body).
struct streamed_body {
    /// The most body bytes the route takes: past it read_body() throws
    /// body_error(413), and a larger Content-Length is refused before the
    /// handler runs.
    std::uint64_t limit = std::uint64_t{1} << 30;
};

/// The outcome of routing one request.
struct route_match {
    const handler* target = nullptr;  ///< null: see `status`
    /// With a target: its streamed_body, when the route streams its body.
    const streamed_body* streamed = nullptr;
    http::status status = http::status::not_found;
    std::string allow;      ///< for 405: "GET, HEAD, PUT"
    std::size_t index = 0;  ///< with a target: the route's place in routes()
};

/// What the router holds about one route (routes()).
struct route_info {
    verb method;
    std::string pattern;
    /// The registered name a registry-routed route calls ("" for inline).
    std::string service;
    /// Whether the handler reads the body itself (streamed_body).
    bool streamed = false;
    /// "GET /kv/{key}": the route's name in logs, metrics and profiles.
    std::string name() const;
};

class router {
  public:
    /// Adds a route. Throws std::invalid_argument naming the pattern when it
    /// is malformed (no leading '/', '*' not last, empty or duplicate
    /// parameter name, a duplicate route for the same method).
    router& add(verb method, std::string_view pattern, handler h);
    /// Adds a route whose handler reads the body as it arrives (see the
    /// header comment); throws std::invalid_argument as add() does, and for
    /// a limit of 0.
    router& add(verb method, std::string_view pattern, handler h, streamed_body body);
    router& get(std::string_view p, handler h) { return add(verb::get, p, std::move(h)); }
    router& post(std::string_view p, handler h) { return add(verb::post, p, std::move(h)); }
    router& post(std::string_view p, handler h, streamed_body b) {
        return add(verb::post, p, std::move(h), b);
    }
    router& put(std::string_view p, handler h) { return add(verb::put, p, std::move(h)); }
    router& put(std::string_view p, handler h, streamed_body b) {
        return add(verb::put, p, std::move(h), b);
    }
    router& del(std::string_view p, handler h) { return add(verb::delete_, p, std::move(h)); }
    /// A WebSocket route (GET): upgrades a valid request and runs `h` in the
    /// connection actor (smarm/http/websocket.hpp); 426/400 otherwise.
    router& websocket(std::string_view p, websocket_handler h) {
        return get(p, [h = std::move(h)](request& req) { return accept_websocket(req, h); });
    }

    /// A registry-routed route (see the header comment).
    template <class Server>
    router& route(verb method, std::string_view pattern, name<typename Server::envelope> n,
                  std::chrono::nanoseconds deadline) {
        std::string text(n.text);
        return add_routed(method, pattern, text, [text, deadline](request& req) -> response {
            using call_t = typename Server::call_type;
            auto r = smarm::call<Server>(name<typename Server::envelope>(text),
                                         call_t(std::move(req)), deadline);
            if (r) return response(std::move(*r.value));
            if (*r.error == call_error::timeout)
                return response(status::gateway_timeout, "deadline passed\n");
            return response(status::service_unavailable, "service unavailable\n");
        });
    }

    /// Finds the handler for `req` and fills its params, wildcard and route.
    route_match match(request& req) const;

    std::size_t size() const noexcept { return routes_.size(); }
    /// The largest limit of any streamed route (0: none streams): a
    /// connection reads a request's head with this limit in force and
    /// routes a request with a body before reading it only when it is not 0.
    std::uint64_t stream_limit() const noexcept { return stream_limit_; }
    /// Every route, in the order added (route_match::index).
    std::vector<route_info> routes() const;

  private:
    router& add_routed(verb method, std::string_view pattern, std::string service, handler h);

    struct segment {
        enum kind_t { literal, param, wildcard } kind;
        std::string text;  // literal text or parameter name
    };
    struct entry {
        verb method;
        std::string pattern;
        std::vector<segment> segments;
        handler h;
        std::string service;  ///< registry-routed: the name called
        std::optional<streamed_body> streamed;
    };
    std::vector<entry> routes_;
    /// Transparent hashing: match looks a path up by string_view.
    struct path_hash {
        using is_transparent = void;
        std::size_t operator()(std::string_view s) const noexcept {
            return std::hash<std::string_view>{}(s);
        }
    };
    /// All-literal routes by path ("/a/b"): indexes into routes_, in the
    /// order they were added.
    std::unordered_map<std::string, std::vector<std::size_t>, path_hash, std::equal_to<>> exact_;
    /// Bit (length % 64) set for every key of exact_.
    std::uint64_t exact_lengths_ = 0;
    std::uint64_t stream_limit_ = 0;
};

/// Decodes %XX escapes; false (and `out` unspecified) on a bad escape.
/// '+' is left alone (it means space only in form bodies and queries).
bool percent_decode(std::string_view in, std::string& out);

}  // namespace smarm::http
