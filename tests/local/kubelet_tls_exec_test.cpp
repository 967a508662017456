// Exec over TLS, as the API server serves it: the kubelet's output pumps hold one pump's TLS
// records for the other's write (net::AnyStream::hold_writes), and what is held must still
// leave while the command runs on. Plain TCP holds nothing, so these tests need TLS.
#include "local/kubelet_fixture.hpp"
#include "net/any_stream.hpp"

#include "../support/tls_contexts.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>

namespace kubelet_test {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using kubesandbox::net::AnyStream;

class KubeletTlsExecTest : public KubeletTest {
protected:
    void SetUp() override {
        KubeletTest::SetUp();
        ASSERT_NO_FATAL_FAILURE(kubesandbox::test::make_tls_contexts(server_ctx_, client_ctx_));
    }

    asio::ssl::context server_ctx_{asio::ssl::context::tls_server};
    std::shared_ptr<asio::ssl::context> client_ctx_;
};

// A command that answers each line of its stdin with a write to stdout and one to stderr, at
// once: both pumps often have bytes in the same turn, so one holds its message for the other.
// Each answer must arrive while the command waits for the next line; an answer whose records
// stayed held would arrive only with the command's end.
TEST_F(KubeletTlsExecTest, OutputOnBothStreamsAtOnceArrivesWhileTheCommandRunsOn) {
    auto pod = running_pod("tlsexec");
    constexpr int rounds = 200;
    tcp::acceptor acceptor(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    asio::co_spawn(
        io_,
        [&]() -> asio::awaitable<void> {
            auto [ec, sock] = co_await acceptor.async_accept(tuple_awaitable);
            if (ec) co_return;
            AnyStream stream = AnyStream::tls_server(std::move(sock), server_ctx_);
            auto [hec] = co_await stream.async_handshake(tuple_awaitable);
            if (hec) co_return;
            beast::flat_buffer buf;
            http::request<http::string_body> req;
            auto [rec, n] = co_await http::async_read(stream, buf, req, tuple_awaitable);
            if (rec) co_return;
            StreamRequest sr{std::move(stream), std::move(buf), std::move(req), pod};
            co_await kubelet_->serve_exec(std::move(sr));
        },
        asio::detached);

    int answered = 0;  // rounds whose both answers arrived before the next line was sent
    std::string late;  // what went wrong, if anything
    bool done = false;
    asio::co_spawn(
        io_,
        [&]() -> asio::awaitable<void> {
            tcp::socket sock(io_);
            co_await sock.async_connect(acceptor.local_endpoint(), asio::use_awaitable);
            websocket::stream<AnyStream> ws(AnyStream::tls_client(std::move(sock), *client_ctx_, "", "127.0.0.1"));
            co_await ws.next_layer().async_handshake(asio::use_awaitable);
            ws.set_option(websocket::stream_base::decorator([](websocket::request_type& req) {
                req.set(http::field::sec_websocket_protocol, "v5.channel.k8s.io");
            }));
            ws.binary(true);
            co_await ws.async_handshake(
                "127.0.0.1",
                "/api/v1/namespaces/default/pods/tlsexec/exec?command=sh&command=-c&command="
                "while%20read%20-r%20l%3B%20do%20printf%20o%24l%3B%20printf%20e%24l%20%3E%262%3B"
                "%20done&container=main&stdin=true&stdout=true&stderr=true",
                asio::use_awaitable);
            std::string out, err;
            beast::flat_buffer buf;
            for (int i = 0; i < rounds; ++i) {
                const std::string line = std::to_string(i);
                const std::string msg = std::string(1, '\0') + line + "\n";
                co_await ws.async_write(asio::buffer(msg), asio::use_awaitable);
                const std::string want_out = "o" + line, want_err = "e" + line;
                // Bounded: the reply is a few bytes on loopback; held records would wait forever.
                asio::steady_timer deadline(io_, std::chrono::seconds(5));
                deadline.async_wait([&](boost::system::error_code ec) {
                    if (!ec) ws.next_layer().close();
                });
                while (out.find(want_out) == std::string::npos || err.find(want_err) == std::string::npos) {
                    auto [ec, n] = co_await ws.async_read(buf, tuple_awaitable);
                    if (ec) {
                        late = "round " + line + ": " + ec.message() + "; stdout so far \"" + out + "\", stderr \"" +
                               err + "\"";
                        done = true;
                        co_return;
                    }
                    auto* d = static_cast<const char*>(buf.data().data());
                    if (n > 0 && d[0] == 1) out.append(d + 1, n - 1);
                    if (n > 0 && d[0] == 2) err.append(d + 1, n - 1);
                    buf.consume(buf.size());
                }
                deadline.cancel();
                out.clear();
                err.clear();
                ++answered;
            }
            const unsigned char close_stdin[2] = {0xff, 0x00};
            co_await ws.async_write(asio::buffer(close_stdin, 2), asio::use_awaitable);
            for (;;) {
                auto [ec, n] = co_await ws.async_read(buf, tuple_awaitable);
                if (ec) break;
                buf.consume(buf.size());
            }
            done = true;
        },
        [&](std::exception_ptr e) {
            if (e) {
                late = "the client threw";
                done = true;
            }
        });
    ASSERT_TRUE(run_until([&] { return done; }, std::chrono::seconds(60)));
    EXPECT_EQ(late, "");
    EXPECT_EQ(answered, rounds);
}

}  // namespace
}  // namespace kubelet_test
