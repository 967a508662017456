// A sandbox that is a plain Pod, reached through the API server's pods/exec WebSocket
// (v5.channel.k8s.io, falling back to v4). Works on any cluster; used by raw mode.
#pragma once

#include <kubesandbox/kube_client.hpp>
#include <kubesandbox/sandbox.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kubesandbox {

struct PodExecSandboxOptions {
    std::string container{"sandbox"};
    std::string shell{"/bin/sh"};
    std::string workdir{"/workspace"};
    std::size_t max_output_bytes{1024 * 1024};
    std::chrono::seconds default_timeout{1800};
    std::size_t max_parallel_transfers{4};  // files moved at once by upload_files/download_files
    // Largest file upload_files sends or download_files accepts; a larger one gets the per-file
    // error file_too_large, and a download stops reading there (a /dev/zero costs this much memory).
    std::size_t max_file_bytes{256 * 1024 * 1024};
    // execute() runs its commands through shell sessions: execs of a small shell that stay open
    // and run one command at a time, each in a fresh `sh -c` with the same environment,
    // working directory and kill-on-timeout as an exec of its own. A command then costs one
    // message each way instead of a connection, an upgrade and a process start. Files up to
    // 1 MiB that upload_files and download_files move go through them too. A sandbox has up
    // to this many sessions (a command that finds them all busy gets an exec of its own), none
    // kept idle longer than `shell_session_idle_limit`; 0 gives every command an exec of its own.
    // Output written by a command's background processes after it returned may show up in a
    // later command's output; a session that receives any between commands is not used again.
    // The commands of a session share its stdout and stderr: one that leaves them non-blocking
    // leaves them so for the next. An idle session is two processes in the pod: the driver
    // shell and the subshell it forked ahead for the next command.
    std::size_t idle_shell_sessions{2};
    std::chrono::seconds shell_session_idle_limit{60};
    // In a session, commands share the session shell's process group (a timeout still kills all a
    // command started, and of what earlier commands left running only orphans that started while
    // the session sat idle): `kill 0` in a command also reaches what earlier commands left
    // running, and `kill -- -$$` finds no group. True starts each command in a group of its
    // own, as an exec of its own would be, at the price of a `setsid` program image per command.
    bool shell_session_process_groups{false};
    // Called after each command (and may be called after a reconnect), never awaited by
    // execute(): the provider uses it to record last-activity.
    std::function<void()> on_activity{};
};

// What run() returns: the streams kept apart, for tools that print them apart.
struct RunResponse {
    std::string stdout_data{};
    std::string stderr_data{};
    std::optional<int> exit_code{};  // 124 on timeout; empty = unknown (no status arrived)
    bool truncated{};                // a stream passed max_output_bytes
    bool timed_out{};
    bool stopped{};  // the output sink returned false: the command was killed there
};

class PodExecSandbox final : public Sandbox {
public:
    PodExecSandbox(KubeClient client, std::string namespace_name, std::string pod_name, PodExecSandboxOptions options);
    ~PodExecSandbox() override;

    const std::string& id() const override { return id_; }
    const std::string& namespace_name() const { return namespace_; }
    const std::string& pod_name() const { return pod_; }
    const PodExecSandboxOptions& options() const { return options_; }

    using Sandbox::execute;
    boost::asio::awaitable<Result<ExecuteResponse>> execute(std::string command,
                                                            std::optional<std::chrono::seconds> timeout) override;
    // Streamed as the command prints (an exec of its own, not a shell session).
    boost::asio::awaitable<Result<ExecuteResponse>> execute(std::string command,
                                                            std::optional<std::chrono::seconds> timeout,
                                                            OutputSink sink) override;
    boost::asio::awaitable<Result<std::vector<FileUploadResponse>>> upload_files(
        std::vector<std::pair<std::string, std::string>> files) override;
    boost::asio::awaitable<Result<std::vector<FileDownloadResponse>>> download_files(
        std::vector<std::string> paths) override;
    // Streamed through an exec of its own each, in constant memory.
    boost::asio::awaitable<Result<FileUploadResponse>> upload_from(std::string path, std::uint64_t size,
                                                                   ByteSource source) override;
    boost::asio::awaitable<Result<FileDownloadResponse>> download_to(std::string path, ByteSink sink) override;

    // Runs argv directly (no shell) in the workdir, feeding `stdin_data` (closed afterwards on
    // v5). Each stream is capped at max_output_bytes; a timeout kills what the command started.
    boost::asio::awaitable<Result<RunResponse>> run(std::vector<std::string> argv, std::string stdin_data,
                                                    std::optional<std::chrono::seconds> timeout);
    // run() with the output handed to `sink` as it arrives instead of collected: memory stays
    // the same however much the command prints, and no cap applies. The response's stdout_data
    // and stderr_data stay empty.
    boost::asio::awaitable<Result<RunResponse>> run(std::vector<std::string> argv, std::string stdin_data,
                                                    std::optional<std::chrono::seconds> timeout, OutputSink sink);

    // Shell sessions opened so far by execute(), and those idle now that the next command could
    // use (for tests and benchmarks).
    std::size_t shell_sessions_opened() const;
    std::size_t shell_sessions_idle() const;

private:
    struct Internals;
    friend struct Internals;
    struct Sessions;

    KubeClient client_;
    std::string namespace_;
    std::string pod_;
    std::string id_;
    PodExecSandboxOptions options_;
    std::unique_ptr<Sessions> sessions_;
};

}  // namespace kubesandbox
