#include "observer.hpp"

namespace smarm::services {

void add_observer_route(http::router& r) {
    r.get("/observer", [](http::request&) {
        http::response out(http::status::ok, std::string(observer_page()),
                           "text/html; charset=utf-8");
        // Nothing leaves the listener: inline script and style only, fetches
        // to this origin, downloads as blob: URLs.
        out.set("Content-Security-Policy",
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                "connect-src 'self'; img-src 'self' data: blob:; base-uri 'none'; "
                "form-action 'none'; frame-ancestors 'none'");
        out.set("X-Content-Type-Options", "nosniff");
        out.set("Cache-Control", "no-store");
        return out;
    });
}

}  // namespace smarm::services
