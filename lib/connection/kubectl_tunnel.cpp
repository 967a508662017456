// The kubectl tunnel: the router through a `kubectl port-forward` child process on a free
// loopback port, restarted with back-off when it dies. For clusters only kubectl can reach; the
// native tunnel (tunnel_connection.cpp) needs no process at all.
#include "connection/pooled_connection.hpp"
#include "net/connector.hpp"
#include "proto/validation.hpp"
#include "util/child_process.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstring>
#include <mutex>

extern char** environ;

namespace kubesandbox {

namespace asio = boost::asio;
using std::chrono::steady_clock;

namespace {

constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);
constexpr std::size_t stderr_kept = 2048;

// One kubectl process: what it printed and whether it is still there.
struct ForwardProcess {
    std::mutex mutex;
    pid_t pid = -1;
    int signal_fd = -1;            // a pidfd: signals never reach a recycled pid
    std::uint16_t local_port = 0;  // from "Forwarding from 127.0.0.1:PORT -> ..."
    bool exited = false;
    std::string exit_status;
    std::string stderr_tail;

    ~ForwardProcess() {
        if (signal_fd >= 0) ::close(signal_fd);
    }

    void stop() {
        std::lock_guard lock(mutex);
        if (exited) return;
        if (signal_fd < 0 || ::syscall(SYS_pidfd_send_signal, signal_fd, SIGTERM, nullptr, 0) != 0)
            ::kill(pid, SIGTERM);
    }

    std::string failure() {
        std::lock_guard lock(mutex);
        std::string tail = stderr_tail;
        while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
        std::string m = exited ? "kubectl port-forward exited (" + exit_status + ")" : "kubectl port-forward";
        return tail.empty() ? m : m + ": " + tail;
    }
};

// "Forwarding from 127.0.0.1:41235 -> 8080" -> 41235.
std::uint16_t forwarded_port(std::string_view line) {
    constexpr std::string_view prefix = "Forwarding from 127.0.0.1:";
    if (!line.starts_with(prefix)) return 0;
    line.remove_prefix(prefix.size());
    unsigned value = 0;
    auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), value);
    if (ec != std::errc() || value == 0 || value > 65535 || end == line.data()) return 0;
    return static_cast<std::uint16_t>(value);
}

// Reads stdout line by line for the port, and drains it after (kubectl prints a line for every
// connection: a full pipe would stall it).
asio::awaitable<void> read_stdout(std::shared_ptr<ForwardProcess> p,
                                  std::shared_ptr<asio::posix::stream_descriptor> out) {
    std::string pending;
    char buffer[4096];
    for (;;) {
        auto [ec, n] = co_await out->async_read_some(asio::buffer(buffer), tuple_awaitable);
        if (ec) co_return;
        pending.append(buffer, n);
        for (std::size_t eol; (eol = pending.find('\n')) != std::string::npos;) {
            if (std::uint16_t port = forwarded_port(std::string_view(pending).substr(0, eol))) {
                std::lock_guard lock(p->mutex);
                if (p->local_port == 0) p->local_port = port;
            }
            pending.erase(0, eol + 1);
        }
        if (pending.size() > 4096) pending.clear();
    }
}

asio::awaitable<void> read_stderr(std::shared_ptr<ForwardProcess> p,
                                  std::shared_ptr<asio::posix::stream_descriptor> err) {
    char buffer[4096];
    for (;;) {
        auto [ec, n] = co_await err->async_read_some(asio::buffer(buffer), tuple_awaitable);
        if (ec) co_return;
        std::lock_guard lock(p->mutex);
        p->stderr_tail.append(buffer, n);
        if (p->stderr_tail.size() > stderr_kept) p->stderr_tail.erase(0, p->stderr_tail.size() - stderr_kept);
    }
}

asio::awaitable<void> reap(std::shared_ptr<ForwardProcess> p, std::shared_ptr<asio::posix::stream_descriptor> pidfd) {
    pid_t pid;
    {
        std::lock_guard lock(p->mutex);
        pid = p->pid;
    }
    auto status = co_await util::reap_child(pidfd ? pidfd.get() : nullptr, pid);
    std::lock_guard lock(p->mutex);
    p->exited = true;
    if (!status || *status == -1) p->exit_status = "status unknown";
    else if (WIFEXITED(*status)) p->exit_status = "exit code " + std::to_string(WEXITSTATUS(*status));
    else if (WIFSIGNALED(*status)) p->exit_status = "killed by signal " + std::to_string(WTERMSIG(*status));
}

// The tunnel's current process and its restarts. Thread-safe.
struct TunnelState {
    std::mutex mutex;
    std::shared_ptr<ForwardProcess> current;
    bool starting = false;
    std::chrono::milliseconds backoff{0};
    steady_clock::time_point next_start{};
    std::string last_failure;
    std::atomic<std::uint64_t> generation{0};
};

// Stops the process when the connection (the only owner of this) goes away.
struct TunnelOwner {
    explicit TunnelOwner(std::shared_ptr<TunnelState> s) : state(std::move(s)) {}
    TunnelOwner(const TunnelOwner&) = delete;
    TunnelOwner& operator=(const TunnelOwner&) = delete;
    std::shared_ptr<TunnelState> state;
    ~TunnelOwner() {
        std::lock_guard lock(state->mutex);
        if (state->current) state->current->stop();
    }
};

std::vector<std::string> kubectl_argv(const KubectlTunnelOptions& o) {
    std::vector<std::string> argv{o.kubectl, "port-forward", "--address=127.0.0.1", "--namespace=" + o.namespace_name};
    if (!o.kubeconfig.empty()) argv.push_back("--kubeconfig=" + o.kubeconfig);
    if (!o.context.empty()) argv.push_back("--context=" + o.context);
    argv.push_back(o.target);
    argv.push_back(":" + std::to_string(o.port));
    return argv;
}

// Starts kubectl and waits for its "Forwarding from" line (or its end), by the deadline.
asio::awaitable<Result<std::shared_ptr<ForwardProcess>>> start_process(asio::any_io_executor executor,
                                                                       std::vector<std::string> argv,
                                                                       steady_clock::time_point give_up) {
    auto spawned = util::spawn_child(argv, environ);
    if (!spawned) {
        if (spawned.error() == ENOENT) co_return fail(errc::invalid_config, argv[0] + ": program not found");
        co_return fail(errc::connection_failed, "cannot run " + argv[0] + ": " + std::strerror(spawned.error()));
    }
    auto p = std::make_shared<ForwardProcess>();
    p->pid = spawned->pid;
    auto out = std::make_shared<asio::posix::stream_descriptor>(executor, spawned->stdout_fd);
    auto err = std::make_shared<asio::posix::stream_descriptor>(executor, spawned->stderr_fd);
    std::shared_ptr<asio::posix::stream_descriptor> pidfd;
    if (int fd = util::open_pidfd(p->pid); fd >= 0) {
        pidfd = std::make_shared<asio::posix::stream_descriptor>(executor, fd);
        p->signal_fd = ::dup(fd);
    }
    asio::co_spawn(executor, read_stdout(p, out), asio::detached);
    asio::co_spawn(executor, read_stderr(p, err), asio::detached);
    asio::co_spawn(executor, reap(p, pidfd), asio::detached);
    asio::steady_timer poll(executor);
    for (;;) {
        {
            std::lock_guard lock(p->mutex);
            if (p->local_port != 0) co_return p;
            if (p->exited) break;
        }
        if (steady_clock::now() >= give_up) {
            p->stop();
            co_return fail(errc::connection_failed, p->failure() + " (no \"Forwarding from\" in time)");
        }
        poll.expires_after(std::chrono::milliseconds(20));
        co_await poll.async_wait(tuple_awaitable);
    }
    co_return fail(errc::connection_failed, p->failure());
}

// A TCP connection to the current process's port, starting one first when there is none.
asio::awaitable<Result<net::AnyStream>> open_through_kubectl(asio::any_io_executor executor,
                                                             std::shared_ptr<TunnelState> state,
                                                             KubectlTunnelOptions options,
                                                             steady_clock::time_point deadline) {
    asio::steady_timer poll(executor);
    for (;;) {
        std::shared_ptr<ForwardProcess> process;
        std::uint16_t port = 0;
        bool start = false;
        std::string failed_recently;
        {
            std::lock_guard lock(state->mutex);
            if (state->current) {
                std::lock_guard plock(state->current->mutex);
                if (state->current->exited) {
                    state->last_failure = "kubectl port-forward exited (" + state->current->exit_status + ")";
                    state->current.reset();
                } else {
                    process = state->current;
                    port = process->local_port;
                }
            }
            if (!process && !state->starting) {
                if (steady_clock::now() >= state->next_start) {
                    state->starting = true;
                    start = true;
                } else {
                    failed_recently = state->last_failure;
                }
            }
        }
        if (process) {
            net::ConnectTarget target;
            target.tls = false;
            target.host = "127.0.0.1";
            target.port = std::to_string(port);
            auto connected = co_await net::connect(executor, target, deadline);
            if (!connected && !connected.error().is(errc::timeout)) {
                // The process is there but does not forward any more: the next request starts another.
                std::string why = process->failure();
                process->stop();
                co_return fail(errc::connection_failed, why + ": " + connected.error().message);
            }
            co_return connected;
        }
        if (!failed_recently.empty())
            co_return fail(errc::connection_failed, failed_recently + " (kubectl is started again after a pause)");
        if (start) {
            auto started = co_await start_process(executor, kubectl_argv(options),
                                                  std::min(deadline, steady_clock::now() + options.ready_timeout));
            std::lock_guard lock(state->mutex);
            state->starting = false;
            if (!started) {
                // At least a second: a kubectl that just failed to start rarely starts a moment later,
                // and each attempt is a process.
                state->backoff =
                    std::clamp(state->backoff * 2, std::chrono::milliseconds(1000), std::chrono::milliseconds(5000));
                state->next_start = steady_clock::now() + state->backoff;
                state->last_failure = started.error().message;
                co_return fail(started.error());
            }
            state->backoff = std::chrono::milliseconds(0);
            state->current = *started;
            state->generation.fetch_add(1);
            continue;
        }
        // Another request is starting it.
        if (steady_clock::now() >= deadline)
            co_return fail(errc::timeout, "kubectl port-forward did not start in time");
        poll.expires_after(std::chrono::milliseconds(20));
        co_await poll.async_wait(tuple_awaitable);
    }
}

}  // namespace

Result<std::shared_ptr<RouterConnection>> make_kubectl_tunnel_connection(asio::any_io_executor executor,
                                                                         KubectlTunnelOptions options) {
    // kubectl reads its arguments as flags when they start with '-': only plain names pass.
    auto slash = options.target.find('/');
    std::string_view kind = std::string_view(options.target).substr(0, slash);
    std::string_view name = slash == std::string::npos ? "" : std::string_view(options.target).substr(slash + 1);
    if (kind.empty() || !proto::validate_dns1123_label(kind).empty() ||
        !proto::validate_dns1123_subdomain(name).empty())
        return fail(
            errc::invalid_config,
            "a kubectl tunnel target is KIND/NAME (svc/sandbox-router-svc, pod/NAME), not '" + options.target + "'");
    if (!proto::validate_dns1123_label(options.namespace_name).empty())
        return fail(errc::invalid_config, "invalid namespace for a kubectl tunnel: '" + options.namespace_name + "'");
    if (options.port == 0) return fail(errc::invalid_config, "a kubectl tunnel needs the port to forward to");
    if (options.kubectl.empty()) return fail(errc::invalid_config, "a kubectl tunnel needs the kubectl program");
    auto state = std::make_shared<TunnelState>();
    auto owner = std::make_shared<TunnelOwner>(state);
    PooledConnectionSettings settings;
    settings.description =
        "kubectl port-forward " + options.namespace_name + "/" + options.target + ":" + std::to_string(options.port);
    settings.token = options.token;
    settings.host = "localhost:" + std::to_string(options.port);
    settings.max_connections = options.max_connections;
    settings.max_idle = options.max_idle;
    settings.generation = [state] { return state->generation.load(); };
    StreamOpener open = [executor, state, owner, options](steady_clock::time_point deadline) {
        return open_through_kubectl(executor, state, options, deadline);
    };
    return make_pooled_router_connection(std::move(executor), std::move(settings), std::move(open));
}

}  // namespace kubesandbox
