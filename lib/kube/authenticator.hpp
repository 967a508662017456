// The Authorization header for API requests, from a kubeconfig: a token file (re-read
// periodically; it wins over a static token, as in client-go), a static token, an exec
// plugin's credential (cached, refreshed before expiry) or basic auth.
#pragma once

#include <kubesandbox/error.hpp>
#include <kubesandbox/kube_config.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/strand.hpp>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

namespace kubesandbox::kube {

class ExecCredentialProvider;

class Authenticator {
public:
    Authenticator(boost::asio::any_io_executor executor, const KubeConfig& config,
                  std::chrono::seconds token_file_reload_interval);
    ~Authenticator();

    // "Bearer ...", "Basic ..." or "" when unauthenticated. force_refresh re-reads the token
    // file or asks the exec plugin again (after a 401).
    boost::asio::awaitable<Result<std::string>> authorization(bool force_refresh);

    // Whether a 401 is worth one retry with refreshed credentials.
    bool can_refresh() const noexcept { return exec_provider_ != nullptr || !token_file_.empty(); }

private:
    boost::asio::awaitable<Result<std::string>> exec_authorization(bool force_refresh);
    Result<std::string> file_authorization(bool force_refresh);

    std::string token_;
    std::string token_file_;
    std::string username_;
    std::string password_;
    std::chrono::seconds reload_interval_;
    std::mutex mutex_;  // guards the file token cache
    std::string file_token_;
    std::chrono::steady_clock::time_point file_token_read_{};
    boost::asio::strand<boost::asio::any_io_executor> exec_strand_;
    std::shared_ptr<ExecCredentialProvider> exec_provider_;  // used only on exec_strand_
};

}  // namespace kubesandbox::kube
