// An installed-smarm consumer: one HTTP route that calls a named gen_server.
// Prints "listening on PORT", serves until SIGTERM, exits 0.

#include <smarm/gen_server.hpp>
#include <smarm/http/router.hpp>
#include <smarm/http/server.hpp>
#include <smarm/registry.hpp>
#include <smarm/runtime.hpp>
#include <smarm/supervisor.hpp>

#include <cstdio>
#include <stdexcept>
#include <string>

namespace http = smarm::http;

class counter : public smarm::gen_server<http::request, http::response> {
  public:
    http::response handle_call(http::request req) override {
        ++n_;
        return http::response(http::status::ok, std::string(*req.param("name")) + " " +
                                                    std::to_string(n_) + "\n");
    }

  private:
    unsigned n_ = 0;
};

inline constexpr smarm::name<counter::envelope> counter_name{"counter"};

int main() {
    http::server_config cfg;
    cfg.port = 0;
    smarm::run([&] {
        auto services = smarm::start_supervisor(
            {}, {{"counter", [] {
                      auto [tx, rx] = smarm::channel<counter::envelope>();
                      if (!smarm::register_name(counter_name, tx))
                          throw std::runtime_error("the name \"counter\" is taken");
                      counter c;
                      c.serve(std::move(rx));
                  }}});
        http::router r;
        r.route<counter>(http::verb::get, "/count/{name}", counter_name, std::chrono::seconds(2));
        http::server srv(cfg, std::move(r));
        srv.start();
        srv.stop_on_signals();
        std::printf("listening on %u\n", static_cast<unsigned>(srv.local_address().port()));
        std::fflush(stdout);
        srv.wait();
        smarm::request_stop(services.id);
    });
    return 0;
}
