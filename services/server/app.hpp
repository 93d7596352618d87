#pragma once
// smarm-server as a library: its supervision tree, routes and lifecycle.
// main.cpp runs one; tests run one in-process.
//
//   top        supervisor, rest_for_one (a restarted services tree restarts
//    │         the listeners after it, so they never serve a stale world)
//    ├─ services   supervisor, one_for_one: kv, worker-0 .. worker-(n-1)
//    ├─ http       the public listener: the built-in routes, plus the
//    │             read-only /metrics and /debug/* when admin.enabled is false
//    └─ admin      (admin.enabled, the default; loopback unless admin.host
//                  says otherwise) /metrics, /debug/* and every endpoint that
//                  acts on the process; admin.token set: each request needs
//                  Authorization: Bearer <token> (else 401)
//
// Lifecycle: start() returns once both listeners are bound (or throws naming
// the address; nothing stays running). A graceful stop (stop(), or the first
// SIGTERM/SIGINT after stop_on_signals()) stops accepting, lets in-flight
// requests finish (http.drain_timeout; idle connections are answered for
// http.drain_grace, see http/server.hpp), then stops the admin listener and the
// services; a second signal stops every connection at once. A listener child
// that fails after start is restarted on the same address; the services
// restart per their supervisor. When the top supervisor exceeds its restart
// intensity it gives up and wait() returns 1 (the process then exits non-zero
// and its orchestrator restarts it).

#include <smarm/config/config.hpp>
#include <smarm/http/server.hpp>
#include <smarm/metrics/metrics.hpp>
#include <smarm/supervisor.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kv/kv.hpp"
#include "workers/workers.hpp"

namespace smarm::services {

/// The kv service's options as the config gives them.
kv_options kv_options_from(const config::settings& s);
/// The workers pool's options as the config gives them.
workers_options workers_options_from(const config::settings& s);
/// The services supervisor's children: kv, then the workers.
std::vector<child_spec> default_services(const config::settings& s);
/// The public listener's server_config.
http::server_config http_config_from(const config::settings& s);
/// The admin listener's guard when admin.token is set: a request without
/// `Authorization: Bearer <token>` (scheme case-insensitive, the token
/// compared in constant time) gets 401 with a WWW-Authenticate challenge.
std::function<std::optional<http::response>(const http::request&)> bearer_token_guard(
    std::string token);

class application {
  public:
    /// `services` are the children of the services supervisor
    /// (default_services(s) for smarm-server; tests may wrap them).
    explicit application(config::settings s);
    application(config::settings s, std::vector<child_spec> services);
    ~application();
    application(const application&) = delete;
    application& operator=(const application&) = delete;

    /// Starts the tree (call from an actor). Throws std::runtime_error naming
    /// the listener and the reason when one cannot start.
    void start();
    /// Where the public listener is bound (resolves port 0).
    socket_address http_address() const;
    /// Where the admin listener is bound (admin.enabled only).
    socket_address admin_address() const;
    /// SIGTERM/SIGINT: the first stops gracefully, the second at once.
    void stop_on_signals();
    /// Graceful stop; returns at once (wait() for the end).
    void stop();
    /// True once the services are up and the server is not draining (what
    /// GET /readyz answers).
    bool ready() const;
    /// Parks until the application has ended: 0 after a stop, 1 when the
    /// top supervisor gave up.
    int wait();
    /// The top supervisor (tests look at its children).
    const supervisor_ref& top() const;
    metrics::exporter& metrics();

  private:
    struct state;
    std::shared_ptr<state> st_;
};

}  // namespace smarm::services
