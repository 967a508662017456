// PodExecSandbox's steps shared by its commands (pod_exec_sandbox.cpp) and its file transfers
// (pod_exec_transfers.cpp). Internal.
#pragma once

#include <kubesandbox/pod_exec_sandbox.hpp>

#include "kube/exec_session.hpp"
#include "sandbox/shell_session.hpp"

#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kubesandbox {

// Defined in pod_exec_sandbox.cpp.
struct PodExecSandbox::Internals {
    static std::vector<std::string> launch_argv(const PodExecSandbox& self, const std::string& marker,
                                                std::vector<std::string> argv);

    // A shell command runs in the launcher's own shell: one shell image per call instead of two
    // (the launcher's, then `sh -c COMMAND`'s). The launcher's steps share the command's first
    // line, so line numbers and error texts are those of `sh -c COMMAND`. No setsid here: it
    // would need a second image, and the runtimes start an exec'd process as the leader of a
    // session of its own already (runc's and crun's exec, the local kubelet); where one does
    // not, a timeout still finds the command by its marker and its descendants. The EXIT trap
    // keeps the marked shell to the end: busybox (and bash) otherwise exec the script's last
    // command in place of the shell, and one that clears its environment (`env -i ...`) would
    // carry no marker left for a timeout to find.
    static std::vector<std::string> launch_shell_argv(const PodExecSandbox& self, const std::string& marker,
                                                      const std::string& command);

    // Kills every process of the command marked `marker`. Best effort: when the pod is gone there
    // is nothing left to kill. Holds no reference to the sandbox, so it may outlive the call.
    static boost::asio::awaitable<bool> kill_marked(std::shared_ptr<KubeClient::Impl> client, kube::ExecTarget killer);

    // The kill of the command marked `marker`. `driver` and `token`: the shell session that ran
    // the command; none for an exec of its own.
    static kube::ExecTarget killer(const PodExecSandbox& self, std::string marker, sandbox::DriverHello driver = {},
                                   std::string token = {});

    static boost::asio::awaitable<bool> kill_marked(PodExecSandbox& self, std::string marker,
                                                    sandbox::DriverHello driver = {}, std::string token = {});

    static boost::asio::awaitable<std::optional<Error>> gone_error(PodExecSandbox& self);

    // Runs `argv`, or with `shell_command` set, the shell command argv[0].
    static boost::asio::awaitable<Result<kube::ExecOutcome>> run_marked(PodExecSandbox& self,
                                                                        std::vector<std::string> argv,
                                                                        bool shell_command, std::string stdin_data,
                                                                        bool with_stdin, std::chrono::seconds limit,
                                                                        OutputSink sink);

    // execute() through a shell session; the same outcomes and clean-up as run_marked. nullopt:
    // run the command in an exec of its own (the sessions are busy, or this image cannot run the
    // session's driver).
    static boost::asio::awaitable<std::optional<Result<kube::ExecOutcome>>> run_in_session(
        PodExecSandbox& self, const std::string& command, std::chrono::seconds limit, std::size_t cap,
        std::optional<std::string_view> input = std::nullopt);

    // A transfer's shell command (a script after `set -- ARGS`) through a shell session, output
    // capped at `cap`, reading `input` when there is one. nullopt: it takes an exec of its own (no
    // session free, or the session broke: a transfer is idempotent, and the exec is its retry).
    static boost::asio::awaitable<std::optional<Result<kube::ExecOutcome>>> transfer_in_session(
        PodExecSandbox& self, const std::string& command, std::size_t cap,
        std::optional<std::string_view> input = std::nullopt);

    // A transfer streamed through an exec of its own, not retried (its source or sink has moved
    // on). A failure of the source is returned as it is; a sandbox that is gone is errc::not_found.
    static boost::asio::awaitable<Result<kube::ExecOutcome>> stream(PodExecSandbox& self, std::vector<std::string> argv,
                                                                    kube::ExecRunOptions run);

    // A whole-file transfer through an exec of its own, retried once on a broken connection.
    static boost::asio::awaitable<Result<kube::ExecOutcome>> transfer(PodExecSandbox& self,
                                                                      std::vector<std::string> argv,
                                                                      std::string stdin_data, bool with_stdin,
                                                                      std::size_t max_stdout);
};

}  // namespace kubesandbox
