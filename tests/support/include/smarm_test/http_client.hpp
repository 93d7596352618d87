#pragma once
// Test support for the HTTP server: run a server on a loopback port inside a
// fresh runtime, and a raw-socket client that writes bytes as given and
// parses what comes back with Beast's response parser.

#include <smarm/http/server.hpp>
#include <smarm/net.hpp>
#include <smarm/runtime.hpp>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include <smarm_test/run.hpp>

#include "stream.hpp"  // smarm_http_internal: actor_stream

namespace smarm_test {

using namespace std::chrono_literals;
namespace http = smarm::http;

struct reply {
    unsigned status = 0;
    std::map<std::string, std::string> headers;  // lower-case names
    std::string body;
    bool keep_alive = false;
    std::string header(const std::string& lower_name) const {
        auto it = headers.find(lower_name);
        return it == headers.end() ? std::string() : it->second;
    }
};

class client {
  public:
    explicit client(std::uint16_t port) : s_(smarm::tcp_stream::connect("127.0.0.1", port, 5s)) {}

    void send(std::string_view raw) { s_.write_all(raw.data(), raw.size(), 10s); }

    /// Reads one response (nullopt when the connection ended or failed).
    std::optional<reply> read(bool head_request = false, std::chrono::nanoseconds timeout = 10s) {
        namespace bhttp = boost::beast::http;
        smarm::http::internal::actor_stream st(s_);
        st.set_deadline(std::chrono::steady_clock::now() + timeout);
        bhttp::response_parser<bhttp::string_body> p;
        p.skip(head_request);
        p.body_limit(64 * 1024 * 1024);
        boost::beast::error_code ec;
        bhttp::read(st, buf_, p, ec);
        if (ec) return std::nullopt;
        reply r;
        auto& m = p.get();
        r.status = m.result_int();
        r.keep_alive = m.keep_alive();
        for (auto& f : m) {
            std::string n(f.name_string());
            for (auto& c : n)
                c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
            r.headers[n] = std::string(f.value());
        }
        r.body = m.body();
        return r;
    }

    /// The socket, for checks that must not park (poll with a real timeout).
    int fd() const noexcept { return s_.native_handle(); }

    /// One request, one response.
    std::optional<reply> get(const std::string& target) {
        send("GET " + target + " HTTP/1.1\r\nHost: t\r\n\r\n");
        return read();
    }

    /// True when the server closes the connection within `timeout` (any
    /// bytes it still sends are discarded).
    bool closed_by_peer(std::chrono::nanoseconds timeout = 10s) {
        const auto until = std::chrono::steady_clock::now() + timeout;
        char b[4096];
        for (;;) {
            auto left = until - std::chrono::steady_clock::now();
            if (left <= 0ns) return false;
            try {
                if (s_.read_some(b, sizeof b, left) == 0) return true;
            } catch (const smarm::io_timeout&) {
                return false;
            } catch (const std::system_error&) {
                return true;  // reset
            }
        }
    }

    smarm::tcp_stream& socket() { return s_; }

  private:
    smarm::tcp_stream s_;
    boost::beast::flat_buffer buf_;
};

/// Runs `body(server, port)` against a server on 127.0.0.1:<free port>,
/// then stops it at once and waits for it.
inline void with_server(http::server_config cfg, http::router r,
                        const std::function<void(http::server&, std::uint16_t)>& body,
                        unsigned schedulers = 2) {
    smarm_test::run(
        [&] {
            cfg.host = "127.0.0.1";
            cfg.port = 0;
            http::server srv(cfg, std::move(r));
            srv.start();
            body(srv, srv.local_address().port());
            srv.stop(0ns);
            srv.wait();
        },
        schedulers);
}

}  // namespace smarm_test
