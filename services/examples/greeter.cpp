// A server of one's own, as docs/writing-a-service.md builds it.
// Usage: smarm-greeter [port=8081]

#include <smarm/http/server.hpp>
#include <smarm/runtime.hpp>

#include <cstdio>
#include <cstdlib>

#include "greeter.hpp"

int main(int argc, char** argv) {
    smarm::http::server_config cfg;
    cfg.port = static_cast<std::uint16_t>(argc > 1 ? std::atoi(argv[1]) : 8081);
    smarm::run([&] {
        // 5. Start the services under a supervisor, then the HTTP server.
        auto services = smarm::start_supervisor({}, {greeter::visit_counter_child()});
        smarm::http::server srv(cfg, greeter::routes());
        srv.start();
        srv.stop_on_signals();  // SIGTERM/SIGINT: finish in-flight requests, then stop
        std::printf("greeter on %s\n", srv.local_address().to_string().c_str());
        std::fflush(stdout);
        srv.wait();
        smarm::request_stop(services.id);  // the services go with the server
    });
}
