// Raw mode's provider: sandboxes as plain, hardened Pods on any cluster, no controller or CRD,
// reached over the pods/exec WebSocket (PodExecSandbox).
#pragma once

#include <kubesandbox/kube_client.hpp>
#include <kubesandbox/logger.hpp>
#include <kubesandbox/pod_exec_sandbox.hpp>
#include <kubesandbox/sandbox_provider.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kubesandbox {

struct RawProviderOptions {
    std::string namespace_name{"default"};
    std::string image{"python:3.12-slim"};
    std::string image_pull_policy{"IfNotPresent"};
    std::vector<std::string> image_pull_secrets{};
    std::string workdir{"/workspace"};
    std::vector<std::string> command{"sleep", "infinity"};
    std::map<std::string, std::string> env{};
    std::string cpu_request{"100m"};
    std::string cpu_limit{"1000m"};
    std::string memory_request{"256Mi"};
    std::string memory_limit{"1Gi"};
    std::string ephemeral_storage_request{};
    std::string ephemeral_storage_limit{"5Gi"};
    std::int64_t run_as_user{1000};
    std::int64_t run_as_group{1000};
    std::string seccomp_profile{"RuntimeDefault"};
    std::string service_account{};  // empty = none; the token is never mounted either way
    std::map<std::string, std::string> node_selector{};
    boost::json::array tolerations{};
    boost::json::array volumes{};
    boost::json::array volume_mounts{};
    boost::json::array init_containers{};
    boost::json::object pod_template_overrides{};            // JSON-merge-patched into spec (null deletes)
    std::map<std::string, std::string> extra_labels{};       // verbatim keys
    std::map<std::string, std::string> extra_annotations{};  // verbatim keys
    std::chrono::seconds startup_timeout{120};
    std::chrono::seconds default_exec_timeout{1800};
    std::size_t max_output_bytes{1024 * 1024};
    // Shell sessions each sandbox keeps open between execute() calls, and for how long
    // (PodExecSandboxOptions::idle_shell_sessions); 0 gives every command an exec of its own.
    std::size_t idle_shell_sessions{2};
    std::chrono::seconds shell_session_idle_limit{60};
    bool shell_session_process_groups{false};
    std::string runtime_class_name{};  // e.g. gvisor, kata
    std::optional<std::int64_t> active_deadline_seconds{};
    bool read_only_root_filesystem{false};  // then emptyDirs for the workdir and /tmp
    std::string setup_script{};             // run once after Ready; failure deletes the sandbox
    bool block_network{true};               // deny-all NetworkPolicy, fail-closed
    bool namespace_per_sandbox{false};      // namespace + ResourceQuota + LimitRange per sandbox
    // Warm pods serve random sandboxes and, in shared-namespace mode, caller ids too: an id's
    // ConfigMap binding (named like the id's pod) names the warm pod serving it, and creating
    // that binding is the claim replicas agree on. Per-sandbox namespaces: caller ids start cold.
    int warm_pool_size{0};
    std::chrono::seconds activity_debounce{30};
    std::optional<std::int64_t> default_ttl_seconds{};
    std::optional<std::int64_t> default_ttl_idle_seconds{};
    std::map<std::string, std::string> default_labels{};  // user labels added to every sandbox
    std::chrono::seconds delete_grace_period{0};
    Logger logger{};  // failures of background work (warm-pool refill, activity, cleanup)
};

class RawProvider final : public SandboxProvider {
public:
    RawProvider(KubeClient client, RawProviderOptions options);
    ~RawProvider() override;
    RawProvider(const RawProvider&) = delete;
    RawProvider& operator=(const RawProvider&) = delete;

    const RawProviderOptions& options() const;

    using SandboxProvider::cleanup;
    using SandboxProvider::get_or_create;
    using SandboxProvider::list;

    boost::asio::awaitable<Result<Acquisition>> acquire(GetOrCreateOptions options) override;
    // The same, typed: raw mode's sandboxes also run argv directly (PodExecSandbox::run).
    boost::asio::awaitable<Result<std::unique_ptr<PodExecSandbox>>> get_or_create_pod(GetOrCreateOptions options);
    boost::asio::awaitable<Result<std::unique_ptr<PodExecSandbox>>> get_or_create_pod() {
        return get_or_create_pod(GetOrCreateOptions());
    }

    boost::asio::awaitable<Result<SandboxInfo>> describe(std::string id) override;
    boost::asio::awaitable<Result<SandboxPage>> list(ListSandboxesOptions options) override;

    // Sandbox ids: a caller id (mapped with pod_name_for), a sandbox's id() "<namespace>/<pod>"
    // (pod named by us, namespace this provider's), or a random sandbox's bare pod name.

    // Idempotent: false when nothing was there. Removes binding, pod, NetworkPolicy and namespace.
    boost::asio::awaitable<Result<bool>> delete_sandbox(std::string id) override;

    // Debounced, detached PATCH of last-activity; never waits.
    void record_activity(const std::string& id) override;

    // Deletes this provider's sandboxes (its namespace mode only) that are expired (TTL, idle
    // past max_idle or their ttl-idle-seconds), dead (terminal phase, a terminated container,
    // warm ones too), stuck failing to start, or abandoned mid-setup; then NetworkPolicies and
    // per-sandbox namespaces whose pod is gone, bindings whose pod is gone, and warm pods claimed
    // for an id that no binding names (all older than startup_timeout + 60 s).
    // A sandbox changed (activity, say) since it was listed is kept: the delete is
    // preconditioned on the listed resourceVersion.
    boost::asio::awaitable<Result<CleanupResult>> cleanup(CleanupOptions options) override;

    // Creates warm pods until warm_pool_size are alive (dead warm pods are deleted and replaced);
    // returns how many it created.
    boost::asio::awaitable<Result<int>> ensure_warm_pool() override;
    boost::asio::awaitable<Result<PoolStatus>> pool_status() override;
    boost::asio::awaitable<Result<ProviderStats>> stats() override;

    // The pod (and namespace) name a caller id maps to: "ksb-" + DNS-1123 form, hash suffix
    // when the id had to change (or could be mistaken for a hashed or random name), so distinct
    // ids never share a pod. A random sandbox's pod name maps to itself.
    static std::string pod_name_for(const std::string& id);

    struct State;

private:
    std::shared_ptr<State> state_;
};

}  // namespace kubesandbox
