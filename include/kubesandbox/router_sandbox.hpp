// A sandbox reached through an agent-sandbox router (or straight at its runtime), speaking the
// python-runtime HTTP API: POST /execute, POST /upload, GET /download/{path}, /list/{path} and
// /exists/{path}. Used by the agent-sandbox mode; works over any RouterConnection
// (router_connection.hpp).
#pragma once

#include <kubesandbox/error.hpp>
#include <kubesandbox/router_connection.hpp>
#include <kubesandbox/sandbox.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace kubesandbox {

struct RouterSandboxOptions {
    std::string sandbox_name{};             // X-Sandbox-ID: the Sandbox's name (status.sandbox.name)
    std::string id{};                       // id(); empty = "<namespace>/<sandbox_name>"
    std::string namespace_name{"default"};  // X-Sandbox-Namespace
    std::uint16_t port{8888};               // X-Sandbox-Port: the runtime's port in the pod
    std::optional<std::string> pod_ip{};    // X-Sandbox-Pod-IP, when the router should use it
    std::string base_dir{"/app"};           // the runtime's SANDBOX_BASE_DIR (its working directory)
    std::size_t max_output_bytes{1024 * 1024};
    std::chrono::seconds default_timeout{1800};
    std::size_t max_file_bytes{256 * 1024 * 1024};
    // Called after each command, never awaited (the provider records activity with it).
    std::function<void()> on_activity{};
};

// An entry of the runtime's directory listing (GET /list/{path}).
struct RuntimeEntry {
    std::string name{};
    std::uint64_t size{0};
    bool is_directory{false};  // the runtime follows links: a link to a directory is one
    double mod_time{0};        // seconds since the epoch
    friend bool operator==(const RuntimeEntry&, const RuntimeEntry&) = default;
};

// execute() runs the command under `sh -c` (the runtime itself uses no shell) with a watchdog
// for the timeout (124 and the usual message; the command's process group is killed), and is
// never replayed. upload_files/download_files use /upload and /download for files below
// base_dir and fall back to commands (base64) for other paths, with the same per-file results
// as raw mode.
class RouterSandbox final : public Sandbox {
public:
    RouterSandbox(std::shared_ptr<RouterConnection> connection, RouterSandboxOptions options);
    ~RouterSandbox() override;

    const std::string& id() const override { return id_; }
    const RouterSandboxOptions& options() const { return options_; }

    using Sandbox::execute;
    boost::asio::awaitable<Result<ExecuteResponse>> execute(std::string command,
                                                            std::optional<std::chrono::seconds> timeout) override;
    // stdout, then stderr, each capped at max_output_bytes (truncated says so), once the runtime
    // has answered.
    boost::asio::awaitable<Result<ExecuteResponse>> execute(std::string command,
                                                            std::optional<std::chrono::seconds> timeout,
                                                            OutputSink sink) override;
    boost::asio::awaitable<Result<std::vector<FileUploadResponse>>> upload_files(
        std::vector<std::pair<std::string, std::string>> files) override;
    boost::asio::awaitable<Result<std::vector<FileDownloadResponse>>> download_files(
        std::vector<std::string> paths) override;
    // Files over a MiB stream in, and every file streams out: over the runtime's HTTP endpoints
    // below base_dir, else through commands a piece at a time.
    boost::asio::awaitable<Result<FileUploadResponse>> upload_from(std::string path, std::uint64_t size,
                                                                   ByteSource source) override;
    boost::asio::awaitable<Result<FileDownloadResponse>> download_to(std::string path, ByteSink sink) override;

    // The runtime's own views, for base_dir and the paths below it (errc::invalid_argument for
    // others, and for names the runtime would decode differently; the file operations' ls works
    // anywhere). Both only read, so they are sent again when a reused connection broke first.
    // list_directory: the entries in the runtime's order; errc::not_found when the path is not a
    // directory, errc::forbidden when it leads out of the base.
    boost::asio::awaitable<Result<std::vector<RuntimeEntry>>> list_directory(std::string path);
    // errc::forbidden when the path leads out of the base.
    boost::asio::awaitable<Result<bool>> exists(std::string path);

    struct Internals;

private:
    friend struct Internals;
    std::shared_ptr<RouterConnection> connection_;
    RouterSandboxOptions options_;
    std::string id_;
    std::string sandbox_fields_;     // the X-Sandbox-* header lines, written once
    bool sandbox_fields_ok_{false};  // false: a name held a line break, and no request is sent
};

}  // namespace kubesandbox
