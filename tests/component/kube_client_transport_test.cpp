// KubeClient transport over loopback: an HTTP CONNECT proxy with credentials in proxy-url, and
// TLS failure paths (wrong CA, tls-server-name for SNI and verification) against an in-test
// HTTPS server whose certificates come from the local cluster's generator.
#include <kubesandbox/kube_client.hpp>

#include "local/tls_certs.hpp"
#include "net/any_stream.hpp"

#include "../support/client_helpers.hpp"
#include "../support/fake_server.hpp"
#include "../support/run_test.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <openssl/ssl.h>

#include <gtest/gtest.h>

#include <array>
#include <memory>

namespace ks = kubesandbox;
namespace asio = boost::asio;
namespace http = boost::beast::http;
using asio::ip::tcp;
using ks::errc;
using ks::test::FakeReply;
using ks::test::FakeRequest;
using ks::test::FakeServer;
using ks::test::http_response;
using namespace std::chrono_literals;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

namespace {

const ks::ResourcePath pods = ks::test::default_pods();

using ks::test::fast_options;

// ---- a tiny HTTP CONNECT proxy -------------------------------------------------------------------

struct ConnectProxy {
    explicit ConnectProxy(asio::io_context& io) : acceptor(io, {asio::ip::make_address("127.0.0.1"), 0}) {}
    tcp::acceptor acceptor;
    std::vector<std::string> heads;  // each CONNECT request head as received
    bool refuse = false;             // answer 407 instead of tunnelling
    unsigned short port() const { return acceptor.local_endpoint().port(); }
};

asio::awaitable<void> pump(std::shared_ptr<tcp::socket> from, std::shared_ptr<tcp::socket> to) {
    std::array<char, 16 * 1024> buf{};
    for (;;) {
        auto [ec, n] = co_await from->async_read_some(asio::buffer(buf), use_tuple);
        if (ec) {
            boost::system::error_code ignored;
            to->shutdown(tcp::socket::shutdown_send, ignored);
            co_return;
        }
        auto [wec, wn] = co_await asio::async_write(*to, asio::buffer(buf.data(), n), use_tuple);
        if (wec) co_return;
    }
}

asio::awaitable<void> proxy_loop(ConnectProxy& proxy) {
    for (;;) {
        auto [ec, accepted] = co_await proxy.acceptor.async_accept(use_tuple);
        if (ec) co_return;
        auto client = std::make_shared<tcp::socket>(std::move(accepted));
        std::string head;
        auto dyn = asio::dynamic_buffer(head, 16 * 1024);
        auto [rec, n] = co_await asio::async_read_until(*client, dyn, "\r\n\r\n", use_tuple);
        if (rec) continue;
        proxy.heads.push_back(head.substr(0, n));
        if (proxy.refuse) {
            const std::string no = "HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n";
            co_await asio::async_write(*client, asio::buffer(no), use_tuple);
            continue;
        }
        // "CONNECT host:port HTTP/1.1": tunnel to that port on loopback.
        const auto sp1 = head.find(' '), sp2 = head.find(' ', sp1 + 1);
        const std::string authority = head.substr(sp1 + 1, sp2 - sp1 - 1);
        const std::string port = authority.substr(authority.rfind(':') + 1);
        auto upstream = std::make_shared<tcp::socket>(proxy.acceptor.get_executor());
        tcp::endpoint target(asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(std::stoi(port)));
        auto [cec] = co_await upstream->async_connect(target, use_tuple);
        if (cec) continue;
        const std::string ok = "HTTP/1.1 200 Connection established\r\n\r\n";
        co_await asio::async_write(*client, asio::buffer(ok), use_tuple);
        asio::co_spawn(proxy.acceptor.get_executor(), pump(client, upstream), asio::detached);
        asio::co_spawn(proxy.acceptor.get_executor(), pump(upstream, client), asio::detached);
    }
}

// ---- a tiny HTTPS server -------------------------------------------------------------------------

struct TlsServer {
    TlsServer(asio::io_context& io, const ks::local::ServingCerts& certs)
        : ctx(asio::ssl::context::tls_server), acceptor(io, {asio::ip::make_address("127.0.0.1"), 0}) {
        ctx.use_certificate_chain(asio::buffer(certs.cert_pem));
        ctx.use_private_key(asio::buffer(certs.key_pem), asio::ssl::context::pem);
        SSL_CTX_set_tlsext_servername_callback(ctx.native_handle(), &TlsServer::on_sni);
        SSL_CTX_set_tlsext_servername_arg(ctx.native_handle(), this);
    }
    static int on_sni(SSL* ssl, int*, void* arg) {
        const char* name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
        static_cast<TlsServer*>(arg)->sni = name ? name : "";
        return SSL_TLSEXT_ERR_OK;
    }
    unsigned short port() const { return acceptor.local_endpoint().port(); }
    std::string url() const { return "https://127.0.0.1:" + std::to_string(port()); }

    asio::ssl::context ctx;
    tcp::acceptor acceptor;
    std::string sni = "(none)";
    int accepted = 0;
    int requests = 0;
};

asio::awaitable<void> serve_tls(std::shared_ptr<ks::net::AnyStream> stream, TlsServer& server) {
    auto [hec] = co_await stream->async_handshake(use_tuple);
    if (hec) co_return;
    boost::beast::flat_buffer buffer;
    for (;;) {
        http::request<http::string_body> req;
        auto [rec, rn] = co_await http::async_read(*stream, buffer, req, use_tuple);
        if (rec) co_return;
        ++server.requests;
        const std::string reply = http_response(200, R"({"kind":"Pod","metadata":{"name":"tls"}})");
        auto [wec, wn] = co_await asio::async_write(*stream, asio::buffer(reply), use_tuple);
        if (wec) co_return;
    }
}

asio::awaitable<void> tls_accept_loop(TlsServer& server) {
    for (;;) {
        auto [ec, sock] = co_await server.acceptor.async_accept(use_tuple);
        if (ec) co_return;
        ++server.accepted;
        auto stream = std::make_shared<ks::net::AnyStream>(ks::net::AnyStream::tls_server(std::move(sock), server.ctx));
        asio::co_spawn(server.acceptor.get_executor(), serve_tls(stream, server), asio::detached);
    }
}

struct TransportTest : ::testing::Test {
    asio::io_context io;
    template <class F>
    void run(F f, std::chrono::milliseconds deadline = 10s) {
        ks::test::run_coroutine_test(io, std::move(f), deadline);
    }
};

}  // namespace

// ---- 8. proxy ----------------------------------------------------------------------------------

TEST_F(TransportTest, ProxyUrlWithUserinfoTunnelsWithProxyAuthorization) {
    FakeServer server(io, [](const FakeRequest& r) {
        EXPECT_EQ(r.headers.at("authorization"), "Bearer tok");
        EXPECT_EQ(r.headers.count("proxy-authorization"), 0u);  // only the proxy sees it
        return FakeReply{http_response(200, R"({"kind":"Pod","metadata":{"name":"p"}})")};
    });
    ConnectProxy proxy(io);
    asio::co_spawn(io, proxy_loop(proxy), asio::detached);
    ks::KubeConfig cfg = ks::KubeConfig::from_url(server.url(), "tok");
    cfg.proxy_url = "http://user:p%40ss@127.0.0.1:" + std::to_string(proxy.port());
    ks::KubeClient client(io.get_executor(), cfg, fast_options());
    run([&]() -> asio::awaitable<void> {
        auto r = co_await client.get(pods.with_name("p"));
        EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().describe());
        auto again = co_await client.get(pods.with_name("p"));  // the tunnel is kept alive
        EXPECT_TRUE(again.has_value());
    });
    ASSERT_EQ(proxy.heads.size(), 1u);
    const std::string target = "127.0.0.1:" + std::to_string(server.port());
    EXPECT_TRUE(proxy.heads[0].starts_with("CONNECT " + target + " HTTP/1.1\r\n")) << proxy.heads[0];
    EXPECT_NE(proxy.heads[0].find("\r\nHost: " + target + "\r\n"), std::string::npos) << proxy.heads[0];
    EXPECT_NE(proxy.heads[0].find("\r\nProxy-Authorization: Basic dXNlcjpwQHNz\r\n"), std::string::npos)
        << proxy.heads[0];
    EXPECT_EQ(server.requests_seen(), 2);
}

TEST_F(TransportTest, ProxyRefusalNeverShowsTheProxyPassword) {
    ConnectProxy proxy(io);
    proxy.refuse = true;
    asio::co_spawn(io, proxy_loop(proxy), asio::detached);
    ks::KubeConfig cfg = ks::KubeConfig::from_url("http://127.0.0.1:1");
    cfg.proxy_url = "http://user:s3cr%21t@127.0.0.1:" + std::to_string(proxy.port());
    auto opts = fast_options();
    opts.max_retries = 0;
    ks::KubeClient client(io.get_executor(), cfg, opts);
    ks::KubeConfig bad_scheme = cfg;
    bad_scheme.proxy_url = "socks5://user:s3cr%21t@127.0.0.1:1080";
    ks::KubeClient socks(io.get_executor(), bad_scheme, opts);
    run([&]() -> asio::awaitable<void> {
        auto r = co_await client.get(pods.with_name("p"));
        EXPECT_FALSE(r.has_value());
        if (!r) {
            EXPECT_TRUE(r.error().is(errc::connection_failed)) << r.error().describe();
            EXPECT_NE(r.error().message.find("407"), std::string::npos) << r.error().message;
            EXPECT_EQ(r.error().describe().find("s3cr"), std::string::npos) << r.error().describe();
            EXPECT_EQ(r.error().describe().find("dXNlcjpzM2NyIXQ"), std::string::npos) << r.error().describe();
        }
        auto s = co_await socks.get(pods.with_name("p"));
        EXPECT_FALSE(s.has_value());
        if (!s) {
            EXPECT_TRUE(s.error().is(errc::invalid_config)) << s.error().describe();
            EXPECT_EQ(s.error().describe().find("s3cr"), std::string::npos) << s.error().describe();
        }
    });
    ASSERT_EQ(proxy.heads.size(), 1u);
    EXPECT_NE(proxy.heads[0].find("Proxy-Authorization: Basic dXNlcjpzM2NyIXQ="), std::string::npos) << proxy.heads[0];
}

// ---- 10. TLS -------------------------------------------------------------------------------------

TEST_F(TransportTest, TlsWithTheRightCaWorksAndAWrongCaIsATypedTlsError) {
    auto certs = ks::local::generate_serving_certs();
    auto other = ks::local::generate_serving_certs();
    ASSERT_TRUE(certs.has_value() && other.has_value());
    TlsServer server(io, *certs);
    asio::co_spawn(io, tls_accept_loop(server), asio::detached);
    ks::KubeConfig good = ks::KubeConfig::from_url(server.url(), "tok");
    good.certificate_authority_pem = certs->ca_pem;
    ks::KubeConfig wrong = good;
    wrong.certificate_authority_pem = other->ca_pem;
    ks::KubeClient ok_client(io.get_executor(), good, fast_options());
    ks::KubeClient bad_client(io.get_executor(), wrong, fast_options());
    int accepted_before_bad = 0;
    run([&]() -> asio::awaitable<void> {
        auto r = co_await ok_client.get(pods.with_name("tls"));
        EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().describe());
        accepted_before_bad = server.accepted;
        auto bad = co_await bad_client.get(pods.with_name("tls"));
        EXPECT_FALSE(bad.has_value());
        if (!bad) {
            EXPECT_TRUE(bad.error().is(errc::tls_error)) << bad.error().describe();
            EXPECT_EQ(&bad.error().lower_code.category(), &asio::error::get_ssl_category());
            EXPECT_NE(bad.error().message.find("certificate verify failed"), std::string::npos) << bad.error().message;
        }
        auto watch = co_await bad_client.watch(pods);
        EXPECT_FALSE(watch.has_value());
        if (!watch) {
            EXPECT_TRUE(watch.error().is(errc::tls_error)) << watch.error().describe();
        }
    });
    EXPECT_EQ(server.requests, 1);
    EXPECT_TRUE(server.sni.empty() || server.sni == "(none)") << server.sni;  // an IP is never sent as SNI
    // A verification failure is final: one connection for the GET, one for the watch, no retries.
    EXPECT_EQ(server.accepted - accepted_before_bad, 2);
}

TEST_F(TransportTest, TlsServerNameIsUsedForSniAndForVerification) {
    auto certs = ks::local::generate_serving_certs();  // SANs: 127.0.0.1, ::1, localhost
    ASSERT_TRUE(certs.has_value());
    TlsServer server(io, *certs);
    asio::co_spawn(io, tls_accept_loop(server), asio::detached);
    ks::KubeConfig named = ks::KubeConfig::from_url(server.url(), "tok");
    named.certificate_authority_pem = certs->ca_pem;
    named.tls_server_name = "localhost";
    ks::KubeConfig mismatched = named;
    mismatched.tls_server_name = "api.not-in-the-cert.example";
    ks::KubeClient named_client(io.get_executor(), named, fast_options());
    ks::KubeClient mismatched_client(io.get_executor(), mismatched, fast_options());
    std::string sni_named;
    run([&]() -> asio::awaitable<void> {
        auto r = co_await named_client.get(pods.with_name("tls"));
        EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().describe());
        sni_named = server.sni;
        // The URL's 127.0.0.1 is in the certificate, but verification must use tls-server-name.
        auto bad = co_await mismatched_client.get(pods.with_name("tls"));
        EXPECT_FALSE(bad.has_value());
        if (!bad) {
            EXPECT_TRUE(bad.error().is(errc::tls_error)) << bad.error().describe();
            EXPECT_NE(bad.error().message.find("api.not-in-the-cert.example"), std::string::npos)
                << bad.error().message;
        }
    });
    EXPECT_EQ(sni_named, "localhost");
    EXPECT_EQ(server.sni, "api.not-in-the-cert.example");
    EXPECT_EQ(server.requests, 1);
}

TEST_F(TransportTest, TlsThroughTheConnectProxy) {
    auto certs = ks::local::generate_serving_certs();
    ASSERT_TRUE(certs.has_value());
    TlsServer server(io, *certs);
    asio::co_spawn(io, tls_accept_loop(server), asio::detached);
    ConnectProxy proxy(io);
    asio::co_spawn(io, proxy_loop(proxy), asio::detached);
    ks::KubeConfig cfg = ks::KubeConfig::from_url(server.url(), "tok");
    cfg.certificate_authority_pem = certs->ca_pem;
    cfg.proxy_url = "127.0.0.1:" + std::to_string(proxy.port());  // scheme-less, no credentials
    ks::KubeClient client(io.get_executor(), cfg, fast_options());
    run([&]() -> asio::awaitable<void> {
        auto r = co_await client.get(pods.with_name("tls"));
        EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().describe());
    });
    ASSERT_EQ(proxy.heads.size(), 1u);
    EXPECT_TRUE(proxy.heads[0].starts_with("CONNECT 127.0.0.1:" + std::to_string(server.port()) + " HTTP/1.1\r\n"));
    EXPECT_EQ(proxy.heads[0].find("Proxy-Authorization"), std::string::npos);
    EXPECT_EQ(server.requests, 1);
}
