// ChannelKeepAlive over a real loopback WebSocket, with short periods: a peer that answers
// nothing is cut after two quiet periods, a peer that answers pings is kept (and pinged), and a
// connection with data flowing is never pinged.
#include "kube/channel_websocket.hpp"

#include "../support/run_test.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/websocket.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

namespace ks = kubesandbox;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
using asio::ip::tcp;
using boost::system::error_code;
using ks::kube::ChannelKeepAlive;
using ks::kube::ChannelWebSocket;
using namespace std::chrono_literals;
using namespace asio::experimental::awaitable_operators;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

namespace {

using ServerSocket = websocket::stream<tcp::socket>;

asio::awaitable<void> sleep_for(std::chrono::milliseconds d) {
    asio::steady_timer t(co_await asio::this_coro::executor, d);
    co_await t.async_wait(use_tuple);
}

class ChannelKeepAliveTest : public ::testing::Test {
protected:
    // A client WebSocket (our stream type, as the exec path opens it, without Beast's idle
    // timeout) and the server's end, handshaken over loopback.
    asio::awaitable<void> connect() {
        tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
        tcp::socket socket(io);
        co_await socket.async_connect(acceptor.local_endpoint(), asio::use_awaitable);
        server = std::make_unique<ServerSocket>(co_await acceptor.async_accept(asio::use_awaitable));
        client = std::make_unique<ChannelWebSocket>(ks::net::AnyStream::tcp(std::move(socket)));
        server->control_callback([this](websocket::frame_type kind, beast::string_view) {
            if (kind == websocket::frame_type::ping) ++pings;
        });
        auto both = co_await (server->async_accept(use_tuple) && client->async_handshake("127.0.0.1", "/", use_tuple));
        const error_code accepted = std::get<0>(both), handshaken = std::get<0>(std::get<1>(both));
        EXPECT_FALSE(accepted) << accepted.message();
        EXPECT_FALSE(handshaken) << handshaken.message();
    }

    void run(std::function<asio::awaitable<void>()> body) { ks::test::run_coroutine_test(io, body, 20s); }

    asio::io_context io;
    std::unique_ptr<ServerSocket> server;
    std::unique_ptr<ChannelWebSocket> client;
    int pings = 0;
};

TEST_F(ChannelKeepAliveTest, APeerThatAnswersNothingIsCutAfterTwoQuietPeriods) {
    error_code read_ec;
    bool timed_out = false;
    std::chrono::steady_clock::duration took{};
    run([&]() -> asio::awaitable<void> {
        co_await connect();  // the server reads nothing from now on, so no pong either
        ChannelKeepAlive keep_alive(*client, io.get_executor(), 100ms);
        const auto start = std::chrono::steady_clock::now();
        beast::flat_buffer buffer;
        auto [ec, n] = co_await client->async_read(buffer, use_tuple);
        took = std::chrono::steady_clock::now() - start;
        read_ec = ec;
        timed_out = keep_alive.timed_out();
    });
    EXPECT_TRUE(read_ec);
    EXPECT_TRUE(timed_out);
    EXPECT_GE(took, 180ms);
    EXPECT_LT(took, 5s);
}

TEST_F(ChannelKeepAliveTest, APeerThatAnswersPingsIsKept) {
    error_code read_ec;
    std::string got;
    bool timed_out = true;
    run([&]() -> asio::awaitable<void> {
        co_await connect();
        // Periods long enough that a pong is never late, even on a loaded machine.
        ChannelKeepAlive keep_alive(*client, io.get_executor(), 250ms);
        auto answer = [&]() -> asio::awaitable<void> {  // a pending read answers each ping with a pong
            beast::flat_buffer sink;
            co_await server->async_read(sink, use_tuple);  // until the client closes
        };
        auto talk_later = [&]() -> asio::awaitable<void> {
            co_await sleep_for(2000ms);
            server->text(true);
            co_await server->async_write(asio::buffer(std::string("done")), use_tuple);
        };
        auto read = [&]() -> asio::awaitable<void> {
            beast::flat_buffer buffer;
            auto [ec, n] = co_await client->async_read(buffer, use_tuple);
            read_ec = ec;
            got = beast::buffers_to_string(buffer.data());
            timed_out = keep_alive.timed_out();
            client->next_layer().close();
        };
        co_await (answer() && talk_later() && read());
    });
    EXPECT_FALSE(read_ec) << read_ec.message();
    EXPECT_EQ(got, "done");
    EXPECT_FALSE(timed_out);
    EXPECT_GE(pings, 2);  // about one every other period over 8 periods
}

TEST_F(ChannelKeepAliveTest, AConnectionWithDataFlowingIsNeverPinged) {
    int messages = 0;
    error_code read_ec;
    run([&]() -> asio::awaitable<void> {
        co_await connect();
        // A ping would take a whole period without a message, 30 times longer than their gaps.
        ChannelKeepAlive keep_alive(*client, io.get_executor(), 300ms);
        auto serve = [&]() -> asio::awaitable<void> {
            beast::flat_buffer sink;
            auto reading = server->async_read(sink, use_tuple);  // would count a ping
            auto talk = [&]() -> asio::awaitable<void> {
                for (int i = 0; i < 120; ++i) {
                    co_await sleep_for(10ms);
                    co_await server->async_write(asio::buffer(std::string("tick")), use_tuple);
                }
                co_await server->async_write(asio::buffer(std::string("end")), use_tuple);
            };
            co_await (std::move(reading) || talk());
        };
        auto read = [&]() -> asio::awaitable<void> {
            for (;;) {
                beast::flat_buffer buffer;
                auto [ec, n] = co_await client->async_read(buffer, use_tuple);
                if (ec) {
                    read_ec = ec;
                    break;
                }
                if (beast::buffers_to_string(buffer.data()) == "end") break;
                ++messages;
            }
        };
        co_await (serve() && read());
    });
    EXPECT_FALSE(read_ec) << read_ec.message();
    EXPECT_EQ(messages, 120);
    EXPECT_EQ(pings, 0);
}

}  // namespace
