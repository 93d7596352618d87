#pragma once
// The streamed-body route both HTTP fuzz targets mount (HTTP/1.1 and
// HTTP/2): the body read in pieces through read_body; a first piece under
// 3 bytes ends the reading early, so the body is left unread (the
// connection closes / the stream is reset after the answer).

#include <smarm/http/router.hpp>

#include <string>

namespace smarm_test {

inline void add_streamed_route(smarm::http::router& r) {
    namespace http = smarm::http;
    r.post(
        "/sum",
        [](http::request& q) {
            std::size_t n = 0;
            for (std::string p = q.read_body(100); !p.empty(); p = q.read_body(100)) {
                n += p.size();
                if (n < 3) break;
            }
            return http::response(http::status::ok, std::to_string(n));
        },
        http::streamed_body{10'000});
}

}  // namespace smarm_test
