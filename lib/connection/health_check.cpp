// Health checks of a router connection: one probe, and a loop that reports changes.
#include "connection/router_connection.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <exception>
#include <optional>

namespace kubesandbox {

namespace asio = boost::asio;

namespace {

// Keeps a little of the body for the message; a probe's answer is small.
struct ProbeSink final : ResponseSink {
    void on_head(unsigned, std::string_view) override {}
    bool on_body(std::string_view chunk) override {
        body.append(chunk.substr(0, 256 - std::min<std::size_t>(body.size(), 256)));
        return true;
    }
    std::string body;
};

}  // namespace

asio::awaitable<Result<void>> check_health(RouterConnection& connection, HealthCheckOptions options) {
    if (options.path.empty() || options.path.front() != '/')
        co_return fail(errc::invalid_argument, "a health check path starts with '/': '" + options.path + "'");
    RouterRequest request;
    request.target = options.path;
    request.replay_safe = true;
    ProbeSink sink;
    auto status =
        co_await connection.impl().send(std::move(request), std::chrono::steady_clock::now() + options.timeout, sink);
    if (status && *status >= 200 && *status < 300) co_return Result<void>{};
    connection.impl().drop_idle();
    if (!status) co_return fail(status.error());
    const errc code = *status == 502 || *status == 503 ? errc::service_unavailable
                      : *status == 504                 ? errc::server_timeout
                                                       : errc::unknown_status;
    Error e = make_error(code, "health check GET " + connection.describe() + options.path + " answered " +
                                   std::to_string(*status) + (sink.body.empty() ? "" : ": " + sink.body));
    e.http_status = *status;
    co_return fail(std::move(e));
}

namespace {

// The loop, on a coroutine thread of its own: turning cancellation exceptions off there does
// not turn them off for the caller (the setting belongs to the whole thread).
asio::awaitable<void> health_loop(std::shared_ptr<RouterConnection> connection, HealthCheckOptions options,
                                  std::function<void(const Result<void>&)> on_change) {
    co_await asio::this_coro::throw_if_cancelled(false);
    asio::steady_timer timer(co_await asio::this_coro::executor);
    std::optional<bool> was_healthy;
    for (;;) {
        auto state = co_await asio::this_coro::cancellation_state;
        if (state.cancelled() != asio::cancellation_type::none) co_return;
        auto result = co_await check_health(*connection, options);
        if (state.cancelled() != asio::cancellation_type::none) co_return;
        if (!was_healthy || *was_healthy != result.has_value()) {
            was_healthy = result.has_value();
            if (on_change) on_change(result);
        }
        timer.expires_after(options.interval);
        auto [ec] = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
        if (ec) co_return;
    }
}

}  // namespace

asio::awaitable<void> run_health_checks(std::shared_ptr<RouterConnection> connection, HealthCheckOptions options,
                                        std::function<void(const Result<void>&)> on_change) {
    // co_spawn passes the caller's cancellation on to the loop's thread.
    auto [e] = co_await asio::co_spawn(co_await asio::this_coro::executor,
                                       health_loop(std::move(connection), std::move(options), std::move(on_change)),
                                       asio::as_tuple(asio::use_awaitable));
    if (e) std::rethrow_exception(e);  // the loop throws nothing of its own: only on_change can
}

}  // namespace kubesandbox
