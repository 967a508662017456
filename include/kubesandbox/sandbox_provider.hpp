// The provider interface every mode implements (raw pods; agent-sandbox claims later), and the
// mode-neutral types it speaks. A SandboxManager is written against this interface alone.
// Providers are stateless: owner, TTLs, activity and warm-pool membership live in labels and
// annotations in the cluster, so many processes can share one namespace safely.
#pragma once

#include <kubesandbox/error.hpp>
#include <kubesandbox/sandbox.hpp>

#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kubesandbox {

// Label and annotation keys on every object a provider makes, all under one project prefix.
namespace keys {
inline constexpr const char* prefix = "kubesandbox.io/";
inline constexpr const char* managed_by = "kubesandbox.io/managed-by";  // label, value "kubesandbox"
inline constexpr const char* managed_by_value = "kubesandbox";
inline constexpr const char* sandbox_id = "kubesandbox.io/sandbox-id";    // label, sanitised id
inline constexpr const char* pool_status = "kubesandbox.io/pool-status";  // label, warm | active
inline constexpr const char* created_at = "kubesandbox.io/created-at";    // annotation, always
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
}  // namespace keys

struct GetOrCreateOptions {
    // Caller id (thread/session id): a deterministic name; empty = a new random sandbox
    // (served from the warm pool when there is one).
    std::optional<std::string> sandbox_id{};
    std::map<std::string, std::string> labels{};  // stored as kubesandbox.io/<key>, values sanitised
    std::optional<std::int64_t> ttl_seconds{};
    std::optional<std::int64_t> ttl_idle_seconds{};
    bool create_if_missing{true};  // false: errc::not_found when the sandbox is not there
};

// How a provider came by the sandbox it returned.
enum class SandboxOrigin {
    existing,      // it was there and alive
    created,       // this call created it
    adopted,       // a concurrent caller (another process, maybe) created it; this call waited for it
    claimed_warm,  // taken from the warm pool
    replaced,      // it was there but dead: this call deleted it and created a new, empty one
};

struct Acquisition {
    std::unique_ptr<Sandbox> sandbox{};
    SandboxOrigin origin{SandboxOrigin::existing};
    // Tells two incarnations under one id apart (a pod's uid): a different value than last time
    // means the sandbox was re-created in between, by whoever.
    std::string instance{};
};

struct SandboxInfo {
    std::string id{};  // the caller id (original), or the object name for random sandboxes
    std::string namespace_name{};
    std::string pod_name{};
    std::string status{};                         // pending | running | warm | terminated | failed
    std::map<std::string, std::string> labels{};  // user labels, prefix stripped
    std::string created_at{};
    std::string last_activity{};
    std::string instance{};  // as Acquisition::instance (a pod's uid)
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

struct CleanupOptions {
    // Reap running sandboxes idle for longer than this, whatever their own ttl-idle-seconds.
    std::optional<std::chrono::seconds> max_idle{};
    // Asked for each sandbox about to be reaped for expiry; false keeps it (one in use here).
    // Called on the provider's caller's executor, between listing and deleting.
    std::function<bool(const SandboxInfo&)> may_delete{};
    // Deletions in flight at once (the client's rate limit still applies); at least 1.
    std::size_t concurrency{16};
};

struct CleanupError {
    std::string id{};
    Error error{};
};

struct CleanupResult {
    std::vector<std::string> deleted{};  // sandbox ids
    // Leftovers whose sandbox was gone: "networkpolicy <ns>/<name>", "namespace <name>".
    std::vector<std::string> orphans_deleted{};
    int kept{0};
    std::vector<CleanupError> errors{};
};

struct PoolStatus {
    int available{0};  // warm and Ready
    int active{0};     // claimed or created sandboxes
    int total{0};
    int target{0};
    // This provider is creating warm sandboxes in the background now (raw mode after claims;
    // an agent-sandbox pool is filled by the cluster's controller, never by the provider).
    bool refilling{false};
};

struct ProviderStats {
    int total{0};
    int running{0};
    int pending{0};
    int warm{0};
    int failed{0};
    int idle{0};  // running with no activity for the idle threshold (default 300 s)
};

class SandboxProvider {
public:
    virtual ~SandboxProvider() = default;

    // Sandbox ids accepted everywhere: a caller id, a sandbox's id() "<namespace>/<name>", or a
    // random sandbox's bare name.

    // The caller's sandbox, created (or adopted after a concurrent create) when missing, with how
    // it was come by. A dead sandbox is replaced (origin replaced), or with create_if_missing
    // false reported as errc::not_found.
    virtual boost::asio::awaitable<Result<Acquisition>> acquire(GetOrCreateOptions options) = 0;

    // acquire() without the origin.
    boost::asio::awaitable<Result<std::unique_ptr<Sandbox>>> get_or_create(GetOrCreateOptions options);
    boost::asio::awaitable<Result<std::unique_ptr<Sandbox>>> get_or_create() {
        return get_or_create(GetOrCreateOptions());
    }
    // An existing sandbox only: errc::not_found when it is gone.
    boost::asio::awaitable<Result<std::unique_ptr<Sandbox>>> reconnect(std::string id) {
        GetOrCreateOptions options;
        options.sandbox_id = std::move(id);
        options.create_if_missing = false;
        return get_or_create(std::move(options));
    }

    // What the cluster holds for the sandbox, without touching it (no activity recorded);
    // errc::not_found when it is not there.
    virtual boost::asio::awaitable<Result<SandboxInfo>> describe(std::string id) = 0;

    // One page of this provider's sandboxes; pass next_cursor back for the next one.
    virtual boost::asio::awaitable<Result<SandboxPage>> list(ListSandboxesOptions options) = 0;
    boost::asio::awaitable<Result<SandboxPage>> list() { return list(ListSandboxesOptions()); }

    // Idempotent: false when nothing was there.
    virtual boost::asio::awaitable<Result<bool>> delete_sandbox(std::string id) = 0;

    // Deletes expired, dead and abandoned sandboxes (and their leftovers).
    // A sandbox someone else deleted or touched meanwhile is counted as kept, not as deleted.
    virtual boost::asio::awaitable<Result<CleanupResult>> cleanup(CleanupOptions options) = 0;
    boost::asio::awaitable<Result<CleanupResult>> cleanup(std::optional<std::chrono::seconds> max_idle) {
        CleanupOptions options;
        options.max_idle = max_idle;
        return cleanup(std::move(options));
    }
    boost::asio::awaitable<Result<CleanupResult>> cleanup() { return cleanup(CleanupOptions()); }

    // Tops the warm pool up to its configured size; how many sandboxes it started. Providers
    // without a pool start none.
    virtual boost::asio::awaitable<Result<int>> ensure_warm_pool();

    virtual boost::asio::awaitable<Result<PoolStatus>> pool_status() = 0;
    virtual boost::asio::awaitable<Result<ProviderStats>> stats() = 0;

    // Debounced, detached update of the sandbox's last activity; never waits.
    virtual void record_activity(const std::string& id) = 0;
};

}  // namespace kubesandbox
