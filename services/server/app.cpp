// smarm-server's supervision tree and lifecycle (app.hpp).
//
// The listener children (http, admin) own their http::server: each (re)start
// builds a fresh one from the config and its routes, binds (acking the
// supervisor only then), and parks in wait(). Three ways out:
//   - the server stopped itself (stop(), a signal): a normal end, which for a
//     transient child means "not restarted"; the http child then tells the
//     application to end (ended_tx), which stops the top supervisor;
//   - the supervisor stops the child (application end, rest_for_one): the
//     child stops its server (gracefully for http) and waits for it under
//     no_preempt, so its own pending stop cannot cut the drain short;
//   - the first bind fails: the error is handed to start() and the child ends
//     normally (a restart could not fix a taken port); a bind failure on a
//     later restart is an ordinary failure (restarted within intensity).
// `mu` guards the current servers, the addresses and the flags; it is held
// only for plain stores and loads (never across a park).

#include "server/app.hpp"

#include <smarm/causal.hpp>
#include <smarm/monitor.hpp>
#include <smarm/progress.hpp>
#include <smarm/select.hpp>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "debug/causal_routes.hpp"
#include "debug/debug.hpp"
#include "debug/trace_routes.hpp"
#include "examples/chat.hpp"
#include "notes/notes.hpp"
#include "observer/observer.hpp"

namespace smarm::services {

namespace http = smarm::http;

namespace {

/// Equal without a timing side channel on where the first difference is
/// (the length is not secret: the token's is fixed by whoever chose it).
bool same_secret(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    unsigned char diff = 0;
    for (std::size_t i = 0; i < a.size(); ++i)
        diff |= static_cast<unsigned char>(a[i] ^ b[i]);
    return diff == 0;
}

}  // namespace

std::function<std::optional<http::response>(const http::request&)> bearer_token_guard(
    std::string token) {
    return [token = std::move(token)](const http::request& req) -> std::optional<http::response> {
        auto h = req.header("Authorization");
        constexpr std::string_view scheme = "Bearer ";
        if (h && h->size() > scheme.size() && http::iequals(h->substr(0, scheme.size()), scheme) &&
            same_secret(h->substr(scheme.size()), token))
            return std::nullopt;
        http::response r(http::status::unauthorized,
                         h ? "401 Unauthorized: wrong bearer token\n"
                           : "401 Unauthorized: this listener needs Authorization: Bearer "
                             "<admin.token>\n");
        r.set("WWW-Authenticate", h ? R"(Bearer realm="smarm-admin", error="invalid_token")"
                                    : R"(Bearer realm="smarm-admin")");
        return r;
    };
}

kv_options kv_options_from(const config::settings& s) {
    kv_options kv;
    kv.value_limit = s.kv.value_limit;
    kv.call_timeout = s.kv.call_timeout;
    kv.log_path = s.kv.log_path;
    kv.sync = s.kv.sync == "none"    ? sync_mode::none
              : s.kv.sync == "group" ? sync_mode::group
                                     : sync_mode::always;
    kv.group_interval = s.kv.group_commit;
    kv.compact_bytes = s.kv.compact_bytes;
    return kv;
}

workers_options workers_options_from(const config::settings& s) {
    return {s.workers.count, s.workers.queue_limit, s.workers.call_timeout,
            s.workers.upload_limit};
}

std::vector<child_spec> default_services(const config::settings& s) {
    auto children = worker_children(workers_options_from(s));
    children.insert(children.begin(), kv_child(kv_options_from(s)));
    return children;
}

notes_options notes_options_from(const config::settings& s, metrics::exporter& m) {
    notes_options o;
    o.pool.connection.conninfo = s.postgres.url;
    o.pool.connection.connect_timeout = s.postgres.connect_timeout;
    o.pool.connection.query_timeout = s.postgres.query_timeout;
    o.pool.connection.on_statement = m.db_statement_observer();
    o.pool.size = s.postgres.pool_size;
    o.pool.checkout_timeout = s.postgres.checkout_timeout;
    o.pool.on_checkout = m.db_checkout_observer();
    return o;
}

http::server_config http_config_from(const config::settings& s) {
    http::server_config c;
    c.host = s.http.host;
    c.port = s.http.port;
    c.max_connections = s.http.max_connections;
    c.header_limit = s.http.header_limit;
    c.body_limit = s.http.body_limit;
    c.header_timeout = s.http.header_timeout;
    c.body_timeout = s.http.body_timeout;
    c.idle_timeout = s.http.idle_timeout;
    c.write_timeout = s.http.write_timeout;
    c.drain_timeout = s.http.drain_timeout;
    c.drain_grace = s.http.drain_grace;
    c.backlog = static_cast<int>(s.http.backlog);
    c.defer_accept = std::chrono::ceil<std::chrono::seconds>(s.http.defer_accept);
    c.access_log = s.http.access_log;
    c.access_log_file = s.http.access_log_file;
    c.websocket = {.max_message = static_cast<std::size_t>(s.websocket.max_message),
                   .ping_interval = s.websocket.ping_interval,
                   .idle_timeout = s.websocket.idle_timeout,
                   .message_timeout = s.websocket.message_timeout,
                   .close_timeout = s.websocket.close_timeout,
                   .deflate = s.websocket.deflate};
    c.http2 = {
        .enabled = s.http2.enabled,
        .max_concurrent_streams = static_cast<std::uint32_t>(s.http2.max_concurrent_streams)};
    if (!s.http.tls_certificate.empty())
        c.tls = http::tls_config{s.http.tls_certificate, s.http.tls_private_key};
    return c;
}

enum class listener { http, admin };

/// A query parameter as a count, at most `max` (0 when absent or bad).
std::uint64_t count_param(const http::request& q, std::string_view name, std::uint64_t max) {
    const auto v = q.query_param(name);
    if (!v) return 0;
    try {
        return std::min<std::uint64_t>(std::stoull(*v), max);
    } catch (const std::exception&) {
        return 0;
    }
}

/// The transfer test routes (http.test_routes): a slow handler, an echo,
/// a large body, a streamed one and a file, for the protocol tests (HTTP/2
/// flow control, stream concurrency).
void add_transfer_test_routes(http::router& r, const std::string& config_file) {
    if (!config_file.empty())  // a file body: the server's own config file
        r.get("/test/file", [config_file](http::request&) {
            return http::response::file(config_file, "text/yaml");
        });
    r.get("/test/sleep", [](http::request& q) {
        smarm::sleep(std::chrono::milliseconds(count_param(q, "ms", 60'000)));
        return http::response(http::status::ok, "slept\n");
    });
    r.post("/test/echo", [](http::request& q) {
        return http::response(http::status::ok, std::move(q.body()), "application/octet-stream");
    });
    r.get("/test/bytes", [](http::request& q) {
        return http::response(http::status::ok,
                              std::string(count_param(q, "n", std::uint64_t{64} << 20), 'x'),
                              "application/octet-stream");
    });
    r.get("/test/chunks", [](http::request& q) {
        const std::uint64_t n = count_param(q, "n", 1'000'000);
        const std::uint64_t size = count_param(q, "size", std::uint64_t{1} << 20);
        auto left = std::make_shared<std::uint64_t>(n);
        return http::response::chunked([left, size]() -> std::optional<std::string> {
            if (*left == 0) return std::nullopt;
            --*left;
            return std::string(size, 'x');
        });
    });
}

/// About `us` microseconds of dependent arithmetic with an observation
/// point every ~1 us: never a timed wait, which would absorb the delay a
/// causal experiment injects into it.
void burn_us(unsigned us) {
    static const double per_us = [] {
        std::uint64_t x = 1;
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 1'000'000; ++i) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            asm volatile("" : "+r"(x));
        }
        const double d =
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                .count();
        return 1e6 / std::max(d, 1.0);
    }();
    const auto chunk = static_cast<std::uint64_t>(per_us);
    std::uint64_t x = us;
    for (unsigned i = 0; i < us; ++i) {
        for (std::uint64_t j = 0; j < chunk; ++j) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            asm volatile("" : "+r"(x));
        }
        check();
    }
}

namespace {

/// The message of a failure's exception, if it has one.
std::optional<std::string> describe(const std::exception_ptr& e) {
    if (!e) return std::nullopt;
    try {
        std::rethrow_exception(e);
    } catch (const std::exception& x) {
        return x.what();
    } catch (...) {
    }
    return std::nullopt;
}

}  // namespace

struct application::state : std::enable_shared_from_this<application::state> {
    state(config::settings cfg, std::vector<child_spec> svc)
        : s(std::move(cfg)), services(std::move(svc)) {
        if (!s.postgres.url.empty()) {
            notes = std::make_shared<notes_state>();
            services.push_back(notes_child(notes_options_from(s, metrics), notes));
            metrics.attach_db_pool([n = notes] { return n->figures(); });
        }
        auto [etx, erx] = channel<int>();
        ended_tx = std::move(etx);
        ended_rx = std::move(erx);
        auto [btx, brx] = channel<std::optional<std::string>>();
        boot_tx = std::move(btx);
        boot_rx = std::move(brx);
    }

    const config::settings s;
    std::vector<child_spec> services;  // with notes_child when postgres.url is set
    metrics::exporter metrics;
    std::shared_ptr<notes_state> notes;  // null without postgres.url
    supervisor_ref top;

    // The http child sends here when its server stopped on its own.
    sender<int> ended_tx;
    receiver<int> ended_rx;
    // Each listener's first start: nullopt = bound, else the error.
    sender<std::optional<std::string>> boot_tx;
    receiver<std::optional<std::string>> boot_rx;

    mutable std::mutex mu;
    std::shared_ptr<http::server> servers[2];
    socket_address addresses[2];
    bool booted[2] = {false, false};
    bool signals = false;
    bool stopping = false;

    static const char* label(listener l) { return l == listener::http ? "http" : "admin"; }

    http::server_config config_for(listener l) {
        http::server_config c;
        if (l == listener::http) {
            c = http_config_from(s);
            c.on_request = metrics.request_observer();
            c.causal = s.causal.http;  // the main listener only: never the admin one
        } else {
            c.host = s.admin.host;
            c.port = s.admin.port;
            if (!s.admin.token.empty()) {
                // The observer page holds no data: it is served unguarded,
                // asks for the token and sends it on its fetches.
                c.authorize = [guard = bearer_token_guard(s.admin.token)](
                                  const http::request& q) -> std::optional<http::response> {
                    if (q.method() == http::verb::get && q.path() == "/observer")
                        return std::nullopt;
                    return guard(q);
                };
            }
        }
        std::lock_guard g(mu);
        // A restart binds the address the first start got (port 0 included).
        if (booted[static_cast<int>(l)]) c.port = addresses[static_cast<int>(l)].port();
        return c;
    }

    http::router routes_for(listener l) {
        http::router r;
        if (l == listener::http) {
            add_kv_routes(r, kv_options_from(s));
            add_worker_routes(r, workers_options_from(s));
            if (notes) add_notes_routes(r, notes);
            if (s.http.test_routes) {
                r.get("/test/throw", [](http::request&) -> http::response {
                    throw std::runtime_error("/test/throw: thrown on purpose");
                });
                // A known bottleneck for the causal profiler's live test:
                // `test.slow` is nearly all of the handler, `test.fast` none.
                r.get("/test/causal", [](http::request&) {
                    {
                        auto g = SMARM_CAUSAL_SITE("test.slow");
                        burn_us(300);
                    }
                    {
                        auto g = SMARM_CAUSAL_SITE("test.fast");
                        burn_us(1);
                    }
                    SMARM_PROGRESS("test.causal");
                    return http::response(http::status::ok, "ok\n");
                });
                add_transfer_test_routes(r, s.source);
            }
            r.get("/plaintext", [](http::request&) {
                return http::response(http::status::ok, "Hello, World!", "text/plain");
            });
            // The benchmarks' POST (its body read and dropped).
            r.post("/plaintext", [](http::request&) {
                return http::response(http::status::ok, "Hello, World!", "text/plain");
            });
            r.get("/json", [](http::request&) {
                return http::response(http::status::ok, R"({"message":"Hello, World!"})",
                                      "application/json");
            });
            r.websocket("/ws/echo", [](http::websocket& ws) {
                for (auto m = ws.recv(); !m.is_close(); m = ws.recv())
                    if (!ws.send(m.data, m.type)) return;
            });
            if (s.websocket.chat) chat::add_routes(r);
            r.get("/healthz",
                  [](http::request&) { return http::response(http::status::ok, "ok\n"); });
            r.get("/readyz", [this](http::request&) {
                if (auto why = not_ready())
                    return http::response(http::status::service_unavailable,
                                          "not ready: " + *why + "\n");
                return http::response(http::status::ok, "ready\n");
            });
        }
        // Read-only /metrics and /debug/* face the public port only without
        // an admin listener. Endpoints that act on the process (run an
        // experiment, stop an actor) are added on the admin listener alone,
        // whatever the config says: never on the public port.
        if ((l == listener::admin) == s.admin.enabled) {
            metrics.add_route(r);
            add_debug_routes(r, {.connections = [this] { return metrics.connections(); }});
            add_observer_route(r);
        }
        if (l == listener::admin) {
            add_causal_routes(r);
            add_debug_actions(r);
            add_trace_routes(r, {.flight = s.trace.flight,
                                 .buffer = s.trace.buffer,
                                 .max_bytes = s.trace.max_bytes});
        }
        if (l == listener::admin && s.http.test_routes)
            r.post("/test/stop/{what}", [this](http::request& q) { return stop_for_test(q); });
        return r;
    }

    /// POST /test/stop/{kv,worker,http}: request_stop the kv server, the
    /// first worker, or the public listener child, so that chaos tests can
    /// watch the tree restart it (202 with the pid; 404 when none runs).
    http::response stop_for_test(const http::request& q) {
        const std::string what(q.param("what").value_or(""));
        std::optional<pid> victim;
        if (what == "kv") {
            victim = whereis(kv_name);
        } else if (what == "worker") {
            auto ws = members(workers_group);
            if (!ws.empty()) victim = ws.front();
        } else if (what == "http") {
            for (auto& [id, p] : which_children(top))
                if (id == "http") victim = p;
        } else {
            return http::response(http::status::bad_request,
                                  "POST /test/stop/{kv,worker,http}: unknown \"" + what + "\"\n");
        }
        if (!victim || !request_stop(*victim))
            return http::response(http::status::not_found, what + ": not running\n");
        return http::response(http::status::accepted, what + " " + victim->to_string() + "\n");
    }

    std::optional<std::string> not_ready() const {
        {
            std::lock_guard g(mu);
            auto& srv = servers[static_cast<int>(listener::http)];
            if (stopping || srv == nullptr || srv->draining()) return "draining";
        }
        if (!whereis(kv_name)) return "kv";
        if (members(workers_group).empty()) return "workers";
        if (notes)
            if (auto why = notes->not_ready()) return why;
        return std::nullopt;
    }

    void run_listener(listener l, const std::function<void()>& started) {
        const int i = static_cast<int>(l);
        auto cfg = config_for(l);
        auto srv = std::make_shared<http::server>(cfg, routes_for(l));
        try {
            srv->start();
        } catch (const std::exception& e) {
            std::string what = std::string(label(l)) + " listener on " + cfg.host + ":" +
                               std::to_string(cfg.port) + ": " + e.what();
            bool first;
            {
                std::lock_guard g(mu);
                first = !booted[i];
            }
            if (first) {
                (void)boot_tx.send(std::move(what));
                return;  // a normal end: not restarted
            }
            throw std::runtime_error(what);
        }
        bool first, stop_now;
        {
            std::lock_guard g(mu);
            servers[i] = srv;
            addresses[i] = srv->local_address();
            first = !std::exchange(booted[i], true);
            stop_now = stopping;
            if (l == listener::http) {
                metrics.attach(*srv);
                if (signals) srv->stop_on_signals();
            }
        }
        if (stop_now) srv->stop();
        if (first) (void)boot_tx.send(std::nullopt);
        if (!first)
            spdlog::warn("smarm-server: {} listener restarted on {}", label(l),
                         srv->local_address().to_string());
        started();
        auto release = [&] {
            std::lock_guard g(mu);
            if (l == listener::http) metrics.detach();
            servers[i].reset();
        };
        try {
            srv->wait();
        } catch (const stopped&) {
            no_preempt hold;
            if (l == listener::http)
                srv->stop();
            else
                srv->stop(std::chrono::nanoseconds::zero());
            srv->wait();
            release();
            throw;
        }
        release();
        if (l == listener::http) (void)ended_tx.send(0);
    }

    child_spec listener_child(listener l) {
        // The tree may outlive the application object: children keep the
        // state alive.
        return {label(l),
                {},
                restart_policy::transient,
                [self = shared_from_this(), l](const std::function<void()>& started) {
                    self->run_listener(l, started);
                }};
    }
};

application::application(config::settings s) : application(s, default_services(s)) {}

application::application(config::settings s, std::vector<child_spec> services)
    : st_(std::make_shared<state>(std::move(s), std::move(services))) {}

application::~application() = default;

void application::start() {
    auto& st = *st_;
    std::vector<child_spec> children{supervisor_child("services", {}, st.services),
                                     st.listener_child(listener::http)};
    if (st.s.admin.enabled) children.push_back(st.listener_child(listener::admin));
    const std::size_t listeners = children.size() - 1;
    supervisor_options o;
    o.strategy = restart_strategy::rest_for_one;
    std::optional<monitor_ref> mon;
    {
        no_preempt hold;  // the monitor exists before the tree can fail
        st.top = start_supervisor(o, std::move(children));
        mon = monitor(st.top.id);
    }
    std::optional<std::string> error;
    for (std::size_t booted = 0; booted < listeners && !error;) {
        if (select({st.boot_rx, mon->rx}) == 1) {
            auto d = mon->rx.recv();
            std::string why = "the supervision tree ended while starting";
            if (auto what = d ? describe(d->error) : std::nullopt) why += ": " + *what;
            throw std::runtime_error("smarm-server: " + why);
        }
        if (auto r = st.boot_rx.try_recv(); r.value) {
            if (*r.value)
                error = *r.value;
            else
                ++booted;
        }
    }
    if (error) {
        request_stop(st.top.id);
        (void)mon->rx.recv();
        throw std::runtime_error("smarm-server: " + *error);
    }
}

socket_address application::http_address() const {
    std::lock_guard g(st_->mu);
    return st_->addresses[static_cast<int>(listener::http)];
}

socket_address application::admin_address() const {
    std::lock_guard g(st_->mu);
    return st_->addresses[static_cast<int>(listener::admin)];
}

void application::stop_on_signals() {
    std::shared_ptr<http::server> srv;
    {
        std::lock_guard g(st_->mu);
        st_->signals = true;
        srv = st_->servers[static_cast<int>(listener::http)];
    }
    if (srv) srv->stop_on_signals();
}

void application::stop() {
    std::shared_ptr<http::server> srv;
    {
        std::lock_guard g(st_->mu);
        st_->stopping = true;
        srv = st_->servers[static_cast<int>(listener::http)];
    }
    // Between restarts nobody serves: end at once (the restarting child
    // sees `stopping` and stops its new server itself).
    if (srv)
        srv->stop();
    else
        (void)st_->ended_tx.send(0);
}

bool application::ready() const {
    return !st_->not_ready();
}

int application::wait() {
    auto& st = *st_;
    auto mon = monitor(st.top.id);
    if (select({st.ended_rx, mon.rx}) == 0) {
        // The public server has stopped: the rest of the tree goes too.
        request_stop(st.top.id);
    }
    auto d = mon.rx.recv();
    if (d && d->reason == down_reason::panic) {
        spdlog::critical("smarm-server: {}",
                         describe(d->error).value_or("the top supervisor ended"));
        return 1;
    }
    return 0;
}

const supervisor_ref& application::top() const {
    return st_->top;
}

metrics::exporter& application::metrics() {
    return st_->metrics;
}

}  // namespace smarm::services
