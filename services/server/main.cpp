// smarm-server: the HTTP server binary (`make run`, the container image).
// Reads config/smarm.yaml (+ SMARM_* environment, + --section.key flags; see
// config/smarm.yaml), runs the supervision tree of server/app.hpp and stops
// gracefully on SIGTERM/SIGINT (a second signal forces).
//
// Routes: GET /plaintext, GET /json, GET /healthz (liveness: 200 while the
// process serves), GET /readyz (200 once the services are up, 503 while
// they are not or the server drains), the kv service under /kv
// (services/kv/kv.hpp), POST /work/sha256 (services/workers/workers.hpp),
// GET /metrics (metrics/), GET /debug/actors and /debug/tree
// (services/debug/); the last three on the admin listener when enabled.
//
// Exit status: 0 after a clean stop, 1 when the server cannot start or its
// supervision tree gave up, 2 for a bad config.

#include <smarm/config/config.hpp>
#include <smarm/runtime.hpp>

#include <spdlog/spdlog.h>

#include <cstdio>
#include <exception>

#include "server/app.hpp"

namespace config = smarm::config;

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
