// The WebSocket upgrade's checks (RFC 6455 section 4.2.1) and the public
// pieces of smarm/http/websocket.hpp that are not the session's
// (websocket_session.hpp).

#include <smarm/http/websocket.hpp>

#include <boost/asio/io_context.hpp>

#include <stdexcept>
#include <string>

#include "websocket_session.hpp"

namespace smarm::http {

namespace {

/// Whether any `name` header lists `token` (comma-separated, any case).
bool has_token(const request& req, std::string_view name, std::string_view token) {
    for (const http::header& h : req.headers()) {
        if (!iequals(h.name, name)) continue;
        std::string_view v = h.value;
        while (!v.empty()) {
            const std::size_t comma = v.find(',');
            std::string_view item = v.substr(0, comma);
            while (!item.empty() && (item.front() == ' ' || item.front() == '\t'))
                item.remove_prefix(1);
            while (!item.empty() && (item.back() == ' ' || item.back() == '\t'))
                item.remove_suffix(1);
            if (iequals(item, token)) return true;
            if (comma == std::string_view::npos) break;
            v.remove_prefix(comma + 1);
        }
    }
    return false;
}

/// A Sec-WebSocket-Key: the base64 of 16 bytes (24 characters, "==" last).
bool valid_key(std::string_view k) noexcept {
    if (k.size() != 24 || k.substr(22) != "==") return false;
    for (std::size_t i = 0; i < 22; ++i) {
        const char c = k[i];
        const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                        (c >= '0' && c <= '9') || c == '+' || c == '/';
        if (!ok) return false;
    }
    return true;
}

response refuse(http::status st, std::string why) {
    response r(st, "websocket: " + why + "\n");
    if (st == http::status::upgrade_required) {
        r.set("Upgrade", "websocket");
        r.set("Sec-WebSocket-Version", "13");
    }
    return r;
}

}  // namespace

bool sendable_close_code(std::uint16_t code) noexcept {
    return (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014) ||
           (code >= 3000 && code <= 4999);
}

void websocket::close(std::uint16_t code, std::string_view reason) {
    if (!sendable_close_code(code))
        throw std::invalid_argument("smarm::http::websocket::close: code " + std::to_string(code) +
                                    " may not be sent (1000-1003, 1007-1014, 3000-4999)");
    if (reason.size() > 123)
        throw std::invalid_argument("smarm::http::websocket::close: the reason is " +
                                    std::to_string(reason.size()) +
                                    " bytes; a close frame holds at most 123");
    do_close(code, reason);
}

response accept_websocket(const request& req, websocket_handler h) {
    if (!has_token(req, "Upgrade", "websocket"))
        return refuse(http::status::upgrade_required, "this resource needs Upgrade: websocket");
    if (req.method() != verb::get)
        return refuse(http::status::bad_request, "the upgrade must be a GET");
    if (req.version() < 11) return refuse(http::status::bad_request, "the upgrade needs HTTP/1.1");
    if (!has_token(req, "Connection", "upgrade"))
        return refuse(http::status::bad_request, "Connection must list upgrade");
    const auto version = req.header("Sec-WebSocket-Version");
    if (!version || *version != "13")
        return refuse(http::status::upgrade_required, "Sec-WebSocket-Version must be 13");
    const auto key = req.header("Sec-WebSocket-Key");
    if (!key || !valid_key(*key))
        return refuse(http::status::bad_request,
                      "Sec-WebSocket-Key must be the base64 of 16 bytes");
    if (!h) throw std::invalid_argument("smarm::http::accept_websocket: an empty handler");
    response r(http::status::switching_protocols);
    r.kind_ = response::body_kind::websocket;
    r.upgrade_ = std::move(h);
    return r;
}

namespace internal {

boost::asio::io_context& ws_unused_context() noexcept {
    static boost::asio::io_context unused;
    return unused;
}

}  // namespace internal

}  // namespace smarm::http
