// smarm-server: the HTTP server binary (`make run`, the container image).
// Reads config/smarm.yaml (+ SMARM_* environment, + --section.key flags; see
// config/smarm.yaml), runs the supervision tree of server/app.hpp and stops
// gracefully on SIGTERM/SIGINT (a second signal forces).
//
// Routes: GET /plaintext, GET /json, GET /healthz (liveness: 200 while the
// process serves), GET /readyz (200 once the services are up, 503 while
// they are not or the server drains), the kv service under /kv
// (services/kv/kv.hpp), POST /work/sha256 (services/workers/workers.hpp),
// with postgres.url the notes service under /notes (services/notes/notes.hpp),
// GET /metrics (metrics/), GET /debug/actors and /debug/tree
// (services/debug/); the last three on the admin listener when enabled.
//
// At start it raises the soft open-file limit to the hard one and warns,
// naming both, when that is still below what http.max_connections needs.
//
// Exit status: 0 after a clean stop, 1 when the server cannot start or its
// supervision tree gave up, 2 for a bad config.

#include <smarm/config/config.hpp>
#include <smarm/net.hpp>
#include <smarm/postgres/postgres.hpp>
#include <smarm/runtime.hpp>

#include <spdlog/spdlog.h>

#include <cstdint>
#include <cstdio>
#include <exception>

#include "server/app.hpp"

namespace config = smarm::config;

namespace {
/// Descriptors smarm-server uses besides HTTP connections: listeners,
/// epoll, signal pipes, the kv log and its compaction, logs, admin
/// connections.
constexpr std::uint64_t fd_reserve = 128;
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
    if (!s.postgres.url.empty()) {
        // libpq's own parser: a typo is a bad config now, not a service
        // retrying forever.
        try {
            smarm::postgres::connection::check_conninfo(s.postgres.url);
        } catch (const std::invalid_argument& e) {
            std::fprintf(stderr, "config: postgres.url: %s\n", e.what());
            return 2;
        }
    }
    if (cmd.print_config) {
        std::fputs(config::to_yaml(s).c_str(), stdout);
        return 0;
    }
    if (cmd.check_config) {
        std::printf("config ok%s%s\n", s.source.empty() ? "" : ": ", s.source.c_str());
        return 0;
    }
    spdlog::set_level(spdlog::level::from_str(s.log.level));

    // Every connection is a descriptor: take the hard open-file limit, and
    // say once if even that is short of what max_connections needs (else
    // the symptom is accept failing under load, long after start).
    const smarm::fd_limit fds = smarm::raise_fd_limit();
    const std::uint64_t fds_needed = s.http.max_connections + fd_reserve;
    if (fds.soft < fds_needed)
        spdlog::warn(
            "open-file limit is {} (hard limit {}), below the {} that http.max_connections={} "
            "needs: connections past ~{} will fail to accept; raise the hard limit (ulimit -Hn, "
            "systemd LimitNOFILE=, docker/podman --ulimit nofile=) or lower http.max_connections",
            fds.soft, fds.hard, fds_needed, s.http.max_connections,
            fds.soft > fd_reserve ? fds.soft - fd_reserve : 0);

    smarm::runtime_config rc;
    rc.schedulers = static_cast<unsigned>(s.runtime.schedulers);
    rc.max_actors = s.runtime.max_actors;
    rc.share_cores = s.runtime.share_cores;
    int status = 0;
    try {
        smarm::runtime rt(rc);
        rt.run([&] {
            smarm::services::application app(s);
            try {
                app.start();
            } catch (const std::exception& e) {
                spdlog::critical("{}", e.what());
                status = 1;
                return;
            }
            app.stop_on_signals();
            if (s.admin.enabled)
                spdlog::info("smarm-server admin listener on {}", app.admin_address().to_string());
            spdlog::info("smarm-server listening on {}{}", app.http_address().to_string(),
                         s.source.empty() ? "" : " (config " + s.source + ")");
            status = app.wait();
            spdlog::info("smarm-server stopped");
        });
    } catch (const std::exception& e) {
        std::fprintf(stderr, "smarm-server: %s\n", e.what());
        return 1;
    }
    return status;
}
