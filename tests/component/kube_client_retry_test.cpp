// KubeClient over a scripted loopback server: idempotent create after a lost response, rate
// limiting, Retry-After, patch idempotency, per-attempt deadlines, connect-timeout retries,
// credentials (tokenFile precedence, no credentials over plain HTTP), lower-layer error codes.
#include <kubesandbox/kube_client.hpp>

#include "../support/client_helpers.hpp"
#include "../support/fake_server.hpp"
#include "../support/run_test.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <boost/json/serialize.hpp>

#include <gtest/gtest.h>

#include <unistd.h>
#include <array>
#include <atomic>
#include <filesystem>
#include <fstream>

namespace ks = kubesandbox;
namespace asio = boost::asio;
namespace json = boost::json;
using ks::errc;
using ks::test::FakeReply;
using ks::test::FakeRequest;
using ks::test::FakeServer;
using ks::test::http_response;
using namespace std::chrono_literals;
using std::chrono::steady_clock;

namespace {

const ks::ResourcePath pods = ks::test::default_pods();

using ks::test::status_json;

using ks::test::fast_options;

json::object named_pod(const std::string& name) {
    json::object pod;
    pod["kind"] = "Pod";
    pod["metadata"].emplace_object()["name"] = name;
    return pod;
}

struct RetryTest : ::testing::Test {
    asio::io_context io;
    template <class F>
    void run(F f, std::chrono::milliseconds deadline = 10s) {
        ks::test::run_coroutine_test(io, std::move(f), deadline);
    }
};

long long ms_since(steady_clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(steady_clock::now() - t).count();
}

}  // namespace

// ---- 1. idempotent create ---------------------------------------------------------------------

TEST_F(RetryTest, IdempotentCreateWhoseResponseWasLostReturnsTheObjectFromGet) {
    int posts = 0, gets = 0;
    FakeServer server(io, [&](const FakeRequest& r) {
        if (r.method == "POST") {
            // The first POST "creates" the pod, then the connection drops before any response.
            if (++posts == 1) return FakeReply{"", 0ms, true};
            return FakeReply{http_response(409, status_json(409, "AlreadyExists", "pods \\\"p\\\" already exists"))};
        }
        ++gets;
        EXPECT_EQ(r.target, "/api/v1/namespaces/default/pods/p");
        return FakeReply{http_response(200, R"({"kind":"Pod","metadata":{"name":"p","uid":"u-1"}})")};
    });
    ks::KubeClient client(io.get_executor(), ks::KubeConfig::from_url(server.url()), fast_options());
    const json::object pod = named_pod("p");
    run([&]() -> asio::awaitable<void> {
        ks::CreateOptions idempotent;
        idempotent.idempotent = true;
        auto r = co_await client.create(pods, pod, idempotent);
        EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().describe());
        if (r) {
            EXPECT_EQ((*r)["metadata"].at("uid").as_string(), "u-1");
        }
    });
    EXPECT_EQ(posts, 2);
    EXPECT_EQ(gets, 1);
}

TEST_F(RetryTest, IdempotentCreateAfterServerErrorThenAlreadyExistsSucceeds) {
    int posts = 0;
    FakeServer server(io, [&](const FakeRequest& r) {
        if (r.method == "POST") {
            if (++posts == 1)
                return FakeReply{http_response(500, status_json(500, "InternalError", "created, then etcd timed out"))};
            return FakeReply{http_response(409, status_json(409, "AlreadyExists", "exists"))};
        }
        return FakeReply{http_response(200, R"({"kind":"Pod","metadata":{"name":"p","uid":"u-2"}})")};
    });
    ks::KubeClient client(io.get_executor(), ks::KubeConfig::from_url(server.url()), fast_options());
    const json::object pod = named_pod("p");
    run([&]() -> asio::awaitable<void> {
        ks::CreateOptions idempotent;
        idempotent.idempotent = true;
        auto r = co_await client.create(pods, pod, idempotent);
        EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().describe());
    });
    EXPECT_EQ(posts, 2);
}

TEST_F(RetryTest, IdempotentCreateRetryFindingSomeoneElsesObjectIsAlreadyExists) {
    int posts = 0;
    FakeServer server(io, [&](const FakeRequest& r) {
        if (r.method == "POST") {
            if (++posts == 1) return FakeReply{"", 0ms, true};
            return FakeReply{http_response(409, status_json(409, "AlreadyExists", "exists"))};
        }
        // Same name, but not carrying the creation token we sent.
        return FakeReply{
            http_response(200, R"({"kind":"Pod","metadata":{"name":"p","annotations":{"token":"theirs"}}})")};
    });
    ks::KubeClient client(io.get_executor(), ks::KubeConfig::from_url(server.url()), fast_options());
    json::object pod = named_pod("p");
    pod["metadata"].as_object()["annotations"].emplace_object()["token"] = "ours";
    run([&]() -> asio::awaitable<void> {
        ks::CreateOptions idempotent;
        idempotent.idempotent = true;
        auto r = co_await client.create(pods, pod, idempotent);
        EXPECT_FALSE(r.has_value());
        if (!r) {
            EXPECT_TRUE(r.error().is(errc::already_exists)) << r.error().describe();
        }
    });
    EXPECT_EQ(posts, 2);
    EXPECT_EQ(server.requests_seen(), 3);
}

TEST_F(RetryTest, IdempotentCreateFirstAttemptConflictIsStillAlreadyExists) {
    // No earlier attempt of ours: somebody else owns the object.
    FakeServer server(io, [&](const FakeRequest& r) {
        EXPECT_EQ(r.method, "POST");
        return FakeReply{http_response(409, status_json(409, "AlreadyExists", "exists"))};
    });
    ks::KubeClient client(io.get_executor(), ks::KubeConfig::from_url(server.url()), fast_options());
    const json::object pod = named_pod("p");
    run([&]() -> asio::awaitable<void> {
        ks::CreateOptions idempotent;
        idempotent.idempotent = true;
        auto r = co_await client.create(pods, pod, idempotent);
        EXPECT_FALSE(r.has_value());
        if (!r) {
            EXPECT_TRUE(r.error().is(errc::already_exists));
        }
    });
    EXPECT_EQ(server.requests_seen(), 1);
}

TEST_F(RetryTest, IdempotentCreateWithGenerateNameIsRefused) {
    FakeServer server(io, [&](const FakeRequest&) { return FakeReply{http_response(201, "{}")}; });
    ks::KubeClient client(io.get_executor(), ks::KubeConfig::from_url(server.url()), fast_options());
    json::object pod;
    pod["metadata"].emplace_object()["generateName"] = "p-";
    run([&]() -> asio::awaitable<void> {
        ks::CreateOptions idempotent;
        idempotent.idempotent = true;
        auto r = co_await client.create(pods, pod, idempotent);
        EXPECT_FALSE(r.has_value());
        if (!r) {
            EXPECT_TRUE(r.error().is(errc::invalid_argument)) << r.error().describe();
        }
        auto plain = co_await client.create(pods, pod);  // not marked idempotent: allowed
        EXPECT_TRUE(plain.has_value());
    });
    EXPECT_EQ(server.requests_seen(), 1);
}

// ---- 2. rate limiting and Retry-After ----------------------------------------------------------

TEST_F(RetryTest, RateLimitFivePerSecondBurstOneSpacesSixGets) {
    FakeServer server(io, [](const FakeRequest&) { return FakeReply{http_response(200, "{}")}; });
    auto opts = fast_options();
    opts.qps = 5;
    opts.burst = 1;
    ks::KubeClient client(io.get_executor(), ks::KubeConfig::from_url(server.url()), opts);
    long long elapsed = 0;
    run([&]() -> asio::awaitable<void> {
        const auto start = steady_clock::now();
        for (int i = 0; i < 6; ++i) {
            auto r = co_await client.get(pods.with_name("x"));
            EXPECT_TRUE(r.has_value());
        }
        elapsed = ms_since(start);
    });
    EXPECT_GE(elapsed, 900);  // 5 waits of 200 ms
    EXPECT_LT(elapsed, 3000);
    EXPECT_EQ(server.requests_seen(), 6);
}

TEST_F(RetryTest, RetryAfterOneSecondDelaysTheRetry) {
    int calls = 0;
    FakeServer server(io, [&](const FakeRequest&) {
        if (++calls == 1)
            return FakeReply{
                http_response(429, "Too many requests, please try again later.", "text/plain", {{"Retry-After", "1"}})};
        return FakeReply{http_response(200, "{}")};
    });
    ks::KubeClient client(io.get_executor(), ks::KubeConfig::from_url(server.url()), fast_options());
    long long elapsed = 0;
    run([&]() -> asio::awaitable<void> {
        const auto start = steady_clock::now();
        auto r = co_await client.get(pods.with_name("x"));
        EXPECT_TRUE(r.has_value());
        elapsed = ms_since(start);
    });
    EXPECT_EQ(calls, 2);
    EXPECT_GE(elapsed, 900);
    EXPECT_LT(elapsed, 3000);
}

// ---- 3. patch idempotency ------------------------------------------------------------------------

TEST_F(RetryTest, JsonPatchWithoutTestOpIsNotRetriedOnServerError) {
    int calls = 0;
    FakeServer server(io, [&](const FakeRequest& r) {
        EXPECT_EQ(r.headers.at("content-type"), "application/json-patch+json");
        if (++calls == 1) return FakeReply{http_response(500, status_json(500, "InternalError", "boom"))};
        return FakeReply{http_response(200, R"({"kind":"Pod"})")};
    });
    ks::KubeClient client(io.get_executor(), ks::KubeConfig::from_url(server.url()), fast_options());
    json::array ops;
    json::object add;
    add["op"] = "add";
    add["path"] = "/spec/containers/-";
    add["value"] = json::object();
    ops.push_back(add);
    run([&]() -> asio::awaitable<void> {
        auto r = co_await client.patch(pods.with_name("p"), ops, ks::PatchType::json);
        EXPECT_FALSE(r.has_value());
        if (!r) {
            EXPECT_TRUE(r.error().is(errc::internal_error));
        }
    });
    EXPECT_EQ(calls, 1);
}

TEST_F(RetryTest, MergePatchIsRetriedOnServerError) {
    int calls = 0;
    FakeServer server(io, [&](const FakeRequest& r) {
        EXPECT_EQ(r.headers.at("content-type"), "application/merge-patch+json");
        if (++calls == 1) return FakeReply{http_response(503, "overloaded", "text/plain", {{"Retry-After", "0"}})};
        return FakeReply{http_response(200, R"({"kind":"Pod"})")};
    });
    ks::KubeClient client(io.get_executor(), ks::KubeConfig::from_url(server.url()), fast_options());
    json::object merge;
    merge["metadata"].emplace_object()["labels"].emplace_object()["a"] = "b";
    run([&]() -> asio::awaitable<void> {
        auto r = co_await client.patch(pods.with_name("p"), merge);
        EXPECT_TRUE(r.has_value());
    });
    EXPECT_EQ(calls, 2);
}

// ---- 5. deadlines ----------------------------------------------------------------------------

TEST_F(RetryTest, OneDeadlineCoversWaitingForAPoolSlotAndTheRequest) {
    // One connection; every answer takes 1 s; the request timeout is 1.6 s. The second GET
    // waits ~1 s for the slot, so its own 1 s exchange overruns the one deadline. (Wide enough
    // that a stalled test process does not make the first GET overrun its own.)
    FakeServer server(io, [](const FakeRequest&) { return FakeReply{http_response(200, "{}"), 1000ms}; });
    auto opts = fast_options();
    opts.max_connections = 1;
    opts.request_timeout = 1600ms;
    opts.max_retries = 0;
    ks::KubeClient client(io.get_executor(), ks::KubeConfig::from_url(server.url()), opts);
    std::optional<ks::Result<json::object>> first, second;
    long long second_ms = 0;
    const auto start = steady_clock::now();
    asio::co_spawn(
        io, [&]() -> asio::awaitable<void> { first = co_await client.get(pods.with_name("a")); }, asio::detached);
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
            second = co_await client.get(pods.with_name("b"));
            second_ms = ms_since(start);
        },
        asio::detached);
    for (int i = 0; i < 200 && !(first && second); ++i) io.run_for(50ms);
    ASSERT_TRUE(first.has_value() && second.has_value());
    EXPECT_TRUE(first->has_value());
    EXPECT_FALSE(second->has_value());
    if (!second->has_value()) {
        EXPECT_TRUE(second->error().is(errc::timeout)) << second->error().describe();
    }
    // One deadline: had the wait for the slot not counted, the second GET would have had 1.6 s for
    // its 1 s exchange and succeeded (checked above). It ends at its deadline, 1.6 s (the bound
    // leaves room for a stalled test process).
    EXPECT_LT(second_ms, 3100);
}

TEST_F(RetryTest, ConnectTimeoutIsRetriedForIdempotentRequests) {
    // A listener whose accept queue (backlog 0) is held full by one connection: further SYNs are
    // dropped, so connecting times out. After 150 ms the test drains the queue and serves.
    asio::ip::tcp::acceptor acceptor(io);
    acceptor.open(asio::ip::tcp::v4());
    acceptor.bind({asio::ip::make_address("127.0.0.1"), 0});
    acceptor.listen(0);
    const auto port = acceptor.local_endpoint().port();
    asio::ip::tcp::socket filler(io);
    filler.connect(acceptor.local_endpoint());

    auto opts = fast_options();
    opts.connect_timeout = 300ms;
    opts.request_timeout = 5s;
    opts.max_retries = 3;
    ks::KubeClient client(io.get_executor(), ks::KubeConfig::from_url("http://127.0.0.1:" + std::to_string(port)),
                          opts);
    int served = 0;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
            asio::steady_timer t(io, 150ms);
            co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
            auto [e0, drained] = co_await acceptor.async_accept(asio::as_tuple(asio::use_awaitable));
            EXPECT_FALSE(e0);
            for (;;) {
                auto [ec, sock] = co_await acceptor.async_accept(asio::as_tuple(asio::use_awaitable));
                if (ec) co_return;
                boost::beast::flat_buffer buf;
                boost::beast::http::request<boost::beast::http::string_body> req;
                auto [rec, rn] =
                    co_await boost::beast::http::async_read(sock, buf, req, asio::as_tuple(asio::use_awaitable));
                if (rec) continue;
                ++served;
                const std::string reply = http_response(200, R"({"kind":"Pod"})");
                co_await asio::async_write(sock, asio::buffer(reply), asio::as_tuple(asio::use_awaitable));
            }
        },
        asio::detached);
    long long elapsed = 0;
    run([&]() -> asio::awaitable<void> {
        const auto start = steady_clock::now();
        auto r = co_await client.get(pods.with_name("x"));
        elapsed = ms_since(start);
        EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().describe());
    });
    EXPECT_EQ(served, 1);
    EXPECT_GE(elapsed, 280);  // the first attempt's connect timed out
}

TEST_F(RetryTest, ConnectTimeoutsExhaustRetriesWithTypedTimeout) {
    asio::ip::tcp::acceptor acceptor(io);
    acceptor.open(asio::ip::tcp::v4());
    acceptor.bind({asio::ip::make_address("127.0.0.1"), 0});
    acceptor.listen(0);
    asio::ip::tcp::socket filler(io);
    filler.connect(acceptor.local_endpoint());
    auto opts = fast_options();
    opts.connect_timeout = 150ms;
    opts.max_retries = 2;
    ks::KubeClient client(
        io.get_executor(),
        ks::KubeConfig::from_url("http://127.0.0.1:" + std::to_string(acceptor.local_endpoint().port())), opts);
    long long elapsed = 0;
    run([&]() -> asio::awaitable<void> {
        const auto start = steady_clock::now();
        auto r = co_await client.get(pods.with_name("x"));
        elapsed = ms_since(start);
        EXPECT_FALSE(r.has_value());
        if (!r) {
            EXPECT_TRUE(r.error().is(errc::timeout)) << r.error().describe();
        }
    });
    EXPECT_GE(elapsed, 3 * 150 - 20);  // three attempts, each cut by connect_timeout
}

// ---- 6. lower-layer codes ----------------------------------------------------------------------

TEST_F(RetryTest, ConnectionClosedKeepsTheLowerLayerCode) {
    FakeServer server(io, [&](const FakeRequest&) {
        std::string full = http_response(200, R"({"kind":"Pod","metadata":{"name":"abcdefgh"}})");
        return FakeReply{full.substr(0, full.size() - 10), 0ms, true};
    });
    ks::KubeClient client(io.get_executor(), ks::KubeConfig::from_url(server.url()), fast_options());
    const json::object pod = named_pod("p");
    run([&]() -> asio::awaitable<void> {
        auto r = co_await client.create(pods, pod);
        EXPECT_FALSE(r.has_value());
        if (!r) {
            EXPECT_TRUE(r.error().is(errc::connection_closed));
            EXPECT_TRUE(r.error().lower_code.failed());
            EXPECT_NE(&r.error().lower_code.category(), &ks::error_category());
            EXPECT_EQ(r.error().lower_code, boost::beast::http::error::partial_message)
                << r.error().lower_code.message();
        }
    });
}

// ---- 7. tokenFile precedence -------------------------------------------------------------------

TEST_F(RetryTest, TokenFileWinsOverTokenAndTokenCoversAnUnreadableFile) {
    auto dir = std::filesystem::temp_directory_path() / ("ks-tokprec-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const auto token_path = dir / "token";
    { std::ofstream(token_path) << "from-file\n"; }
    std::vector<std::string> seen;
    FakeServer server(io, [&](const FakeRequest& r) {
        seen.push_back(r.headers.count("authorization") ? r.headers.at("authorization") : "");
        return FakeReply{http_response(200, "{}")};
    });
    ks::KubeConfig both = ks::KubeConfig::from_url(server.url(), "static-token");
    both.token_file = token_path.string();
    ks::KubeConfig missing_file = both;
    missing_file.token_file = (dir / "absent").string();
    ks::KubeClient with_file(io.get_executor(), both, fast_options());
    ks::KubeClient without_file(io.get_executor(), missing_file, fast_options());
    run([&]() -> asio::awaitable<void> {
        auto a = co_await with_file.get(pods.with_name("x"));
        EXPECT_TRUE(a.has_value());
        auto b = co_await without_file.get(pods.with_name("x"));
        EXPECT_TRUE(b.has_value());
    });
    EXPECT_EQ(seen, (std::vector<std::string>{"Bearer from-file", "Bearer static-token"}));
    std::filesystem::remove_all(dir);
}

// ---- 9. no credentials over plain HTTP to other hosts -----------------------------------------------

TEST_F(RetryTest, CredentialsAreNeverSentOverPlainHttpToANonLoopbackHost) {
    ks::KubeConfig bearer = ks::KubeConfig::from_url("http://10.255.255.1:8080", "secret-token");
    ks::KubeConfig basic = ks::KubeConfig::from_url("http://api.example.com");
    basic.username = "admin";
    basic.password = "hunter2";
    ks::KubeClient a(io.get_executor(), bearer, fast_options());
    ks::KubeClient b(io.get_executor(), basic, fast_options());
    const std::array<ks::KubeClient*, 2> clients{&a, &b};
    run([&]() -> asio::awaitable<void> {
        const auto start = steady_clock::now();
        for (auto* client : clients) {
            auto r = co_await client->get(pods.with_name("x"));
            EXPECT_FALSE(r.has_value());
            if (!r) {
                EXPECT_TRUE(r.error().is(errc::invalid_config)) << r.error().describe();
                EXPECT_NE(r.error().message.find("plain http://"), std::string::npos) << r.error().message;
                EXPECT_EQ(r.error().message.find("secret-token"), std::string::npos);
                EXPECT_EQ(r.error().message.find("hunter2"), std::string::npos);
            }
            auto w = co_await client->watch(pods);
            EXPECT_FALSE(w.has_value());
        }
        EXPECT_LT(ms_since(start), 1500);  // refused up front: a connect attempt would wait 2 s
    });
}

TEST_F(RetryTest, CredentialsOverPlainHttpToLoopbackAreFine) {
    FakeServer server(io, [](const FakeRequest& r) {
        EXPECT_EQ(r.headers.at("authorization"), "Bearer t");
        return FakeReply{http_response(200, "{}")};
    });
    std::string url = server.url();
    url.replace(url.find("127.0.0.1"), 9, "localhost");
    ks::KubeClient client(io.get_executor(), ks::KubeConfig::from_url(url, "t"), fast_options());
    run([&]() -> asio::awaitable<void> {
        auto r = co_await client.get(pods.with_name("x"));
        EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().describe());
    });
}
