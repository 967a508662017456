// What RouterSandbox puts on the wire, against a scripted router on loopback: every kind of
// request tells the router when to give up, and an oversized error answer neither ends up whole
// in the error nor costs the connection.
#include <kubesandbox/router_connection.hpp>
#include <kubesandbox/router_sandbox.hpp>

#include "../support/byte_pieces.hpp"
#include "../support/fake_server.hpp"
#include "../support/run_test.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>

#include <gtest/gtest.h>

#include <charconv>

namespace {
namespace asio = boost::asio;
using namespace kubesandbox;
using kubesandbox::test::FakeReply;
using kubesandbox::test::FakeRequest;
using kubesandbox::test::FakeServer;
using namespace std::chrono_literals;

std::shared_ptr<RouterConnection> connect(asio::io_context& io, const FakeServer& server) {
    DirectConnectionOptions options;
    options.url = server.url();
    auto made = make_direct_connection(io.get_executor(), options);
    EXPECT_TRUE(made);
    return made ? *made : nullptr;
}

std::optional<long> seconds_in(const std::string& text) {
    long v = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
    return v;
}

// The router ends a call it was told to end by X-Sandbox-Timeout with a 504 the client reads;
// without the field it waits its own proxy timeout, past the client's deadline for short
// transfers. So each request names a limit a little below the client's own.
TEST(RouterSandboxWire, EveryRequestTellsTheRouterALimitBelowItsOwnDeadline) {
    asio::io_context io;
    std::vector<FakeRequest> seen;
    FakeServer server(io, [&](const FakeRequest& r) {
        seen.push_back(r);
        if (r.target == "/execute")
            return FakeReply(test::http_response(200, R"({"stdout":"","stderr":"","exit_code":0})"));
        if (r.target == "/upload") return FakeReply(test::http_response(200, "{}"));
        if (r.target == "/download/f") return FakeReply(test::http_response(200, "hello", "application/octet-stream"));
        if (r.target == "/list/.") return FakeReply(test::http_response(200, "[]"));
        if (r.target == "/exists/f") return FakeReply(test::http_response(200, R"({"exists":true})"));
        return FakeReply(test::http_response(404, R"({"detail":"no route"})"));
    });
    auto c = connect(io, server);
    ASSERT_TRUE(c);
    RouterSandboxOptions o;
    o.sandbox_name = "sb";
    o.default_timeout = 40s;
    RouterSandbox sandbox(c, o);
    auto big = std::make_shared<const std::string>(3 * 1024 * 1024 + 5, 'b');
    test::run_coroutine_test(
        io,
        [&]() -> asio::awaitable<void> {
            auto ran = co_await sandbox.execute("true", std::chrono::seconds(20));
            EXPECT_TRUE(ran) << (ran ? "" : ran.error().describe());
            std::vector<std::pair<std::string, std::string>> files{{"/app/f", "hello"}};
            auto up = co_await sandbox.upload_files(files);
            EXPECT_TRUE(up && up->size() == 1 && !(*up)[0].error);
            std::vector<std::string> paths{"/app/f"};
            auto down = co_await sandbox.download_files(paths);
            EXPECT_TRUE(down && down->size() == 1 && (*down)[0].content == "hello");
            auto listed = co_await sandbox.list_directory("/app");
            EXPECT_TRUE(listed && listed->empty()) << (listed ? "" : listed.error().describe());
            auto exists = co_await sandbox.exists("/app/f");
            EXPECT_TRUE(exists && *exists);
            auto streamed = co_await sandbox.upload_from("/app/big", big->size(), test::uneven_pieces(big));
            EXPECT_TRUE(streamed && !streamed->error) << (streamed ? *streamed->error : streamed.error().describe());
            test::CollectedBytes got;
            auto to = co_await sandbox.download_to("/app/f", got.sink());
            EXPECT_TRUE(to && !to->error && got.data == "hello");
        },
        30s);
    // The execute's limit: its timeout plus 5 s. A transfer has a minute plus a second per MiB,
    // and the router gets a few seconds less; a streamed download has the default timeout.
    std::map<std::string, std::vector<long>> limits;
    for (const auto& r : seen) {
        auto v = seconds_in(r.headers.count("x-sandbox-timeout") ? r.headers.at("x-sandbox-timeout") : "");
        EXPECT_TRUE(v) << r.method << " " << r.target << " has no numeric X-Sandbox-Timeout";
        if (v) limits[r.method + " " + r.target].push_back(*v);
    }
    auto in = [&](const std::string& request, long low, long high) {
        ASSERT_TRUE(limits.count(request)) << request;
        for (long v : limits[request]) {
            EXPECT_GE(v, low) << request;
            EXPECT_LE(v, high) << request;
        }
    };
    in("POST /execute", 25, 25);
    in("POST /upload", 50, 58);  // 5 bytes, the probe and the 3 MiB body (63 s)
    in("GET /list/.", 50, 55);
    in("GET /exists/f", 50, 55);
    ASSERT_EQ(limits["GET /download/f"].size(), 2u);
    const auto downloads = limits["GET /download/f"];
    EXPECT_TRUE(downloads[0] >= 305 && downloads[0] <= 311) << downloads[0];  // download_files: 60 + 256 s
    EXPECT_TRUE(downloads[1] >= 30 && downloads[1] <= 35) << downloads[1];    // download_to: the 40 s default
    EXPECT_EQ(limits["POST /upload"].size(), 3u);
    EXPECT_EQ(server.connections_accepted(), 2);  // the streamed body has a connection of its own
}

// The limit is written when the request goes out: a call that waited for the one connection
// tells the router the time it has left, not the time it had when it was made.
TEST(RouterSandboxWire, TheLimitCountsFromWhenTheRequestGoesOut) {
    asio::io_context io;
    std::vector<FakeRequest> seen;
    FakeServer server(io, [&](const FakeRequest& r) {
        seen.push_back(r);
        // The first call holds the only connection for 2.5 s.
        return FakeReply(test::http_response(200, "[]"), seen.size() == 1 ? 2500ms : 0ms);
    });
    DirectConnectionOptions options;
    options.url = server.url();
    options.max_connections = 1;
    auto c = make_direct_connection(io.get_executor(), options);
    ASSERT_TRUE(c);
    RouterSandboxOptions o;
    o.sandbox_name = "sb";
    RouterSandbox sandbox(*c, o);
    test::run_coroutine_test(
        io,
        [&]() -> asio::awaitable<void> {
            using namespace asio::experimental::awaitable_operators;
            auto [first, second] = co_await (sandbox.list_directory("/app") && sandbox.list_directory("/app/d"));
            EXPECT_TRUE(first && second);
        },
        20s);
    ASSERT_EQ(seen.size(), 2u);
    // A minute less a 5 s margin when it went out at once; 2.5 s less after the wait.
    EXPECT_EQ(seen[0].headers["x-sandbox-timeout"], "54") << "first";
    auto waited = seconds_in(seen[1].headers["x-sandbox-timeout"]);
    EXPECT_TRUE(waited && *waited <= 52) << seen[1].headers["x-sandbox-timeout"];
}

// An error answer is kept to its first 4 KiB and the rest is read and dropped, so the
// connection stays usable for the next call.
TEST(RouterSandboxWire, AnErrorAnswerPastFourKiBIsCutAndTheConnectionKept) {
    asio::io_context io;
    int calls = 0;
    const std::string detail(64 * 1024, 'x');
    FakeServer server(io, [&](const FakeRequest&) {
        if (++calls == 1) return FakeReply(test::http_response(500, R"({"detail":")" + detail + R"("})"));
        return FakeReply(test::http_response(200, R"([{"name":"a","size":1,"type":"file","mod_time":1.5}])"));
    });
    auto c = connect(io, server);
    ASSERT_TRUE(c);
    RouterSandboxOptions o;
    o.sandbox_name = "sb";
    RouterSandbox sandbox(c, o);
    test::run_coroutine_test(
        io,
        [&]() -> asio::awaitable<void> {
            auto failed = co_await sandbox.list_directory("/app");
            EXPECT_TRUE(!failed && failed.error().code == errc::unknown_status)
                << (failed ? "a listing" : failed.error().describe());
            if (!failed) {
                EXPECT_NE(failed.error().message.find("HTTP 500"), std::string::npos);
                EXPECT_LT(failed.error().message.size(), 600u);  // the start of what was kept
            }
            auto listed = co_await sandbox.list_directory("/app");
            EXPECT_TRUE(listed && listed->size() == 1 && (*listed)[0].name == "a")
                << (listed ? "" : listed.error().describe());
        },
        20s);
    EXPECT_EQ(calls, 2);
    EXPECT_EQ(server.connections_accepted(), 1);
}

}  // namespace
