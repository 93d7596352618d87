// TLS round trips against the server with a certificate generated here.

#include <smarm/http/server.hpp>

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <boost/beast/websocket/stream.hpp>
#include <smarm/channel.hpp>

#include <unistd.h>
#include <cstdio>
#include <memory>
#include <string>

#include <smarm_test/http_client.hpp>

using namespace smarm_test;
namespace ssl = boost::asio::ssl;
namespace bhttp = boost::beast::http;

namespace {

/// A self-signed P-256 certificate for "localhost" in PEM files.
struct test_cert {
    std::string cert_path, key_path;
    test_cert() {
        // Per process: ctest runs the tests of this file in parallel.
        const std::string dir = ::testing::TempDir() + "smarm_tls_" + std::to_string(::getpid());
        cert_path = dir + "_cert.pem";
        key_path = dir + "_key.pem";
        EVP_PKEY* key = EVP_EC_gen("P-256");
        X509* x = X509_new();
        X509_set_version(x, 2);
        ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
        X509_gmtime_adj(X509_getm_notBefore(x), -3600);
        X509_gmtime_adj(X509_getm_notAfter(x), 3600);
        X509_set_pubkey(x, key);
        X509_NAME* n = X509_get_subject_name(x);
        X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC,
                                   reinterpret_cast<const unsigned char*>("localhost"), -1, -1, 0);
        X509_set_issuer_name(x, n);
        X509_sign(x, key, EVP_sha256());
        FILE* f = std::fopen(cert_path.c_str(), "w");
        PEM_write_X509(f, x);
        std::fclose(f);
        f = std::fopen(key_path.c_str(), "w");
        PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr);
        std::fclose(f);
        X509_free(x);
        EVP_PKEY_free(key);
    }
    ~test_cert() {
        std::remove(cert_path.c_str());
        std::remove(key_path.c_str());
    }
};

http::router hello_routes() {
    http::router r;
    r.get("/plaintext",
          [](http::request&) { return http::response(http::status::ok, "Hello, TLS!"); });
    r.post("/echo", [](http::request& q) { return http::response(http::status::ok, q.body()); });
    return r;
}

TEST(HttpTls, RoundTripWithAlpnAndKeepAlive) {
    test_cert cert;
    http::server_config cfg;
    cfg.tls = http::tls_config{cert.cert_path, cert.key_path};
    with_server(cfg, hello_routes(), [&](http::server&, std::uint16_t port) {
        ssl::context cctx(ssl::context::tls_client);
        cctx.load_verify_file(cert.cert_path);  // trust exactly our certificate
        cctx.set_verify_mode(ssl::verify_peer);
        auto sock = smarm::tcp_stream::connect("127.0.0.1", port, 5s);
        http::internal::actor_stream raw(sock);
        raw.set_deadline(std::chrono::steady_clock::now() + 10s);
        ssl::stream<http::internal::actor_stream&> tls(raw, cctx);
        static const unsigned char protos[] = "\x08http/1.1";
        SSL_set_alpn_protos(tls.native_handle(), protos, sizeof protos - 1);
        SSL_set_tlsext_host_name(tls.native_handle(), "localhost");
        boost::beast::error_code ec;
        tls.handshake(ssl::stream_base::client, ec);
        ASSERT_FALSE(ec) << ec.message();
        const unsigned char* alpn = nullptr;
        unsigned int alpn_len = 0;
        SSL_get0_alpn_selected(tls.native_handle(), &alpn, &alpn_len);
        EXPECT_EQ(std::string(reinterpret_cast<const char*>(alpn), alpn_len), "http/1.1");
        EXPECT_GE(SSL_version(tls.native_handle()), TLS1_2_VERSION);

        boost::beast::flat_buffer buf;
        for (int i = 0; i < 3; ++i) {  // keep-alive over one TLS session
            std::string req =
                "POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\n\r\nhi #" +
                std::to_string(i);
            boost::asio::write(tls, boost::asio::buffer(req), ec);
            ASSERT_FALSE(ec) << ec.message();
            bhttp::response<bhttp::string_body> res;
            bhttp::read(tls, buf, res, ec);
            ASSERT_FALSE(ec) << ec.message();
            EXPECT_EQ(res.result_int(), 200u);
            EXPECT_EQ(res.body(), "hi #" + std::to_string(i));
        }
    });
}

TEST(HttpTls, WebSocketOverTls) {
    // wss://: the session's gate over the TLS stream, several messages in
    // one TLS write (OpenSSL buffers what the socket no longer shows).
    test_cert cert;
    http::server_config cfg;
    cfg.tls = http::tls_config{cert.cert_path, cert.key_path};
    http::router r;
    r.websocket("/ws", [](http::websocket& ws) {
        auto [tx, rx] = smarm::channel<int>();
        for (auto ev = ws.recv_or({rx});; ev = ws.recv_or({rx})) {
            auto& m = std::get<http::websocket::message>(ev);
            if (m.is_close()) return;
            ws.send("tls " + m.data);
        }
    });
    with_server(cfg, std::move(r), [&](http::server&, std::uint16_t port) {
        ssl::context cctx(ssl::context::tls_client);
        cctx.load_verify_file(cert.cert_path);
        cctx.set_verify_mode(ssl::verify_peer);
        auto sock = smarm::tcp_stream::connect("127.0.0.1", port, 5s);
        http::internal::actor_stream raw(sock);
        raw.set_deadline(std::chrono::steady_clock::now() + 10s);
        ssl::stream<http::internal::actor_stream&> tls(raw, cctx);
        SSL_set_tlsext_host_name(tls.native_handle(), "localhost");
        boost::beast::error_code ec;
        tls.handshake(ssl::stream_base::client, ec);
        ASSERT_FALSE(ec) << ec.message();
        boost::beast::websocket::stream<ssl::stream<http::internal::actor_stream&>&> ws(tls);
        ws.handshake("localhost", "/ws", ec);
        ASSERT_FALSE(ec) << ec.message();
        // Three masked (zero key) frames in one TLS record.
        std::string frames;
        for (char ch : {'a', 'b', 'c'})
            frames += std::string("\x81\x81\0\0\0\0", 6) + ch;
        boost::asio::write(tls, boost::asio::buffer(frames), ec);
        ASSERT_FALSE(ec) << ec.message();
        for (std::string want : {"tls a", "tls b", "tls c"}) {
            boost::beast::flat_buffer buf;
            ws.read(buf, ec);
            ASSERT_FALSE(ec) << ec.message();
            EXPECT_EQ(boost::beast::buffers_to_string(buf.data()), want);
        }
        ws.close(boost::beast::websocket::close_code::normal, ec);
    });
}

TEST(HttpTls, OldProtocolsAndPlaintextAreRefused) {
    test_cert cert;
    http::server_config cfg;
    cfg.tls = http::tls_config{cert.cert_path, cert.key_path};
    with_server(cfg, hello_routes(), [&](http::server&, std::uint16_t port) {
        {  // a TLS 1.1-only client
            ssl::context cctx(ssl::context::tls_client);
            SSL_CTX_set_min_proto_version(cctx.native_handle(), TLS1_1_VERSION);
            SSL_CTX_set_max_proto_version(cctx.native_handle(), TLS1_1_VERSION);
            auto sock = smarm::tcp_stream::connect("127.0.0.1", port, 5s);
            http::internal::actor_stream raw(sock);
            raw.set_deadline(std::chrono::steady_clock::now() + 10s);
            ssl::stream<http::internal::actor_stream&> tls(raw, cctx);
            boost::beast::error_code ec;
            tls.handshake(ssl::stream_base::client, ec);
            EXPECT_TRUE(ec);
        }
        {  // plain HTTP on the TLS port: the handshake fails, nothing is served
            client c(port);
            c.send("GET /plaintext HTTP/1.1\r\nHost: t\r\n\r\n");
            EXPECT_FALSE(c.read(false, 5s));
        }
    });
}

TEST(HttpTls, BadCertificateFilesAreReportedByName) {
    http::server_config cfg;
    cfg.host = "127.0.0.1";
    cfg.port = 0;
    cfg.tls = http::tls_config{"/nonexistent/cert.pem", "/nonexistent/key.pem"};
    smarm_test::run([&] {
        http::server srv(cfg, hello_routes());
        try {
            srv.start();
            ADD_FAILURE() << "start() accepted missing certificate files";
        } catch (const std::runtime_error& e) {
            EXPECT_NE(std::string(e.what()).find("/nonexistent/cert.pem"), std::string::npos)
                << e.what();
        }
    });
}

}  // namespace
