// serve_port_forward over real loopback sockets, in all three wire variants, against a real
// echo server on 127.0.0.1 (pod_pid 0 = the host network namespace).
#include "local/port_forward.hpp"
#include "local/spdy.hpp"
#include "proto/channel_protocol.hpp"

#include <gtest/gtest.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/websocket/stream.hpp>

#include <chrono>
#include <map>
#include <optional>
#include <set>

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace ks = kubesandbox;
namespace spdy = ks::local::spdy;
using tcp = asio::ip::tcp;
using namespace std::string_literals;

constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);

// gtest's ASSERT_* return from the function, which a coroutine cannot do.
#define CO_ASSERT(cond)                                  \
    do {                                                 \
        if (!(cond)) {                                   \
            ADD_FAILURE() << "assertion failed: " #cond; \
            co_return;                                   \
        }                                                \
    } while (0)

// Echoes every byte; on EOF it half-closes back (so half-close propagation is observable).
asio::awaitable<void> echo_connection(tcp::socket s) {
    std::string buf(16384, '\0');
    while (true) {
        auto [ec, n] = co_await s.async_read_some(asio::buffer(buf), tuple_awaitable);
        if (ec) break;
        auto [wec, w] = co_await asio::async_write(s, asio::buffer(buf.data(), n), tuple_awaitable);
        (void)w;
        if (wec) co_return;
    }
    boost::system::error_code ec;
    s.shutdown(tcp::socket::shutdown_send, ec);
    // Keep the socket until the peer closes.
    auto [rec, n] = co_await s.async_read_some(asio::buffer(buf), tuple_awaitable);
    (void)rec;
    (void)n;
}

asio::awaitable<void> echo_server(tcp::acceptor& acc) {
    while (true) {
        auto [ec, s] = co_await acc.async_accept(tuple_awaitable);
        if (ec) co_return;
        asio::co_spawn(acc.get_executor(), echo_connection(std::move(s)), asio::detached);
    }
}

// Accepts connections, reads the request head like the API server, hands over to the kubelet side.
asio::awaitable<void> api_side(tcp::acceptor& acc) {
    while (true) {
        auto [ec, s] = co_await acc.async_accept(tuple_awaitable);
        if (ec) co_return;
        ks::local::StreamRequest req{ks::net::AnyStream::tcp(std::move(s)), {}, {}, {}};
        auto [rec, n] = co_await http::async_read(req.stream, req.buffer, req.request, tuple_awaitable);
        (void)n;
        if (rec) continue;
        req.pod = boost::json::object{{"metadata", boost::json::object{{"name", "p1"}, {"uid", "uid-1"}}}};
        asio::co_spawn(acc.get_executor(), ks::local::serve_port_forward(std::move(req), 0), asio::detached);
    }
}

// A port with nothing listening: bind, read the port, close.
std::uint16_t closed_port(asio::io_context& ioc) {
    tcp::acceptor a(ioc, {asio::ip::address_v4::loopback(), 0});
    auto p = a.local_endpoint().port();
    a.close();
    return p;
}

class PortForwardTest : public ::testing::Test {
protected:
    void SetUp() override {
        asio::co_spawn(ioc_, echo_server(echo_), asio::detached);
        asio::co_spawn(ioc_, api_side(api_), asio::detached);
    }
    // Runs `body` to completion within the deadline.
    void run(asio::awaitable<void> body, std::chrono::seconds deadline = std::chrono::seconds(20)) {
        bool done = false;
        std::exception_ptr failure;
        asio::co_spawn(ioc_, std::move(body), [&](std::exception_ptr e) {
            done = true;
            failure = e;
            ioc_.stop();
        });
        ioc_.run_for(deadline);
        ASSERT_TRUE(done) << "test body did not finish in time";
        if (failure) std::rethrow_exception(failure);
    }
    std::uint16_t echo_port() const { return echo_.local_endpoint().port(); }
    std::uint16_t api_port() const { return api_.local_endpoint().port(); }

    asio::io_context ioc_;
    tcp::acceptor echo_{ioc_, {asio::ip::address_v4::loopback(), 0}};
    tcp::acceptor api_{ioc_, {asio::ip::address_v4::loopback(), 0}};
};

asio::awaitable<tcp::socket> connect_to(std::uint16_t port) {
    tcp::socket s(co_await asio::this_coro::executor);
    co_await s.async_connect({asio::ip::address_v4::loopback(), port}, asio::use_awaitable);
    co_return s;
}

using WsClient = websocket::stream<tcp::socket>;

// WebSocket handshake offering `subprotocol`; returns the negotiated one.
asio::awaitable<std::string> ws_handshake(WsClient& ws, std::string subprotocol, std::string target) {
    ws.set_option(websocket::stream_base::decorator(
        [subprotocol](websocket::request_type& req) { req.set(http::field::sec_websocket_protocol, subprotocol); }));
    websocket::response_type res;
    co_await ws.async_handshake(res, "127.0.0.1", target, asio::use_awaitable);
    ws.binary(true);
    ws.auto_fragment(false);
    co_return std::string(res[http::field::sec_websocket_protocol]);
}

asio::awaitable<std::string> ws_read(WsClient& ws) {
    beast::flat_buffer b;
    co_await ws.async_read(b, asio::use_awaitable);
    EXPECT_TRUE(ws.got_binary());
    co_return beast::buffers_to_string(b.data());
}

// ---- Variant A ----

TEST_F(PortForwardTest, WebSocketChannelProtocolEchoes) {
    auto refused = closed_port(ioc_);
    run([&]() -> asio::awaitable<void> {
        WsClient ws(co_await connect_to(api_port()));
        std::string target = "/api/v1/namespaces/default/pods/p1/portforward?ports=" + std::to_string(echo_port()) +
                             "&ports=" + std::to_string(refused);
        auto proto = co_await ws_handshake(ws, "v5.channel.k8s.io, v4.channel.k8s.io", target);
        EXPECT_EQ(proto, "v4.channel.k8s.io");
        // Four prefix messages: channels 0..3, each the port as uint16 LE.
        for (std::uint8_t ch = 0; ch < 4; ++ch) {
            auto m = co_await ws_read(ws);
            auto port = ch < 2 ? echo_port() : refused;
            EXPECT_EQ(m, ks::proto::encode_port_prefix(ch, port)) << int(ch);
        }
        // The refused port reports on its error channel (3).
        auto err = co_await ws_read(ws);
        CO_ASSERT(!err.empty());
        EXPECT_EQ(err[0], '\x03');
        EXPECT_NE(err.find("error forwarding port " + std::to_string(refused) + " to pod p1, uid uid-1"),
                  std::string::npos)
            << err;
        EXPECT_NE(err.find("connection refused"), std::string::npos) << err;

        std::string payload = "hello through the pod\n";
        co_await ws.async_write(asio::buffer(ks::proto::encode_channel_frame(0, payload)), asio::use_awaitable);
        std::string echoed;
        while (echoed.size() < payload.size()) {
            auto m = co_await ws_read(ws);
            auto f = ks::proto::decode_channel_frame(m);
            EXPECT_TRUE(f);
            EXPECT_EQ(f->channel, 0);
            echoed += f->payload;
        }
        EXPECT_EQ(echoed, payload);
        co_await ws.async_close(websocket::close_code::normal, asio::use_awaitable);
    }());
}

TEST_F(PortForwardTest, WebSocketClosesWhenUpstreamEnds) {
    auto refused = closed_port(ioc_);
    run([&]() -> asio::awaitable<void> {
        WsClient ws(co_await connect_to(api_port()));
        co_await ws_handshake(ws, "v4.channel.k8s.io",
                              "/api/v1/namespaces/default/pods/p1/portforward?ports=" + std::to_string(refused));
        EXPECT_EQ(co_await ws_read(ws), ks::proto::encode_port_prefix(0, refused));
        EXPECT_EQ(co_await ws_read(ws), ks::proto::encode_port_prefix(1, refused));
        auto err = co_await ws_read(ws);
        EXPECT_EQ(err.substr(0, 1), "\x01");
        // Every forwarded connection is over: the server closes the WebSocket normally.
        beast::flat_buffer b;
        auto [ec, n] = co_await ws.async_read(b, tuple_awaitable);
        (void)n;
        EXPECT_EQ(ec, websocket::error::closed);
        EXPECT_EQ(ws.reason().code, websocket::close_code::normal);
    }());
}

TEST_F(PortForwardTest, MissingPortsIsBadRequest) {
    run([&]() -> asio::awaitable<void> {
        WsClient ws(co_await connect_to(api_port()));
        ws.set_option(websocket::stream_base::decorator(
            [](websocket::request_type& req) { req.set(http::field::sec_websocket_protocol, "v4.channel.k8s.io"); }));
        websocket::response_type res;
        auto [ec] = co_await ws.async_handshake(res, "127.0.0.1", "/api/v1/namespaces/default/pods/p1/portforward",
                                                tuple_awaitable);
        EXPECT_TRUE(ec);
        EXPECT_EQ(res.result_int(), 400u);
        EXPECT_NE(res.body().find("\"reason\":\"BadRequest\""), std::string::npos) << res.body();
    }());
}

// ---- SPDY client used for variants B and C ----

// Byte transport under the SPDY client: a raw socket or a WebSocket tunnel.
struct Pipe {
    tcp::socket* raw = nullptr;
    WsClient* ws = nullptr;
    std::size_t split = 0;  // tunnel: cut writes into messages of this size (0 = whole)

    asio::awaitable<void> write(std::string bytes) {
        if (raw) {
            co_await asio::async_write(*raw, asio::buffer(bytes), asio::use_awaitable);
            co_return;
        }
        std::string_view rest = bytes;
        while (!rest.empty()) {
            auto n = split ? std::min(split, rest.size()) : rest.size();
            co_await ws->async_write(asio::buffer(rest.data(), n), asio::use_awaitable);
            rest.remove_prefix(n);
        }
    }
    // Returns empty on close.
    asio::awaitable<std::string> read() {
        if (raw) {
            std::string buf(65536, '\0');
            auto [ec, n] = co_await raw->async_read_some(asio::buffer(buf), tuple_awaitable);
            if (ec) co_return std::string{};
            buf.resize(n);
            co_return buf;
        }
        beast::flat_buffer b;
        auto [ec, n] = co_await ws->async_read(b, tuple_awaitable);
        (void)n;
        if (ec) co_return std::string{};
        co_return beast::buffers_to_string(b.data());
    }
};

struct SpdyClient {
    Pipe pipe;
    spdy::Encoder enc;
    spdy::Decoder dec;
    bool closed = false;

    asio::awaitable<void> open(std::uint32_t id, std::string type, std::uint16_t port, std::string request_id) {
        spdy::SynStream syn;
        syn.stream_id = id;
        syn.headers = {{"streamtype", type}, {"port", std::to_string(port)}, {"requestid", request_id}};
        co_await pipe.write(*enc.syn_stream(syn));
    }
    // Next frame, nullopt once the server closed the connection.
    asio::awaitable<std::optional<spdy::Frame>> next() {
        while (true) {
            auto f = dec.next();
            EXPECT_TRUE(f);
            if (!f) co_return std::nullopt;
            if (*f) co_return std::move(**f);
            auto bytes = co_await pipe.read();
            if (bytes.empty()) {
                closed = true;
                co_return std::nullopt;
            }
            dec.feed(bytes);
        }
    }
};

struct StreamLog {
    std::map<std::uint32_t, std::string> data;
    std::set<std::uint32_t> fin, replied;
    std::uint64_t window_granted = 0;
    std::vector<std::uint32_t> pings;
};

// Reads frames until `until` is satisfied or the connection closes.
template <class Pred>
asio::awaitable<void> collect(SpdyClient& c, StreamLog& log, Pred until) {
    while (!until()) {
        auto f = co_await c.next();
        if (!f) co_return;
        if (auto* d = std::get_if<spdy::DataFrame>(&*f)) {
            EXPECT_FALSE(log.fin.count(d->stream_id)) << "data after FIN on " << d->stream_id;
            log.data[d->stream_id] += d->data;
            if (d->fin) log.fin.insert(d->stream_id);
        } else if (auto* r = std::get_if<spdy::SynReply>(&*f)) {
            log.replied.insert(r->stream_id);
        } else if (auto* w = std::get_if<spdy::WindowUpdate>(&*f)) {
            log.window_granted += w->delta;
        } else if (auto* p = std::get_if<spdy::Ping>(&*f)) {
            log.pings.push_back(p->id);
        } else if (auto* rst = std::get_if<spdy::RstStream>(&*f)) {
            ADD_FAILURE() << "unexpected RST_STREAM " << rst->stream_id << " status " << rst->status;
        }
    }
}

// The kubectl sequence: error+data pair, payload, half-close, echo, FIN on both, RST, GOAWAY.
asio::awaitable<void> spdy_echo_session(SpdyClient& c, std::uint16_t port, std::uint16_t refused) {
    StreamLog log;
    co_await c.open(1, "error", port, "0");
    co_await c.pipe.write(c.enc.data(1, "", true));
    co_await c.open(3, "data", port, "0");
    co_await c.pipe.write(c.enc.ping(1));
    std::string payload(300 * 1024, 'x');
    for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>('a' + i % 26);
    for (std::size_t at = 0; at < payload.size(); at += 32 * 1024)
        co_await c.pipe.write(c.enc.data(3, std::string_view(payload).substr(at, 32 * 1024), false));
    co_await c.pipe.write(c.enc.data(3, "", true));  // local side closed
    co_await collect(c, log, [&] { return log.fin.count(3) && log.fin.count(1); });
    EXPECT_TRUE(log.replied.count(1));
    EXPECT_TRUE(log.replied.count(3));
    EXPECT_EQ(log.pings, std::vector<std::uint32_t>{1});
    EXPECT_EQ(log.data[3].size(), payload.size());
    EXPECT_TRUE(log.data[3] == payload);
    EXPECT_EQ(log.data[1], "");  // empty error stream = success
    EXPECT_EQ(log.window_granted, payload.size());
    co_await c.pipe.write(c.enc.rst_stream(3, spdy::RstStatus::cancel));

    // Second connection to a closed port: the error stream carries the kubelet's message.
    StreamLog log2;
    co_await c.open(5, "error", refused, "1");
    co_await c.pipe.write(c.enc.data(5, "", true));
    co_await c.open(7, "data", refused, "1");
    co_await collect(c, log2, [&] { return log2.fin.count(5) && log2.fin.count(7); });
    EXPECT_NE(log2.data[5].find("error forwarding port " + std::to_string(refused) + " to pod p1, uid uid-1"),
              std::string::npos)
        << log2.data[5];
    EXPECT_NE(log2.data[5].find("connection refused"), std::string::npos) << log2.data[5];
    EXPECT_EQ(log2.data[7], "");

    // GOAWAY: the server ends the connection.
    co_await c.pipe.write(c.enc.goaway(7, spdy::GoAwayStatus::ok));
    StreamLog rest;
    co_await collect(c, rest, [] { return false; });
    EXPECT_TRUE(c.closed);
}

asio::awaitable<std::unique_ptr<tcp::socket>> spdy_upgrade(std::uint16_t api_port, std::string protocol,
                                                           unsigned& status, std::string& accepted) {
    auto s = std::make_unique<tcp::socket>(co_await connect_to(api_port));
    std::string head =
        "POST /api/v1/namespaces/default/pods/p1/portforward HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Content-Length: 0\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
        "X-Stream-Protocol-Version: " +
        protocol + "\r\n\r\n";
    co_await asio::async_write(*s, asio::buffer(head), asio::use_awaitable);
    // Read the response head byte by byte so no SPDY byte is swallowed.
    std::string resp;
    char ch;
    while (resp.find("\r\n\r\n") == std::string::npos) {
        auto [ec, n] = co_await asio::async_read(*s, asio::buffer(&ch, 1), tuple_awaitable);
        if (ec || n != 1) break;
        resp.push_back(ch);
    }
    status = resp.size() > 12 ? static_cast<unsigned>(std::stoi(resp.substr(9, 3))) : 0;
    accepted = resp;
    co_return s;
}

TEST_F(PortForwardTest, SpdyOverPlainUpgrade) {
    auto refused = closed_port(ioc_);
    run([&]() -> asio::awaitable<void> {
        unsigned status = 0;
        std::string head;
        auto s = co_await spdy_upgrade(api_port(), "portforward.k8s.io", status, head);
        EXPECT_EQ(status, 101u) << head;
        EXPECT_NE(head.find("X-Stream-Protocol-Version: portforward.k8s.io"), std::string::npos) << head;
        EXPECT_NE(head.find("Upgrade: SPDY/3.1"), std::string::npos) << head;
        SpdyClient c;
        c.pipe.raw = s.get();
        co_await spdy_echo_session(c, echo_port(), refused);
    }());
}

TEST_F(PortForwardTest, SpdyUpgradeRejectsUnknownStreamProtocol) {
    run([&]() -> asio::awaitable<void> {
        unsigned status = 0;
        std::string head;
        auto s = co_await spdy_upgrade(api_port(), "channel.k8s.io", status, head);
        EXPECT_EQ(status, 403u) << head;
        EXPECT_NE(head.find("X-Accepted-Stream-Protocol-Versions: portforward.k8s.io"), std::string::npos) << head;
    }());
}

TEST_F(PortForwardTest, SpdyTunnelledInWebSocket) {
    auto refused = closed_port(ioc_);
    run([&]() -> asio::awaitable<void> {
        WsClient ws(co_await connect_to(api_port()));
        auto proto =
            co_await ws_handshake(ws, "SPDY/3.1+portforward.k8s.io", "/api/v1/namespaces/default/pods/p1/portforward");
        EXPECT_EQ(proto, "SPDY/3.1+portforward.k8s.io");
        SpdyClient c;
        c.pipe.ws = &ws;
        c.pipe.split = 5;  // message boundaries inside frames: the server must reassemble
        co_await spdy_echo_session(c, echo_port(), refused);
    }());
}

TEST_F(PortForwardTest, SpdyRejectsBadStreamsAndEndsOnProtocolError) {
    run([&]() -> asio::awaitable<void> {
        unsigned status = 0;
        std::string head;
        auto s = co_await spdy_upgrade(api_port(), "portforward.k8s.io", status, head);
        CO_ASSERT(status == 101u);
        SpdyClient c;
        c.pipe.raw = s.get();
        // A stream with no port is refused with RST_STREAM PROTOCOL_ERROR.
        spdy::SynStream syn;
        syn.stream_id = 1;
        syn.headers = {{"streamtype", "data"}};
        co_await c.pipe.write(*c.enc.syn_stream(syn));
        auto f = co_await c.next();
        CO_ASSERT(f);
        auto* rst = std::get_if<spdy::RstStream>(&*f);
        CO_ASSERT(rst != nullptr);
        EXPECT_EQ(rst->stream_id, 1u);
        EXPECT_EQ(rst->status, 1u);
        // Garbage (wrong SPDY version): GOAWAY PROTOCOL_ERROR and the connection closes.
        co_await c.pipe.write("\x80\x02\x00\x06\x00\x00\x00\x04\x00\x00\x00\x01"s);
        f = co_await c.next();
        CO_ASSERT(f);
        auto* ga = std::get_if<spdy::GoAway>(&*f);
        CO_ASSERT(ga != nullptr);
        EXPECT_EQ(ga->status, 1u);
        f = co_await c.next();
        EXPECT_FALSE(f);
        EXPECT_TRUE(c.closed);
    }());
}

}  // namespace
