// The router connection's HTTP/1.1 codec without sockets: request heads, and responses parsed
// straight into a sink in any split.
#include "connection/http1.hpp"

#include <boost/beast/http/error.hpp>

#include <gtest/gtest.h>

namespace {
using namespace kubesandbox;
namespace http = boost::beast::http;

struct RecordingSink final : ResponseSink {
    void on_head(unsigned s, std::string_view type) override {
        status = s;
        content_type = type;
        ++heads;
    }
    bool on_body(std::string_view chunk) override {
        if (refuse_after && body.size() + chunk.size() > refuse_after) return false;
        body.append(chunk);
        return true;
    }
    unsigned status = 0;
    std::string content_type, body;
    int heads = 0;
    std::size_t refuse_after = 0;
};

// Feeds `bytes` in pieces of `step`, as a socket might deliver them.
bool feed(http1::ResponseParser& parser, std::string_view bytes, std::size_t step) {
    std::string pending;
    for (std::size_t i = 0; i < bytes.size(); i += step) {
        pending.append(bytes.substr(i, step));
        boost::system::error_code ec;
        std::size_t used = parser.put(boost::asio::buffer(pending), ec);
        pending.erase(0, used);
        while (!ec && used != 0 && !pending.empty() && !parser.is_done()) {
            used = parser.put(boost::asio::buffer(pending), ec);
            pending.erase(0, used);
        }
        if (ec && ec != http::error::need_more) return false;
        if (parser.is_done()) return true;
    }
    return parser.is_done();
}

TEST(Http1, RequestHeadHasEveryFieldOnce) {
    RouterRequest r;
    r.method = "POST";
    r.target = "/execute";
    r.add_header("X-Sandbox-ID", "sb");
    r.add_header("Content-Type", "application/json");
    r.body = "{}";
    EXPECT_EQ(http1::request_head(r, "/prefix", "router:8080", "tok"),
              "POST /prefix/execute HTTP/1.1\r\nHost: router:8080\r\nUser-Agent: kubesandbox\r\n"
              "Authorization: Bearer tok\r\nX-Sandbox-ID: sb\r\nContent-Type: application/json\r\n"
              "Content-Length: 2\r\n\r\n");
    RouterRequest get;
    get.target = "/download/a%20b";
    EXPECT_EQ(http1::request_head(get, "", "h", ""),
              "GET /download/a%20b HTTP/1.1\r\nHost: h\r\nUser-Agent: kubesandbox\r\n\r\n");
}

TEST(Http1, LineBreaksNeverReachTheWire) {
    RouterRequest r;
    r.target = "/x";
    r.add_header("X-Sandbox-ID", "a\r\nInjected: 1");
    EXPECT_TRUE(r.bad_field);
    EXPECT_EQ(r.fields, "");
    EXPECT_EQ(http1::request_head(r, "", "h", ""), "");
    RouterRequest named;
    named.target = "/x";
    named.add_header("Bad:Name", "v");
    EXPECT_EQ(http1::request_head(named, "", "h", ""), "");
    RouterRequest unnamed;
    unnamed.add_header("", "v");
    unnamed.add_header("X-Fine", "v");
    EXPECT_EQ(http1::request_head(unnamed, "", "h", ""), "");
    EXPECT_EQ(unnamed.fields, "X-Fine: v\r\n");
    r = RouterRequest{};
    r.target = "/x HTTP/1.0\r\n";
    EXPECT_EQ(http1::request_head(r, "", "h", ""), "");
    r.target = "/x";
    EXPECT_EQ(http1::request_head(r, "", "h", "t\nX: y"), "");
}

TEST(Http1, ParsesLengthAndChunkedBodiesInAnySplit) {
    const std::string sized =
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\nhello world";
    const std::string chunked =
        "HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\nContent-Type: text/plain\r\n\r\n"
        "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
    for (std::size_t step : {std::size_t(1), std::size_t(3), std::size_t(7), std::size_t(4096)}) {
        RecordingSink a;
        http1::ResponseParser pa(a);
        pa.eager(true);
        ASSERT_TRUE(feed(pa, sized, step)) << step;
        EXPECT_EQ(a.status, 200u);
        EXPECT_EQ(a.content_type, "application/json");
        EXPECT_EQ(a.body, "hello world");
        EXPECT_EQ(a.heads, 1);
        EXPECT_TRUE(pa.keep_alive());
        RecordingSink b;
        http1::ResponseParser pb(b);
        pb.eager(true);
        ASSERT_TRUE(feed(pb, chunked, step)) << step;
        EXPECT_EQ(b.status, 201u);
        EXPECT_EQ(b.body, "hello world");
    }
}

// A head that arrives in two reads, the second after the Content-Type line: Beast hands over
// that field in the first put(), whose bytes the caller then consumes, so the parser keeps a
// copy. The same for a folded value, which Beast assembles in a buffer of its own.
TEST(Http1, ContentTypeSurvivesTheBufferItCameIn) {
    // A field is handed over once the next line has begun (it might be folded otherwise).
    const std::string head_start = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-";
    const std::string head_rest = "Length: 2\r\nX-Filler: " + std::string(200, 'x') + "\r\n\r\n{}";
    RecordingSink sink;
    http1::ResponseParser parser(sink);
    parser.eager(true);
    std::string buffer;
    buffer.reserve(4096);  // one storage throughout, so consumed bytes are overwritten in place
    buffer = head_start;
    boost::system::error_code ec;
    std::size_t used = parser.put(boost::asio::buffer(buffer), ec);
    EXPECT_EQ(ec, http::error::need_more);
    EXPECT_GT(used, 0u);  // the fields so far were parsed and consumed
    buffer.erase(0, used);
    buffer.append(head_rest);
    while (!parser.is_done() && !buffer.empty()) {
        used = parser.put(boost::asio::buffer(buffer), ec);
        ASSERT_TRUE(!ec || ec == http::error::need_more) << ec.message();
        buffer.erase(0, used);
        if (used == 0) break;
    }
    ASSERT_TRUE(parser.is_done());
    EXPECT_EQ(sink.content_type, "application/json");
    EXPECT_EQ(sink.body, "{}");

    const std::string folded =
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain;\r\n charset=utf-8\r\n"
        "X-Other: a\r\n b\r\nContent-Length: 0\r\n\r\n";
    RecordingSink fold_sink;
    http1::ResponseParser fold_parser(fold_sink);
    ASSERT_TRUE(feed(fold_parser, folded, 4096));
    EXPECT_EQ(fold_sink.content_type, "text/plain; charset=utf-8");
}

// Beast before 1.86 asserted (n >= 5 in parse_chunk_header) when the last chunk of an empty
// chunked body, "0\r\n", had been put() and the next put() brought one byte more: with asserts
// on (the default debugoptimized build) a server splitting its response there aborted us.
TEST(Http1, AnEmptyChunkedBodyParsesInAnySplit) {
    const std::string empty = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
    const std::string trailer = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-Trailer: yes\r\n\r\n";
    for (const std::string* message : {&empty, &trailer}) {
        for (std::size_t step = 1; step <= 6; ++step) {
            RecordingSink sink;
            http1::ResponseParser parser(sink);
            parser.eager(true);
            ASSERT_TRUE(feed(parser, *message, step)) << step << " " << *message;
            EXPECT_EQ(sink.body, "");
            EXPECT_EQ(sink.heads, 1);
        }
    }
}

TEST(Http1, ASinkThatRefusesStopsTheParse) {
    RecordingSink sink;
    sink.refuse_after = 4;
    http1::ResponseParser parser(sink);
    parser.eager(true);
    EXPECT_FALSE(feed(parser, "HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello world", 4096));
    EXPECT_TRUE(parser.refused_by_sink());
    RecordingSink other;
    http1::ResponseParser garbage(other);
    EXPECT_FALSE(feed(garbage, "SMTP ready\r\n\r\n", 4096));
    EXPECT_FALSE(garbage.refused_by_sink());
}

// The router's limit: a quarter of the time left less, at most 5 s less, at most the cap; a
// decimal below 10 s (both routers read a float), never zero or negative.
TEST(Http1, TheRoutersLimitLeavesAMarginBeforeTheDeadline) {
    using std::chrono::milliseconds;
    constexpr std::int64_t uncapped = INT64_MAX;
    EXPECT_EQ(http1::router_timeout_value(milliseconds(60'000), uncapped), "55");
    EXPECT_EQ(http1::router_timeout_value(milliseconds(60'999), uncapped), "55");
    EXPECT_EQ(http1::router_timeout_value(milliseconds(60'000), 25), "25");
    EXPECT_EQ(http1::router_timeout_value(milliseconds(12'000), uncapped), "9");
    EXPECT_EQ(http1::router_timeout_value(milliseconds(10'500), uncapped), "7.875");
    EXPECT_EQ(http1::router_timeout_value(milliseconds(8'000), uncapped), "6");
    EXPECT_EQ(http1::router_timeout_value(milliseconds(2'500), uncapped), "1.875");
    EXPECT_EQ(http1::router_timeout_value(milliseconds(40), uncapped), "0.030");
    EXPECT_EQ(http1::router_timeout_value(milliseconds(0), uncapped), "0.001");
    EXPECT_EQ(http1::router_timeout_value(milliseconds(-5'000), uncapped), "0.001");
    EXPECT_EQ(http1::router_timeout_value(std::chrono::hours(24), uncapped), "86395");
}

}  // namespace
