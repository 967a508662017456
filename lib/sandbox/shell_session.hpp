// Shell sessions: long-lived pods/exec WebSockets running the driver of shell_session_core, so
// that an execute() costs one message each way on an open connection instead of a TLS
// connection, an upgrade and a process start. Internal.
#pragma once

#include <kubesandbox/kube_client.hpp>

#include "kube/exec_session.hpp"
#include "sandbox/shell_session_core.hpp"

#include <boost/asio/awaitable.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kubesandbox::sandbox {

class ShellSession;

// The sessions of one sandbox: at most `max_sessions` at once, none kept idle longer than
// `idle_limit` (below the idle timeouts of load balancers in front of API servers). A command
// that finds them all busy runs in an exec of its own. Each session's driver keeps `scripts`
// (static storage): commands that end with one send its number, not the script; when a server
// in the way refuses the longer exec request, sessions start without them.
class ShellSessionPool {
public:
    ShellSessionPool(std::shared_ptr<KubeClient::Impl> client, kube::ExecTarget driver, std::size_t max_sessions,
                     std::chrono::steady_clock::duration idle_limit, std::span<const std::string_view> scripts = {});
    ~ShellSessionPool();  // idle sessions end gracefully (the driver sees end of input)
    ShellSessionPool(const ShellSessionPool&) = delete;
    ShellSessionPool& operator=(const ShellSessionPool&) = delete;

    // An idle session, or a new one (an exec of the driver), or null when `max_sessions` are in
    // use. Errors are those of the exec. Every session acquired goes back through release().
    boost::asio::awaitable<Result<std::shared_ptr<ShellSession>>> acquire();
    // Back after a command (or its failure): kept when clean, else ended.
    void release(std::shared_ptr<ShellSession> session);

    std::size_t idle_count() const;
    std::size_t reusable_count() const;  // idle sessions a command could use now
    std::size_t opened_count() const;    // sessions opened so far (for tests and benchmarks)

private:
    struct Idle {
        std::shared_ptr<ShellSession> session;
        std::chrono::steady_clock::time_point since;
    };
    std::shared_ptr<KubeClient::Impl> client_;
    kube::ExecTarget driver_;
    std::size_t max_sessions_;
    std::chrono::steady_clock::duration idle_limit_;
    std::span<const std::string_view> scripts_;
    std::atomic<bool> scripts_refused_{};
    mutable std::mutex mutex_;
    std::vector<Idle> idle_;
    std::size_t opened_{};
    std::size_t in_use_{};
};

// What one command in a session produced.
struct ShellRun {
    kube::ExecOutcome outcome;  // exit_code set unless timed out
    bool cancelled{};           // the caller was cancelled: the command may still run
    bool not_sent{};            // the session ended before the command was sent: nothing ran
};

class ShellSession : public std::enable_shared_from_this<ShellSession> {
public:
    struct Private;
    explicit ShellSession(std::shared_ptr<Private> state);
    ~ShellSession();

    // Opens a session running the driver as `driver` (an exec with stdin) followed by a token of
    // its own and `scripts` (static storage) for it to keep; it ends itself once idle for
    // `idle_limit`.
    static boost::asio::awaitable<Result<std::shared_ptr<ShellSession>>> open(
        std::shared_ptr<KubeClient::Impl> client, kube::ExecTarget driver,
        std::chrono::steady_clock::duration idle_limit, std::span<const std::string_view> scripts = {});

    // Sends `command` to the driver, which runs it after the launch line with next_exec_marker(),
    // and collects the output up to `cap` per stream until both trailers. On a timeout or a cancelled caller the
    // session is ended and the command keeps running: the caller kills it. Errors: the connection broke or the driver
    // ended before the trailers (errc::connection_closed), or a malformed trailer.
    // With `input`, the command's stdin is those bytes (else empty), and it must read exactly them
    // (`head -c N`): nothing more comes before its end. A command given input that fails may
    // have left some unread: the session is not used again.
    boost::asio::awaitable<Result<ShellRun>> run(std::string_view command, std::size_t cap,
                                                 std::optional<std::chrono::steady_clock::duration> timeout,
                                                 std::optional<std::string_view> input = std::nullopt);

    const DriverHello& driver() const;
    const std::string& token() const;  // the last argument of the driver's command line
    // The marker the next command run() sends will carry (the session is one caller's at a time).
    std::string next_exec_marker() const;
    // Open, not ending, no command in flight, and nothing arrived between commands.
    bool reusable() const;
    // Ends the session: the driver gets end of input and ends once its command (if any) is done
    // (its subshell kills it: the exec's status says 137); on v4, which cannot close stdin, the
    // connection is cut.
    void end();

private:
    std::shared_ptr<Private> state_;
};

}  // namespace kubesandbox::sandbox
