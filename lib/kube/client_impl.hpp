// KubeClient internals shared with the other I/O components that talk to the API server
// (exec WebSocket, port-forward tunnel): the server's address, authentication, fresh
// connections and the keep-alive pool. Connection mechanics live in lib/net/.
#pragma once

#include <kubesandbox/kube_client.hpp>

#include "kube/authenticator.hpp"
#include "kube/rate_limiter.hpp"
#include "kube/retry_policy.hpp"
#include "net/any_stream.hpp"
#include "net/connection_pool.hpp"
#include "net/connector.hpp"
#include "proto/request.hpp"

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>

namespace kubesandbox::kube {

struct RawResponse {
    unsigned status = 0;
    std::string content_type;
    std::string body;
    std::string retry_after;
    int attempt = 0;  // 0 when the first try produced it; > 0 after retries
};

struct RawRequest {
    std::string method;
    std::string target;  // path + query, without the server's base path
    std::string body;
    std::string content_type;
    bool idempotent = false;
};

}  // namespace kubesandbox::kube

namespace kubesandbox {

struct KubeClient::Impl : std::enable_shared_from_this<KubeClient::Impl> {
    Impl(boost::asio::any_io_executor ex, KubeConfig cfg, KubeClientOptions opts);
    ~Impl();

    // One request with rate limiting, pooling, auth refresh on 401 and retries per policy.
    // Non-2xx responses are returned, not turned into errors.
    boost::asio::awaitable<Result<kube::RawResponse>> execute(kube::RawRequest request);

    // A fresh connection (TCP or TLS, through the proxy when configured), not from the pool:
    // for upgrades (exec, port-forward) and watches. Bounded by options.connect_timeout and,
    // when given, by `deadline` (the request's deadline), whichever comes first.
    boost::asio::awaitable<Result<net::AnyStream>> connect(std::chrono::steady_clock::time_point deadline);
    boost::asio::awaitable<Result<net::AnyStream>> connect() {
        return connect(std::chrono::steady_clock::time_point::max());
    }
    // "Bearer ..." or "Basic ..." or "" when unauthenticated.
    boost::asio::awaitable<Result<std::string>> authorization(bool force_refresh) {
        return auth.authorization(force_refresh);
    }
    bool can_refresh_credentials() const noexcept { return auth.can_refresh(); }
    std::string host_header() const { return net::host_header(url.host, url.port, url.tls); }
    std::string full_target(std::string_view target) const { return url.base_path + std::string(target); }
    // The delay before retry `attempt`, or nullopt to give up (thread-safe).
    std::optional<std::chrono::milliseconds> retry_delay(const kube::Attempt& attempt);

    boost::asio::any_io_executor executor;
    KubeConfig config;
    KubeClientOptions options;
    proto::ServerUrl url;
    std::optional<Error> config_error;  // set when the config cannot work; every call fails with it
    net::ConnectTarget target;          // how to reach the server (the proxy is chosen per connect)
    kube::Authenticator auth;
    kube::RateLimiter limiter;
    net::ConnectionPool pool;

private:
    boost::asio::awaitable<Result<kube::RawResponse>> attempt(const kube::RawRequest& request,
                                                              const std::string& authorization, bool& request_sent,
                                                              bool& connect_failed);
    std::mutex rng_mutex;
    std::mt19937_64 rng{std::random_device{}()};
};

// The client's shared internals, for kubesandbox's own components only.
struct KubeClientAccess {
    static const std::shared_ptr<KubeClient::Impl>& impl(const KubeClient& client) noexcept { return client.impl_; }
};

}  // namespace kubesandbox
