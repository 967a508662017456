// KubeClient internals shared with the other I/O components that talk to the API server
// (exec WebSocket, port-forward tunnel): connection setup and authentication.
#pragma once

#include <kubesandbox/kube_client.hpp>

#include "kube/rate_limiter.hpp"
#include "net/any_stream.hpp"
#include "proto/request.hpp"

#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/flat_buffer.hpp>

#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>

namespace kubesandbox::kube {

class ExecCredentialProvider;

struct PooledConnection {
    net::AnyStream stream;
    boost::beast::flat_buffer buffer;
    std::chrono::steady_clock::time_point idle_since{};
};

struct RawResponse {
    unsigned status = 0;
    std::string content_type;
    std::string body;
    std::string retry_after;
    int attempt = 0;  // 0 when the first try produced it; > 0 after retries
};

// What one attempt got to do before it failed, for the retry decision.
struct AttemptProgress {
    bool request_sent = false;    // bytes of the request may have reached the server
    bool connect_failed = false;  // failed (or timed out) while connecting: nothing was sent
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
    boost::asio::awaitable<Result<std::string>> authorization(bool force_refresh);
    std::string host_header() const;
    std::string full_target(std::string_view target) const { return url.base_path + std::string(target); }

    boost::asio::any_io_executor executor;
    KubeConfig config;
    KubeClientOptions options;
    proto::ServerUrl url;
    std::optional<Error> config_error;  // set when the config cannot work; every call fails with it
    std::shared_ptr<boost::asio::ssl::context> ssl_context;
    kube::RateLimiter limiter;

    // Connection slots: a thread-safe counting semaphore.
    using SlotChannel = boost::asio::experimental::concurrent_channel<void(boost::system::error_code)>;
    std::unique_ptr<SlotChannel> slots;

    std::mutex mutex;  // guards everything below
    std::deque<kube::PooledConnection> idle;
    std::mt19937_64 rng{std::random_device{}()};
    std::string file_token;
    std::chrono::steady_clock::time_point file_token_read{};
    std::shared_ptr<kube::ExecCredentialProvider> exec_provider;  // used only on exec_strand
    boost::asio::strand<boost::asio::any_io_executor> exec_strand;

private:
    void init_exec_provider();
    boost::asio::awaitable<Result<std::string>> exec_authorization(bool force_refresh);
    boost::asio::awaitable<Result<kube::RawResponse>> attempt(const kube::RawRequest& request,
                                                              const std::string& authorization,
                                                              kube::AttemptProgress& progress);
    std::optional<kube::PooledConnection> take_idle();
    void give_back(kube::PooledConnection connection);
};

// The client's shared internals, for kubesandbox's own components only.
struct KubeClientAccess {
    static const std::shared_ptr<KubeClient::Impl>& impl(const KubeClient& client) noexcept { return client.impl_; }
};

}  // namespace kubesandbox
