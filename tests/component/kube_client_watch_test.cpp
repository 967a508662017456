// Watch over a scripted loopback server: ERROR events as typed errors, the idle deadline, and
// ListWatch (list, watch, re-list on 410).
#include <kubesandbox/kube_client.hpp>

#include "../support/client_helpers.hpp"
#include "../support/fake_server.hpp"
#include "../support/run_test.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <gtest/gtest.h>

namespace ks = kubesandbox;
namespace asio = boost::asio;
namespace json = boost::json;
using ks::errc;
using ks::test::chunk;
using ks::test::chunked_head;
using ks::test::FakeReply;
using ks::test::FakeRequest;
using ks::test::FakeServer;
using ks::test::http_response;
using Type = ks::WatchEvent::Type;
using namespace std::chrono_literals;
using std::chrono::steady_clock;

namespace {

const ks::ResourcePath pods = ks::test::default_pods();

using ks::test::fast_options;

std::string pod_json(std::string_view name, std::string_view rv) {
    return R"({"kind":"Pod","metadata":{"name":")" + std::string(name) +
           R"(","namespace":"default","resourceVersion":")" + std::string(rv) + R"("}})";
}
std::string event_line(std::string_view type, const std::string& object) {
    return R"({"type":")" + std::string(type) + R"(","object":)" + object + "}\n";
}
std::string error_event(unsigned code, std::string_view reason, std::string_view message) {
    return event_line("ERROR", R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":")" +
                                   std::string(message) + R"(","reason":")" + std::string(reason) + R"(","code":)" +
                                   std::to_string(code) + "}");
}
std::string pod_list(std::string_view rv, const std::vector<std::string>& items) {
    std::string out =
        R"({"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":")" + std::string(rv) + R"("},"items":[)";
    for (std::size_t i = 0; i < items.size(); ++i) out += (i ? "," : "") + items[i];
    return out + "]}";
}
std::string query_value(const std::string& target, const std::string& key) {
    auto pos = target.find(key + "=");
    if (pos == std::string::npos) return {};
    pos += key.size() + 1;
    return target.substr(pos, target.find('&', pos) - pos);
}

struct WatchTest : ::testing::Test {
    asio::io_context io;
    template <class F>
    void run(F f, std::chrono::milliseconds deadline = 10s) {
        ks::test::run_coroutine_test(io, std::move(f), deadline);
    }
};

}  // namespace

TEST_F(WatchTest, ErrorEventWith410IsExpired) {
    FakeServer server(io, [](const FakeRequest&) {
        FakeReply reply{chunked_head()};
        reply.more.push_back({chunk(event_line("ADDED", pod_json("a", "5"))), 5ms});
        reply.more.push_back({chunk(error_event(410, "Expired", "too old resource version: 1 (5)")), 5ms});
        reply.more.push_back({chunk(""), 5ms});
        return reply;
    });
    ks::KubeClient client(io.get_executor(), ks::KubeConfig::from_url(server.url()), fast_options());
    run([&]() -> asio::awaitable<void> {
        auto w = co_await client.watch(pods);
        EXPECT_TRUE(w.has_value());
        if (!w) co_return;
        auto first = co_await w->next();
        EXPECT_TRUE(first.has_value() && first->has_value() && (*first)->type == Type::added);
        auto second = co_await w->next();
        EXPECT_FALSE(second.has_value());
        if (!second) {
            EXPECT_TRUE(second.error().is(errc::expired)) << second.error().describe();
            EXPECT_EQ(second.error().http_status, 410u);
            EXPECT_EQ(second.error().message, "too old resource version: 1 (5)");
        }
    });
}

TEST_F(WatchTest, OtherErrorEventsAreTypedFromTheirStatus) {
    FakeServer server(io, [](const FakeRequest&) {
        FakeReply reply{chunked_head()};
        reply.more.push_back({chunk(error_event(500, "InternalError", "watch chan error: etcd closed")), 5ms});
        reply.more.push_back({chunk(""), 5ms});
        return reply;
    });
    ks::KubeClient client(io.get_executor(), ks::KubeConfig::from_url(server.url()), fast_options());
    run([&]() -> asio::awaitable<void> {
        auto w = co_await client.watch(pods);
        EXPECT_TRUE(w.has_value());
        if (!w) co_return;
        auto ev = co_await w->next();
        EXPECT_FALSE(ev.has_value());
        if (!ev) {
            EXPECT_TRUE(ev.error().is(errc::internal_error)) << ev.error().describe();
            EXPECT_EQ(ev.error().reason, "InternalError");
        }
    });
}

TEST_F(WatchTest, SilentServerHitsTheIdleDeadline) {
    FakeServer server(io, [](const FakeRequest&) {
        FakeReply reply{chunked_head()};
        reply.more.push_back({chunk(event_line("ADDED", pod_json("a", "5"))), 5ms});
        reply.more.push_back({chunk(""), 60'000ms});  // then nothing for a minute
        return reply;
    });
    ks::KubeClient client(io.get_executor(), ks::KubeConfig::from_url(server.url()), fast_options());
    run(
        [&]() -> asio::awaitable<void> {
            ks::WatchOptions options;
            options.idle_timeout = 300ms;
            auto w = co_await client.watch(pods, options);
            EXPECT_TRUE(w.has_value());
            if (!w) co_return;
            auto first = co_await w->next();
            EXPECT_TRUE(first.has_value() && first->has_value());
            const auto start = steady_clock::now();
            auto second = co_await w->next();
            const auto waited = steady_clock::now() - start;
            EXPECT_FALSE(second.has_value());
            if (!second) {
                EXPECT_TRUE(second.error().is(errc::timeout)) << second.error().describe();
            }
            EXPECT_GE(waited, 250ms);
            EXPECT_LT(waited, 2s);
        },
        5s);
}

TEST_F(WatchTest, BookmarksKeepAnIdleWatchAliveAndSlowConsumersAreNotCut) {
    FakeServer server(io, [](const FakeRequest&) {
        FakeReply reply{chunked_head()};
        for (int i = 0; i < 5; ++i)
            reply.more.push_back({chunk(event_line("BOOKMARK", R"({"kind":"Pod","metadata":{"resourceVersion":")" +
                                                                   std::to_string(10 + i) + R"("}})")),
                                  150ms});
        reply.more.push_back({chunk(""), 150ms});
        return reply;
    });
    ks::KubeClient client(io.get_executor(), ks::KubeConfig::from_url(server.url()), fast_options());
    run([&]() -> asio::awaitable<void> {
        ks::WatchOptions options;
        options.idle_timeout = 700ms;  // > the 150 ms between bookmarks, < the consumer's pause
        auto w = co_await client.watch(pods, options);
        EXPECT_TRUE(w.has_value());
        if (!w) co_return;
        int bookmarks = 0;
        for (;;) {
            auto ev = co_await w->next();
            EXPECT_TRUE(ev.has_value()) << (ev ? "" : ev.error().describe());
            if (!ev || !*ev) break;
            ++bookmarks;
            if (bookmarks == 1) {
                // The caller takes longer than the idle timeout between next() calls: the idle
                // clock only runs while next() waits for bytes.
                asio::steady_timer t(io, 1000ms);
                co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
            }
        }
        EXPECT_EQ(bookmarks, 5);
    });
}

TEST_F(WatchTest, ListWatchRelistsOn410AndYieldsTheDifference) {
    int lists = 0, watches = 0;
    std::vector<std::string> watch_rvs;
    FakeServer server(io, [&](const FakeRequest& r) {
        const bool is_watch = r.target.find("watch=true") != std::string::npos;
        if (!is_watch) {
            EXPECT_NE(r.target.find("labelSelector=app%3Dx"), std::string::npos) << r.target;
            if (++lists == 1)
                return FakeReply{http_response(200, pod_list("10", {pod_json("a", "3"), pod_json("b", "4")}))};
            return FakeReply{http_response(200, pod_list("20", {pod_json("a", "11"), pod_json("c", "12")}))};
        }
        ++watches;
        watch_rvs.push_back(query_value(r.target, "resourceVersion"));
        FakeReply reply{chunked_head()};
        if (watches == 1) {
            reply.more.push_back({chunk(event_line("MODIFIED", pod_json("a", "11"))), 5ms});
            reply.more.push_back({chunk(error_event(410, "Expired", "too old resource version: 10 (15)")), 5ms});
            reply.more.push_back({chunk(""), 5ms});
        } else if (watches == 2) {
            reply.more.push_back(
                {chunk(event_line("BOOKMARK", R"({"kind":"Pod","metadata":{"resourceVersion":"21"}})")), 5ms});
            reply.more.push_back({chunk(""), 5ms});  // normal end (timeoutSeconds)
        } else {
            reply.more.push_back({chunk(event_line("ADDED", pod_json("d", "22"))), 5ms});
            reply.more.push_back({chunk(""), 60'000ms});
        }
        return reply;
    });
    ks::KubeClient client(io.get_executor(), ks::KubeConfig::from_url(server.url()), fast_options());
    ks::WatchOptions options;
    options.label_selector = "app=x";
    ks::ListWatch lw(client, pods, options);
    std::vector<std::string> seen;
    run([&]() -> asio::awaitable<void> {
        for (int i = 0; i < 6; ++i) {
            auto ev = co_await lw.next();
            EXPECT_TRUE(ev.has_value()) << (ev ? "" : ev.error().describe());
            if (!ev) co_return;
            const char* type = ev->type == Type::added      ? "ADDED"
                               : ev->type == Type::modified ? "MODIFIED"
                               : ev->type == Type::deleted  ? "DELETED"
                                                            : "OTHER";
            seen.push_back(std::string(type) + " " + std::string(ev->object.at("metadata").at("name").as_string()));
        }
        lw.close();
    });
    // First list as ADDED; the watch's change; after the 410 only the difference of the re-list
    // (a is unchanged at rv 11, c is new, b is gone); then a watch resumed from the bookmark.
    EXPECT_EQ(seen, (std::vector<std::string>{"ADDED a", "ADDED b", "MODIFIED a", "ADDED c", "DELETED b", "ADDED d"}));
    EXPECT_EQ(lw.lists_made(), 2);
    EXPECT_EQ(watch_rvs, (std::vector<std::string>{"10", "20", "21"}));
}
