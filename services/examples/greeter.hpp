#pragma once
// The service from docs/writing-a-service.md: a gen_server that counts
// visits per name, reached through a registry-routed route, next to an
// inline route. greeter.cpp runs it; tests/services/greeter_test.cpp checks
// it, so the guide cannot rot.

#include <smarm/gen_server.hpp>
#include <smarm/http/router.hpp>
#include <smarm/registry.hpp>
#include <smarm/supervisor.hpp>

#include <map>
#include <string>

namespace greeter {

namespace http = smarm::http;

// 1. The service: a gen_server whose calls are HTTP requests and whose
//    replies are HTTP responses. It owns its state; nothing else touches it.
class visit_counter : public smarm::gen_server<http::request, http::response> {
  public:
    http::response handle_call(http::request req) override {
        std::string who(req.param("name").value_or("nobody"));
        unsigned n = ++visits_[who];
        return http::response(http::status::ok,
                              who + " has visited " + std::to_string(n) + " time(s)\n");
    }

  private:
    std::map<std::string, unsigned> visits_;
};

// 2. Its registered name: routes reach it by name, so a restarted server is
//    found again without anyone holding its address.
inline constexpr smarm::name<visit_counter::envelope> visits{"visits"};

// 3. A supervisor child that runs it under that name (restarted if it dies).
inline smarm::child_spec visit_counter_child() {
    return {"visits", [] {
                auto [tx, rx] = smarm::channel<visit_counter::envelope>();
                if (!smarm::register_name(visits, tx))
                    throw std::runtime_error("the name \"visits\" is taken");
                visit_counter server;
                server.serve(std::move(rx));
            }};
}

// 4. The routes: one inline handler (runs in the connection actor) and one
//    registry-routed to the service (503 while it is down, 504 past 1 s).
inline http::router routes() {
    http::router r;
    r.get("/hello/{name}", [](http::request& req) {
        return http::response(http::status::ok,
                              "Hello, " + std::string(*req.param("name")) + "!\n");
    });
    r.route<visit_counter>(http::verb::get, "/visits/{name}", visits, std::chrono::seconds(1));
    return r;
}

}  // namespace greeter
