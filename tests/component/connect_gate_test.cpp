// The bound on TLS connections being opened at once (net::ConnectGate through net::connect),
// against real loopback servers: one that never answers a ClientHello (so every handshake that
// got in stays open and can be counted) and one that completes them.
#include "net/connect_gate.hpp"
#include "local/tls_certs.hpp"
#include "net/any_stream.hpp"
#include "net/connector.hpp"
#include "net/tls_context.hpp"

#include "../support/run_test.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ks = kubesandbox;
namespace asio = boost::asio;
using asio::ip::tcp;
using namespace std::chrono_literals;
using std::chrono::steady_clock;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

namespace {

asio::awaitable<void> sleep_for(std::chrono::milliseconds d) {
    asio::steady_timer t(co_await asio::this_coro::executor, d);
    co_await t.async_wait(use_tuple);
}

class ConnectGateTest : public ::testing::Test {
protected:
    void SetUp() override {
        certs = *ks::local::generate_serving_certs();
        ks::net::TlsClientSettings settings;
        settings.ca_pem = certs.ca_pem;
        auto ctx = ks::net::make_tls_client_context(settings);
        ASSERT_TRUE(ctx.has_value());
        target.host = "127.0.0.1";
        target.port = std::to_string(acceptor.local_endpoint().port());
        target.tls = true;
        target.tls_context = *ctx;
        target.connect_timeout = 5s;
    }

    // Accepts and keeps every connection, reading nothing: handshakes stay in progress.
    asio::awaitable<void> hold_all() {
        for (;;) {
            auto [ec, socket] = co_await acceptor.async_accept(use_tuple);
            if (ec) co_return;
            held.push_back(std::move(socket));
        }
    }

    // Accepts and completes every handshake, keeping the streams open.
    asio::awaitable<void> serve_all(asio::ssl::context& server_ctx) {
        for (;;) {
            auto [ec, socket] = co_await acceptor.async_accept(use_tuple);
            if (ec) co_return;
            auto stream =
                std::make_shared<ks::net::AnyStream>(ks::net::AnyStream::tls_server(std::move(socket), server_ctx));
            asio::co_spawn(
                io,
                [this, stream]() -> asio::awaitable<void> {
                    auto [hec] = co_await stream->async_handshake(use_tuple);
                    if (!hec) served.push_back(stream);
                },
                asio::detached);
        }
    }

    // Starts `n` connects with `deadline`; their outcomes land in `results` as they end.
    void start_connects(int n, steady_clock::time_point deadline) {
        for (int i = 0; i < n; ++i) {
            asio::co_spawn(
                io,
                [this, deadline]() -> asio::awaitable<void> {
                    auto r = co_await ks::net::connect(io.get_executor(), target, deadline);
                    results.push_back(r ? std::optional<ks::Error>() : std::optional<ks::Error>(r.error()));
                    if (r) connected.push_back(std::move(*r));
                },
                asio::detached);
        }
    }

    void run(std::function<asio::awaitable<void>()> body) { ks::test::run_coroutine_test(io, body, 30s); }

    asio::io_context io;
    tcp::acceptor acceptor{io, {asio::ip::make_address("127.0.0.1"), 0}};
    ks::local::ServingCerts certs;
    ks::net::ConnectTarget target;
    std::vector<tcp::socket> held;
    std::vector<std::shared_ptr<ks::net::AnyStream>> served;
    std::vector<ks::net::AnyStream> connected;
    std::vector<std::optional<ks::Error>> results;
};

TEST_F(ConnectGateTest, OnlyTheLimitOpensAtOnceAndTheRestTimeOutWaiting) {
    run([&]() -> asio::awaitable<void> {
        asio::co_spawn(io, hold_all(), asio::detached);
        target.gate = std::make_shared<ks::net::ConnectGate>(io.get_executor(), 2);
        start_connects(2, steady_clock::now() + 1500ms);  // in first; their handshakes hang
        start_connects(3, steady_clock::now() + 300ms);   // behind them
        while (results.size() < 3) co_await sleep_for(20ms);
        EXPECT_EQ(held.size(), 2u) << "connections that reached the server";
        for (const auto& r : results) {
            if (!r) {
                ADD_FAILURE() << "a connect behind the gate succeeded";
                continue;
            }
            EXPECT_TRUE(r->is(ks::errc::timeout)) << r->describe();
            EXPECT_NE(r->message.find("waiting behind 2 connections being opened"), std::string::npos) << r->message;
        }
        while (results.size() < 5) co_await sleep_for(20ms);
        for (std::size_t i = 3; i < 5; ++i) {
            if (!results[i]) {
                ADD_FAILURE() << "a handshake nobody answered succeeded";
                continue;
            }
            EXPECT_TRUE(results[i]->is(ks::errc::timeout)) << results[i]->describe();
            EXPECT_NE(results[i]->message.find("TLS handshake"), std::string::npos) << results[i]->message;
        }
        EXPECT_EQ(held.size(), 2u);
    });
}

TEST_F(ConnectGateTest, WithoutAGateEveryConnectionOpensAtOnce) {
    run([&]() -> asio::awaitable<void> {
        asio::co_spawn(io, hold_all(), asio::detached);
        start_connects(5, steady_clock::now() + 600ms);
        co_await sleep_for(300ms);
        EXPECT_EQ(held.size(), 5u);
        while (results.size() < 5) co_await sleep_for(20ms);
    });
}

TEST_F(ConnectGateTest, QueuedConnectionsGoInAsEarlierOnesFinish) {
    asio::ssl::context server_ctx{asio::ssl::context::tls_server};
    server_ctx.use_certificate_chain(asio::buffer(certs.cert_pem));
    server_ctx.use_private_key(asio::buffer(certs.key_pem), asio::ssl::context::pem);
    run([&]() -> asio::awaitable<void> {
        asio::co_spawn(io, serve_all(server_ctx), asio::detached);
        target.gate = std::make_shared<ks::net::ConnectGate>(io.get_executor(), 2);
        start_connects(12, steady_clock::now() + 10s);
        while (results.size() < 12) co_await sleep_for(10ms);
        for (const auto& r : results) EXPECT_FALSE(r.has_value()) << r->describe();
        EXPECT_EQ(connected.size(), 12u);
        // Every permit came back: two more go in at once.
        auto a = co_await target.gate->enter(steady_clock::now());
        auto b = co_await target.gate->enter(steady_clock::now());
        EXPECT_TRUE(a && b);
    });
}

TEST_F(ConnectGateTest, APermitLetsTheNextWaiterInWhenItEnds) {
    run([&]() -> asio::awaitable<void> {
        ks::net::ConnectGate gate(io.get_executor(), 1);
        auto first = co_await gate.enter(steady_clock::now() + 1s);
        EXPECT_TRUE(first.has_value());
        if (!first) co_return;
        // Full: a waiter with a short deadline gives up.
        auto t0 = steady_clock::now();
        EXPECT_FALSE((co_await gate.enter(steady_clock::now() + 100ms)).has_value());
        EXPECT_GE(steady_clock::now() - t0, 90ms);
        // A waiter goes in once the permit is released (moved twice first: still one permit).
        bool second_in = false;
        asio::co_spawn(
            io,
            [&]() -> asio::awaitable<void> {
                auto second = co_await gate.enter(steady_clock::now() + 5s);
                second_in = second.has_value();
            },
            asio::detached);
        co_await sleep_for(50ms);
        EXPECT_FALSE(second_in);
        std::optional<ks::net::ConnectGate::Permit> moved = std::move(first);
        ks::net::ConnectGate::Permit again = std::move(*moved);
        moved.reset();
        co_await sleep_for(50ms);
        EXPECT_FALSE(second_in) << "a moved-from permit released the gate";
        { auto released = std::move(again); }
        for (int i = 0; i < 100 && !second_in; ++i) co_await sleep_for(10ms);
        EXPECT_TRUE(second_in);
    });
}

TEST_F(ConnectGateTest, APermitReleasedAsAWaitersDeadlineFiresIsNeverLost) {
    // The holder lets go from a timer due at the waiter's deadline: in the same pass of the
    // reactor, the permit reaches the waiter's receive while its deadline has fired too. That
    // permit must end up with the waiter or back in the gate, never nowhere.
    run([&]() -> asio::awaitable<void> {
        ks::net::ConnectGate gate(io.get_executor(), 1);
        int rounds = 0, served = 0;
        for (; rounds < 300; ++rounds) {
            auto held = co_await gate.enter(steady_clock::now());
            if (!held) break;  // the gate's one permit is gone
            const auto at = steady_clock::now() + 2ms;
            auto holder = std::make_shared<std::optional<ks::net::ConnectGate::Permit>>(std::move(held));
            auto releaser = std::make_shared<asio::steady_timer>(io, at);
            releaser->async_wait([releaser, holder](boost::system::error_code) { holder->reset(); });
            auto waited = co_await gate.enter(at);
            served += waited.has_value();
            waited.reset();
            while (holder->has_value()) co_await sleep_for(1ms);
        }
        EXPECT_EQ(rounds, 300) << "the permit was lost in round " << rounds << " (" << served
                               << " rounds served the waiter)";
    });
}

}  // namespace
