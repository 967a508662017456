#include "kube/authenticator.hpp"

#include "kube/exec_plugin.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/detail/base64.hpp>

#include <fstream>
#include <sstream>

namespace kubesandbox::kube {

namespace asio = boost::asio;
using std::chrono::steady_clock;

namespace {

std::string trim(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
    std::size_t i = 0;
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
    return s.substr(i);
}

}  // namespace

Authenticator::Authenticator(asio::any_io_executor executor, const KubeConfig& config,
                             std::chrono::seconds token_file_reload_interval)
    : token_(config.token),
      token_file_(config.token_file),
      username_(config.username),
      password_(config.password),
      reload_interval_(token_file_reload_interval),
      exec_strand_(asio::make_strand(executor)) {
    if (config.exec && config.token.empty() && config.token_file.empty())
        exec_provider_ = std::make_shared<ExecCredentialProvider>(exec_strand_, config);
}

Authenticator::~Authenticator() = default;

Result<std::string> Authenticator::file_authorization(bool force_refresh) {
    std::lock_guard lock(mutex_);
    const auto now = steady_clock::now();
    if (force_refresh || file_token_.empty() || now - file_token_read_ > reload_interval_) {
        std::ifstream in(token_file_, std::ios::binary);
        if (in) {
            std::stringstream ss;
            ss << in.rdbuf();
            std::string fresh = trim(ss.str());
            if (!fresh.empty()) file_token_ = std::move(fresh);
            file_token_read_ = now;
        } else if (file_token_.empty() && token_.empty()) {
            return fail(errc::invalid_config, "tokenFile " + token_file_ + ": cannot be read");
        }
    }
    if (!file_token_.empty()) return "Bearer " + file_token_;
    if (!token_.empty()) return "Bearer " + token_;
    return fail(errc::invalid_config, "tokenFile " + token_file_ + ": is empty");
}

asio::awaitable<Result<std::string>> Authenticator::exec_authorization(bool force_refresh) {
    // The provider is single-threaded: every call runs on its strand.
    auto provider = exec_provider_;
    auto fetch = [provider, force_refresh]() -> asio::awaitable<Result<Credential>> {
        co_return co_await provider->get(force_refresh);
    };
    auto credential = co_await asio::co_spawn(exec_strand_, std::move(fetch), asio::use_awaitable);
    if (!credential) co_return fail(credential.error());
    if (credential->token.empty())
        co_return fail(errc::exec_plugin_failed,
                       "the exec plugin returned a client certificate without a token; certificate "
                       "credentials from exec plugins are not supported yet");
    co_return "Bearer " + credential->token;
}

asio::awaitable<Result<std::string>> Authenticator::authorization(bool force_refresh) {
    if (!token_file_.empty()) co_return file_authorization(force_refresh);
    if (!token_.empty()) co_return "Bearer " + token_;
    if (exec_provider_) co_return co_await exec_authorization(force_refresh);
    if (!username_.empty() || !password_.empty()) {
        namespace base64 = boost::beast::detail::base64;
        std::string plain = username_ + ":" + password_;
        std::string encoded(base64::encoded_size(plain.size()), '\0');
        encoded.resize(base64::encode(encoded.data(), plain.data(), plain.size()));
        co_return "Basic " + encoded;
    }
    co_return std::string();
}

}  // namespace kubesandbox::kube
