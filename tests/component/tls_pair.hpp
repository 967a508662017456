// The TLS component tests' pair: a handshaken client and server over loopback, and helpers.
#pragma once

#include "local/tls_certs.hpp"
#include "net/any_stream.hpp"
#include "net/tls_context.hpp"

#include "../support/run_test.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <gtest/gtest.h>

#include <openssl/ssl.h>

#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace ks = kubesandbox;
namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;
using ks::net::AnyStream;
using namespace std::chrono_literals;
using namespace asio::experimental::awaitable_operators;
inline constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

namespace tls_test {

inline std::string pattern(std::size_t n, unsigned seed) {
    std::string s(n, '\0');
    for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + seed * 7 + (i >> 12)) & 0xff);
    return s;
}

class TlsStreamTest : public ::testing::Test {
protected:
    void SetUp() override {
        auto certs = ks::local::generate_serving_certs();
        ASSERT_TRUE(certs.has_value());
        server_ctx.use_certificate_chain(asio::buffer(certs->cert_pem));
        server_ctx.use_private_key(asio::buffer(certs->key_pem), asio::ssl::context::pem);
        ks::net::TlsClientSettings settings;
        settings.ca_pem = certs->ca_pem;
        auto ctx = ks::net::make_tls_client_context(settings);
        ASSERT_TRUE(ctx.has_value());
        client_ctx = *ctx;
    }

    // A handshaken client/server pair over loopback; the client verifies `verify_host`.
    asio::awaitable<std::pair<AnyStream, AnyStream>> pair(std::string verify_host = "127.0.0.1") {
        tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
        tcp::socket client_socket(io);
        co_await client_socket.async_connect(acceptor.local_endpoint(), asio::use_awaitable);
        tcp::socket server_socket = co_await acceptor.async_accept(asio::use_awaitable);
        AnyStream client = AnyStream::tls_client(std::move(client_socket), *client_ctx, "", verify_host);
        AnyStream server = AnyStream::tls_server(std::move(server_socket), server_ctx);
        auto handshakes = co_await (client.async_handshake(use_tuple) && server.async_handshake(use_tuple));
        const error_code client_ec = std::get<0>(handshakes), server_ec = std::get<0>(std::get<1>(handshakes));
        EXPECT_FALSE(client_ec) << client_ec.message();
        EXPECT_FALSE(server_ec) << server_ec.message();
        co_return std::pair<AnyStream, AnyStream>{std::move(client), std::move(server)};
    }

    // The client's handshake result against a server whose certificate names 127.0.0.1, ::1
    // and localhost, verifying `verify_host`.
    asio::awaitable<error_code> handshake_verifying(std::string verify_host) {
        tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
        tcp::socket client_socket(io);
        co_await client_socket.async_connect(acceptor.local_endpoint(), asio::use_awaitable);
        tcp::socket server_socket = co_await acceptor.async_accept(asio::use_awaitable);
        AnyStream client = AnyStream::tls_client(std::move(client_socket), *client_ctx, "", verify_host);
        AnyStream server = AnyStream::tls_server(std::move(server_socket), server_ctx);
        auto handshakes = co_await (client.async_handshake(use_tuple) && server.async_handshake(use_tuple));
        co_return std::get<0>(handshakes);
    }

    void run(std::function<asio::awaitable<void>()> body) { ks::test::run_coroutine_test(io, body, 30s); }

    asio::io_context io;
    asio::ssl::context server_ctx{asio::ssl::context::tls_server};
    std::shared_ptr<asio::ssl::context> client_ctx;
};

inline asio::awaitable<void> sleep_for(std::chrono::milliseconds d) {
    asio::steady_timer t(co_await asio::this_coro::executor, d);
    co_await t.async_wait(use_tuple);
}

}  // namespace tls_test
