#pragma once
// Write access to a request's private fields for the parser glue and the
// router (the public API is read-only).

#include <smarm/http/message.hpp>

#include <string>
#include <string_view>
#include <vector>

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
    static internal::body_source*& source(request& r) noexcept { return r.source_; }
    static void set_id(request& r, std::uint64_t conn, std::uint64_t seq) noexcept {
        r.connection_id_ = conn;
        r.sequence_ = seq;
    }
    /// Makes `r` an empty request again (as if default-constructed; valid
    /// after a move too) but keeps its header vector's and small strings'
    /// storage, so a keep-alive connection's next request allocates
    /// nothing for them. Large buffers are released: an idle connection
    /// must not hold on to its last big body.
    static void reset(request& r) noexcept {
        constexpr std::size_t keep_bytes = 4096, keep_headers = 64;
        auto clear = [](std::string& s) {
            if (s.capacity() > keep_bytes)
                std::string().swap(s);
            else
                s.clear();
        };
        r.method_ = verb::unknown;
        clear(r.method_string_);
        clear(r.target_);
        clear(r.path_);
        r.version_ = 11;
        if (r.headers_.capacity() > keep_headers)
            std::vector<http::header>().swap(r.headers_);
        else
            r.headers_.clear();
        clear(r.body_);
        r.body_read_ = 0;
        r.source_ = nullptr;
        r.params_.clear();
        clear(r.wildcard_);
        clear(r.route_);
        r.peer_ = socket_address{};
        r.connection_id_ = 0;
        r.sequence_ = 0;
    }
};

}  // namespace smarm::http
