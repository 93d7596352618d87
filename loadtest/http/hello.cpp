// smarm-hello: the minimal plaintext server the HTTP benchmarks run
// (loadtest/http/compare_http.py), beside nginx and Go net/http.
// Usage: smarm-hello [port=18090] [schedulers=hardware threads] [idle_spin_us=50]

#include <smarm/http/server.hpp>
#include <smarm/runtime.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

namespace http = smarm::http;

int main(int argc, char** argv) {
    http::server_config cfg;
    cfg.host = "127.0.0.1";
    cfg.port = static_cast<std::uint16_t>(argc > 1 ? std::atoi(argv[1]) : 18090);
    cfg.idle_timeout = std::chrono::seconds(65);
    smarm::runtime_config rc;
    if (argc > 2) rc.schedulers = static_cast<unsigned>(std::atoi(argv[2]));
    if (argc > 3) rc.idle_spin = std::chrono::microseconds(std::atoi(argv[3]));
    try {
        smarm::runtime rt(rc);
        rt.run([&] {
            http::router r;
            r.get("/plaintext", [](http::request&) {
                return http::response(http::status::ok, "Hello, World!", "text/plain");
            });
            http::server srv(cfg, std::move(r));
            srv.start();
            srv.stop_on_signals();
            std::printf("smarm-hello listening on %s\n", srv.local_address().to_string().c_str());
            std::fflush(stdout);
            srv.wait();
        });
    } catch (const std::exception& e) {  // a bad argument, the port taken
        std::fprintf(stderr, "smarm-hello: %s\n", e.what());
        return 1;
    }
    return 0;
}
