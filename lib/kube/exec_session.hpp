// One pods/exec session over WebSocket (v5.channel.k8s.io, else v4.channel.k8s.io), and a
// runner that collects output with caps, a deadline and stdin. Internal.
#pragma once

#include <kubesandbox/kube_client.hpp>

#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kubesandbox::kube {

struct ExecTarget {
    std::string namespace_name{};
    std::string pod{};
    std::string container{};
    std::vector<std::string> command{};
    bool stdin{};
};

struct ExecOutcome {
    std::string stdout_data{};
    std::string stderr_data{};
    bool stdout_truncated{};
    bool stderr_truncated{};
    std::optional<int> exit_code{};
    bool timed_out{};
    bool closed_cleanly{};                // the server closed the WebSocket normally (1000)
    bool stopped_by_sink{};               // on_output returned false or threw: the session was ended there
    std::exception_ptr sink_exception{};  // what on_output threw, for the caller to rethrow after clean-up
    std::string protocol{};
};

struct ExecRunOptions {
    std::string stdin_data{};
    // Used instead of stdin_data when set: lets a caller retry without copying a large payload.
    std::shared_ptr<const std::string> stdin_shared{};
    // Used instead of both when set: the input piece by piece, each valid until the next call,
    // an empty piece at its end. An error from it ends the session, and run_exec returns it.
    std::function<boost::asio::awaitable<Result<std::string_view>>()> stdin_source{};
    std::size_t max_stdout{SIZE_MAX};
    std::size_t max_stderr{SIZE_MAX};
    // End the session as soon as a stream passes its cap (its *_truncated flag is set and no exit
    // code arrives): for reads where nothing past the cap is wanted, e.g. /dev/zero.
    bool stop_at_cap{};
    std::optional<std::chrono::steady_clock::duration> timeout{};
    // When set, stdout (1) and stderr (2) go here as they arrive instead of into the outcome (no
    // caps apply). The next message is read only once it completes; false ends the session.
    std::function<boost::asio::awaitable<bool>(int channel, std::string_view data)> on_output{};
};

// The API path and query of an exec of `target` (below the server's base path).
std::string exec_request_target(const ExecTarget& target);

// Runs one exec session to completion on a strand of the client's executor. Errors: the
// upgrade was refused (typed from the Status), the connection broke (errc::connection_closed),
// or the server reported the command could not run (errc::pod_failed). Cancelling the caller
// ends the session (the connection is closed) and returns errc::connection_closed; it never throws.
boost::asio::awaitable<Result<ExecOutcome>> run_exec(std::shared_ptr<KubeClient::Impl> client, ExecTarget target,
                                                     ExecRunOptions options);

}  // namespace kubesandbox::kube
