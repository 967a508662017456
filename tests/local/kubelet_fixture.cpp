#include "local/kubelet_fixture.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>

#include <cctype>

namespace kubelet_test {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;

asio::awaitable<void> KubeletTest::exec_client(tcp::endpoint ep, std::string target, std::string protocols,
                                               std::string input, bool count_only, bool fragment, ExecResult& r) {
    websocket::stream<tcp::socket> ws(co_await asio::this_coro::executor);
    auto [cec] = co_await ws.next_layer().async_connect(ep, tuple_awaitable);
    if (cec) co_return;
    ws.set_option(websocket::stream_base::decorator(
        [protocols](websocket::request_type& req) { req.set(http::field::sec_websocket_protocol, protocols); }));
    ws.auto_fragment(fragment);
    if (fragment) ws.write_buffer_bytes(1024);
    ws.binary(true);
    websocket::response_type res;
    auto [hec] = co_await ws.async_handshake(res, "127.0.0.1", target, tuple_awaitable);
    r.http_status = res.result_int();
    r.http_body = res.body();
    if (hec) {
        r.done = true;
        co_return;
    }
    r.protocol = std::string(res[http::field::sec_websocket_protocol]);
    if (!input.empty() || fragment) {
        std::string msg = std::string(1, '\0') + input;
        co_await ws.async_write(asio::buffer(msg), tuple_awaitable);
        if (!fragment) {
            const unsigned char close_stdin[2] = {0xff, 0x00};
            co_await ws.async_write(asio::buffer(close_stdin, 2), tuple_awaitable);
        }
    }
    beast::flat_buffer buf;
    for (;;) {
        auto [ec, n] = co_await ws.async_read(buf, tuple_awaitable);
        if (ec) {
            r.close_code = ws.reason().code;
            break;
        }
        auto* d = static_cast<const char*>(buf.data().data());
        if (n > 0) {
            if (d[0] == 1) {
                r.out_bytes += n - 1;
                if (!count_only) r.out.append(d + 1, n - 1);
            } else if (d[0] == 2) {
                r.err.append(d + 1, n - 1);
            } else if (d[0] == 3) {
                r.status.append(d + 1, n - 1);
            }
        }
        buf.consume(buf.size());
    }
    r.done = true;
}

KubeletTest::ExecResult KubeletTest::exec(const json::object& pod, std::vector<std::string> argv, std::string input,
                                          std::string extra, bool count_only, std::string protocols, bool fragment,
                                          std::chrono::milliseconds timeout) {
    tcp::acceptor acceptor(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    std::string target =
        "/api/v1/namespaces/default/pods/" + std::string(pod.at("metadata").at("name").as_string()) + "/exec?";
    for (auto& a : argv) {
        std::string enc;
        for (unsigned char c : a) {
            if (std::isalnum(c) || c == '-' || c == '_' || c == '.') {
                enc += static_cast<char>(c);
            } else {
                char b[4];
                std::snprintf(b, sizeof b, "%%%02X", c);
                enc += b;
            }
        }
        target += "command=" + enc + "&";
    }
    target += "container=main" + (input.empty() && !fragment ? extra : extra + "&stdin=true");
    ExecResult r;
    // Server side: accept, read the request head, hand everything to the kubelet.
    asio::co_spawn(
        io_,
        [&]() -> asio::awaitable<void> {
            auto [ec, sock] = co_await acceptor.async_accept(tuple_awaitable);
            if (ec) co_return;
            beast::flat_buffer buf;
            http::request<http::string_body> req;
            auto [rec, n] = co_await http::async_read(sock, buf, req, tuple_awaitable);
            if (rec) co_return;
            StreamRequest sr{kubesandbox::net::AnyStream::tcp(std::move(sock)), std::move(buf), std::move(req), pod};
            co_await kubelet_->serve_exec(std::move(sr));
        },
        asio::detached);
    asio::co_spawn(io_, exec_client(acceptor.local_endpoint(), target, protocols, input, count_only, fragment, r),
                   asio::detached);
    EXPECT_TRUE(run_until([&] { return r.done; }, timeout)) << "exec did not finish";
    return r;
}

}  // namespace kubelet_test
