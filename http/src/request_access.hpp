#pragma once
// Write access to a request's private fields for the parser glue and the
// router (the public API is read-only).

#include <smarm/http/message.hpp>

#include <string_view>

namespace smarm::http {

/// The path part of a request target: what precedes the first '?' or '#'.
/// (A loop: string_view::find_first_of with a set is a scan per character.)
inline std::string_view raw_path(std::string_view target) noexcept {
    std::size_t i = 0;
    while (i < target.size() && target[i] != '?' && target[i] != '#')
        ++i;
    return target.substr(0, i);
}

struct request_access {
    static verb& method(request& r) noexcept { return r.method_; }
    static std::string& method_string(request& r) noexcept { return r.method_string_; }
    static std::string& target(request& r) noexcept { return r.target_; }
    static std::string& path(request& r) noexcept { return r.path_; }
    static unsigned& version(request& r) noexcept { return r.version_; }
    static std::vector<http::header>& headers(request& r) noexcept { return r.headers_; }
    static std::vector<std::pair<std::string, std::string>>& params(request& r) noexcept {
        return r.params_;
    }
    static std::string& wildcard(request& r) noexcept { return r.wildcard_; }
    static std::string& route(request& r) noexcept { return r.route_; }
    static socket_address& peer(request& r) noexcept { return r.peer_; }
    static void set_id(request& r, std::uint64_t conn, std::uint64_t seq) noexcept {
        r.connection_id_ = conn;
        r.sequence_ = seq;
    }
};

}  // namespace smarm::http
