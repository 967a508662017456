// A sandbox reached through an agent-sandbox router (or straight at its runtime), speaking the
// python-runtime HTTP API: POST /execute, POST /upload, GET /download/{path}. Used by the
// agent-sandbox mode; works with any RouterConnection (direct URL now; tunnel and gateway later).
#pragma once

#include <kubesandbox/error.hpp>
#include <kubesandbox/sandbox.hpp>

#include <boost/asio/any_io_executor.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace kubesandbox {

// How requests reach the router: one keep-alive pool per endpoint, shared by every sandbox
// behind it. Thread-safe.
class RouterConnection {
public:
    virtual ~RouterConnection() = default;
    virtual std::string describe() const = 0;  // for messages: the URL, never a token

    struct Impl;  // the request interface (internal)
    virtual Impl& impl() = 0;
};

struct DirectConnectionOptions {
    std::string url{};     // http://host:port or https://host:port, optionally with a path prefix
    std::string token{};   // sent as "Authorization: Bearer"; empty = none
    std::string ca_pem{};  // for https: trusted CA (empty = the system's)
    bool insecure_skip_verify{false};
    std::size_t max_connections{64};
    // Idle connections are not reused after this: the reference router (uvicorn) drops them at 5 s.
    std::chrono::milliseconds max_idle{std::chrono::seconds(4)};
    std::chrono::milliseconds connect_timeout{std::chrono::seconds(5)};
};

// A connection to the router at `url` (errc::invalid_config for a bad URL or CA). Like every
// object bound to an executor, it must be destroyed before its io_context.
Result<std::shared_ptr<RouterConnection>> make_direct_connection(boost::asio::any_io_executor executor,
                                                                 DirectConnectionOptions options);

class KubeClient;

struct TunnelConnectionOptions {
    std::string namespace_name{"default"};
    std::string pod{};         // the router's pod (or a sandbox's, to reach its runtime directly)
    std::uint16_t port{8080};  // the port in that pod, or the service's port
    // Instead of `pod`: the router's Service. Each new connection goes to a ready endpoint of its
    // EndpointSlices (in turn), resolved again, so a replaced router pod is found.
    std::string service{};
    std::string token{};  // sent as "Authorization: Bearer"; empty = none
    std::size_t max_connections{64};
    std::chrono::milliseconds max_idle{std::chrono::seconds(4)};
};

// A connection through the API server: each pooled HTTP connection is a port-forward WebSocket
// (pods/portforward, v4.channel.k8s.io) opened with `client`'s credentials, so nothing but the
// API server needs to be reachable, and no kubectl or local port is used. errc::invalid_config
// without exactly one of pod and service, or without a port. Must be destroyed before the client's io_context.
Result<std::shared_ptr<RouterConnection>> make_tunnel_connection(KubeClient& client, TunnelConnectionOptions options);

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
    boost::asio::awaitable<Result<std::vector<FileUploadResponse>>> upload_files(
        std::vector<std::pair<std::string, std::string>> files) override;
    boost::asio::awaitable<Result<std::vector<FileDownloadResponse>>> download_files(
        std::vector<std::string> paths) override;

    struct Internals;

private:
    friend struct Internals;
    std::shared_ptr<RouterConnection> connection_;
    RouterSandboxOptions options_;
    std::string id_;
};

}  // namespace kubesandbox
