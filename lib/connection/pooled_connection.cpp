// The pooled HTTP/1.1 router connection (see pooled_connection.hpp).
#include "connection/pooled_connection.hpp"
#include "connection/http1.hpp"
#include "net/connection_pool.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>

#include <algorithm>
#include <array>
#include <mutex>
#include <optional>

namespace kubesandbox {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using std::chrono::steady_clock;

namespace {

constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);

class PooledRouterConnection final : public RouterConnection, public RouterConnection::Impl {
public:
    PooledRouterConnection(asio::any_io_executor executor, PooledConnectionSettings settings, StreamOpener open)
        : executor_(std::move(executor)),
          settings_(std::move(settings)),
          open_(std::move(open)),
          pool_(executor_, settings_.max_connections, settings_.max_idle) {}

    std::string describe() const override { return settings_.description; }
    RouterConnection::Impl& impl() override { return *this; }

    asio::awaitable<Result<unsigned>> send(RouterRequest request, steady_clock::time_point deadline,
                                           ResponseSink& sink) override {
        auto slot = pool_.try_acquire();
        if (!slot) slot = co_await pool_.acquire(deadline);
        if (!slot)
            co_return fail(errc::timeout, "no free connection to the router " + settings_.description + " in time");
        // The router's limit counts from now, after any wait for the slot.
        if (request.router_timeout_at_most)
            request.add_header("X-Sandbox-Timeout", http1::router_timeout_value(deadline - steady_clock::now(),
                                                                                *request.router_timeout_at_most));
        const std::string head =
            http1::request_head(request, settings_.prefix,
                                settings_.current_host ? settings_.current_host() : settings_.host, settings_.token);
        if (head.empty())
            co_return fail(errc::invalid_argument, "a request to the router " + settings_.description +
                                                       " has a line break or space where none may be");
        auto what = [&] { return request.method + " " + settings_.description + request.target; };
        // Past the deadline the stream closes itself, so any failure then is a timeout.
        auto transport_error = [&](const boost::system::error_code& ec, const std::string& when) {
            if (steady_clock::now() >= deadline) return make_error(errc::timeout, what() + ": timed out");
            return make_error(errc::connection_closed, what() + when + ": " + ec.message());
        };

        const bool streamed = static_cast<bool>(request.body_source);
        for (int attempt = 0;; ++attempt) {
            std::optional<net::PooledConnection> idle;
            if (!streamed) idle = take_current_idle();
            const bool reused = idle.has_value();
            net::PooledConnection conn;
            if (idle) {
                conn = std::move(*idle);
            } else {
                conn.generation = generation();
                const std::uint64_t successes_before = open_successes();
                if (auto paused = backing_off()) co_return fail(std::move(*paused));
                auto connected = co_await open_(deadline);
                opened(connected ? nullptr : &connected.error(), successes_before);
                if (!connected) {
                    Error e = connected.error();
                    // A timeout, or nothing published to connect to (a Gateway without an address), says more as it is.
                    if (e.is(errc::service_unavailable))
                        e = make_error(errc::service_unavailable, settings_.description + ": " + e.message);
                    else if (!e.is(errc::timeout))
                        e = make_error(errc::connection_failed,
                                       "cannot connect to the router " + settings_.description + ": " + e.message);
                    co_return fail(std::move(e));
                }
                conn.stream = std::move(*connected);
            }
            auto left = deadline - steady_clock::now();
            if (left <= steady_clock::duration::zero()) co_return fail(errc::timeout, what() + ": timed out");
            conn.stream.expires_after(left);
            if (streamed) {
                if (auto failed = co_await write_streamed(conn, head, request)) {
                    if (failed->source) {
                        conn.stream.close();
                        co_return fail(std::move(*failed->source));
                    }
                    // The server may have answered early (413, 401) and closed: its answer says more.
                    auto early = co_await receive(conn, false, sink);
                    conn.stream.close();
                    if (early) co_return early->status;
                    co_return fail(transport_error(failed->ec, " (sending the body)"));
                }
            } else {
                // Head and body in one gather write: one syscall, and one segment when they fit.
                const std::array<asio::const_buffer, 2> out{asio::buffer(head), asio::buffer(request.body)};
                auto [wec, wn] = co_await asio::async_write(conn.stream, out, tuple_awaitable);
                if (wec) {
                    conn.stream.close();
                    // A failed write on a reused connection: the server closed it while idle.
                    if (reused && attempt == 0 && steady_clock::now() < deadline) continue;
                    co_return fail(transport_error(wec, ""));
                }
            }
            auto received = co_await receive(conn, request.method == "HEAD", sink);
            if (!received) {
                conn.stream.close();
                if (received.error().kind == Received::refused)
                    co_return fail(errc::cancelled, what() + ": response refused by the reader");
                if (received.error().kind == Received::garbled)
                    co_return fail(errc::invalid_response, what() + ": the router's response is not valid HTTP");
                // Nothing came back on a reused connection: stale, unless the request was unsafe to repeat.
                if (received.error().kind == Received::nothing && reused && attempt == 0 && request.replay_safe &&
                    steady_clock::now() < deadline)
                    continue;
                co_return fail(transport_error(
                    received.error().ec, received.error().kind == Received::nothing ? "" : " (response cut short)"));
            }
            // A connection opened for a streamed body is closed, not kept: it was opened beside
            // the idle ones, which would otherwise grow by one per such request.
            if (received->keep_alive && conn.generation == generation() && !streamed) {
                pool_.give_back(std::move(conn));
            } else {
                conn.stream.close();
            }
            co_return received->status;
        }
    }

    void drop_idle() override {
        while (auto idle = pool_.take_idle()) idle->stream.close();
    }

private:
    std::uint64_t generation() const { return settings_.generation ? settings_.generation() : 0; }

    // While opens are paused after failures: the error to fail with.
    std::optional<Error> backing_off() {
        if (settings_.open_backoff_max.count() == 0) return std::nullopt;
        std::lock_guard lock(backoff_mutex_);
        const auto now = steady_clock::now();
        if (now >= retry_at_) return std::nullopt;
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(retry_at_ - now).count();
        return make_error(errc::connection_failed, "cannot connect to the router " + settings_.description + ": " +
                                                       last_open_error_ + " (not tried again for " +
                                                       std::to_string(left) + " ms)");
    }

    std::uint64_t open_successes() {
        std::lock_guard lock(backoff_mutex_);
        return open_successes_;
    }

    // Records how an open went: a failure (not the request's own timeout) lengthens the pause; a
    // success ends it, also one that a concurrent open's failure started. A failure of an open
    // begun before the latest success says nothing new (an old endpoint, say): no pause.
    void opened(const Error* failure, std::uint64_t successes_before) {
        if (settings_.open_backoff_max.count() == 0) return;
        std::lock_guard lock(backoff_mutex_);
        if (!failure) {
            ++open_successes_;
            backoff_ = std::chrono::milliseconds(0);
            retry_at_ = {};
            return;
        }
        if (failure->is(errc::timeout) || open_successes_ != successes_before) return;
        backoff_ = std::clamp(backoff_ * 2, std::min(settings_.open_backoff_min, settings_.open_backoff_max),
                              settings_.open_backoff_max);
        retry_at_ = steady_clock::now() + backoff_;
        last_open_error_ = failure->message;
    }

    // An idle connection to the current endpoint; those to an older one are closed.
    std::optional<net::PooledConnection> take_current_idle() {
        const std::uint64_t current = generation();
        for (;;) {
            auto idle = pool_.take_idle();
            if (!idle || idle->generation == current) return idle;
            idle->stream.close();
        }
    }

    struct BodyFailure {
        boost::system::error_code ec{};
        std::optional<Error> source{};  // the source failed, or gave more or less than body_size
    };

    // The head, then the body source's pieces as they come.
    asio::awaitable<std::optional<BodyFailure>> write_streamed(net::PooledConnection& conn, const std::string& head,
                                                               RouterRequest& request) {
        auto [hec, hn] = co_await asio::async_write(conn.stream, asio::buffer(head), tuple_awaitable);
        if (hec) co_return BodyFailure{hec};
        std::uint64_t left = request.body_size;
        for (;;) {
            auto piece = co_await request.body_source();
            if (!piece) co_return BodyFailure{{}, std::move(piece.error())};
            if (piece->size() > left)
                co_return BodyFailure{{}, make_error(errc::invalid_argument, "a request body outgrew its length")};
            if (piece->empty()) break;
            left -= piece->size();
            auto [ec, n] = co_await asio::async_write(conn.stream, asio::buffer(*piece), tuple_awaitable);
            if (ec) co_return BodyFailure{ec};
        }
        if (left != 0)
            co_return BodyFailure{{}, make_error(errc::invalid_argument, "a request body ended short of its length")};
        co_return std::nullopt;
    }

    struct Response {
        unsigned status = 0;
        bool keep_alive = false;
    };
    enum class Received { nothing, cut_short, garbled, refused };
    struct Failure {
        Received kind;
        boost::system::error_code ec{};
    };

    // Reads one response, the body straight from the connection's buffer into the sink.
    asio::awaitable<tl::expected<Response, Failure>> receive(net::PooledConnection& conn, bool head_only,
                                                             ResponseSink& sink) {
        http1::ResponseParser parser(sink);
        parser.eager(true);
        parser.body_limit(boost::none);
        parser.header_limit(64 * 1024);
        if (head_only) parser.skip(true);
        for (;;) {
            if (conn.buffer.size() != 0) {
                boost::system::error_code ec;
                std::size_t used = parser.put(conn.buffer.data(), ec);
                conn.buffer.consume(used);
                if (parser.refused_by_sink() || (sink.drains() && !co_await sink.drain()))
                    co_return tl::unexpected(Failure{Received::refused});
                if (ec && ec != http::error::need_more) co_return tl::unexpected(Failure{Received::garbled});
                if (parser.is_done()) co_return Response{parser.status(), parser.keep_alive()};
                if (!ec && used != 0) continue;
            }
            auto [ec, n] = co_await conn.stream.async_read_some(conn.buffer.prepare(64 * 1024), tuple_awaitable);
            conn.buffer.commit(n);
            if (!ec) continue;
            if (ec == asio::error::eof && parser.got_some() && parser.need_eof()) {
                boost::system::error_code eof_ec;
                parser.put_eof(eof_ec);  // a body that ends with the connection
                if (!eof_ec) co_return Response{parser.status(), false};
            }
            co_return tl::unexpected(Failure{parser.got_some() ? Received::cut_short : Received::nothing, ec});
        }
    }

    asio::any_io_executor executor_;
    PooledConnectionSettings settings_;
    StreamOpener open_;
    net::ConnectionPool pool_;
    std::mutex backoff_mutex_;
    std::chrono::milliseconds backoff_{0};
    steady_clock::time_point retry_at_{};
    std::uint64_t open_successes_ = 0;
    std::string last_open_error_;
};

}  // namespace

std::shared_ptr<RouterConnection> make_pooled_router_connection(asio::any_io_executor executor,
                                                                PooledConnectionSettings settings, StreamOpener open) {
    return std::make_shared<PooledRouterConnection>(std::move(executor), std::move(settings), std::move(open));
}

}  // namespace kubesandbox
