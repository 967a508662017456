// KubeClient against a scripted loopback server: pooling, retries, faults, timeouts, watch.
#include <kubesandbox/kube_client.hpp>

#include "../support/client_helpers.hpp"
#include "../support/fake_server.hpp"
#include "../support/run_test.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/serialize.hpp>

#include <gtest/gtest.h>

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

namespace {

const ks::ResourcePath pods = ks::test::default_pods();

using ks::test::status_json;

using ks::test::fast_options;

struct ClientTest : ::testing::Test {
    asio::io_context io;
    template <class F>
    void run(F f, std::chrono::milliseconds deadline = 10s) {
        ks::test::run_coroutine_test(io, std::move(f), deadline);
    }
};

}  // namespace

TEST_F(ClientTest, GetReusesOneKeepAliveConnection) {
    FakeServer server(io, [](const FakeRequest& r) {
        EXPECT_EQ(r.headers.at("authorization"), "Bearer secret-token");
        EXPECT_EQ(r.target, "/api/v1/namespaces/default/pods/p1");
        return FakeReply{http_response(200, R"({"kind":"Pod","metadata":{"name":"p1"}})")};
    });
    ks::KubeClient client(io.get_executor(), ks::KubeConfig::from_url(server.url(), "secret-token"), fast_options());
    run([&]() -> asio::awaitable<void> {
        for (int i = 0; i < 5; ++i) {
            auto r = co_await client.get(pods.with_name("p1"));
            EXPECT_TRUE(r.has_value());
            if (r) {
                EXPECT_EQ((*r)["metadata"].at("name").as_string(), "p1");
            }
        }
    });
    EXPECT_EQ(server.connections_accepted(), 1);
    EXPECT_EQ(server.requests_seen(), 5);
}

TEST_F(ClientTest, StatusErrorsAreTyped) {
    FakeServer server(io, [](const FakeRequest& r) {
        if (r.method == "POST")
            return FakeReply{http_response(409, status_json(409, "AlreadyExists", "pods \\\"p\\\" already exists"))};
        return FakeReply{http_response(404, status_json(404, "NotFound", "pods \\\"p\\\" not found"))};
    });
    ks::KubeClient client(io.get_executor(), ks::KubeConfig::from_url(server.url()), fast_options());
    // Built outside the coroutine: g++ 12 rejects brace-initialised string arrays in coroutine frames.
    json::object pod_p;
    pod_p["metadata"].emplace_object()["name"] = "p";
    run([&]() -> asio::awaitable<void> {
        auto g = co_await client.get(pods.with_name("p"));
        EXPECT_FALSE(g.has_value());
        if (!g) {
            EXPECT_TRUE(g.error().is(errc::not_found));
            EXPECT_EQ(g.error().http_status, 404u);
            EXPECT_EQ(g.error().message, "pods \"p\" not found");
        }
        auto c = co_await client.create(pods, pod_p);
        EXPECT_FALSE(c.has_value());
        if (!c) {
            EXPECT_TRUE(c.error().is(errc::already_exists));
        }
        auto d = co_await client.remove(pods.with_name("p"));
        EXPECT_TRUE(d.has_value());
        if (d) {
            EXPECT_FALSE(d->found);
        }
    });
    // Neither the 404s nor the 409 were retried.
    EXPECT_EQ(server.requests_seen(), 3);
}

TEST_F(ClientTest, TooManyRequestsPlainTextIsRetriedForGetHonouringRetryAfter) {
    std::atomic<int> calls = 0;
    FakeServer server(io, [&](const FakeRequest&) {
        if (++calls <= 2)
            return FakeReply{http_response(429, "Too many requests, please try again later.\n", "text/plain",
                                           {{"Retry-After", "0"}})};
        return FakeReply{http_response(200, R"({"kind":"Pod"})")};
    });
    ks::KubeClient client(io.get_executor(), ks::KubeConfig::from_url(server.url()), fast_options());
    run([&]() -> asio::awaitable<void> {
        auto r = co_await client.get(pods.with_name("x"));
        EXPECT_TRUE(r.has_value());
    });
    EXPECT_EQ(calls.load(), 3);
}

TEST_F(ClientTest, TooManyRequestsExhaustsRetriesWithTypedError) {
    FakeServer server(io, [&](const FakeRequest&) {
        return FakeReply{
            http_response(429, "Too many requests, please try again later.", "text/plain", {{"Retry-After", "0"}})};
    });
    auto opts = fast_options();
    opts.max_retries = 2;
    ks::KubeClient client(io.get_executor(), ks::KubeConfig::from_url(server.url()), opts);
    run([&]() -> asio::awaitable<void> {
        auto r = co_await client.get(pods.with_name("x"));
        EXPECT_FALSE(r.has_value());
        if (!r) {
            EXPECT_TRUE(r.error().is(errc::too_many_requests));
            EXPECT_EQ(r.error().message, "Too many requests, please try again later.");
            EXPECT_TRUE(r.error().retry_after.has_value());
        }
    });
    EXPECT_EQ(server.requests_seen(), 3);
}

TEST_F(ClientTest, ServerErrorOnCreateIsNotRetriedUnlessIdempotent) {
    std::atomic<int> posts = 0;
    FakeServer server(io, [&](const FakeRequest&) {
        if (++posts == 1) return FakeReply{http_response(500, status_json(500, "InternalError", "boom"))};
        return FakeReply{http_response(201, R"({"kind":"Pod","metadata":{"name":"p"}})")};
    });
    ks::KubeClient client(io.get_executor(), ks::KubeConfig::from_url(server.url()), fast_options());
    json::object pod_p;  // an idempotent create needs a fixed name
    pod_p["metadata"].emplace_object()["name"] = "p";
    run([&]() -> asio::awaitable<void> {
        auto plain = co_await client.create(pods, pod_p);
        EXPECT_FALSE(plain.has_value());
        if (!plain) {
            EXPECT_TRUE(plain.error().is(errc::internal_error));
        }
        posts = 0;
        ks::CreateOptions idempotent;
        idempotent.idempotent = true;
        auto marked = co_await client.create(pods, pod_p, idempotent);
        EXPECT_TRUE(marked.has_value());
    });
    EXPECT_EQ(posts.load(), 2);
}

TEST_F(ClientTest, DroppedConnectionMidBodyRetriesGetButNotPost) {
    std::atomic<int> calls = 0;
    FakeServer server(io, [&](const FakeRequest& r) {
        ++calls;
        if (r.method == "POST" || calls == 1) {
            std::string full = http_response(200, R"({"kind":"Pod","metadata":{"name":"abcdefgh"}})");
            return FakeReply{full.substr(0, full.size() - 10), 0ms, true};
        }
        return FakeReply{http_response(200, R"({"kind":"Pod"})")};
    });
    ks::KubeClient client(io.get_executor(), ks::KubeConfig::from_url(server.url()), fast_options());
    run([&]() -> asio::awaitable<void> {
        auto g = co_await client.get(pods.with_name("x"));
        EXPECT_TRUE(g.has_value());
        auto p = co_await client.create(pods, json::object());
        EXPECT_FALSE(p.has_value());
        if (!p) {
            EXPECT_TRUE(p.error().is(errc::connection_closed)) << p.error().describe();
        }
    });
    EXPECT_EQ(calls.load(), 3);
}

TEST_F(ClientTest, GarbageJsonIsInvalidResponse) {
    FakeServer server(io, [](const FakeRequest&) { return FakeReply{http_response(200, "{\"kind\": nope")}; });
    ks::KubeClient client(io.get_executor(), ks::KubeConfig::from_url(server.url()), fast_options());
    run([&]() -> asio::awaitable<void> {
        auto r = co_await client.get(pods.with_name("x"));
        EXPECT_FALSE(r.has_value());
        if (!r) {
            EXPECT_TRUE(r.error().is(errc::invalid_response));
        }
        auto l = co_await client.list(pods);
        EXPECT_FALSE(l.has_value());
    });
}

TEST_F(ClientTest, SlowServerTimesOut) {
    FakeServer server(io, [](const FakeRequest&) { return FakeReply{http_response(200, "{}"), 3000ms}; });
    auto opts = fast_options();
    opts.request_timeout = 200ms;
    opts.max_retries = 0;
    ks::KubeClient client(io.get_executor(), ks::KubeConfig::from_url(server.url()), opts);
    run(
        [&]() -> asio::awaitable<void> {
            auto r = co_await client.get(pods.with_name("x"));
            EXPECT_FALSE(r.has_value());
            if (!r) {
                EXPECT_TRUE(r.error().is(errc::timeout)) << r.error().describe();
            }
        },
        2500ms);
}

TEST_F(ClientTest, ConnectionRefusedIsTransportError) {
    unsigned short port;
    {
        asio::ip::tcp::acceptor a(io, {asio::ip::make_address("127.0.0.1"), 0});
        port = a.local_endpoint().port();
    }
    auto opts = fast_options();
    opts.max_retries = 1;
    ks::KubeClient client(io.get_executor(), ks::KubeConfig::from_url("http://127.0.0.1:" + std::to_string(port)),
                          opts);
    run([&]() -> asio::awaitable<void> {
        auto r = co_await client.get(pods.with_name("x"));
        EXPECT_FALSE(r.has_value());
        if (!r) {
            EXPECT_EQ(r.error().code, asio::error::connection_refused);
            EXPECT_NE(r.error().message.find("127.0.0.1"), std::string::npos);
        }
    });
}

TEST_F(ClientTest, PoolBoundsConcurrentConnections) {
    FakeServer server(io, [](const FakeRequest&) { return FakeReply{http_response(200, "{}"), 50ms}; });
    auto opts = fast_options();
    opts.max_connections = 2;
    ks::KubeClient client(io.get_executor(), ks::KubeConfig::from_url(server.url()), opts);
    std::atomic<int> ok = 0;
    for (int i = 0; i < 8; ++i) {
        asio::co_spawn(
            io,
            [&]() -> asio::awaitable<void> {
                auto r = co_await client.get(pods.with_name("x"));
                if (r && ++ok == 8) io.stop();
            },
            asio::detached);
    }
    io.run_for(5s);
    EXPECT_EQ(ok.load(), 8);
    EXPECT_LE(server.connections_accepted(), 2);
}

TEST_F(ClientTest, ListSendsPaginationAndReturnsCursor) {
    FakeServer server(io, [](const FakeRequest& r) {
        if (r.target.find("continue=tok1") != std::string::npos)
            return FakeReply{http_response(
                200, R"({"kind":"PodList","metadata":{"resourceVersion":"7"},"items":[{"metadata":{"name":"c"}}]})")};
        EXPECT_NE(r.target.find("limit=2"), std::string::npos);
        EXPECT_NE(r.target.find("labelSelector=app%3Dx%2Ctier%20in%20%28a%29"), std::string::npos) << r.target;
        return FakeReply{http_response(
            200,
            R"({"kind":"PodList","metadata":{"resourceVersion":"7","continue":"tok1","remainingItemCount":1},"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}]})")};
    });
    ks::KubeClient client(io.get_executor(), ks::KubeConfig::from_url(server.url()), fast_options());
    run([&]() -> asio::awaitable<void> {
        ks::ListOptions o;
        o.limit = 2;
        o.label_selector = "app=x,tier in (a)";
        auto p1 = co_await client.list(pods, o);
        EXPECT_TRUE(p1.has_value());
        if (!p1) co_return;
        EXPECT_EQ(p1->items.size(), 2u);
        EXPECT_EQ(p1->continue_token, "tok1");
        EXPECT_EQ(p1->remaining_item_count, 1);
        o.continue_token = p1->continue_token;
        auto p2 = co_await client.list(pods, o);
        EXPECT_TRUE(p2.has_value());
        if (p2) {
            EXPECT_EQ(p2->items.size(), 1u);
            EXPECT_TRUE(p2->continue_token.empty());
        }
    });
}

TEST_F(ClientTest, ExpiredContinueIsTyped) {
    FakeServer server(io, [](const FakeRequest&) {
        return FakeReply{http_response(410, status_json(410, "Expired", "The provided continue parameter is too old"))};
    });
    ks::KubeClient client(io.get_executor(), ks::KubeConfig::from_url(server.url()), fast_options());
    run([&]() -> asio::awaitable<void> {
        ks::ListOptions old;
        old.continue_token = "old";
        auto r = co_await client.list(pods, old);
        EXPECT_FALSE(r.has_value());
        if (!r) {
            EXPECT_TRUE(r.error().is(errc::expired));
        }
    });
}

TEST_F(ClientTest, WatchStreamsEventsSplitAcrossChunks) {
    const std::string events =
        R"({"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"a","resourceVersion":"5"}}})"
        "\n"
        R"({"type":"MODIFIED","object":{"kind":"Pod","metadata":{"name":"a","resourceVersion":"6"}}})"
        "\n"
        R"({"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"9"}}})"
        "\n";
    FakeServer server(io, [&](const FakeRequest& r) {
        EXPECT_NE(r.target.find("watch=true"), std::string::npos);
        EXPECT_NE(r.target.find("resourceVersion=4"), std::string::npos);
        FakeReply reply{ks::test::chunked_head()};
        // Split the events at awkward places, including inside a JSON string.
        reply.more.push_back({ks::test::chunk(events.substr(0, 17)), 10ms});
        reply.more.push_back({ks::test::chunk(events.substr(17, 90)), 10ms});
        reply.more.push_back({ks::test::chunk(events.substr(107)), 10ms});
        reply.more.push_back({ks::test::chunk(""), 10ms});
        return reply;
    });
    ks::KubeClient client(io.get_executor(), ks::KubeConfig::from_url(server.url()), fast_options());
    run([&]() -> asio::awaitable<void> {
        ks::WatchOptions from4;
        from4.resource_version = "4";
        auto w = co_await client.watch(pods, from4);
        EXPECT_TRUE(w.has_value());
        if (!w) co_return;
        std::vector<ks::WatchEvent::Type> types;
        for (;;) {
            auto ev = co_await w->next();
            EXPECT_TRUE(ev.has_value());
            if (!ev || !*ev) break;
            types.push_back((*ev)->type);
        }
        EXPECT_EQ(types, (std::vector<ks::WatchEvent::Type>{ks::WatchEvent::Type::added, ks::WatchEvent::Type::modified,
                                                            ks::WatchEvent::Type::bookmark}));
    });
}

TEST_F(ClientTest, WatchGoneIsExpiredAndCutStreamIsConnectionClosed) {
    std::atomic<int> calls = 0;
    FakeServer server(io, [&](const FakeRequest&) {
        if (++calls == 1)
            return FakeReply{http_response(410, status_json(410, "Expired", "too old resource version: 1 (5)"))};
        FakeReply reply{ks::test::chunked_head()};
        reply.more.push_back({ks::test::chunk(R"({"type":"ADDED","object":{"metadata":{"name":"a"}}})"
                                              "\n{\"type\":\"MOD"),
                              5ms});
        reply.close_after = true;
        return reply;
    });
    ks::KubeClient client(io.get_executor(), ks::KubeConfig::from_url(server.url()), fast_options());
    run([&]() -> asio::awaitable<void> {
        ks::WatchOptions from1;
        from1.resource_version = "1";
        auto gone = co_await client.watch(pods, from1);
        EXPECT_FALSE(gone.has_value());
        if (!gone) {
            EXPECT_TRUE(gone.error().is(errc::expired));
        }
        auto w = co_await client.watch(pods);
        EXPECT_TRUE(w.has_value());
        if (!w) co_return;
        auto first = co_await w->next();
        EXPECT_TRUE(first.has_value() && first->has_value());
        auto second = co_await w->next();
        EXPECT_FALSE(second.has_value());
        if (!second) {
            EXPECT_TRUE(second.error().is(errc::connection_closed)) << second.error().describe();
        }
    });
}

TEST_F(ClientTest, TokenFileIsReReadAfterUnauthorized) {
    auto dir = std::filesystem::temp_directory_path() / ("ks-token-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    auto token_path = dir / "token";
    { std::ofstream(token_path) << "old-token\n"; }
    FakeServer server(io, [&](const FakeRequest& r) {
        if (r.headers.at("authorization") != "Bearer new-token") {
            { std::ofstream(token_path) << "new-token\n"; }  // the kubelet rotated it meanwhile
            return FakeReply{http_response(401, status_json(401, "Unauthorized", "Unauthorized"))};
        }
        return FakeReply{http_response(200, "{}")};
    });
    ks::KubeConfig cfg = ks::KubeConfig::from_url(server.url());
    cfg.token_file = token_path.string();
    ks::KubeClient client(io.get_executor(), cfg, fast_options());
    run([&]() -> asio::awaitable<void> {
        auto r = co_await client.get(pods.with_name("x"));
        EXPECT_TRUE(r.has_value());
    });
    EXPECT_EQ(server.requests_seen(), 2);
    std::filesystem::remove_all(dir);
}

TEST_F(ClientTest, BadServerUrlIsConfigError) {
    ks::KubeClient client(io.get_executor(), ks::KubeConfig::from_url("ftp://nowhere"), fast_options());
    run([&]() -> asio::awaitable<void> {
        auto r = co_await client.get(pods.with_name("x"));
        EXPECT_FALSE(r.has_value());
        if (!r) {
            EXPECT_TRUE(r.error().is(errc::invalid_config));
        }
    });
}

TEST_F(ClientTest, CallerCancellationEndsRequestPromptly) {
    using namespace asio::experimental::awaitable_operators;
    FakeServer server(io, [](const FakeRequest&) { return FakeReply{http_response(200, "{}"), 5000ms}; });
    ks::KubeClient client(io.get_executor(), ks::KubeConfig::from_url(server.url()), fast_options());
    run(
        [&]() -> asio::awaitable<void> {
            asio::steady_timer t(io, 100ms);
            auto start = std::chrono::steady_clock::now();
            auto r = co_await (client.get(pods.with_name("x")) || t.async_wait(asio::as_tuple(asio::use_awaitable)));
            EXPECT_EQ(r.index(), 1u);
            EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
        },
        4s);
}

// A JSON patch is replay-safe only when a "test" op guards it (the replay then fails cleanly
// instead of applying twice); unguarded JSON patches are covered in kube_client_retry_test.cpp.
TEST_F(ClientTest, GuardedJsonPatchSendsContentTypeAndIsRetriedAsIdempotent) {
    std::atomic<int> calls = 0;
    FakeServer server(io, [&](const FakeRequest& r) {
        EXPECT_EQ(r.method, "PATCH");
        EXPECT_EQ(r.headers.at("content-type"), "application/json-patch+json");
        EXPECT_EQ(r.body, R"([{"op":"test","path":"/metadata/resourceVersion","value":"7"},)"
                          R"({"op":"add","path":"/metadata/labels/a","value":"b"}])");
        if (++calls == 1) return FakeReply{http_response(503, "overloaded", "text/plain", {{"Retry-After", "0"}})};
        return FakeReply{http_response(200, R"({"kind":"Pod","metadata":{"labels":{"a":"b"}}})")};
    });
    ks::KubeClient client(io.get_executor(), ks::KubeConfig::from_url(server.url()), fast_options());
    json::array ops;
    json::object guard;
    guard["op"] = "test";
    guard["path"] = "/metadata/resourceVersion";
    guard["value"] = "7";
    ops.push_back(guard);
    json::object op;
    op["op"] = "add";
    op["path"] = "/metadata/labels/a";
    op["value"] = "b";
    ops.push_back(op);
    run([&]() -> asio::awaitable<void> {
        auto r = co_await client.patch(pods.with_name("p"), ops, ks::PatchType::json);
        EXPECT_TRUE(r.has_value());
    });
    EXPECT_EQ(calls.load(), 2);
}
