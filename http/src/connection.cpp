// The connection loop's non-template pieces: how a failed read maps to a
// status, and the request's decoded path.

#include "connection.hpp"

#include <boost/beast/http/error.hpp>

namespace smarm::http::internal {

std::optional<http::status> status_for(const error_code& ec) {
    namespace bhttp = boost::beast::http;
    if (ec == bhttp::error::header_limit) return http::status::request_header_fields_too_large;
    if (ec == bhttp::error::body_limit) return http::status::payload_too_large;
    if (ec == boost::beast::error::timeout) return http::status::request_timeout;
    if (ec == bhttp::error::end_of_stream || ec == bhttp::error::partial_message)
        return std::nullopt;
    if (&ec.category() == &bhttp::make_error_code(bhttp::error::bad_target).category())
        return http::status::bad_request;
    return std::nullopt;  // a socket error: the peer is gone
}

bool decode_path(request& req) {
    return percent_decode(raw_path(req.target()), request_access::path(req));
}

}  // namespace smarm::http::internal
