#pragma once
// TLS for the connection loop: OpenSSL through Asio's ssl::stream, layered
// over the actor stream (so the handshake, reads and writes park the actor
// like plain IO). TLS 1.2 is the minimum; ALPN selects h2 (with `h2`) or
// http/1.1.

#include <smarm/http/config.hpp>

#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/write.hpp>

#include <memory>
#include <optional>
#include <string_view>

#include "stream.hpp"

namespace smarm::http::internal {

/// The server's TLS context. Throws std::runtime_error naming the file when
/// the certificate or key cannot be loaded (or do not match). `h2`: ALPN
/// offers h2 before http/1.1.
std::unique_ptr<boost::asio::ssl::context> make_tls_context(const tls_config& cfg, bool h2);

/// The connection loop's stream contract over TLS.
class tls_stream {
  public:
    tls_stream(actor_stream& raw, boost::asio::ssl::context& ctx) : raw_(raw), ssl_(raw, ctx) {}

    /// The server side of the handshake, by `deadline`.
    bool handshake(time_point deadline) {
        raw_.set_deadline(deadline);
        error_code ec;
        ssl_.handshake(boost::asio::ssl::stream_base::server, ec);
        return !ec;
    }
    void set_deadline(std::optional<time_point> t) noexcept { raw_.set_deadline(t); }

    template <class Buffers>
    std::size_t read_some(const Buffers& b, error_code& ec) {
        return ssl_.read_some(b, ec);
    }
    template <class Buffers>
    std::size_t read_some(const Buffers& b) {
        return ssl_.read_some(b);
    }
    template <class Buffers>
    std::size_t write_some(const Buffers& b, error_code& ec) {
        return ssl_.write_some(b, ec);
    }
    template <class Buffers>
    std::size_t write_some(const Buffers& b) {
        return ssl_.write_some(b);
    }
    bool write_all(std::string_view data) {
        error_code ec;
        boost::asio::write(ssl_, boost::asio::buffer(data.data(), data.size()), ec);
        return !ec;
    }
    /// Sends close_notify and waits (at most a second) for the peer's, then
    /// half-closes and drains like a plain connection.
    void linger() {
        raw_.set_deadline(std::chrono::steady_clock::now() + std::chrono::seconds(1));
        error_code ec;
        ssl_.shutdown(ec);
        raw_.linger();
    }
    /// The protocol ALPN selected ("" when none).
    std::string_view alpn() const;
    actor_stream& raw() noexcept { return raw_; }
    /// Whether OpenSSL holds received bytes not yet read (plaintext of a
    /// record already decrypted, or ciphertext in its input BIO): a read
    /// may then succeed with the socket itself not readable.
    bool buffered() noexcept;

  private:
    actor_stream& raw_;
    boost::asio::ssl::stream<actor_stream&> ssl_;
};

/// TLS: the socket's arm, plus OpenSSL's own buffer; a read that does not
/// wait is not possible through OpenSSL's record layer (a partial record
/// needs the socket), so read_now reads with the caller's deadline (a TLS
/// peer's records arrive whole in practice).
template <>
struct ws_stream_traits<tls_stream> {
    static smarm::detail::select_source* readable(tls_stream& s) noexcept {
        return &s.raw().socket().readable();
    }
    static bool buffered(tls_stream& s) noexcept { return s.buffered(); }
    static std::size_t read_now(tls_stream& s, void* p, std::size_t n, error_code& ec) {
        return s.read_some(boost::asio::buffer(p, n), ec);
    }
};

}  // namespace smarm::http::internal
