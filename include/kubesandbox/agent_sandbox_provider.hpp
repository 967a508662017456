// agent-sandbox mode's provider: sandboxes as kubernetes-sigs/agent-sandbox SandboxClaims
// (extensions.agents.x-k8s.io/v1beta1), served warm from a SandboxWarmPool or cold by the
// controller, and reached through a sandbox router (RouterSandbox over a RouterConnection).
// Stateless like raw mode: owner, TTLs and activity live in the claim's labels and annotations.
#pragma once

#include <kubesandbox/kube_client.hpp>
#include <kubesandbox/logger.hpp>
#include <kubesandbox/router_sandbox.hpp>
#include <kubesandbox/sandbox_provider.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

namespace kubesandbox {

// What the runtime-protocol seam gets for a ready claim.
struct RuntimeEndpoint {
    // Reaches the runtime's port: the router, a tunnel to the pod, or the pod's address.
    std::shared_ptr<RouterConnection> connection{};
    // The sandbox's name, namespace, port, pod IP, base dir, limits and activity callback.
    RouterSandboxOptions options{};
    // Another port of the same sandbox (a runtime that serves files and processes apart, as
    // sandboxd does), reached the way `connection` is: a tunnel or a direct connection of its
    // own; through the router, the router itself (requests name the port in X-Sandbox-Port).
    std::function<Result<std::shared_ptr<RouterConnection>>(std::uint16_t port)> connect_port{};
};

struct AgentSandboxProviderOptions {
    std::string namespace_name{"default"};
    // The claim's spec.warmPoolRef (v1beta1, agent-sandbox ≥ 0.5). With `template_name` set,
    // claims name the pool in the namespace that serves the template (warm_pool when it does);
    // on a cluster serving only v1alpha1 (before 0.5) they name the template
    // (spec.sandboxTemplateRef), and an empty warm_pool asks for a cold start (warmpool "none").
    // v1beta1 has no way to ask for a cold start but a pool of 0 replicas.
    std::string warm_pool{"python-runtime"};
    std::string template_name{};
    // Empty: chosen from the versions the cluster serves (one discovery read, kept).
    std::string claim_api_version{};
    std::shared_ptr<RouterConnection> connection{};  // how requests reach the router (unless *_to_pods)
    // No router: each sandbox is reached through its own port-forward tunnel (through the API
    // server, make_tunnel_connection) to runtime_port in its pod, the Sandbox's namesake
    // (agent-sandbox maps each Sandbox to a Pod of the same name).
    bool tunnel_to_pods{false};
    // No router, from inside the cluster: each sandbox's runtime at http://ADDRESS:runtime_port,
    // ADDRESS being the claim's status.sandbox.serviceFQDN when the controller reports one, else
    // its pod IP, else <sandbox>.<namespace>.svc.cluster.local (one direct connection each).
    // Wins over tunnel_to_pods when both are set.
    bool direct_to_pods{false};
    std::uint16_t runtime_port{8888};
    std::string base_dir{"/app"};  // the runtime's SANDBOX_BASE_DIR
    bool send_pod_ip{false};       // X-Sandbox-Pod-IP from the claim's status
    std::chrono::seconds ready_timeout{180};
    std::chrono::seconds default_exec_timeout{1800};
    std::size_t max_output_bytes{1024 * 1024};
    std::size_t max_file_bytes{256 * 1024 * 1024};
    std::map<std::string, std::string> env{};              // forces a cold start; the template must allow it
    std::map<std::string, std::string> pod_labels{};       // additionalPodMetadata
    std::map<std::string, std::string> pod_annotations{};  // additionalPodMetadata
    std::map<std::string, std::string> extra_labels{};     // verbatim keys, on the claim
    std::optional<std::int64_t> default_ttl_seconds{};     // also the claim's lifecycle.shutdownTime
    std::optional<std::int64_t> default_ttl_idle_seconds{};
    std::map<std::string, std::string> default_labels{};
    std::chrono::seconds activity_debounce{30};
    Logger logger{};
    // The runtime-protocol seam: makes the Sandbox for a ready claim. Empty = RouterSandbox
    // (python-runtime's API); a sandboxd client plugs in here, leaving the provider, the manager
    // and the file operations as they are.
    std::function<std::unique_ptr<Sandbox>(RuntimeEndpoint)> runtime{};
};

class AgentSandboxProvider final : public SandboxProvider {
public:
    AgentSandboxProvider(KubeClient client, AgentSandboxProviderOptions options);
    ~AgentSandboxProvider() override;
    AgentSandboxProvider(const AgentSandboxProvider&) = delete;
    AgentSandboxProvider& operator=(const AgentSandboxProvider&) = delete;

    const AgentSandboxProviderOptions& options() const;

    using SandboxProvider::cleanup;
    using SandboxProvider::get_or_create;
    using SandboxProvider::list;

    // Creates the claim (or finds it: a claim someone else made under our name is refused with
    // errc::conflict), waits for it with one watch, fails fast on the controller's terminal
    // reasons and deletes a claim it made that did not become ready. origin claimed_warm when the
    // controller adopted a warm pool sandbox.
    boost::asio::awaitable<Result<Acquisition>> acquire(GetOrCreateOptions options) override;
    boost::asio::awaitable<Result<SandboxInfo>> describe(std::string id) override;
    boost::asio::awaitable<Result<SandboxPage>> list(ListSandboxesOptions options) override;
    // Deletes the claim (the controller's owner references take the Sandbox and Pod with it); a
    // claim under the name that kubesandbox did not make is left alone (errc::conflict).
    boost::asio::awaitable<Result<bool>> delete_sandbox(std::string id) override;
    boost::asio::awaitable<Result<CleanupResult>> cleanup(CleanupOptions options) override;
    // The SandboxWarmPool's status (available = readyReplicas, target = spec.replicas).
    boost::asio::awaitable<Result<PoolStatus>> pool_status() override;
    boost::asio::awaitable<Result<ProviderStats>> stats() override;
    void record_activity(const std::string& id) override;

    // The claim name a caller id maps to (as raw mode names pods).
    static std::string claim_name_for(const std::string& id);

    struct State;

private:
    std::shared_ptr<State> state_;
};

}  // namespace kubesandbox
