// TLS session resumption without sockets: a client and a server SSL joined by a BIO pair, the
// client's context built by make_tls_client_context (so with the cache), the server's as the
// local cluster builds it.
#include "net/tls_session_cache.hpp"
#include "local/tls_certs.hpp"
#include "net/tls_context.hpp"

#include <openssl/bio.h>
#include <openssl/ssl.h>

#include <gtest/gtest.h>

namespace {
using namespace kubesandbox;

struct SslFree {
    void operator()(SSL* s) const noexcept { SSL_free(s); }
};
using SslPtr = std::unique_ptr<SSL, SslFree>;

class TlsSessionCacheTest : public ::testing::Test {
protected:
    void SetUp() override {
        auto certs = local::generate_serving_certs();
        ASSERT_TRUE(certs) << certs.error().describe();
        net::TlsClientSettings settings;
        settings.ca_pem = certs->ca_pem;
        auto client = net::make_tls_client_context(settings);
        ASSERT_TRUE(client) << client.error().describe();
        client_ = *client;
        server_ = std::make_unique<boost::asio::ssl::context>(boost::asio::ssl::context::tls_server);
        boost::system::error_code ec;
        server_->use_certificate_chain(boost::asio::buffer(certs->cert_pem), ec);
        ASSERT_FALSE(ec);
        server_->use_private_key(boost::asio::buffer(certs->key_pem), boost::asio::ssl::context::pem, ec);
        ASSERT_FALSE(ec);
    }

    // One connection: handshake, the server's tickets read by the client; whether it resumed.
    bool connect(const std::string& key) {
        SslPtr c(SSL_new(client_->native_handle()));
        SslPtr s(SSL_new(server_->native_handle()));
        BIO *cb = nullptr, *sb = nullptr;
        EXPECT_EQ(BIO_new_bio_pair(&cb, 0, &sb, 0), 1);
        SSL_set_bio(c.get(), cb, cb);
        SSL_set_bio(s.get(), sb, sb);
        SSL_set_connect_state(c.get());
        SSL_set_accept_state(s.get());
        SSL_set_tlsext_host_name(c.get(), "localhost");
        SSL_set1_host(c.get(), "localhost");
        net::resume_session(c.get(), key);
        bool c_done = false, s_done = false;
        for (int i = 0; i < 20 && !(c_done && s_done); ++i) {
            if (!c_done) {
                int r = SSL_do_handshake(c.get());
                c_done = r == 1;
                if (r != 1) {
                    EXPECT_EQ(SSL_get_error(c.get(), r), SSL_ERROR_WANT_READ);
                }
            }
            if (!s_done) {
                int r = SSL_do_handshake(s.get());
                s_done = r == 1;
                if (r != 1) {
                    EXPECT_EQ(SSL_get_error(s.get(), r), SSL_ERROR_WANT_READ);
                }
            }
        }
        EXPECT_TRUE(c_done && s_done);
        EXPECT_EQ(SSL_get_verify_result(c.get()), X509_V_OK);
        // The server's application data after its tickets: reading it makes the client take them.
        EXPECT_EQ(SSL_write(s.get(), "x", 1), 1);
        char byte = 0;
        EXPECT_EQ(SSL_read(c.get(), &byte, 1), 1);
        return SSL_session_reused(c.get()) == 1;
    }

    std::shared_ptr<boost::asio::ssl::context> client_;
    std::unique_ptr<boost::asio::ssl::context> server_;
};

TEST_F(TlsSessionCacheTest, TheSecondConnectionResumesWithATicketOfTheFirst) {
    EXPECT_EQ(net::cached_sessions(client_->native_handle(), "a"), 0u);
    EXPECT_FALSE(connect("a"));
    EXPECT_EQ(net::cached_sessions(client_->native_handle(), "a"), 2u);  // OpenSSL servers send two
    EXPECT_TRUE(connect("a"));
    EXPECT_TRUE(connect("a"));
    EXPECT_GE(net::cached_sessions(client_->native_handle(), "a"), 1u);
}

TEST_F(TlsSessionCacheTest, TicketsAreUsedOnceAndOnlyUnderTheirKey) {
    EXPECT_FALSE(connect("a"));
    EXPECT_FALSE(connect("b"));  // another server, name or verification: a full handshake
    const std::size_t kept = net::cached_sessions(client_->native_handle(), "a");
    ASSERT_GE(kept, 1u);
    // Offering a ticket takes it out; the resumed connection brings its own.
    SslPtr probe(SSL_new(client_->native_handle()));
    net::resume_session(probe.get(), "a");
    EXPECT_EQ(net::cached_sessions(client_->native_handle(), "a"), kept - 1);
    EXPECT_NE(SSL_get_session(probe.get()), nullptr);
}

TEST_F(TlsSessionCacheTest, KeepsAtMostTheConfiguredNumberPerKey) {
    net::enable_session_cache(client_->native_handle(), 1);
    EXPECT_FALSE(connect("a"));  // a full handshake: OpenSSL servers send two tickets
    EXPECT_EQ(net::cached_sessions(client_->native_handle(), "a"), 1u);
    EXPECT_TRUE(connect("a"));
    EXPECT_EQ(net::cached_sessions(client_->native_handle(), "a"), 1u);
}

// One ticket set per server a client has reached would grow without end for a client that
// reaches many (one address per sandbox): the least recently used key goes past the limit.
TEST_F(TlsSessionCacheTest, KeepsTicketsForAtMostTheConfiguredNumberOfKeys) {
    net::enable_session_cache(client_->native_handle(), 8, 2);
    EXPECT_FALSE(connect("a"));
    EXPECT_FALSE(connect("b"));
    EXPECT_TRUE(connect("a"));  // "a" used more recently than "b"
    EXPECT_FALSE(connect("c"));
    EXPECT_EQ(net::cached_keys(client_->native_handle()), 2u);
    EXPECT_GE(net::cached_sessions(client_->native_handle(), "a"), 1u);
    EXPECT_EQ(net::cached_sessions(client_->native_handle(), "b"), 0u);
    EXPECT_GE(net::cached_sessions(client_->native_handle(), "c"), 1u);
    EXPECT_FALSE(connect("b"));  // forgotten: a full handshake again
}

// TLS 1.2 servers renew nothing on a resumed handshake (OpenSSL reports no new session then): the
// session is reused, never used up.
TEST_F(TlsSessionCacheTest, ATls12SessionIsReusedUntilItExpires) {
    ASSERT_EQ(SSL_CTX_set_max_proto_version(server_->native_handle(), TLS1_2_VERSION), 1);
    EXPECT_FALSE(connect("a"));
    EXPECT_EQ(net::cached_sessions(client_->native_handle(), "a"), 1u);
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(connect("a")) << i;
    EXPECT_EQ(net::cached_sessions(client_->native_handle(), "a"), 1u);
}

}  // namespace
