#include "local/router.hpp"

#include "local/port_forward.hpp"
#include "local/router_core.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include <algorithm>
#include <map>
#include <vector>

namespace kubesandbox::local {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;
using boost::system::error_code;

namespace {

constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);
constexpr auto connect_timeout = std::chrono::seconds(5);

using RequestHead = http::request_parser<http::buffer_body>;

std::optional<std::string_view> header(const http::request<http::buffer_body>& req, std::string_view name) {
    auto it = req.find(beast::string_view(name.data(), name.size()));
    if (it == req.end()) return std::nullopt;
    return std::string_view(it->value().data(), it->value().size());
}

}  // namespace

// Closes an upstream socket once its exchange has made no progress for `timeout`.
struct Watchdog {
    asio::steady_timer timer;
    std::chrono::milliseconds timeout;
    std::weak_ptr<tcp::socket> upstream;
    std::chrono::steady_clock::time_point last_progress = std::chrono::steady_clock::now();
    bool fired = false;
    bool done = false;  // the exchange is over: a handler already queued does nothing

    Watchdog(asio::any_io_executor executor, std::chrono::milliseconds t, const std::shared_ptr<tcp::socket>& socket)
        : timer(std::move(executor)), timeout(t), upstream(socket) {}

    void progress() { last_progress = std::chrono::steady_clock::now(); }

    // The handler holds the watchdog, so it lives until the timer is cancelled or fires.
    static void arm(const std::shared_ptr<Watchdog>& self) {
        self->timer.expires_at(self->last_progress + self->timeout);
        self->timer.async_wait([self](error_code ec) {
            if (ec || self->done) return;
            if (std::chrono::steady_clock::now() < self->last_progress + self->timeout) return arm(self);
            self->fired = true;
            if (auto s = self->upstream.lock()) {
                error_code ignored;
                s->close(ignored);
            }
        });
    }
};

struct SandboxRouter::Impl : std::enable_shared_from_this<Impl> {
    asio::any_io_executor executor;
    RouterOptions options;
    PodResolver resolver;
    std::optional<tcp::acceptor> acceptor;
    std::map<std::uint64_t, std::weak_ptr<tcp::socket>> sockets;  // open client and upstream sockets
    std::uint64_t next_id = 0;
    bool stopped = false;

    std::uint64_t track(const std::shared_ptr<tcp::socket>& s) {
        sockets[++next_id] = s;
        return next_id;
    }

    asio::awaitable<bool> reply(tcp::socket& client, unsigned version, bool keep_alive, unsigned status,
                                std::string body) {
        http::response<http::string_body> res{static_cast<http::status>(status), version};
        res.set(http::field::content_type, "application/json");
        res.body() = std::move(body);
        res.keep_alive(keep_alive);
        res.prepare_payload();
        auto [ec, n] = co_await http::async_write(client, res, tuple_awaitable);
        co_return !ec && keep_alive;
    }

    // Reads what is left of a request body that will not be relayed, up to a limit; true when
    // the connection can go on (the whole body read).
    static asio::awaitable<bool> skip_body(tcp::socket& client, beast::flat_buffer& buffer, RequestHead& parser) {
        std::uint64_t budget = 1 << 20;
        std::vector<char> chunk(64 * 1024);
        while (!parser.is_done()) {
            parser.get().body().data = chunk.data();
            parser.get().body().size = chunk.size();
            auto [ec, n] = co_await http::async_read(client, buffer, parser, tuple_awaitable);
            if (ec && ec != http::error::need_buffer) co_return false;
            std::uint64_t got = chunk.size() - parser.get().body().size;
            if (got > budget) co_return false;
            budget -= got;
        }
        co_return true;
    }

    // Answers without relaying; the connection goes on only if the request body could be read.
    asio::awaitable<bool> refuse(tcp::socket& client, beast::flat_buffer& buffer, RequestHead& parser, unsigned status,
                                 std::string body) {
        const unsigned version = parser.get().version();
        bool keep_alive = parser.get().keep_alive() && co_await skip_body(client, buffer, parser);
        co_return co_await reply(client, version, keep_alive, status, std::move(body));
    }

    struct BodySent {
        bool too_large = false;     // past max_request_body
        bool request_read = true;   // the client's request was read to its end
        bool upstream_took = true;  // the upstream took all of it
    };

    // Sends the request head and then its body to the upstream piece by piece as the client
    // sends it, so the router holds 256 KiB of a body, not the body (pieces of 64 KiB were about
    // a tenth slower in bench scenario 12).
    static asio::awaitable<BodySent> send_body(tcp::socket& client, beast::flat_buffer& buffer, RequestHead& parser,
                                               tcp::socket& upstream, http::request<http::buffer_body>& out,
                                               Watchdog& watchdog) {
        BodySent sent;
        std::size_t piece = parser.is_done() ? 0 : 256 * 1024;
        if (auto length = parser.content_length())
            piece = static_cast<std::size_t>(std::min<std::uint64_t>(piece, *length));
        std::vector<char> chunk(piece);
        out.body().data = nullptr;
        out.body().size = 0;
        out.body().more = !parser.is_done();
        http::request_serializer<http::buffer_body> serializer{out};
        while (!parser.is_done()) {
            parser.get().body().data = chunk.data();
            parser.get().body().size = chunk.size();
            auto [ec, n] = co_await http::async_read(client, buffer, parser, tuple_awaitable);
            watchdog.progress();  // a slow client is not the upstream's stall
            if (ec && ec != http::error::need_buffer) {
                sent.too_large = ec == http::error::body_limit;
                sent.request_read = false;
                break;  // the client broke off: the upstream gets a short body and closes
            }
            out.body().size = chunk.size() - parser.get().body().size;
            // No data pointer for an empty piece: Beast 1.81 would write a chunked body's end twice.
            out.body().data = out.body().size > 0 ? chunk.data() : nullptr;
            out.body().more = !parser.is_done();
            auto [wec, wn] = co_await http::async_write(upstream, serializer, tuple_awaitable);
            watchdog.progress();
            if (wec && wec != http::error::need_buffer) {
                // Gone, timed out, or it answered early and closed: the rest of the body is not
                // read, so the client's connection ends after the answer.
                sent.upstream_took = false;
                sent.request_read = false;
                break;
            }
        }
        if (sent.request_read && !serializer.is_done()) {
            out.body().data = nullptr;
            out.body().size = 0;
            out.body().more = false;
            auto [wec, wn] = co_await http::async_write(upstream, serializer, tuple_awaitable);
            if (wec) sent.upstream_took = false;
        }
        if (!sent.request_read && sent.upstream_took) {
            error_code ignored;  // the client broke off: the upstream sees a short body end
            upstream.shutdown(tcp::socket::shutdown_send, ignored);
        }
        co_return sent;
    }

    // Relays one request, its body as it arrives; false when the client connection is done.
    asio::awaitable<bool> relay(tcp::socket& client, beast::flat_buffer& buffer, RequestHead& parser) {
        auto& req = parser.get();
        const unsigned version = req.version();
        bool keep_alive = req.keep_alive();
        std::string_view target(req.target().data(), req.target().size());
        auto query = target.find('?');
        if (target.substr(0, query) == "/healthz" && req.method() == http::verb::get) {
            co_return co_await refuse(client, buffer, parser, 200, R"({"status":"ok"})");
        }
        auto method = req.method();
        if (method != http::verb::get && method != http::verb::post && method != http::verb::put &&
            method != http::verb::delete_ && method != http::verb::patch) {
            co_return co_await refuse(client, buffer, parser, 405, router_detail_body("Method Not Allowed"));
        }
        RouterRequestHeaders h{header(req, "X-Sandbox-ID"),      header(req, "X-Sandbox-Namespace"),
                               header(req, "X-Sandbox-Port"),    header(req, "X-Sandbox-Pod-IP"),
                               header(req, "X-Sandbox-Timeout"), header(req, "Authorization")};
        auto decision = route_sandbox_request(h, options.token, options.proxy_timeout);
        if (decision.refusal) {
            co_return co_await refuse(client, buffer, parser, decision.refusal->status,
                                      router_detail_body(decision.refusal->detail));
        }
        const RouterTarget& to = *decision.target;
        if (options.delay.count() > 0) {
            asio::steady_timer slow(executor);
            slow.expires_after(options.delay);
            co_await slow.async_wait(tuple_awaitable);
        }
        const std::string unreachable = "Could not connect to the backend sandbox: " + to.sandbox_id;

        // Connect inside the pod (pods are addressed by name: every pod's IP is its own loopback).
        int pid = resolver(to.namespace_name, to.sandbox_id);
        if (pid <= 0) co_return co_await refuse(client, buffer, parser, 502, router_detail_body(unreachable));
        auto connected = co_await connect_in_pod(executor, pid, to.port);
        if (!connected) co_return co_await refuse(client, buffer, parser, 502, router_detail_body(unreachable));
        auto upstream = std::make_shared<tcp::socket>(std::move(*connected));
        auto upstream_id = track(upstream);
        struct Untrack {
            Impl& self;
            std::uint64_t id;
            ~Untrack() { self.sockets.erase(id); }
        } untrack{*this, upstream_id};

        // The upstream socket is closed when the exchange makes no progress for the timeout: the
        // wait for an answer, or a stall while a body moves (httpx's timeouts upstream are per
        // operation, so a long upload that keeps moving is not cut off).
        auto watchdog = std::make_shared<Watchdog>(executor, to.timeout, upstream);
        Watchdog::arm(watchdog);
        struct StopWatchdog {
            Watchdog& dog;
            ~StopWatchdog() {
                dog.done = true;
                dog.timer.cancel();
            }
        } stop_watchdog{*watchdog};

        http::request<http::buffer_body> out{method, req.target(), 11};
        std::string connection(header(req, "Connection").value_or(""));
        for (const auto& field : req) {
            std::string_view name(field.name_string().data(), field.name_string().size());
            if (drop_request_header(name, connection) || field.name() == http::field::content_length) continue;
            out.insert(field.name_string(), field.value());
        }
        out.set(http::field::host,
                to.sandbox_id + "." + to.namespace_name + ".svc.cluster.local:" + std::to_string(to.port));
        if (auto length = parser.content_length()) {
            out.content_length(*length);
        } else if (!parser.is_done()) {
            out.chunked(true);
        } else if (method != http::verb::get && method != http::verb::delete_) {
            out.content_length(0);
        }
        out.keep_alive(false);
        auto sent = co_await send_body(client, buffer, parser, *upstream, out, *watchdog);
        if (sent.too_large) {
            co_return co_await reply(client, version, false, 413, router_detail_body("Request body too large."));
        }
        if (!sent.request_read) keep_alive = false;  // the client's stream is out of step now
        beast::flat_buffer upstream_buffer;
        http::response_parser<http::buffer_body> response;
        response.body_limit(boost::none);
        // The upstream may have answered before taking the whole body; its answer still counts.
        error_code rec;
        std::tie(rec, std::ignore) =
            co_await http::async_read_header(*upstream, upstream_buffer, response, tuple_awaitable);
        if (rec) {
            if (watchdog->fired) {
                co_return co_await reply(
                    client, version, keep_alive, 504,
                    router_detail_body("Timed out waiting for the backend sandbox: " + to.sandbox_id));
            }
            co_return co_await reply(client, version, keep_alive, 502, router_detail_body(unreachable));
        }

        // Stream the body back as it arrives, with the upstream's status and end-to-end headers.
        auto& upstream_res = response.get();
        http::response<http::buffer_body> res{upstream_res.result(), version};
        for (const auto& field : upstream_res) {
            std::string_view name(field.name_string().data(), field.name_string().size());
            if (drop_response_header(name) || field.name() == http::field::content_length) continue;
            res.insert(field.name_string(), field.value());
        }
        if (auto length = response.content_length()) {
            res.content_length(*length);
        } else if (!response.is_done()) {
            res.chunked(true);
        }
        res.keep_alive(keep_alive);
        res.body().data = nullptr;
        res.body().more = !response.is_done();
        // The head goes out with the first piece of the body (one write, one segment for a small
        // response: a client then wakes once, not twice).
        http::response_serializer<http::buffer_body> serializer{res};
        char chunk[64 * 1024];
        while (!response.is_done()) {
            response.get().body().data = chunk;
            response.get().body().size = sizeof chunk;
            auto [ec, n] = co_await http::async_read(*upstream, upstream_buffer, response, tuple_awaitable);
            if (ec && ec != http::error::need_buffer) co_return false;  // upstream died: cut the client off
            res.body().size = sizeof chunk - response.get().body().size;
            res.body().data = res.body().size > 0 ? chunk : nullptr;  // as in send_body
            res.body().more = !response.is_done();
            watchdog->progress();
            auto [cec, cn] = co_await http::async_write(client, serializer, tuple_awaitable);
            watchdog->progress();  // nor is a slow reader
            if (cec && cec != http::error::need_buffer) co_return false;
        }
        if (!serializer.is_done()) {
            res.body().data = nullptr;
            res.body().size = 0;
            res.body().more = false;
            auto [cec, cn] = co_await http::async_write(client, serializer, tuple_awaitable);
            if (cec) co_return false;
        }
        co_return keep_alive;
    }

    // Reads what the client still sends for a moment before the socket closes: closing on unread
    // data (a request body not relayed) resets the connection, and a client can lose the answer.
    static asio::awaitable<void> linger(std::shared_ptr<tcp::socket> client) {
        asio::steady_timer timer(client->get_executor());
        timer.expires_after(std::chrono::seconds(2));
        timer.async_wait([client](error_code ec) {
            if (!ec) client->cancel(ec);
        });
        std::vector<char> discard(16 * 1024);
        for (;;) {
            auto [ec, n] = co_await client->async_read_some(asio::buffer(discard), tuple_awaitable);
            if (ec) break;
        }
        timer.cancel();
    }

    asio::awaitable<void> serve(std::shared_ptr<tcp::socket> client) {
        auto self = shared_from_this();
        auto id = track(client);
        beast::flat_buffer buffer;
        for (;;) {
            RequestHead parser;
            parser.body_limit(boost::none);  // Beast would check Content-Length against it in the head
            parser.header_limit(64 * 1024);
            auto [ec, n] = co_await http::async_read_header(*client, buffer, parser, tuple_awaitable);
            if (ec || stopped) break;
            if (options.max_request_body > 0) {
                if (parser.content_length().value_or(0) > options.max_request_body) {
                    co_await reply(*client, parser.get().version(), false, 413,
                                   router_detail_body("Request body too large."));
                    break;
                }
                parser.body_limit(options.max_request_body);  // a chunked body, as it arrives
            }
            if (!co_await relay(*client, buffer, parser)) break;
        }
        error_code ignored;
        client->shutdown(tcp::socket::shutdown_send, ignored);
        co_await linger(client);
        client->close(ignored);
        sockets.erase(id);
    }

    asio::awaitable<void> accept_loop() {
        auto self = shared_from_this();
        for (;;) {
            auto client = std::make_shared<tcp::socket>(executor);
            auto [ec] = co_await acceptor->async_accept(*client, tuple_awaitable);
            if (stopped || !acceptor->is_open()) co_return;
            if (ec) continue;
            client->set_option(tcp::no_delay(true), ec);
            asio::co_spawn(executor, serve(std::move(client)), asio::detached);
        }
    }
};

SandboxRouter::SandboxRouter(asio::any_io_executor executor, RouterOptions options, PodResolver resolver)
    : impl_(std::make_shared<Impl>()) {
    impl_->executor = std::move(executor);
    impl_->options = std::move(options);
    impl_->resolver = std::move(resolver);
}

SandboxRouter::~SandboxRouter() { stop(); }

Result<std::uint16_t> SandboxRouter::start(const std::string& address, std::uint16_t port) {
    error_code ec;
    auto ip = asio::ip::make_address(address, ec);
    if (ec) return fail(make_error(ec, "router address " + address));
    tcp::endpoint endpoint(ip, port);
    tcp::acceptor acceptor(impl_->executor);
    acceptor.open(endpoint.protocol(), ec);
    if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor.bind(endpoint, ec);
    if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return fail(make_error(ec, "router listen on " + address + ":" + std::to_string(port)));
    std::uint16_t bound = acceptor.local_endpoint().port();
    impl_->acceptor.emplace(std::move(acceptor));
    asio::co_spawn(impl_->executor, impl_->accept_loop(), asio::detached);
    return bound;
}

void SandboxRouter::stop() {
    if (!impl_ || impl_->stopped) return;
    impl_->stopped = true;
    error_code ignored;
    if (impl_->acceptor) impl_->acceptor->close(ignored);
    for (auto& [id, weak] : impl_->sockets) {
        if (auto s = weak.lock()) s->close(ignored);
    }
}

}  // namespace kubesandbox::local
