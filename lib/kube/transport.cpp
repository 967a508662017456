// KubeClient's transport: one request through the rate limiter and the connection pool, with
// credentials refreshed once on 401 and retries as the retry policy allows.
#include "kube/client_impl.hpp"
#include "kube/retry_policy.hpp"
#include "net/http_exchange.hpp"
#include "net/tls_context.hpp"
#include "net/with_timeout.hpp"
#include "proto/status.hpp"

#include <boost/asio/steady_timer.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

namespace kubesandbox {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using std::chrono::steady_clock;

namespace {

bool has_credentials(const KubeConfig& c) {
    return !c.token.empty() || !c.token_file.empty() || c.exec.has_value() || !c.username.empty() ||
           !c.password.empty();
}

}  // namespace

KubeClient::Impl::Impl(asio::any_io_executor ex, KubeConfig cfg, KubeClientOptions opts)
    : executor(std::move(ex)),
      config(std::move(cfg)),
      options(std::move(opts)),
      auth(executor, config, options.token_file_reload_interval),
      limiter(options.qps, options.burst),
      pool(executor, options.max_connections) {
    auto parsed = proto::parse_server_url(config.server);
    if (!parsed) {
        config_error = parsed.error();
        return;
    }
    url = *parsed;
    if (!url.tls && has_credentials(config) && !proto::is_loopback_host(url.host)) {
        // Bearer tokens and passwords in clear text on the network: refuse (loopback is fine).
        config_error =
            make_error(errc::invalid_config, "refusing to send credentials over plain http:// to non-loopback host " +
                                                 url.host + ": use https:// for this server");
        return;
    }
    target.host = url.host;
    target.port = url.port;
    target.tls = url.tls;
    target.tls_server_name = config.tls_server_name;
    target.verify_server_name = !config.insecure_skip_tls_verify;
    target.connect_timeout = options.connect_timeout;
    if (url.tls) {
        net::TlsClientSettings tls;
        tls.ca_pem = config.certificate_authority_pem;
        tls.insecure_skip_verify = config.insecure_skip_tls_verify;
        tls.client_certificate_pem = config.client_certificate_pem;
        tls.client_key_pem = config.client_key_pem;
        auto ctx = net::make_tls_client_context(tls);
        if (ctx) target.tls_context = *ctx;
        else config_error = ctx.error();
        if (options.max_concurrent_connects > 0)
            target.gate = std::make_shared<net::ConnectGate>(executor, options.max_concurrent_connects);
    }
}

KubeClient::Impl::~Impl() = default;

std::optional<std::chrono::milliseconds> KubeClient::Impl::retry_delay(const kube::Attempt& attempt) {
    std::lock_guard lock(rng_mutex);
    return kube::retry_delay(attempt, options, rng);
}

asio::awaitable<Result<net::AnyStream>> KubeClient::Impl::connect(steady_clock::time_point deadline) {
    if (config_error) co_return fail(*config_error);
    // An explicit proxy-url, else HTTPS_PROXY/HTTP_PROXY unless NO_PROXY matches.
    net::ConnectTarget t = target;
    t.proxy_url =
        config.proxy_url.empty() ? net::proxy_from_environment(url.tls, url.host, url.port) : config.proxy_url;
    co_return co_await net::connect(executor, std::move(t), deadline);
}

asio::awaitable<Result<kube::RawResponse>> KubeClient::Impl::attempt(const kube::RawRequest& request,
                                                                     const std::string& authorization,
                                                                     bool& request_sent, bool& connect_failed) {
    request_sent = false;
    connect_failed = false;
    // One absolute deadline for the whole attempt: waiting for a pool slot, connecting, sending
    // and receiving all spend from the same request_timeout.
    const auto deadline = steady_clock::now() + options.request_timeout;
    auto slot = pool.try_acquire();
    if (!slot) slot = co_await pool.acquire(deadline);
    if (!slot) co_return fail(errc::timeout, "no connection to the API server became free in time");

    bool reused = true;
    std::optional<net::PooledConnection> conn = pool.take_idle();
    if (!conn) {
        reused = false;
        auto s = co_await connect(deadline);
        if (!s) {
            connect_failed = true;
            co_return fail(s.error());
        }
        conn.emplace();
        conn->stream = std::move(*s);
    }

    http::request<http::string_body> req;
    req.method_string(request.method);
    req.target(full_target(request.target));
    req.version(11);
    req.set(http::field::host, host_header());
    req.set(http::field::user_agent, options.user_agent);
    req.set(http::field::accept, "application/json");
    if (!authorization.empty()) req.set(http::field::authorization, authorization);
    if (!request.content_type.empty()) req.set(http::field::content_type, request.content_type);
    req.keep_alive(true);
    req.body() = request.body;
    req.prepare_payload();

    if (deadline <= steady_clock::now()) {
        pool.give_back(std::move(*conn));
        co_return fail(errc::timeout, "API request timed out before it could be sent");
    }
    auto reply = co_await net::exchange(conn->stream, conn->buffer, req, deadline, reused, request_sent);
    if (!reply) co_return fail(reply.error());
    if (reply->keep_alive) pool.give_back(std::move(*conn));
    kube::RawResponse out;
    out.status = reply->status;
    out.content_type = std::move(reply->content_type);
    out.retry_after = std::move(reply->retry_after);
    out.body = std::move(reply->body);
    co_return out;
}

asio::awaitable<Result<kube::RawResponse>> KubeClient::Impl::execute(kube::RawRequest request) {
    if (config_error) co_return fail(*config_error);
    bool auth_refreshed = false;
    for (int number = 0;; ++number) {
        if (auto wait = limiter.reserve(); wait > steady_clock::duration::zero()) {
            asio::steady_timer t(executor, wait);
            co_await t.async_wait(net::use_tuple);
        }
        auto authz = co_await authorization(false);
        if (!authz) co_return fail(authz.error());
        bool request_sent = false;
        bool connect_failed = false;
        auto resp = co_await attempt(request, *authz, request_sent, connect_failed);

        kube::Attempt a;
        a.number = number;
        a.idempotent = request.idempotent;
        a.request_sent = request_sent;
        if (resp) {
            resp->attempt = number;
            if (resp->status == 401 && !auth_refreshed && can_refresh_credentials()) {
                // Rotated credentials: refresh once; a 401 means the request was not processed.
                auth_refreshed = true;
                auto fresh = co_await authorization(true);
                if (!fresh) co_return fail(fresh.error());
                --number;
                continue;
            }
            a.http_status = resp->status;
            a.retry_after = proto::parse_retry_after(resp->retry_after);
            if (resp->status < 400) co_return resp;
        } else if (resp.error().is_permanent() || (resp.error().is(errc::timeout) && !connect_failed)) {
            // A connect timeout is a connection failure like a refused connect and may be retried;
            // a request that ran out of time waiting for its response is not replayed.
            co_return resp;
        }
        auto delay = retry_delay(a);
        if (!delay) co_return resp;
        asio::steady_timer t(executor, *delay);
        auto [ec] = co_await t.async_wait(net::use_tuple);
        if (ec == asio::error::operation_aborted) co_return fail(errc::cancelled, "cancelled while waiting to retry");
    }
}

}  // namespace kubesandbox
