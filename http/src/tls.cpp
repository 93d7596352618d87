#include "tls.hpp"

#include <openssl/ssl.h>

#include <stdexcept>
#include <string>

namespace smarm::http::internal {

namespace {

// ALPN: the server speaks http/1.1 only. A client that offers something
// else gets no ALPN answer and may carry on or hang up.
int select_alpn(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
                unsigned int inlen, void*) {
    static const unsigned char ours[] = "\x08http/1.1";
    unsigned char* sel = nullptr;
    if (SSL_select_next_proto(&sel, outlen, ours, sizeof ours - 1, in, inlen) ==
        OPENSSL_NPN_NEGOTIATED) {
        *out = sel;
        return SSL_TLSEXT_ERR_OK;
    }
    return SSL_TLSEXT_ERR_NOACK;
}

}  // namespace

std::unique_ptr<boost::asio::ssl::context> make_tls_context(const tls_config& cfg) {
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
    SSL_CTX_set_alpn_select_cb(ctx->native_handle(), select_alpn, nullptr);
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
