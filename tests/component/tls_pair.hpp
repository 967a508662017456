// The TLS component tests' pair: a handshaken client and server over loopback, and helpers.
#pragma once

#include "net/any_stream.hpp"

#include "../support/run_test.hpp"
#include "../support/tls_contexts.hpp"

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
    void SetUp() override { ASSERT_NO_FATAL_FAILURE(ks::test::make_tls_contexts(server_ctx, client_ctx)); }

    // A handshaken client/server pair over loopback; the client verifies `verify_host`.
    asio::awaitable<std::pair<AnyStream, AnyStream>> pair(std::string verify_host = "127.0.0.1") {
        auto connected = co_await connect(std::move(verify_host));
        EXPECT_FALSE(connected.client_ec) << connected.client_ec.message();
        EXPECT_FALSE(connected.server_ec) << connected.server_ec.message();
        co_return std::pair<AnyStream, AnyStream>{std::move(connected.client), std::move(connected.server)};
    }

    // The client's handshake result against a server whose certificate names 127.0.0.1, ::1
    // and localhost, verifying `verify_host`.
    asio::awaitable<error_code> handshake_verifying(std::string verify_host) {
        co_return (co_await connect(std::move(verify_host))).client_ec;
    }

    void run(std::function<asio::awaitable<void>()> body) { ks::test::run_coroutine_test(io, body, 30s); }

    asio::io_context io;
    asio::ssl::context server_ctx{asio::ssl::context::tls_server};
    std::shared_ptr<asio::ssl::context> client_ctx;

private:
    struct Connected {
        AnyStream client, server;
        error_code client_ec, server_ec;
    };
    // Both ends of a loopback connection after both handshakes, whatever their results.
    asio::awaitable<Connected> connect(std::string verify_host) {
        tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
        tcp::socket client_socket(io);
        co_await client_socket.async_connect(acceptor.local_endpoint(), asio::use_awaitable);
        tcp::socket server_socket = co_await acceptor.async_accept(asio::use_awaitable);
        Connected c{AnyStream::tls_client(std::move(client_socket), *client_ctx, "", verify_host),
                    AnyStream::tls_server(std::move(server_socket), server_ctx),
                    {},
                    {}};
        auto handshakes = co_await (c.client.async_handshake(use_tuple) && c.server.async_handshake(use_tuple));
        c.client_ec = std::get<0>(handshakes);
        c.server_ec = std::get<0>(std::get<1>(handshakes));
        co_return c;
    }
};

inline asio::awaitable<void> sleep_for(std::chrono::milliseconds d) {
    asio::steady_timer t(co_await asio::this_coro::executor, d);
    co_await t.async_wait(use_tuple);
}

}  // namespace tls_test
