// The sandbox interface every mode implements (raw pods over exec-websocket, agent-sandbox over
// the router). File operations are written once on top of it.
#pragma once

#include <kubesandbox/error.hpp>

#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kubesandbox {

// DeepAgents' ExecuteResponse: output = stdout, then "\n" + stderr when both are non-empty.
struct ExecuteResponse {
    std::string output{};
    std::optional<int> exit_code{};  // empty = unknown (no status arrived)
    bool truncated{};
};

// The four DeepAgents literals, or another backend-specific string.
namespace file_error {
inline constexpr const char* file_not_found = "file_not_found";
inline constexpr const char* permission_denied = "permission_denied";
inline constexpr const char* is_directory = "is_directory";
inline constexpr const char* invalid_path = "invalid_path";
// Ours: the file is larger than the sandbox's transfer limit (nothing past it was read).
inline constexpr const char* file_too_large = "file_too_large";
}  // namespace file_error

struct FileUploadResponse {
    std::string path{};
    std::optional<std::string> error{};
};

struct FileDownloadResponse {
    std::string path{};
    std::optional<std::string> content{};  // bytes, set on success
    std::optional<std::string> error{};
};

class Sandbox {
public:
    virtual ~Sandbox() = default;

    // Stable, namespace-qualified ("namespace/name"), known before the first command.
    virtual const std::string& id() const = 0;

    // Runs `command` through the sandbox's shell in its working directory. timeout: nullopt =
    // the sandbox default, 0 = none. A timeout is not an error: exit code 124 and the output
    // "Command timed out after N seconds", and the remote processes are killed. Errors are
    // for transport failures and a sandbox that disappeared (the command is then killed where
    // the sandbox still exists, best effort, and the message says so), and invalid_argument for
    // a NUL byte in the command or a negative timeout. A command is never replayed.
    virtual boost::asio::awaitable<Result<ExecuteResponse>> execute(std::string command,
                                                                    std::optional<std::chrono::seconds> timeout) = 0;
    boost::asio::awaitable<Result<ExecuteResponse>> execute(std::string command) {
        return execute(std::move(command), std::nullopt);
    }

    // One response per input, in input order; partial success. Paths must be absolute.
    virtual boost::asio::awaitable<Result<std::vector<FileUploadResponse>>> upload_files(
        std::vector<std::pair<std::string, std::string>> files) = 0;
    virtual boost::asio::awaitable<Result<std::vector<FileDownloadResponse>>> download_files(
        std::vector<std::string> paths) = 0;
};

}  // namespace kubesandbox
