// One HTTP exchange over an in-memory AnyStream (no socket): what was written, what was parsed,
// and how early closes and garbage are typed.
#include "net/http_exchange.hpp"
#include "net/any_stream.hpp"
#include "net/connector.hpp"

#include <gtest/gtest.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/http.hpp>

#include <cstring>

namespace {
using namespace kubesandbox;
namespace asio = boost::asio;
namespace http = boost::beast::http;
using namespace std::chrono_literals;

// Serves `input` to reads (then EOF) and records writes; completions are posted, like a socket's.
class MemoryStream final : public net::AnyStream::Impl {
public:
    MemoryStream(asio::any_io_executor ex, std::string input, std::shared_ptr<std::string> written,
                 std::shared_ptr<int> writes)
        : ex_(std::move(ex)), input_(std::move(input)), written_(std::move(written)), writes_(std::move(writes)) {}
    asio::any_io_executor executor() override { return ex_; }
    void read_some(asio::mutable_buffer b, net::IoHandler h) override {
        std::size_t n = closed_ ? 0 : std::min(b.size(), input_.size() - pos_);
        std::memcpy(b.data(), input_.data() + pos_, n);
        pos_ += n;
        auto ec =
            n == 0 && b.size() != 0 ? asio::error::make_error_code(asio::error::eof) : boost::system::error_code{};
        asio::post(ex_, [h = std::move(h), ec, n]() mutable { std::move(h)(ec, n); });
    }
    void write_some(const net::ConstBufferList& list, net::IoHandler h) override {
        for (const auto& b : list) written_->append(static_cast<const char*>(b.data()), b.size());
        ++*writes_;
        asio::post(ex_,
                   [h = std::move(h), n = list.bytes()]() mutable { std::move(h)(boost::system::error_code{}, n); });
    }
    void handshake(net::DoneHandler h) override {
        asio::post(ex_, [h = std::move(h)]() mutable { std::move(h)(boost::system::error_code{}); });
    }
    void shutdown(net::DoneHandler h) override {
        asio::post(ex_, [h = std::move(h)]() mutable { std::move(h)(boost::system::error_code{}); });
    }
    void close() noexcept override { closed_ = true; }
    void expires_after(std::chrono::steady_clock::duration) override {}
    void expires_never() override {}
    bool idle_alive() override { return !closed_ && pos_ == input_.size(); }
    bool is_tls() const noexcept override { return false; }

private:
    asio::any_io_executor ex_;
    std::string input_;
    std::size_t pos_ = 0;
    std::shared_ptr<std::string> written_;
    std::shared_ptr<int> writes_;
    bool closed_ = false;
};

struct Outcome {
    Result<net::HttpReply> reply = fail(errc::internal_error, "not run");
    bool sent = false;
    std::string written;
    int writes = 0;
};

Outcome run_exchange(std::string server_bytes, bool reused = false) {
    asio::io_context io;
    auto written = std::make_shared<std::string>();
    auto writes = std::make_shared<int>(0);
    net::AnyStream stream(std::make_unique<MemoryStream>(io.get_executor(), std::move(server_bytes), written, writes));
    boost::beast::flat_buffer buffer;
    http::request<http::string_body> req{http::verb::post, "/api/v1/namespaces/ns/pods", 11};
    req.set(http::field::host, "example");
    req.set(http::field::user_agent, "kubesandbox");
    req.set(http::field::authorization, "Bearer t");
    req.set(http::field::accept, "application/json");
    req.set(http::field::content_type, "application/json");
    req.body() = "{}";
    req.prepare_payload();
    Outcome out;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
            out.reply =
                co_await net::exchange(stream, buffer, req, std::chrono::steady_clock::now() + 5s, reused, out.sent);
        },
        asio::detached);
    io.run_for(5s);
    out.written = *written;
    out.writes = *writes;
    return out;
}

TEST(HttpExchange, WritesTheRequestAndParsesTheResponse) {
    auto out = run_exchange("HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}");
    ASSERT_TRUE(out.reply) << out.reply.error().describe();
    EXPECT_EQ(out.reply->status, 201u);
    EXPECT_EQ(out.reply->content_type, "application/json");
    EXPECT_EQ(out.reply->body, "{}");
    EXPECT_TRUE(out.reply->keep_alive);
    EXPECT_TRUE(out.sent);
    EXPECT_EQ(out.written.rfind("POST /api/v1/namespaces/ns/pods HTTP/1.1\r\n", 0), 0u) << out.written;
    EXPECT_NE(out.written.find("\r\n\r\n{}"), std::string::npos);
    // The head (a buffer per field) and the body leave in one write: one syscall, one segment.
    EXPECT_EQ(out.writes, 1);
}

TEST(AnyStream, BufferListKeepsTheFirstBuffersAndCutsPrefixes) {
    const std::string a = "head", c = "body";
    net::ConstBufferList list;
    list.items[0] = asio::buffer(a);
    list.items[1] = asio::buffer(c);
    list.count = 2;
    EXPECT_EQ(list.bytes(), 8u);
    auto cut = list.prefix(6);
    ASSERT_EQ(cut.count, 2u);
    EXPECT_EQ(cut.bytes(), 6u);
    EXPECT_EQ(cut.items[1].size(), 2u);
    EXPECT_EQ(list.prefix(0).count, 0u);
    EXPECT_EQ(list.prefix(100).bytes(), 8u);
}

TEST(HttpExchange, RetryAfterAndConnectionCloseAreReported) {
    auto out = run_exchange(
        "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 3\r\nConnection: close\r\nContent-Length: 0\r\n\r\n");
    ASSERT_TRUE(out.reply) << out.reply.error().describe();
    EXPECT_EQ(out.reply->status, 429u);
    EXPECT_EQ(out.reply->retry_after, "3");
    EXPECT_FALSE(out.reply->keep_alive);
}

TEST(HttpExchange, ACloseBeforeAFullResponseIsConnectionClosed) {
    auto out = run_exchange("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc");
    ASSERT_FALSE(out.reply);
    EXPECT_TRUE(out.reply.error().is(errc::connection_closed)) << out.reply.error().describe();
    EXPECT_TRUE(out.reply.error().outcome_unknown());
    EXPECT_TRUE(out.sent);  // the server may have acted on it
    auto silent = run_exchange("");
    ASSERT_FALSE(silent.reply);
    EXPECT_TRUE(silent.reply.error().is(errc::connection_closed)) << silent.reply.error().describe();
}

TEST(HttpExchange, GarbageIsInvalidResponse) {
    auto out = run_exchange("SMTP ready\r\n\r\n");
    ASSERT_FALSE(out.reply);
    EXPECT_TRUE(out.reply.error().is(errc::invalid_response)) << out.reply.error().describe();
}

TEST(Connector, HostHeaderOmitsDefaultPortsAndBracketsIpv6) {
    EXPECT_EQ(net::host_header("example", "443", true), "example");
    EXPECT_EQ(net::host_header("example", "80", false), "example");
    EXPECT_EQ(net::host_header("example", "6443", true), "example:6443");
    EXPECT_EQ(net::host_header("::1", "8443", true), "[::1]:8443");
}

}  // namespace
