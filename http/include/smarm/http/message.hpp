#pragma once
// smarm::http requests and responses as handlers see them.
//
//     http::response hello(http::request& req) {
//         auto name = req.param("name").value_or("world");
//         return http::response(http::status::ok, "Hello, " + std::string(name) + "!\n");
//     }
//
// A request owns everything it refers to (method, target, headers, body,
// route parameters), so it can be moved to another actor: a registry-routed
// route hands it to a gen_server whose call type is http::request.
//
// A request's body is read whole before its handler runs (body()), unless
// its route streams it (router::add with http::streamed_body): the handler
// then reads it piece by piece with read_body(), and nothing holds more of
// it than one read buffer (HTTP/1.1) or one stream window (HTTP/2).
//
// A response is a status, headers and one body: a string (the usual case,
// written with a Content-Length), a file (streamed in pieces, never read
// whole), or a chunk generator (streamed with chunked transfer encoding, or
// close-delimited for an HTTP/1.0 client). HEAD requests get the headers
// only, whatever the body kind.

#include <smarm/net.hpp>

#include <boost/beast/http/field.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/verb.hpp>

#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace smarm::http {

class websocket;

namespace internal {
class body_source;  // the connection's side of a streamed body
}

using verb = boost::beast::http::verb;
using status = boost::beast::http::status;
using field = boost::beast::http::field;

/// One header (names compare case-insensitively).
struct header {
    std::string name;
    std::string value;
};

/// Case-insensitive ASCII comparison of header names.
bool iequals(std::string_view a, std::string_view b) noexcept;

/// A request body that cannot be read on: read_body() throws it with the
/// status to answer (413 past the route's limit, 408 no bytes within
/// body_timeout, 400 bad chunked framing or a peer that reset the stream).
/// A handler that lets it escape answers that status; an HTTP/1.1
/// connection closes after it.
class body_error : public std::runtime_error {
  public:
    body_error(http::status s, const std::string& what) : std::runtime_error(what), status_(s) {}
    http::status status() const noexcept { return status_; }

  private:
    http::status status_;
};

/// An HTTP request (see the header comment).
class request {
  public:
    request() = default;

    verb method() const noexcept { return method_; }
    /// The method as sent ("GET", or an extension method's token).
    const std::string& method_string() const noexcept { return method_string_; }
    /// The request target as sent: "/kv/a%20b?x=1".
    const std::string& target() const noexcept { return target_; }
    /// The percent-decoded path of the target: "/kv/a b".
    const std::string& path() const noexcept { return path_; }
    /// The raw query string (after '?', not decoded), possibly empty.
    std::string_view query() const noexcept;
    /// The percent-decoded value of the first query parameter `name`
    /// ("" for a bare `?name`), or nullopt when absent or badly encoded.
    std::optional<std::string> query_param(std::string_view name) const;
    /// Parameter `name` from an application/x-www-form-urlencoded body
    /// ('+' decodes to a space there), else from the query (query_param):
    /// what `curl -d 'a=1&b=2'` and `curl '...?a=1'` both send.
    std::optional<std::string> form_param(std::string_view name) const;
    /// HTTP version: 10, 11 or 20 (HTTP/2).
    unsigned version() const noexcept { return version_; }
    /// The first value of header `name`, if present.
    std::optional<std::string_view> header(std::string_view name) const noexcept;
    const std::vector<http::header>& headers() const noexcept { return headers_; }
    /// The whole body (empty when the route streams it: read_body()).
    const std::string& body() const noexcept { return body_; }
    std::string& body() noexcept { return body_; }
    /// Whether the handler reads the body through read_body() as it
    /// arrives (its route was added with http::streamed_body).
    bool body_streamed() const noexcept { return source_ != nullptr; }
    /// The next piece of the body, at most `max` bytes (> 0, else
    /// std::invalid_argument); "" once all of it has been read. On a
    /// streamed route it parks the actor until bytes arrive, each wait
    /// bounded by server_config::body_timeout, and throws body_error when
    /// the body cannot be read on; otherwise it hands out body() from the
    /// front, so one handler serves both kinds of route. Call it from the
    /// handler's own actor before the handler returns. A streamed body the
    /// handler leaves unread is not drained: an HTTP/1.1 connection closes
    /// after the response, an HTTP/2 stream is reset (NO_ERROR) after it.
    std::string read_body(std::size_t max = 64 * 1024);

    /// A named route parameter ("{key}" in the pattern), percent-decoded.
    std::optional<std::string_view> param(std::string_view name) const noexcept;
    /// What a trailing "*" in the route pattern matched (decoded), or "".
    const std::string& wildcard() const noexcept { return wildcard_; }
    /// The route pattern that matched ("/kv/{key}"), for metrics and logs.
    const std::string& route() const noexcept { return route_; }

    /// The peer's address.
    const socket_address& peer() const noexcept { return peer_; }
    /// This request's id ("<connection>-<sequence>", hex), as logged and
    /// sent in 500 responses.
    std::string id() const;

  private:
    friend struct request_access;
    verb method_ = verb::unknown;
    std::string method_string_;
    std::string target_;
    std::string path_;
    unsigned version_ = 11;
    std::vector<http::header> headers_;
    std::string body_;
    std::size_t body_read_ = 0;                ///< of body_, by read_body()
    internal::body_source* source_ = nullptr;  ///< set while a streamed body is read
    std::vector<std::pair<std::string, std::string>> params_;
    std::string wildcard_;
    std::string route_;
    socket_address peer_;
    std::uint64_t connection_id_ = 0;
    std::uint64_t sequence_ = 0;
};

/// Produces the next piece of a chunked body; nullopt ends the body. Runs
/// in the connection actor, so it may park (read a channel, a file, ...).
using chunk_source = std::function<std::optional<std::string>()>;

/// An HTTP response (see the header comment).
class response {
  public:
    /// websocket: an accepted upgrade (accept_websocket, websocket.hpp).
    enum class body_kind { text, file, chunks, websocket };

    response() = default;
    /// A response with a string body, Content-Type text/plain (UTF-8).
    explicit response(http::status s, std::string body = {})
        : status_(s), body_(std::move(body)) {}
    /// A response with a string body of type `content_type` ("" sends no
    /// Content-Type); std::invalid_argument if it holds a line break.
    response(http::status s, std::string body, std::string content_type)
        : status_(s), body_(std::move(body)), content_type_(std::move(content_type)),
          custom_type_(true) {
        if (has_line_break(content_type_)) refuse_content_type();
    }

    /// Streams the file at `path` (Content-Length from its size). A file
    /// that cannot be opened makes a 404 (missing) or 403 (not readable).
    static response file(std::string path, std::string content_type = "application/octet-stream");
    /// Streams what `next` yields, chunked.
    static response chunked(chunk_source next,
                            std::string content_type = "application/octet-stream");

    http::status status() const noexcept { return status_; }
    response& set_status(http::status s) noexcept {
        status_ = s;
        return *this;
    }
    /// Adds a header (Content-Length, Transfer-Encoding, Date, Server and
    /// Connection are managed by the server and rejected here).
    response& set(std::string name, std::string value);
    /// Sets the Content-Type ("" sends none); std::invalid_argument if it
    /// holds a line break (it is written into the head as is).
    response& set_content_type(std::string ct);
    const std::string& content_type() const noexcept {
        return custom_type_ ? content_type_ : default_type();
    }
    const std::vector<http::header>& headers() const noexcept { return headers_; }
    std::optional<std::string_view> header(std::string_view name) const noexcept;

    body_kind kind() const noexcept { return kind_; }
    const std::string& body() const noexcept { return body_; }
    std::string& body() noexcept { return body_; }
    /// For file bodies: the path.
    const std::string& file_path() const noexcept { return body_; }
    /// For chunked bodies: the source.
    chunk_source& chunks() noexcept { return chunks_; }
    /// For an accepted WebSocket upgrade: the handler (websocket.hpp).
    std::function<void(websocket&)>& upgrade() noexcept { return upgrade_; }

    /// Ask the server to close the connection after this response.
    response& close_connection() noexcept {
        close_ = true;
        return *this;
    }
    bool closes() const noexcept { return close_; }

  private:
    http::status status_ = http::status::ok;
    static bool has_line_break(std::string_view s) noexcept {  // two memchr: a loop cost 2x
        return std::memchr(s.data(), '\r', s.size()) != nullptr ||
               std::memchr(s.data(), '\n', s.size()) != nullptr;
    }
    [[noreturn]] static void refuse_content_type();
    /// The usual Content-Type, shared: a string of its 25 characters per
    /// response was a heap allocation per request.
    static const std::string& default_type() noexcept {
        static const std::string text = "text/plain; charset=utf-8";
        return text;
    }
    std::string body_;
    std::string content_type_;  ///< when custom_type_
    bool custom_type_ = false;
    std::vector<http::header> headers_;
    body_kind kind_ = body_kind::text;
    chunk_source chunks_;
    std::function<void(websocket&)> upgrade_;
    bool close_ = false;
    friend response accept_websocket(const request&, std::function<void(websocket&)>);
};

}  // namespace smarm::http
