// The direct connection: the router at a URL, over a keep-alive pool.
#include "connection/router_connection.hpp"
#include "net/connection_pool.hpp"
#include "net/connector.hpp"
#include "net/tls_context.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/url/parse.hpp>

namespace kubesandbox {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using std::chrono::steady_clock;

namespace {

constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);

Error transport_error(const boost::system::error_code& ec, const std::string& what) {
    if (ec == beast::error::timeout) return make_error(errc::timeout, what + ": timed out");
    return make_error(errc::connection_closed, what + ": " + ec.message());
}

class DirectConnection final : public RouterConnection, public RouterConnection::Impl {
public:
    DirectConnection(asio::any_io_executor executor, DirectConnectionOptions options, net::ConnectTarget target,
                     std::string prefix, std::string host)
        : executor_(std::move(executor)),
          options_(std::move(options)),
          target_(std::move(target)),
          prefix_(std::move(prefix)),
          host_(std::move(host)),
          pool_(executor_, options_.max_connections, options_.max_idle) {}

    std::string describe() const override { return options_.url; }
    RouterConnection::Impl& impl() override { return *this; }

    asio::awaitable<Result<unsigned>> send(RouterRequest request, steady_clock::time_point deadline,
                                           ResponseSink& sink) override {
        auto slot = co_await pool_.acquire(deadline);
        if (!slot) co_return fail(errc::timeout, "no free connection to the router " + options_.url + " in time");

        http::request<http::string_body> req{http::string_to_verb(request.method), prefix_ + request.target, 11};
        req.set(http::field::host, host_);
        req.set(http::field::user_agent, "kubesandbox");
        if (!options_.token.empty()) req.set(http::field::authorization, "Bearer " + options_.token);
        for (auto& [name, value] : request.headers) req.insert(name, value);
        req.body() = std::move(request.body);
        req.keep_alive(true);
        req.prepare_payload();
        const std::string what = request.method + " " + options_.url + request.target;

        for (int attempt = 0;; ++attempt) {
            auto idle = pool_.take_idle();
            const bool reused = idle.has_value();
            net::PooledConnection conn;
            if (idle) {
                conn = std::move(*idle);
            } else {
                auto target = target_;
                auto connected = co_await net::connect(executor_, std::move(target), deadline);
                if (!connected) {
                    Error e = connected.error();
                    if (!e.is(errc::timeout))
                        e = make_error(errc::connection_failed,
                                       "cannot connect to the router " + options_.url + ": " + e.message);
                    co_return fail(std::move(e));
                }
                conn.stream = std::move(*connected);
            }
            auto left = deadline - steady_clock::now();
            if (left <= steady_clock::duration::zero()) co_return fail(errc::timeout, what + ": timed out");
            conn.stream.expires_after(left);
            auto [wec, wn] = co_await http::async_write(conn.stream, req, tuple_awaitable);
            if (wec) {
                conn.stream.close();
                // A failed write on a reused connection: the server closed it while idle.
                if (reused && attempt == 0) continue;
                co_return fail(transport_error(wec, what));
            }
            http::response_parser<http::buffer_body> parser;
            parser.body_limit(boost::none);
            auto [hec, hn] = co_await http::async_read_header(conn.stream, conn.buffer, parser, tuple_awaitable);
            if (hec) {
                conn.stream.close();
                // Nothing came back on a reused connection: stale, unless the request was unsafe to repeat.
                if (reused && attempt == 0 && !parser.got_some() && request.replay_safe && hec != beast::error::timeout)
                    continue;
                co_return fail(transport_error(hec, what));
            }
            auto& res = parser.get();
            sink.on_head(res.result_int(), std::string_view(res[http::field::content_type].data(),
                                                            res[http::field::content_type].size()));
            char chunk[64 * 1024];
            while (!parser.is_done()) {
                res.body().data = chunk;
                res.body().size = sizeof chunk;
                auto [ec, n] = co_await http::async_read(conn.stream, conn.buffer, parser, tuple_awaitable);
                if (ec && ec != http::error::need_buffer) {
                    conn.stream.close();
                    co_return fail(transport_error(ec, what + " (response cut short)"));
                }
                std::size_t got = sizeof chunk - res.body().size;
                if (got && !sink.on_body(std::string_view(chunk, got))) {
                    conn.stream.close();
                    co_return fail(errc::cancelled, what + ": response refused by the reader");
                }
            }
            const unsigned status = res.result_int();
            if (res.keep_alive()) {
                pool_.give_back(std::move(conn));
            } else {
                conn.stream.close();
            }
            co_return status;
        }
    }

private:
    asio::any_io_executor executor_;
    DirectConnectionOptions options_;
    net::ConnectTarget target_;
    std::string prefix_;
    std::string host_;
    net::ConnectionPool pool_;
};

}  // namespace

Result<std::shared_ptr<RouterConnection>> make_direct_connection(asio::any_io_executor executor,
                                                                 DirectConnectionOptions options) {
    auto url = boost::urls::parse_absolute_uri(options.url);
    if (!url) return fail(errc::invalid_config, "invalid router URL: " + options.url);
    std::string scheme(url->scheme());
    if (scheme != "http" && scheme != "https")
        return fail(errc::invalid_config, "router URL must be http:// or https://: " + options.url);
    if (url->host().empty()) return fail(errc::invalid_config, "router URL has no host: " + options.url);
    net::ConnectTarget target;
    target.tls = scheme == "https";
    target.host = std::string(url->host_type() == boost::urls::host_type::ipv6 ? url->host_address() : url->host());
    target.port = url->has_port() ? std::string(url->port()) : (target.tls ? "443" : "80");
    target.connect_timeout = options.connect_timeout;
    if (target.tls) {
        net::TlsClientSettings tls;
        tls.ca_pem = options.ca_pem;
        tls.insecure_skip_verify = options.insecure_skip_verify;
        auto context = net::make_tls_client_context(tls);
        if (!context) return fail(context.error());
        target.tls_context = *context;
        target.verify_server_name = !options.insecure_skip_verify;
    }
    std::string prefix(url->encoded_path());
    while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
    std::string host = net::host_header(target.host, target.port, target.tls);
    return std::shared_ptr<RouterConnection>(std::make_shared<DirectConnection>(
        std::move(executor), std::move(options), std::move(target), std::move(prefix), std::move(host)));
}

}  // namespace kubesandbox
