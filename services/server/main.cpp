// smarm-server: the HTTP server binary (`make run`, the container image).
// Reads config/smarm.yaml (+ SMARM_* environment, + --section.key flags; see
// config/smarm.yaml), serves the built-in routes and stops gracefully on
// SIGTERM/SIGINT (a second signal forces).
//
// Routes: GET /plaintext, GET /json, GET /healthz (liveness: 200 while the
// process serves), GET /readyz (200 once the services are up, 503 while
// they are not or the server drains), and
// the kv service under /kv (services/kv/kv.hpp) and POST /work/sha256
// (services/workers/workers.hpp), GET /metrics (metrics/), GET /debug/actors
// and /debug/tree (services/debug/).

#include <smarm/config/config.hpp>
#include <smarm/http/server.hpp>
#include <smarm/metrics/metrics.hpp>
#include <smarm/runtime.hpp>
#include <smarm/supervisor.hpp>

#include "debug/debug.hpp"
#include "kv/kv.hpp"
#include "workers/workers.hpp"

#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdio>
#include <exception>
#include <memory>

namespace http = smarm::http;
namespace config = smarm::config;

namespace {

http::server_config http_config(const config::settings& s) {
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
    c.access_log = s.http.access_log;
    c.access_log_file = s.http.access_log_file;
    if (!s.http.tls_certificate.empty())
        c.tls = http::tls_config{s.http.tls_certificate, s.http.tls_private_key};
    return c;
}

http::router routes(const std::shared_ptr<std::atomic<http::server*>>& self,
                    const smarm::services::kv_options& kv,
                    const smarm::services::workers_options& workers, bool test_routes) {
    http::router r;
    smarm::services::add_kv_routes(r, kv);
    smarm::services::add_worker_routes(r, workers);
    if (test_routes)
        r.get("/test/throw", [](http::request&) -> http::response {
            throw std::runtime_error("/test/throw: thrown on purpose");
        });
    r.get("/plaintext", [](http::request&) {
        return http::response(http::status::ok, "Hello, World!", "text/plain");
    });
    r.get("/json", [](http::request&) {
        return http::response(http::status::ok, R"({"message":"Hello, World!"})",
                              "application/json");
    });
    r.get("/healthz", [](http::request&) { return http::response(http::status::ok, "ok\n"); });
    r.get("/readyz", [self](http::request&) {
        http::server* s = self->load();
        if (s == nullptr || s->draining())
            return http::response(http::status::service_unavailable, "not ready: draining\n");
        // Ready once the services are up: kv registered, a worker joined.
        if (!smarm::whereis(smarm::services::kv_name))
            return http::response(http::status::service_unavailable, "not ready: kv\n");
        if (smarm::members(smarm::services::workers_group).empty())
            return http::response(http::status::service_unavailable, "not ready: workers\n");
        return http::response(http::status::ok, "ready\n");
    });
    return r;
}

}  // namespace

int main(int argc, char** argv) {
    config::command cmd;
    try {
        cmd = config::load(argc, argv);
    } catch (const config::config_error& e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 2;
    }
    const config::settings& s = cmd.values;
    if (cmd.print_config) {
        std::fputs(config::to_yaml(s).c_str(), stdout);
        return 0;
    }
    if (cmd.check_config) {
        std::printf("config ok%s%s\n", s.source.empty() ? "" : ": ", s.source.c_str());
        return 0;
    }
    spdlog::set_level(spdlog::level::from_str(s.log.level));

    smarm::runtime_config rc;
    rc.schedulers = static_cast<unsigned>(s.runtime.schedulers);
    rc.max_actors = s.runtime.max_actors;
    int rc_exit = 0;
    try {
        smarm::runtime rt(rc);
        rt.run([&] {
            smarm::services::kv_options kv;
            kv.value_limit = s.kv.value_limit;
            kv.call_timeout = s.kv.call_timeout;
            kv.log_path = s.kv.log_path;
            kv.sync = s.kv.sync == "none"    ? smarm::services::sync_mode::none
                      : s.kv.sync == "group" ? smarm::services::sync_mode::group
                                             : smarm::services::sync_mode::always;
            kv.group_interval = s.kv.group_commit;
            kv.compact_bytes = s.kv.compact_bytes;
            // The services, supervised: a crashed kv restarts (its routes
            // answer 503 meanwhile).
            smarm::services::workers_options workers{s.workers.count, s.workers.queue_limit,
                                                     s.workers.call_timeout};
            auto children = smarm::services::worker_children(workers);
            children.insert(children.begin(), smarm::services::kv_child(kv));
            auto services = smarm::start_supervisor({}, std::move(children));
            auto self = std::make_shared<std::atomic<http::server*>>(nullptr);
            smarm::metrics::exporter metrics;
            auto hc = http_config(s);
            hc.on_request = metrics.request_observer();
            auto r = routes(self, kv, workers, s.http.test_routes);
            // /metrics and /debug/* on the main port, or only on the admin
            // listener when it is enabled.
            http::router admin_routes;
            http::router& internal = s.admin.enabled ? admin_routes : r;
            metrics.add_route(internal);
            smarm::services::add_debug_routes(internal);
            http::server srv(hc, std::move(r));
            metrics.attach(srv);
            http::server_config ac;
            ac.host = s.admin.host;
            ac.port = s.admin.port;
            http::server admin(ac, std::move(admin_routes));
            try {
                srv.start();
            } catch (const std::exception& e) {
                spdlog::critical("smarm-server: {}", e.what());
                smarm::request_stop(services.id);
                rc_exit = 1;
                return;
            }
            if (s.admin.enabled) {
                try {
                    admin.start();
                } catch (const std::exception& e) {
                    spdlog::critical("smarm-server: admin listener: {}", e.what());
                    srv.stop(std::chrono::nanoseconds::zero());
                    srv.wait();
                    metrics.detach();
                    smarm::request_stop(services.id);
                    rc_exit = 1;
                    return;
                }
                spdlog::info("smarm-server admin listener on {}",
                             admin.local_address().to_string());
            }
            self->store(&srv);
            srv.stop_on_signals();
            spdlog::info("smarm-server listening on {}{}", srv.local_address().to_string(),
                         s.source.empty() ? "" : " (config " + s.source + ")");
            srv.wait();
            if (s.admin.enabled) {
                admin.stop(std::chrono::nanoseconds::zero());
                admin.wait();
            }
            metrics.detach();
            self->store(nullptr);
            smarm::request_stop(services.id);
            spdlog::info("smarm-server stopped");
        });
    } catch (const std::exception& e) {
        std::fprintf(stderr, "smarm-server: %s\n", e.what());
        return 1;
    }
    return rc_exit;
}
