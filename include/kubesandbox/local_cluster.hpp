// The embedded local cluster: a Kubernetes API server emulator on loopback whose pods are
// bubblewrap-isolated local processes. Runs on its own thread; kubectl works against it.
#pragma once

#include <kubesandbox/error.hpp>
#include <kubesandbox/kube_config.hpp>
#include <kubesandbox/logger.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace kubesandbox {

struct LocalClusterOptions {
    std::string bind_address = "127.0.0.1";  // loopback unless told otherwise
    std::uint16_t port = 0;                  // 0 = a free port
    std::uint16_t router_port = 0;           // the sandbox router's (plain HTTP); 0 = a free port
    bool tls = true;                         // HTTPS with a generated CA; false = plain HTTP
    std::filesystem::path data_dir{};        // empty = a temporary directory removed on stop
    std::string token{};                     // bearer token; empty = random
    std::chrono::seconds continue_token_ttl{300};
    // Run pods without bubblewrap namespaces when bwrap cannot create them. Loudly unsafe.
    bool allow_no_isolation = false;
    // The bubblewrap program (searched in PATH unless it contains '/'). Tests point it at a program
    // that fails (e.g. /bin/false) to see how the cluster refuses pods without isolation.
    std::string bwrap_program = "bwrap";
    // Each pod's execs start from one process that entered the pod once (a spawner); false: each
    // exec enters the pod on its own, a program start slower (kept for comparison and tests).
    bool exec_spawner = true;
    // Accept requests that carry no credentials, with full access, as the insecure port of old
    // API servers did. Meant for tls = false, where kubectl sends no token from its kubeconfig
    // (it only sends credentials over HTTPS). A request with a wrong token still gets 401.
    bool allow_anonymous = false;
    // Image name (exact, or a prefix ending in '*', e.g. "python:*") -> root filesystem:
    // "host" = the host's userland read-only, "busybox" = a minimal busybox root, or a directory.
    std::map<std::string, std::string> images{};
    // kubesandbox-runtime, the HTTP runtime of agent-sandbox pods (images python-runtime-sandbox*
    // and busybox-runtime*). Empty = $KUBESANDBOX_RUNTIME, else the installed or built program.
    std::filesystem::path runtime_program{};
    // The agent-sandbox controller (SandboxClaims, SandboxWarmPools, Sandboxes), with the
    // templates and warm pools python-runtime and busybox-runtime in namespace default.
    bool agent_sandbox = true;
    int agent_sandbox_pool_replicas = 1;  // of each default warm pool
    // What leads to the router on a cluster running agent-sandbox: the Service
    // agent-sandbox-system/sandbox-router-svc:8080 (before a host-network Pod standing for the
    // router) and the Gateway default/sandbox-router-gateway. Off: no objects besides the caller's.
    bool router_objects = true;
    Logger logger{};  // the kubelet's diagnostics (pods that fail to start or stop)
};

// Faults injected into API responses, for tests. Thread-safe.
//   status               answer with `status` (429 carries Retry-After when retry_after_seconds is set)
//   drop_before_response close the connection without answering
//   drop_mid_body        send the head and half the body of a plain response, then close
//   latency              delay the request by `latency`, then serve it normally
//   drop_mid_stream      serve normally but cut the connection once the server has written
//                        `drop_after_bytes` bytes on it (response head and framing included);
//                        honoured by every response, including the streams handed to the kubelet
//                        (exec, port-forward, log) and watches. The cut is a plain
//                        close: no WebSocket close frame, no final chunk, no exec status.
struct FaultRule {
    std::string path_contains;  // applies to requests whose target contains this ("" = all)
    std::string method{};       // "" = any
    int count = 1;              // how many requests it hits; -1 = until cleared
    enum class Action { status, drop_before_response, drop_mid_body, latency, drop_mid_stream } action = Action::status;
    unsigned status = 500;  // for Action::status
    std::optional<int> retry_after_seconds{};
    std::chrono::milliseconds latency{0};
    std::size_t drop_after_bytes = 0;  // for Action::drop_mid_stream
};

class LocalCluster {
public:
    static Result<std::unique_ptr<LocalCluster>> start(LocalClusterOptions options = {});
    ~LocalCluster();  // stops; no pod process survives
    void stop();

    std::string url() const;
    std::uint16_t port() const;
    // The agent-sandbox router (http://address:port). It wants token() as a bearer token and
    // reaches the pod named by X-Sandbox-ID in X-Sandbox-Namespace. The Gateway
    // default/sandbox-router-gateway (gateway.networking.k8s.io/v1) publishes it too: the router's
    // address in status.addresses, its port in the HTTP listener.
    std::string router_url() const;
    const std::string& token() const;
    const std::string& ca_pem() const;  // empty for plain HTTP
    bool isolation_available() const;
    // Why pods cannot be isolated ("" when they can); pods then fail with reason
    // IsolationUnavailable and this message, unless allow_no_isolation is set.
    std::string isolation_problem() const;

    KubeConfig kube_config(std::string namespace_name = "default") const;
    Result<void> write_kubeconfig(const std::filesystem::path& path) const;
    // {"url": router_url(), "token": token()} as JSON, mode 0600 (kubesandbox-local writes it
    // beside its kubeconfig as <kubeconfig>.router, where the CLI finds it).
    Result<void> write_router_config(const std::filesystem::path& path) const;

    void add_fault(FaultRule rule);
    void clear_faults();
    // Requests a fault rule has hit so far: a test waits for its fault to be under way.
    std::size_t faults_applied() const;
    void expire_continue_tokens();  // every outstanding continue token now yields 410
    void expire_watches();          // every open watch gets an ERROR 410 and ends
    // Watches open on a resource (its plural, "pods"): a test waits for a client to be watching.
    std::size_t open_watches(std::string_view plural) const;
    // The API server as if restarted: its listener closes and every connection to it is cut
    // (watches, exec and port-forward streams included; no close frames); `down` later it listens
    // again on the same port. Objects and pods stay. Returns once the connections are cut.
    void restart_api_server(std::chrono::milliseconds down);
    // The sandbox router as if restarted: every connection through it is cut (requests in
    // flight fail, their commands keep running in the pods) and it listens again on its port.
    void restart_router();
    void set_router_delay(std::chrono::milliseconds delay);  // a slow router; 0 = none

    struct Impl;

private:
    explicit LocalCluster(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_{};
};

}  // namespace kubesandbox
