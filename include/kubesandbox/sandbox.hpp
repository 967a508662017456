// The sandbox interface every mode implements (raw pods over exec-websocket, agent-sandbox over
// the router). File operations are written once on top of it.
#pragma once

#include <kubesandbox/error.hpp>

#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
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

// The next piece of a file being uploaded, valid until the next call; an empty piece at its end.
// An error ends the upload with that error.
using ByteSource = std::function<boost::asio::awaitable<Result<std::string_view>>()>;
// Receives a file being downloaded, piece by piece (`data` is valid until the returned awaitable
// completes; the next piece is read only then). Pieces are never empty, so an empty file calls it
// no time. Returning false stops the download.
using ByteSink = std::function<boost::asio::awaitable<bool>(std::string_view data)>;

// Receives a command's output as it arrives: stream 1 is stdout, 2 is stderr; `data` is valid
// until the returned awaitable completes. The next piece is read only then, so a slow sink slows
// the command down (through TCP) instead of filling memory. Returning false ends the command:
// it is killed, as on a timeout; an exception it throws does the same and then reaches the
// caller. The timeout counts while the sink runs but cannot interrupt it: a sink must not block
// for long.
using OutputSink = std::function<boost::asio::awaitable<bool>(int stream, std::string_view data)>;

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
    // execute() with the output handed to `sink` instead of collected, stdout and stderr apart:
    // the response holds the exit code, and output only for a timeout's message. A sink that
    // returns false ends the command (killed as on a timeout) with errc::cancelled. How soon the
    // output arrives depends on the sandbox: PodExecSandbox streams it as the command prints, in
    // constant memory and with no cap; RouterSandbox hands over each stream, capped, once the
    // runtime answers (python-runtime answers when the command has ended). This default hands
    // over execute()'s output, composed and capped, as stream 1 (truncated says if it was cut).
    virtual boost::asio::awaitable<Result<ExecuteResponse>> execute(std::string command,
                                                                    std::optional<std::chrono::seconds> timeout,
                                                                    OutputSink sink);

    // One response per input, in input order; partial success. Paths must be absolute.
    virtual boost::asio::awaitable<Result<std::vector<FileUploadResponse>>> upload_files(
        std::vector<std::pair<std::string, std::string>> files) = 0;
    virtual boost::asio::awaitable<Result<std::vector<FileDownloadResponse>>> download_files(
        std::vector<std::string> paths) = 0;

    // One file of `size` bytes from `source`, and one file into `sink`, for files too large to
    // hold in memory: per-file errors as upload_files/download_files report them (the download's
    // content stays unset). A source that gives more or fewer bytes than `size` is an
    // invalid_argument error; a sink that stops the download, errc::cancelled. A failed upload
    // may leave the file partly written, and a failed download may have passed part of the file
    // to the sink. Not retried. This default holds the file in memory (through
    // upload_files/download_files, so their max_file_bytes applies); sandboxes that can stream
    // override it, and a streamed file has no size limit.
    virtual boost::asio::awaitable<Result<FileUploadResponse>> upload_from(std::string path, std::uint64_t size,
                                                                           ByteSource source);
    virtual boost::asio::awaitable<Result<FileDownloadResponse>> download_to(std::string path, ByteSink sink);
};

}  // namespace kubesandbox
