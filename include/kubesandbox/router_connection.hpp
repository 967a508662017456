// How requests reach a sandbox router (or a runtime): a RouterConnection, one keep-alive pool
// shared by every sandbox behind it. Made for a URL (direct, or in-cluster DNS), through the
// API server (tunnel: a port-forward per pooled connection), or through a Gateway whose
// published address is watched.
#pragma once

#include <kubesandbox/error.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

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
    // When opening a tunnel fails (API server down, pod gone), no new one is tried for 100 ms,
    // doubling up to this while they keep failing; calls needing one fail at once meanwhile
    // (errc::connection_failed with the last error). 0 = every call tries.
    std::chrono::milliseconds open_backoff_max{std::chrono::seconds(5)};
};

// A connection through the API server: each pooled HTTP connection is a port-forward WebSocket
// (pods/portforward, v4.channel.k8s.io) opened with `client`'s credentials, so nothing but the
// API server needs to be reachable, and no kubectl or local port is used. errc::invalid_config
// without exactly one of pod and service, or without a port. Must be destroyed before the client's io_context.
Result<std::shared_ptr<RouterConnection>> make_tunnel_connection(KubeClient& client, TunnelConnectionOptions options);

struct GatewayConnectionOptions {
    std::string gateway_name{};  // required
    std::string gateway_namespace{"default"};
    // The port to connect to; unset = the Gateway's first listener with the scheme's protocol
    // (HTTP or HTTPS), else 80 / 443. (The agent-sandbox SDK always uses 80.)
    std::optional<std::uint16_t> port{};
    bool https{false};  // the reference Gateway serves plain HTTP
    std::string ca_pem{};
    bool insecure_skip_verify{false};
    std::string token{};  // sent as "Authorization: Bearer"; empty = none
    // How long a request waits for the Gateway to publish an address (while it is programmed).
    std::chrono::milliseconds ready_timeout{std::chrono::seconds(180)};
    std::size_t max_connections{64};
    std::chrono::milliseconds max_idle{std::chrono::seconds(4)};
    std::chrono::milliseconds connect_timeout{std::chrono::seconds(5)};
};

// A connection to the router behind a Gateway: it lists and watches the Gateway (list and watch
// on gateways.gateway.networking.k8s.io) and connects to the first usable status.addresses[]
// value. When the address changes, new connections go to the new one and idle connections to
// the old one are dropped; a connect that fails reads the Gateway once more (the watch may lag)
// and tries the address it publishes now. While the Gateway has no usable address requests wait for one (up to
// ready_timeout, never past their deadline), then fail with errc::service_unavailable; when it
// does not exist (or was deleted) they fail so at once.
// errc::invalid_config without a gateway name. Must be destroyed before the client's io_context.
Result<std::shared_ptr<RouterConnection>> make_gateway_connection(KubeClient& client, GatewayConnectionOptions options);

struct KubectlTunnelOptions {
    std::string kubectl{"kubectl"};  // the program, looked up in PATH
    std::string kubeconfig{};        // --kubeconfig; empty = kubectl's own default
    std::string context{};           // --context; empty = the kubeconfig's current one
    std::string namespace_name{"default"};
    std::string target{"svc/sandbox-router-svc"};  // what kubectl forwards to: svc/NAME, pod/NAME, ...
    std::uint16_t port{8080};                      // the port there
    std::string token{};                           // for the router: "Authorization: Bearer"
    // How long a start may take before "Forwarding from" is printed.
    std::chrono::milliseconds ready_timeout{std::chrono::seconds(30)};
    std::size_t max_connections{64};
    std::chrono::milliseconds max_idle{std::chrono::seconds(4)};
};

// A connection through a `kubectl port-forward` child process, for clusters that only kubectl
// can reach (an auth flow the library lacks). One process per connection, shared by every
// sandbox behind it, started on first use on a free loopback port; when it exits (or stops
// accepting), the next request starts another, after a back-off of 100 ms doubling to 5 s while
// starts keep failing. A failed start is errc::connection_failed with kubectl's stderr. The
// process is stopped when the connection is destroyed. errc::invalid_config for a target or
// namespace that is not a plain name. Must be destroyed before the executor's io_context.
Result<std::shared_ptr<RouterConnection>> make_kubectl_tunnel_connection(boost::asio::any_io_executor executor,
                                                                         KubectlTunnelOptions options);

struct HealthCheckOptions {
    std::string path{"/healthz"};  // the sandbox router's probe; a runtime reached directly answers GET /
    std::chrono::milliseconds timeout{std::chrono::seconds(5)};
    std::chrono::milliseconds interval{std::chrono::seconds(10)};  // between probes (run_health_checks)
};

// One probe: GET options.path through the connection (no sandbox headers), healthy on a 2xx.
// Failures are typed as a request's are (connection_failed, connection_closed, timeout; another
// status: service_unavailable for 502/503, server_timeout for 504, else unknown_status, with
// Error::http_status set) and drop the connection's idle
// connections, so the next request opens a fresh one (re-resolving a Service's endpoints or a
// Gateway's address) instead of trying a stream that may be dead.
boost::asio::awaitable<Result<void>> check_health(RouterConnection& connection, HealthCheckOptions options);

// Probes every options.interval until cancelled (asio per-operation cancellation, e.g. a
// cancellation_signal bound to co_spawn's handler, or `||` with a timer), calling on_change with
// the first result and then with each one whose outcome differs from the one before, so a host
// can log, export or act on the state. Returns when cancelled; throws only what on_change throws.
boost::asio::awaitable<void> run_health_checks(std::shared_ptr<RouterConnection> connection, HealthCheckOptions options,
                                               std::function<void(const Result<void>&)> on_change);

}  // namespace kubesandbox
