#pragma once
// The connection's side of a streamed request body (request::read_body on
// a route added with http::streamed_body). HTTP/1.1 reads it from the
// connection's socket through the request's own parser
// (connection.hpp's h1_body); HTTP/2 hands the stream actor the DATA the
// connection received (h2_session.cpp's h2_body), giving the stream's
// window back only as the handler reads.

#include <smarm/http/message.hpp>

#include <cstddef>
#include <string>

namespace smarm::http::internal {

class body_source {
  public:
    virtual ~body_source() = default;
    /// Appends at most `max` (> 0) bytes of the body to `out`, parking
    /// until some arrive; false (nothing appended) at the body's end.
    /// Throws body_error when the body cannot be read on.
    virtual bool read(std::string& out, std::size_t max) = 0;
};

}  // namespace smarm::http::internal
