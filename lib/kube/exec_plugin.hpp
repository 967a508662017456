// Runs exec credential plugins (kubeconfig users[].user.exec) without blocking the io_context,
// and caches what they print until it expires.
#pragma once

#include <kubesandbox/kube_config.hpp>

#include "proto/exec_credential.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kubesandbox::kube {

struct Credential {
    std::string token;
    std::string client_certificate_pem;
    std::string client_key_pem;
    std::optional<std::chrono::system_clock::time_point> expiry;
};

// Not thread-safe: call get() from one thread (or one strand) at a time. Must outlive the
// coroutines that await get().
class ExecCredentialProvider {
public:
    static constexpr std::chrono::milliseconds default_timeout{30000};
    // A credential is refreshed this long before its expirationTimestamp.
    static constexpr std::chrono::seconds refresh_margin{10};

    ExecCredentialProvider(boost::asio::any_io_executor executor, ExecCredentialConfig config,
                           std::optional<proto::ExecClusterInfo> cluster,
                           std::chrono::milliseconds timeout = default_timeout);
    // Takes exec settings and cluster info from a resolved kubeconfig (config.exec must be set).
    ExecCredentialProvider(boost::asio::any_io_executor executor, const KubeConfig& config,
                           std::chrono::milliseconds timeout = default_timeout);
    ~ExecCredentialProvider();
    ExecCredentialProvider(const ExecCredentialProvider&) = delete;
    ExecCredentialProvider& operator=(const ExecCredentialProvider&) = delete;

    // The cached credential while it is fresh, else the plugin's next output. Concurrent callers
    // share one plugin run. force_refresh (after a 401) re-runs the plugin, or joins a run that
    // is already under way.
    boost::asio::awaitable<Result<Credential>> get(bool force_refresh = false);

    // Forgets the cached credential.
    void invalidate() noexcept { cached_.reset(); }

private:
    struct Run;
    boost::asio::awaitable<Result<Credential>> run_plugin();
    bool fresh() const;

    boost::asio::any_io_executor executor_;
    ExecCredentialConfig config_;
    std::optional<proto::ExecClusterInfo> cluster_;
    std::chrono::milliseconds timeout_;
    std::optional<Credential> cached_;
    std::shared_ptr<Run> running_;  // the plugin run in progress, if any
};

}  // namespace kubesandbox::kube
