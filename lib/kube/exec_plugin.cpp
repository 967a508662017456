#include "kube/exec_plugin.hpp"

#include "util/child_process.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>

extern char** environ;

namespace kubesandbox::kube {
namespace asio = boost::asio;
using asio::use_awaitable;
using sys_error = boost::system::error_code;

namespace {

constexpr std::size_t max_stdout = 4 * 1024 * 1024;
constexpr std::size_t max_stderr_shown = 1024;

constexpr auto tuple_awaitable = asio::as_tuple(use_awaitable);

struct Fd {
    int fd = -1;
    Fd() = default;
    explicit Fd(int f) : fd(f) {}
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    ~Fd() { reset(); }
    void reset() noexcept {
        if (fd >= 0) ::close(fd);
        fd = -1;
    }
    int release() noexcept {
        int f = fd;
        fd = -1;
        return f;
    }
};

// Reads until EOF; keeps the first `limit` bytes and drains the rest so the plugin never blocks
// on a full pipe. Errors come back as values (this is raced against a timer).
asio::awaitable<void> read_all(asio::posix::stream_descriptor& sd, std::string& out, std::size_t limit, bool& overflow,
                               sys_error& result) {
    char buf[4096];
    for (;;) {
        auto [ec, n] = co_await sd.async_read_some(asio::buffer(buf), tuple_awaitable);
        if (n > 0) {
            const std::size_t room = out.size() < limit ? limit - out.size() : 0;
            if (n > room) overflow = true;
            out.append(buf, std::min(n, room));
        }
        if (ec) {
            if (ec != asio::error::eof) result = ec;
            co_return;
        }
    }
}

// Waits for `pid` to exit and reaps it. `status` stays -1 when the status could not be
// collected (someone else reaped the child); `exited` stays false when the wait was cancelled.
asio::awaitable<void> wait_exit(asio::posix::stream_descriptor* pidfd, pid_t pid, int& status, bool& exited) {
    auto reaped = co_await util::reap_child(pidfd, pid);
    if (!reaped) co_return;
    status = *reaped;
    exited = true;
}

std::string describe_stderr(std::string err, bool truncated) {
    while (!err.empty() && (err.back() == '\n' || err.back() == '\r' || err.back() == ' ')) err.pop_back();
    if (err.empty()) return {};
    std::string out = "; stderr: " + err;
    if (truncated) out += "... (truncated)";
    return out;
}

std::string describe_status(int status) {
    if (status == -1) return "exit status unknown";
    if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
    return "status " + std::to_string(status);
}

}  // namespace

struct ExecCredentialProvider::Run {
    std::vector<std::shared_ptr<asio::steady_timer>> waiters;
    std::optional<Result<Credential>> result;
    bool provider_gone = false;
};

ExecCredentialProvider::ExecCredentialProvider(asio::any_io_executor executor, ExecCredentialConfig config,
                                               std::optional<proto::ExecClusterInfo> cluster,
                                               std::chrono::milliseconds timeout)
    : executor_(std::move(executor)), config_(std::move(config)), cluster_(std::move(cluster)), timeout_(timeout) {}

ExecCredentialProvider::ExecCredentialProvider(asio::any_io_executor executor, const KubeConfig& config,
                                               std::chrono::milliseconds timeout)
    : executor_(std::move(executor)), config_(config.exec.value_or(ExecCredentialConfig{})), timeout_(timeout) {
    if (config_.provide_cluster_info) {
        proto::ExecClusterInfo info;
        info.server = config.server;
        info.certificate_authority_pem = config.certificate_authority_pem;
        info.tls_server_name = config.tls_server_name;
        info.insecure_skip_tls_verify = config.insecure_skip_tls_verify;
        info.proxy_url = config.proxy_url;
        cluster_ = std::move(info);
    }
}

ExecCredentialProvider::~ExecCredentialProvider() {
    if (running_) {
        running_->provider_gone = true;
        for (auto& t : running_->waiters) t->cancel();
    }
}

bool ExecCredentialProvider::fresh() const {
    if (!cached_) return false;
    if (!cached_->expiry) return true;
    return std::chrono::system_clock::now() + refresh_margin < *cached_->expiry;
}

asio::awaitable<Result<Credential>> ExecCredentialProvider::get(bool force_refresh) {
    for (;;) {
        if (!force_refresh && fresh()) co_return *cached_;
        if (running_) {
            // Join the run in progress; its owner wakes us by cancelling the timer.
            auto run = running_;
            auto timer = std::make_shared<asio::steady_timer>(executor_, asio::steady_timer::time_point::max());
            run->waiters.push_back(timer);
            co_await timer->async_wait(tuple_awaitable);
            if (run->result) co_return *run->result;
            if (run->provider_gone ||
                (co_await asio::this_coro::cancellation_state).cancelled() != asio::cancellation_type::none)
                co_return fail(errc::cancelled, "exec plugin run was abandoned");
            continue;  // its owner was cancelled: run the plugin ourselves
        }
        auto run = std::make_shared<Run>();
        running_ = run;
        // However the run ends (a cancelled owner included), the next caller is not left waiting
        // on it: it is no longer the run in progress, and those who joined it wake up.
        struct Finish {
            ExecCredentialProvider& self;
            std::shared_ptr<Run> run;
            ~Finish() {
                if (run->provider_gone) return;
                if (self.running_ == run) self.running_.reset();
                for (auto& t : run->waiters) t->cancel();
            }
        } finish{*this, run};
        Result<Credential> result = co_await run_plugin();
        if (result) cached_ = *result;
        else cached_.reset();
        run->result = result;
        co_return result;
    }
}

asio::awaitable<Result<Credential>> ExecCredentialProvider::run_plugin() {
    using namespace asio::experimental::awaitable_operators;
    const std::string name = "exec plugin \"" + config_.command + "\"";
    if (config_.command.empty()) co_return fail(errc::exec_plugin_failed, "exec plugin: no command configured");
    if (config_.interactive_mode == "Always")
        co_return fail(errc::exec_plugin_failed,
                       name + ": interactiveMode Always needs a terminal, which is never attached");

    // Environment: inherited, then the kubeconfig's variables, then KUBERNETES_EXEC_INFO.
    std::set<std::string, std::less<>> overridden{"KUBERNETES_EXEC_INFO"};
    for (const auto& [k, v] : config_.env) overridden.insert(k);
    std::vector<std::string> env_strings;
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
        std::string_view kv(*e);
        if (overridden.count(kv.substr(0, kv.find('='))) != 0) continue;
        env_strings.emplace_back(kv);
    }
    for (const auto& [k, v] : config_.env) env_strings.push_back(k + "=" + v);
    env_strings.push_back("KUBERNETES_EXEC_INFO=" + proto::make_exec_info(config_.api_version, cluster_));
    std::vector<char*> envp;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> argv_strings{config_.command};
    argv_strings.insert(argv_strings.end(), config_.args.begin(), config_.args.end());

    auto spawned = util::spawn_child(argv_strings, envp.data());
    if (!spawned) {
        std::string m = name;
        if (spawned.error() == ENOENT) {
            m += ": executable not found";
            if (!config_.install_hint.empty()) m += "; " + config_.install_hint;
        } else {
            m += ": cannot run: ";
            m += std::strerror(spawned.error());
        }
        co_return fail(errc::exec_plugin_failed, std::move(m));
    }
    const pid_t pid = spawned->pid;
    Fd out_r(spawned->stdout_fd), err_r(spawned->stderr_fd);

    asio::posix::stream_descriptor out_sd(executor_, out_r.release());
    asio::posix::stream_descriptor err_sd(executor_, err_r.release());
    std::optional<asio::posix::stream_descriptor> pidfd_sd;
    if (int pidfd = util::open_pidfd(pid); pidfd >= 0) pidfd_sd.emplace(executor_, pidfd);
    asio::posix::stream_descriptor* pidfd_ptr = pidfd_sd ? &*pidfd_sd : nullptr;

    std::string out, err;
    bool out_overflow = false, err_overflow = false, exited = false;
    // However this frame ends (a cancelled caller's exception included), the plugin does not run on.
    struct KillUnlessExited {
        pid_t pid;
        const bool& exited;
        ~KillUnlessExited() {
            if (exited) return;
            ::kill(-pid, SIGKILL);
            ::kill(pid, SIGKILL);
        }
    } kill_guard{pid, exited};
    sys_error out_ec, err_ec;
    int status = -1;
    asio::steady_timer deadline(executor_, timeout_);
    auto outcome = co_await ((read_all(out_sd, out, max_stdout, out_overflow, out_ec) &&
                              read_all(err_sd, err, max_stderr_shown, err_overflow, err_ec) &&
                              wait_exit(pidfd_ptr, pid, status, exited)) ||
                             deadline.async_wait(tuple_awaitable));

    if (outcome.index() != 0 || !exited) {
        ::kill(-pid, SIGKILL);
        ::kill(pid, SIGKILL);
        if (!exited) co_await wait_exit(pidfd_ptr, pid, status, exited);
        const auto secs = std::chrono::duration_cast<std::chrono::duration<double>>(timeout_).count();
        std::string m = name + ": timed out after " + std::to_string(secs);
        while (m.back() == '0') m.pop_back();
        if (m.back() == '.') m.pop_back();
        m += " s and was killed" + describe_stderr(std::move(err), err_overflow);
        co_return fail(errc::exec_plugin_failed, std::move(m));
    }
    const bool success = status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (status != -1 && !success) {
        std::string m = name + " failed (" + describe_status(status) + ")";
        if (WIFEXITED(status) && WEXITSTATUS(status) == 127 && !config_.install_hint.empty())
            m += "; " + config_.install_hint;
        m += describe_stderr(std::move(err), err_overflow);
        co_return fail(errc::exec_plugin_failed, std::move(m));
    }
    if (out_ec || out_overflow)
        co_return fail(errc::exec_plugin_failed,
                       name + ": " +
                           (out_overflow ? std::string("output too large") : "reading output: " + out_ec.message()) +
                           describe_stderr(std::move(err), err_overflow));
    auto parsed = proto::parse_exec_credential(out, config_.api_version);
    if (!parsed)
        co_return fail(errc::exec_plugin_failed, name + " (" + describe_status(status) + ") printed an " +
                                                     parsed.error().message +
                                                     describe_stderr(std::move(err), err_overflow));
    Credential cred;
    cred.token = std::move(parsed->token);
    cred.client_certificate_pem = std::move(parsed->client_certificate_pem);
    cred.client_key_pem = std::move(parsed->client_key_pem);
    cred.expiry = parsed->expiry;
    co_return cred;
}

}  // namespace kubesandbox::kube
