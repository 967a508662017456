// Raw mode's provider: sandboxes as plain, hardened Pods on any cluster, no controller or CRD.
// Stateless: every fact (owner, TTLs, activity, warm-pool membership) lives in labels and
// annotations in the cluster, so many processes can share one namespace safely.
#pragma once

#include <kubesandbox/kube_client.hpp>
#include <kubesandbox/kubernetes_sandbox.hpp>

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

// Label and annotation keys, all under one project prefix.
namespace raw_keys {
inline constexpr const char* prefix = "kubesandbox.io/";
inline constexpr const char* managed_by = "kubesandbox.io/managed-by";  // label, value "kubesandbox"
inline constexpr const char* managed_by_value = "kubesandbox";
inline constexpr const char* sandbox_id = "kubesandbox.io/sandbox-id";      // label, sanitised id
inline constexpr const char* pool_status = "kubesandbox.io/pool-status";    // label, warm | active
inline constexpr const char* created_at = "kubesandbox.io/created-at";      // annotation, always
inline constexpr const char* ttl_seconds = "kubesandbox.io/ttl-seconds";
inline constexpr const char* ttl_idle_seconds = "kubesandbox.io/ttl-idle-seconds";
inline constexpr const char* last_activity = "kubesandbox.io/last-activity";
inline constexpr const char* id_original = "kubesandbox.io/thread-id-original";   // when the id was hashed
inline constexpr const char* labels_original = "kubesandbox.io/labels-original";  // JSON of changed values
// label, per-sandbox | shared: selectors of one mode never see the other mode's objects
inline constexpr const char* namespace_mode = "kubesandbox.io/namespace-mode";
// label, hash of the pod spec and security settings: warm pods are claimed only by equal configs
inline constexpr const char* config_hash = "kubesandbox.io/config-hash";
// annotations, random per call: tell our own retried request's effect from someone else's
inline constexpr const char* creation_token = "kubesandbox.io/creation-token";
inline constexpr const char* claim_token = "kubesandbox.io/claim-token";
// annotation, pending | done | failed: the creator's setup_script; others wait for done
inline constexpr const char* setup = "kubesandbox.io/setup";
}  // namespace raw_keys

struct RawProviderConfig {
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
    boost::json::object pod_template_overrides{};  // JSON-merge-patched into spec (null deletes)
    std::map<std::string, std::string> extra_labels{};       // verbatim keys
    std::map<std::string, std::string> extra_annotations{};  // verbatim keys
    std::chrono::seconds startup_timeout{120};
    std::chrono::seconds default_exec_timeout{1800};
    std::size_t max_output_bytes{1024 * 1024};
    std::string runtime_class_name{};  // e.g. gvisor, kata
    std::optional<std::int64_t> active_deadline_seconds{};
    bool read_only_root_filesystem{false};  // then emptyDirs for the workdir and /tmp
    std::string setup_script{};             // run once after Ready; failure deletes the sandbox
    bool block_network{true};               // deny-all NetworkPolicy, fail-closed
    bool namespace_per_sandbox{false};      // namespace + ResourceQuota + LimitRange per sandbox
    int warm_pool_size{0};
    std::chrono::seconds activity_debounce{30};
    std::optional<std::int64_t> default_ttl_seconds{};
    std::optional<std::int64_t> default_ttl_idle_seconds{};
    std::map<std::string, std::string> default_labels{};  // user labels added to every sandbox
    std::chrono::seconds delete_grace_period{0};
};

struct GetOrCreateOptions {
    // Caller id (thread/session id): a deterministic pod name; empty = a new random sandbox
    // (served from the warm pool when there is one).
    std::optional<std::string> sandbox_id{};
    std::map<std::string, std::string> labels{};  // stored as kubesandbox.io/<key>, values sanitised
    std::optional<std::int64_t> ttl_seconds{};
    std::optional<std::int64_t> ttl_idle_seconds{};
    bool create_if_missing{true};
};

struct SandboxInfo {
    std::string id{};  // the caller id (original), or the pod name for random sandboxes
    std::string namespace_name{};
    std::string pod_name{};
    std::string status{};  // pending | running | warm | terminated | failed
    std::map<std::string, std::string> labels{};  // user labels, prefix stripped
    std::string created_at{};
    std::string last_activity{};
};

struct ListSandboxesOptions {
    std::map<std::string, std::string> labels{};  // user labels (unprefixed)
    std::optional<std::string> status{};
    std::optional<std::int64_t> limit{};
    std::string cursor{};
    bool include_warm{false};
};

struct SandboxPage {
    std::vector<SandboxInfo> items{};
    std::string next_cursor{};  // empty on the last page
};

struct CleanupError {
    std::string id{};
    Error error{};
};

struct CleanupResult {
    std::vector<std::string> deleted{};  // sandbox ids
    // Leftovers whose sandbox pod was gone: "networkpolicy <ns>/<name>", "namespace <name>".
    std::vector<std::string> orphans_deleted{};
    int kept{0};
    std::vector<CleanupError> errors{};
};

struct PoolStatus {
    int available{0};  // warm and Ready
    int active{0};     // claimed or created sandboxes
    int total{0};
    int target{0};
};

struct ProviderStats {
    int total{0};
    int running{0};
    int pending{0};
    int warm{0};
    int failed{0};
    int idle{0};  // running with no activity for the idle threshold (default 300 s)
};

class RawProvider {
public:
    RawProvider(KubeClient client, RawProviderConfig config);
    ~RawProvider();
    RawProvider(const RawProvider&) = delete;
    RawProvider& operator=(const RawProvider&) = delete;

    const RawProviderConfig& config() const;

    boost::asio::awaitable<Result<std::unique_ptr<KubernetesSandbox>>> get_or_create(GetOrCreateOptions options);
    boost::asio::awaitable<Result<std::unique_ptr<KubernetesSandbox>>> get_or_create() {
        return get_or_create(GetOrCreateOptions());
    }

    boost::asio::awaitable<Result<SandboxPage>> list(ListSandboxesOptions options);
    boost::asio::awaitable<Result<SandboxPage>> list() { return list(ListSandboxesOptions()); }

    // Sandbox ids accepted everywhere: a caller id (mapped with pod_name_for), a sandbox's id()
    // "<namespace>/<pod>" (pod named by us, namespace this provider's), or a random sandbox's
    // bare pod name.

    // Idempotent: false when nothing was there. Removes pod, NetworkPolicy and namespace.
    boost::asio::awaitable<Result<bool>> delete_sandbox(std::string id);

    // Debounced, detached PATCH of last-activity; never waits.
    void record_activity(const std::string& id);

    // Deletes this provider's sandboxes (its namespace mode only) that are expired (TTL, idle
    // past max_idle or their ttl-idle-seconds), dead (terminal phase, a terminated container,
    // warm ones too), stuck failing to start, or abandoned mid-setup; then NetworkPolicies and
    // per-sandbox namespaces whose pod is gone (older than startup_timeout + 60 s).
    boost::asio::awaitable<Result<CleanupResult>> cleanup(std::optional<std::chrono::seconds> max_idle);
    boost::asio::awaitable<Result<CleanupResult>> cleanup() { return cleanup(std::nullopt); }

    // Creates warm pods until warm_pool_size are present; returns how many it created.
    boost::asio::awaitable<Result<int>> ensure_warm_pool();
    boost::asio::awaitable<Result<PoolStatus>> pool_status();
    boost::asio::awaitable<Result<ProviderStats>> stats();

    // The pod (and namespace) name a caller id maps to: "ksb-" + DNS-1123 form, hash suffix
    // when the id had to change (or could be mistaken for a hashed or random name), so distinct
    // ids never share a pod. A random sandbox's pod name maps to itself.
    static std::string pod_name_for(const std::string& id);

    struct State;

private:
    std::shared_ptr<State> state_;
};

}  // namespace kubesandbox
