#include "fake_server.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <cctype>
#include <cstdio>

namespace kubesandbox::test {
namespace asio = boost::asio;
namespace http = boost::beast::http;
using asio::ip::tcp;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

std::string http_response(unsigned status, std::string_view body, std::string_view content_type,
                          std::vector<std::pair<std::string, std::string>> headers) {
    std::string out = "HTTP/1.1 " + std::to_string(status) + " X\r\n";
    if (!content_type.empty()) out += "Content-Type: " + std::string(content_type) + "\r\n";
    for (auto& [k, v] : headers) out += k + ": " + v + "\r\n";
    out += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
    out += body;
    return out;
}

std::string chunked_head(unsigned status, std::string_view content_type) {
    return "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Type: " + std::string(content_type) +
           "\r\nTransfer-Encoding: chunked\r\n\r\n";
}

std::string chunk(std::string_view data) {
    char size[32];
    std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    return std::string(size) + std::string(data) + "\r\n";
}

struct FakeServer::State {
    explicit State(asio::io_context& io) : acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {}
    tcp::acceptor acceptor;
    Handler handler;
    std::vector<std::weak_ptr<tcp::socket>> sockets;
    bool stopped = false;
};

namespace {

asio::awaitable<void> serve(std::shared_ptr<tcp::socket> sock, std::shared_ptr<FakeServer::State> st,
                            std::shared_ptr<std::atomic<int>> requests) {
    boost::beast::flat_buffer buffer;
    for (;;) {
        http::request_parser<http::string_body> parser;
        parser.body_limit(64 * 1024 * 1024);
        auto [ec, n] = co_await http::async_read(*sock, buffer, parser, use_tuple);
        if (ec) co_return;
        ++*requests;
        auto msg = parser.release();
        FakeRequest req;
        req.method = std::string(msg.method_string());
        req.target = std::string(msg.target());
        for (const auto& f : msg) {
            std::string name(f.name_string());
            for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
            req.headers[name] = std::string(f.value());
        }
        req.body = std::move(msg.body());
        FakeReply reply = st->handler(req);
        if (reply.delay.count() > 0) {
            asio::steady_timer t(sock->get_executor(), reply.delay);
            co_await t.async_wait(use_tuple);
        }
        auto [wec, wn] = co_await asio::async_write(*sock, asio::buffer(reply.raw), use_tuple);
        if (wec) co_return;
        for (auto& [piece, pause] : reply.more) {
            asio::steady_timer t(sock->get_executor(), pause);
            co_await t.async_wait(use_tuple);
            auto [pec, pn] = co_await asio::async_write(*sock, asio::buffer(piece), use_tuple);
            if (pec) co_return;
        }
        if (reply.close_after) {
            boost::system::error_code ignored;
            sock->shutdown(tcp::socket::shutdown_both, ignored);
            sock->close(ignored);
            co_return;
        }
    }
}

asio::awaitable<void> accept_loop(std::shared_ptr<FakeServer::State> st, std::shared_ptr<std::atomic<int>> accepted,
                                  std::shared_ptr<std::atomic<int>> requests) {
    for (;;) {
        auto [ec, s] = co_await st->acceptor.async_accept(use_tuple);
        if (ec || st->stopped) co_return;
        ++*accepted;
        auto sock = std::make_shared<tcp::socket>(std::move(s));
        st->sockets.push_back(sock);
        asio::co_spawn(st->acceptor.get_executor(), serve(sock, st, requests), asio::detached);
    }
}

}  // namespace

FakeServer::FakeServer(asio::io_context& io, Handler handler) : state_(std::make_shared<State>(io)) {
    state_->handler = std::move(handler);
    asio::co_spawn(io, accept_loop(state_, accepted_, requests_), asio::detached);
}

FakeServer::~FakeServer() { stop(); }

void FakeServer::stop() {
    state_->stopped = true;
    boost::system::error_code ignored;
    state_->acceptor.close(ignored);
    for (auto& w : state_->sockets)
        if (auto s = w.lock()) s->close(ignored);
}

unsigned short FakeServer::port() const { return state_->acceptor.local_endpoint().port(); }
std::string FakeServer::url() const { return "http://127.0.0.1:" + std::to_string(port()); }

}  // namespace kubesandbox::test
