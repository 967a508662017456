// The direct router connection over loopback against a scripted server: one keep-alive
// connection reused, bodies streamed to the sink whatever their framing, and every failure typed.
#include <kubesandbox/router_connection.hpp>
#include <kubesandbox/router_sandbox.hpp>

#include "connection/pooled_connection.hpp"
#include "connection/router_connection.hpp"
#include "net/connector.hpp"

#include "../support/byte_pieces.hpp"
#include "../support/fake_server.hpp"
#include "../support/run_test.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <gtest/gtest.h>

#include <algorithm>

namespace {
namespace asio = boost::asio;
using namespace kubesandbox;
using kubesandbox::test::FakeReply;
using kubesandbox::test::FakeRequest;
using kubesandbox::test::FakeServer;
using namespace std::chrono_literals;

struct Collect final : ResponseSink {
    void on_head(unsigned s, std::string_view) override { status = s; }
    bool on_body(std::string_view chunk) override {
        body.append(chunk);
        ++pieces;
        return body.size() <= limit;
    }
    unsigned status = 0;
    std::string body;
    int pieces = 0;
    std::size_t limit = std::size_t(-1);
};

class RouterConnectionTest : public ::testing::Test {
protected:
    std::shared_ptr<RouterConnection> connect(const FakeServer& server, std::string token = "") {
        DirectConnectionOptions options;
        options.url = server.url() + "/base";
        options.token = std::move(token);
        auto made = make_direct_connection(io_.get_executor(), options);
        EXPECT_TRUE(made);
        return made ? *made : nullptr;
    }
    asio::awaitable<Result<unsigned>> send(RouterConnection& c, RouterRequest r, Collect& sink,
                                           std::chrono::milliseconds within) {
        co_return co_await c.impl().send(std::move(r), std::chrono::steady_clock::now() + within, sink);
    }
    // A plain TCP connection to 127.0.0.1:port, as a test's own StreamOpener makes one.
    asio::awaitable<Result<net::AnyStream>> connect_plain(std::string port,
                                                          std::chrono::steady_clock::time_point deadline) {
        net::ConnectTarget target;
        target.tls = false;
        target.host = "127.0.0.1";
        target.port = std::move(port);
        co_return co_await net::connect(io_.get_executor(), target, deadline);
    }
    template <class F>
    void run(F body) {
        kubesandbox::test::run_coroutine_test(io_, body, 20s);
    }
    asio::io_context io_;
};

TEST_F(RouterConnectionTest, ReusesOneConnectionAndSendsHeadAndBodyOnce) {
    std::vector<FakeRequest> seen;
    FakeServer server(io_, [&](const FakeRequest& r) {
        seen.push_back(r);
        return FakeReply(test::http_response(200, "{\"n\":" + std::to_string(seen.size()) + "}"));
    });
    auto c = connect(server, "secret");
    run([&]() -> asio::awaitable<void> {
        for (int i = 1; i <= 3; ++i) {
            RouterRequest r;
            r.method = "POST";
            r.target = "/execute";
            r.add_header("X-Sandbox-ID", "sb");
            r.body = "{\"command\":\"true\"}";
            Collect sink;
            auto status = co_await send(*c, r, sink, 5000ms);
            EXPECT_TRUE(status && *status == 200) << (status ? "" : status.error().describe());
            EXPECT_EQ(sink.body, "{\"n\":" + std::to_string(i) + "}");
        }
    });
    EXPECT_EQ(server.connections_accepted(), 1);
    ASSERT_EQ(seen.size(), 3u);
    EXPECT_EQ(seen[0].target, "/base/execute");
    EXPECT_EQ(seen[0].headers["authorization"], "Bearer secret");
    EXPECT_EQ(seen[0].headers["x-sandbox-id"], "sb");
    EXPECT_EQ(seen[0].body, "{\"command\":\"true\"}");
}

// A body from a source goes out as it is read, with its announced length, on a connection of its
// own (it cannot be sent twice); a source that fails or breaks its length ends the request.
TEST_F(RouterConnectionTest, StreamsARequestBodyFromASource) {
    std::vector<FakeRequest> seen;
    FakeServer server(io_, [&](const FakeRequest& r) {
        seen.push_back(r);
        return FakeReply(test::http_response(200, "{}"));
    });
    auto c = connect(server);
    auto body = std::make_shared<std::string>(700 * 1024 + 3, '\0');
    for (std::size_t i = 0; i < body->size(); ++i) (*body)[i] = static_cast<char>(i * 7 + i / 251);
    auto streamed = [&](std::uint64_t size, ByteSource source) {
        RouterRequest r;
        r.method = "POST";
        r.target = "/upload";
        r.body_size = size;
        r.body_source = std::move(source);
        r.replay_safe = true;  // still sent once: the source cannot give its bytes again
        return r;
    };
    run([&]() -> asio::awaitable<void> {
        RouterRequest plain;
        plain.target = "/health";
        Collect first;
        EXPECT_TRUE(co_await send(*c, plain, first, 5000ms));
        Collect sent;
        auto status = co_await send(*c, streamed(body->size(), test::uneven_pieces(body)), sent, 5000ms);
        EXPECT_TRUE(status && *status == 200) << (status ? "" : status.error().describe());
        EXPECT_EQ(server.connections_accepted(), 2);  // the idle one was left for others

        ByteSource failing = [calls = 0]() mutable -> asio::awaitable<Result<std::string_view>> {
            if (calls++ == 0) co_return std::string_view("part");
            co_return fail(errc::io_error, "local disk gone");
        };
        Collect a;
        status = co_await send(*c, streamed(10, failing), a, 5000ms);
        EXPECT_TRUE(!status && status.error().is(errc::io_error));
        Collect b;
        status = co_await send(*c, streamed(3, test::uneven_pieces(body)), b, 5000ms);
        EXPECT_TRUE(!status && status.error().is(errc::invalid_argument));
        Collect d;
        status = co_await send(*c, streamed(body->size() + 1, test::uneven_pieces(body)), d, 5000ms);
        EXPECT_TRUE(!status && status.error().is(errc::invalid_argument));
        Collect after;
        EXPECT_TRUE(co_await send(*c, plain, after, 5000ms));
    });
    ASSERT_EQ(seen.size(), 3u);  // the broken bodies never made a request
    EXPECT_EQ(seen[1].headers["content-length"], std::to_string(body->size()));
    EXPECT_TRUE(seen[1].body == *body);
}

TEST_F(RouterConnectionTest, StreamsChunkedAndUntilCloseBodies) {
    FakeServer server(io_, [&](const FakeRequest& r) {
        if (r.target == "/base/chunked") {
            FakeReply reply(test::chunked_head(200, "text/plain") + test::chunk("abc"));
            reply.more = {{test::chunk("def"), 20ms}, {test::chunk(""), 20ms}};
            return reply;
        }
        return FakeReply("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nto the end", 0ms, true);
    });
    auto c = connect(server);
    run([&]() -> asio::awaitable<void> {
        RouterRequest r;
        r.target = "/chunked";
        Collect chunked;
        auto status = co_await send(*c, r, chunked, 5000ms);
        EXPECT_TRUE(status && *status == 200);
        EXPECT_EQ(chunked.body, "abcdef");
        EXPECT_GE(chunked.pieces, 2);  // handed over as it came, not at the end
        r.target = "/close";
        Collect until_close;
        status = co_await send(*c, r, until_close, 5000ms);
        EXPECT_TRUE(status && *status == 200) << (status ? "" : status.error().describe());
        EXPECT_EQ(until_close.body, "to the end");
    });
}

TEST_F(RouterConnectionTest, FailuresAreTyped) {
    FakeServer server(io_, [&](const FakeRequest& r) {
        if (r.target == "/base/garbage") return FakeReply("SMTP ready\r\n\r\n");
        if (r.target == "/base/slow") return FakeReply(test::http_response(200, "{}"), 3000ms);
        if (r.target == "/base/cut") return FakeReply("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort", 0ms, true);
        return FakeReply(test::http_response(200, std::string(1000, 'x')));
    });
    auto c = connect(server);
    run([&]() -> asio::awaitable<void> {
        RouterRequest r;
        r.target = "/garbage";
        Collect a;
        auto status = co_await send(*c, r, a, 5000ms);
        EXPECT_TRUE(!status && status.error().code == errc::invalid_response);
        r.target = "/slow";
        Collect b;
        auto begun = std::chrono::steady_clock::now();
        status = co_await send(*c, r, b, 300ms);
        EXPECT_TRUE(!status && status.error().code == errc::timeout) << (status ? "" : status.error().describe());
        EXPECT_LT(std::chrono::steady_clock::now() - begun, 2s);
        r.target = "/cut";
        Collect d;
        status = co_await send(*c, r, d, 5000ms);
        EXPECT_TRUE(!status && status.error().code == errc::connection_closed);
        r.target = "/big";
        Collect e;
        e.limit = 10;
        status = co_await send(*c, r, e, 5000ms);
        EXPECT_TRUE(!status && status.error().code == errc::cancelled);
        r.target = "/x";
        r.add_header("X-Sandbox-ID", "a\r\nX-Injected: 1");
        Collect f;
        status = co_await send(*c, r, f, 5000ms);
        EXPECT_TRUE(!status && status.error().code == errc::invalid_argument);
    });
}

// A sandbox whose name or namespace would break the head is refused before anything is sent;
// a good one sends the fields it was made with, and a call's own timeout, on every request.
TEST_F(RouterConnectionTest, SandboxFieldsAreWrittenOnceAndNeverCarryALineBreak) {
    std::vector<FakeRequest> seen;
    FakeServer server(io_, [&](const FakeRequest& r) {
        seen.push_back(r);
        return FakeReply(test::http_response(200, R"({"stdout":"","stderr":"","exit_code":0})"));
    });
    auto c = connect(server);
    run([&]() -> asio::awaitable<void> {
        for (auto bad : {std::pair<std::string, std::string>{"a\r\nX-Injected: 1", "default"},
                         std::pair<std::string, std::string>{"sb", "ns\nX-Injected: 1"}}) {
            RouterSandboxOptions o;
            o.sandbox_name = bad.first;
            o.namespace_name = bad.second;
            RouterSandbox sandbox(c, o);
            auto r = co_await sandbox.execute("true", std::chrono::seconds(5));
            EXPECT_TRUE(!r && r.error().code == errc::invalid_argument) << (r ? r->output : r.error().describe());
        }
        EXPECT_TRUE(seen.empty());
        RouterSandboxOptions o;
        o.sandbox_name = "sb";
        o.namespace_name = "ns";
        o.port = 9999;
        o.pod_ip = "10.0.0.7";
        RouterSandbox sandbox(c, o);
        for (int timeout : {5, 7}) {
            auto r = co_await sandbox.execute("true", std::chrono::seconds(timeout));
            EXPECT_TRUE(r) << (r ? "" : r.error().describe());
        }
    });
    ASSERT_EQ(seen.size(), 2u);
    for (std::size_t i = 0; i < seen.size(); ++i) {
        EXPECT_EQ(seen[i].headers["x-sandbox-id"], "sb");
        EXPECT_EQ(seen[i].headers["x-sandbox-namespace"], "ns");
        EXPECT_EQ(seen[i].headers["x-sandbox-port"], "9999");
        EXPECT_EQ(seen[i].headers["x-sandbox-pod-ip"], "10.0.0.7");
        EXPECT_EQ(seen[i].headers["x-sandbox-timeout"], i == 0 ? "10" : "12");  // the limit plus 5 s
        EXPECT_EQ(seen[i].headers["content-type"], "application/json");
        EXPECT_EQ(seen[i].headers.count("x-injected"), 0u);
    }
}

// A path that keeps failing is not hammered: opens pause (500 ms here), doubling, and the calls
// in between fail at once with the last error; the first open that works ends the pause. The
// pauses are wide so a stalled test process cannot outlast one between two calls.
TEST_F(RouterConnectionTest, FailedOpensPauseWithBackOff) {
    FakeServer server(io_, [&](const FakeRequest&) { return FakeReply(test::http_response(200, "ok")); });
    int opens = 0;
    int failing = 3;
    PooledConnectionSettings settings;
    settings.description = "test path";
    settings.host = "test";
    settings.open_backoff_min = 500ms;
    settings.open_backoff_max = 2000ms;
    const std::string port = server.url().substr(server.url().rfind(':') + 1);
    StreamOpener open = [&](std::chrono::steady_clock::time_point deadline) -> asio::awaitable<Result<net::AnyStream>> {
        ++opens;
        if (failing-- > 0) co_return fail(errc::connection_failed, "refused #" + std::to_string(opens));
        co_return co_await connect_plain(port, deadline);
    };
    auto c = make_pooled_router_connection(io_.get_executor(), settings, open);
    run([&]() -> asio::awaitable<void> {
        RouterRequest r;
        r.target = "/x";
        auto attempt = [&]() -> asio::awaitable<Result<unsigned>> {
            Collect sink;
            co_return co_await send(*c, r, sink, 2000ms);
        };
        auto pause = [&](std::chrono::milliseconds d) -> asio::awaitable<void> {
            asio::steady_timer t(io_, d);
            co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
        };
        auto first = co_await attempt();
        EXPECT_TRUE(!first && first.error().code == errc::connection_failed);
        auto paused = co_await attempt();
        EXPECT_TRUE(!paused && paused.error().message.find("refused #1 (not tried again for") != std::string::npos)
            << (paused ? "sent" : paused.error().message);
        EXPECT_EQ(opens, 1);
        co_await pause(750ms);  // past 500 ms: tried again, fails, pauses 1 s
        EXPECT_FALSE(co_await attempt());
        EXPECT_EQ(opens, 2);
        EXPECT_FALSE(co_await attempt());
        EXPECT_EQ(opens, 2);
        co_await pause(1250ms);  // past 1 s: fails again, pauses 2 s (the cap)
        EXPECT_FALSE(co_await attempt());
        EXPECT_EQ(opens, 3);
        EXPECT_FALSE(co_await attempt());
        EXPECT_EQ(opens, 3);
        co_await pause(2250ms);
        auto works = co_await attempt();
        EXPECT_TRUE(works && *works == 200u) << (works ? "" : works.error().describe());
        EXPECT_EQ(opens, 4);
    });
}

// Of two opens at once one fails and the other connects, in either order: the path works, so a
// call that then needs a connection of its own opens one at once instead of failing with the old
// error for a pause (a success ends a pause a failure began; a failure of an open begun before a
// success starts none).
TEST_F(RouterConnectionTest, OfTwoOpensAtOnceAFailureDoesNotPauseAPathThatWorks) {
    FakeServer server(io_, [&](const FakeRequest&) { return FakeReply(test::http_response(200, "ok")); });
    const std::string port = server.url().substr(server.url().rfind(':') + 1);
    for (const bool failure_first : {true, false}) {
        SCOPED_TRACE(failure_first ? "the failure first" : "the success first");
        io_.restart();  // the previous run stopped it
        int opens = 0;
        PooledConnectionSettings settings;
        settings.description = "test path";
        settings.host = "test";
        settings.open_backoff_min = 5000ms;
        settings.open_backoff_max = 5000ms;
        // The first two opens end after 50 and 150 ms; one of them fails.
        StreamOpener open =
            [&](std::chrono::steady_clock::time_point deadline) -> asio::awaitable<Result<net::AnyStream>> {
            const int n = ++opens;
            asio::steady_timer t(io_, n == 1 ? 50ms : n == 2 ? 150ms : 0ms);
            co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
            if (n == (failure_first ? 1 : 2)) co_return fail(errc::connection_failed, "refused");
            co_return co_await connect_plain(port, deadline);
        };
        auto c = make_pooled_router_connection(io_.get_executor(), settings, open);
        run([&]() -> asio::awaitable<void> {
            std::vector<Result<unsigned>> results;
            // Sends `n` requests at once; their results once all have ended.
            auto at_once = [&](int n) -> asio::awaitable<void> {
                results.clear();
                for (int i = 0; i < n; ++i)
                    asio::co_spawn(
                        io_,
                        [&]() -> asio::awaitable<void> {
                            RouterRequest r;
                            r.target = "/x";
                            Collect sink;
                            results.push_back(co_await send(*c, r, sink, 2000ms));
                        },
                        asio::detached);
                asio::steady_timer t(io_);
                while (results.size() < static_cast<std::size_t>(n)) {
                    t.expires_after(10ms);
                    co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
                }
            };
            co_await at_once(2);
            EXPECT_EQ(opens, 2);
            EXPECT_EQ(std::count_if(results.begin(), results.end(), [](auto& r) { return r && *r == 200u; }), 1);
            // One takes the idle connection, the other needs a new one.
            co_await at_once(2);
            for (auto& r : results) EXPECT_TRUE(r && *r == 200u) << (r ? "" : r.error().describe());
            EXPECT_EQ(opens, 3);
        });
    }
}

// A probe: 2xx is healthy; any other answer is a typed error that also drops the idle
// connections (the next request opens a fresh one); a closed port is connection_failed. The
// loop reports the first result and each change, and ends when cancelled.
TEST_F(RouterConnectionTest, HealthChecksProbeDropIdleConnectionsAndReportChanges) {
    bool healthy = true;
    int probes = 0;
    FakeServer server(io_, [&](const FakeRequest& r) {
        if (r.target == "/base/healthz") {
            ++probes;
            EXPECT_EQ(r.headers.count("x-sandbox-id"), 0u);
            return FakeReply(healthy ? test::http_response(200, R"({"status":"ok"})")
                                     : test::http_response(503, "draining"));
        }
        return FakeReply(test::http_response(200, "{}"));
    });
    auto c = connect(server);
    FakeServer dead_server(io_, [](const FakeRequest&) { return FakeReply(test::http_response(200, "{}")); });
    auto dead = connect(dead_server);
    dead_server.stop();
    run([&]() -> asio::awaitable<void> {
        auto pause = [&](std::chrono::milliseconds d) -> asio::awaitable<void> {
            asio::steady_timer t(io_, d);
            co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
        };
        auto request = [&]() -> asio::awaitable<Result<unsigned>> {
            RouterRequest r;
            r.target = "/x";
            Collect sink;
            co_return co_await send(*c, r, sink, 2000ms);
        };
        HealthCheckOptions options;
        options.timeout = 2s;
        auto ok = co_await check_health(*c, options);
        EXPECT_TRUE(ok) << (ok ? "" : ok.error().describe());
        EXPECT_TRUE(co_await request());
        EXPECT_EQ(server.connections_accepted(), 1);  // the probe's connection was kept and reused
        healthy = false;
        auto sick = co_await check_health(*c, options);
        EXPECT_TRUE(!sick && sick.error().code == errc::service_unavailable && sick.error().http_status == 503 &&
                    sick.error().message.find("draining") != std::string::npos)
            << (sick ? "healthy" : sick.error().describe());
        EXPECT_TRUE(co_await request());
        EXPECT_EQ(server.connections_accepted(), 2);  // the idle connection was dropped
        auto refused = co_await check_health(*dead, options);
        EXPECT_TRUE(!refused && refused.error().code == errc::connection_failed)
            << (refused ? "healthy" : refused.error().describe());
        options.path = "healthz";
        auto bad = co_await check_health(*c, options);
        EXPECT_TRUE(!bad && bad.error().code == errc::invalid_argument);

        options.path = "/healthz";
        options.interval = 20ms;
        healthy = true;
        std::vector<bool> changes;
        bool ended = false;
        asio::cancellation_signal stop;
        asio::co_spawn(io_,
                       run_health_checks(c, options, [&](const Result<void>& r) { changes.push_back(r.has_value()); }),
                       asio::bind_cancellation_slot(stop.slot(), [&](std::exception_ptr) { ended = true; }));
        auto wait_for_changes = [&](std::size_t n) -> asio::awaitable<void> {
            for (int i = 0; i < 200 && changes.size() < n; ++i) co_await pause(10ms);
        };
        co_await wait_for_changes(1);
        const int probes_before = probes;
        co_await pause(200ms);  // several healthy probes, reported once
        EXPECT_GE(probes - probes_before, 3);
        healthy = false;
        co_await wait_for_changes(2);
        co_await pause(100ms);
        healthy = true;
        co_await wait_for_changes(3);
        co_await pause(100ms);
        stop.emit(asio::cancellation_type::terminal);
        for (int i = 0; i < 200 && !ended; ++i) co_await pause(10ms);
        EXPECT_TRUE(ended);
        EXPECT_EQ(changes, (std::vector<bool>{true, false, true}));
        const int probes_at_stop = probes;
        co_await pause(100ms);
        EXPECT_EQ(probes, probes_at_stop);  // no probe after the loop ended
    });
}

}  // namespace
