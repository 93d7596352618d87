#include "tls.hpp"

#include <openssl/ssl.h>

#include <stdexcept>
#include <string>

namespace smarm::http::internal {

namespace {

// ALPN: h2 first when HTTP/2 is on (the server's order decides), then
// http/1.1. A client that offers neither gets no ALPN answer and may carry
// on (as HTTP/1.1) or hang up.
int select_alpn(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
                unsigned int inlen, void* arg) {
    static const unsigned char both[] = "\x02h2\x08http/1.1";
    static const unsigned char h1[] = "\x08http/1.1";
    const bool h2 = arg != nullptr;
    unsigned char* sel = nullptr;
    if (SSL_select_next_proto(&sel, outlen, h2 ? both : h1, h2 ? sizeof both - 1 : sizeof h1 - 1,
                              in, inlen) == OPENSSL_NPN_NEGOTIATED) {
        *out = sel;
        return SSL_TLSEXT_ERR_OK;
    }
    return SSL_TLSEXT_ERR_NOACK;
}

}  // namespace

std::unique_ptr<boost::asio::ssl::context> make_tls_context(const tls_config& cfg, bool h2) {
    namespace ssl = boost::asio::ssl;
    auto ctx = std::make_unique<ssl::context>(ssl::context::tls_server);
    ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                     ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 |
                     ssl::context::single_dh_use);
    SSL_CTX_set_min_proto_version(ctx->native_handle(), TLS1_2_VERSION);
    boost::system::error_code ec;
    ctx->use_certificate_chain_file(cfg.certificate_file, ec);
    if (ec)
        throw std::runtime_error("smarm::http: cannot load the TLS certificate chain \"" +
                                 cfg.certificate_file + "\": " + ec.message());
    ctx->use_private_key_file(cfg.private_key_file, ssl::context::pem, ec);
    if (ec)
        throw std::runtime_error("smarm::http: cannot load the TLS private key \"" +
                                 cfg.private_key_file + "\": " + ec.message());
    if (SSL_CTX_check_private_key(ctx->native_handle()) != 1)
        throw std::runtime_error("smarm::http: the TLS private key \"" + cfg.private_key_file +
                                 "\" does not match the certificate \"" + cfg.certificate_file +
                                 "\"");
    // Any non-null argument means "h2 too" (the callback only tests it).
    static int h2_on = 1;
    SSL_CTX_set_alpn_select_cb(ctx->native_handle(), select_alpn, h2 ? &h2_on : nullptr);
    return ctx;
}

std::string_view tls_stream::alpn() const {
    const unsigned char* p = nullptr;
    unsigned int n = 0;
    SSL_get0_alpn_selected(const_cast<tls_stream*>(this)->ssl_.native_handle(), &p, &n);
    return {reinterpret_cast<const char*>(p), n};
}

bool tls_stream::buffered() noexcept {
    SSL* ssl = ssl_.native_handle();
    return SSL_pending(ssl) > 0 || BIO_ctrl_pending(SSL_get_rbio(ssl)) > 0;
}

}  // namespace smarm::http::internal
