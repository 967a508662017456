// Raw provider internals shared by its I/O files: the provider's state (a client, the options
// and a little memory: the activity debounce table and the refill flag) and the operations
// the façade composes. Everything else lives in the cluster.
#pragma once

#include <kubesandbox/kube_client.hpp>
#include <kubesandbox/raw_provider.hpp>

#include "providers/raw/manifests.hpp"
#include "providers/raw/naming.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/json/object.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kubesandbox {

struct RawProvider::State {
    KubeClient client;
    RawProviderOptions options;
    std::string config_hash{};  // label value of this configuration's warm pods
    std::mutex mutex{};         // guards what follows
    std::unordered_map<std::string, std::chrono::steady_clock::time_point> last_patch{};
    bool refilling{false};
    bool refill_again{false};

    State(KubeClient c, RawProviderOptions o);
};

namespace raw {

using StatePtr = std::shared_ptr<RawProvider::State>;
using steady_time = std::chrono::steady_clock::time_point;

// acquire.cpp
struct PodAcquisition {
    std::unique_ptr<PodExecSandbox> sandbox;
    SandboxOrigin origin = SandboxOrigin::existing;
    std::string uid;
};
boost::asio::awaitable<Result<PodAcquisition>> acquire(StatePtr st, GetOrCreateOptions options);
// Where a target's pod is: the id's own name, or the pod its binding names (with the binding).
struct Located {
    std::string ns;
    std::string pod;
    std::optional<boost::json::object> binding;
};
boost::asio::awaitable<Result<Located>> locate(StatePtr st, Target target);

// readiness.cpp: until the pod is Ready (and, with require_setup, its creator's setup_script
// done), by watch from `initial`'s resourceVersion; fails fast on terminal states.
boost::asio::awaitable<Result<void>> wait_ready(StatePtr st, std::string ns, std::string name,
                                                boost::json::object initial, steady_time deadline, bool require_setup);
// Until the pod with `uid` is gone (or replaced).
boost::asio::awaitable<Result<void>> wait_gone(StatePtr st, std::string ns, std::string pod, std::string uid,
                                               steady_time deadline);

// lifecycle.cpp
struct CreateOutcome {
    bool adopted{false};  // someone else created the pod; we waited for its setup
    std::string uid{};
};
boost::asio::awaitable<Result<CreateOutcome>> create_and_wait(StatePtr st, std::string name, Identity identity,
                                                              bool deterministic, bool warm);
// The sandbox's deny-all NetworkPolicy exists, is ours and is owned by the pod (re-created or
// re-owned when not); errors refuse the sandbox. No-op without block_network.
boost::asio::awaitable<Result<void>> ensure_network_policy(StatePtr st, const std::string& ns, const std::string& name,
                                                           const std::string& sandbox_label, const std::string& uid);
// Removes pod, NetworkPolicy and (optionally) the per-sandbox namespace, only when ours.
// `expected_version`: the pod's resourceVersion when the caller decided ("" = any); a pod
// changed since is not deleted (errc::conflict). No default argument: g++ 12 destroys a braced
// default twice inside co_await.
boost::asio::awaitable<Result<bool>> delete_objects(StatePtr st, std::string ns, std::string pod,
                                                    std::optional<std::string> expected_label, bool remove_namespace,
                                                    std::string expected_version);
// delete_objects for a pod as a list returned it, for the reaper: no read first (the delete is
// preconditioned on the listed uid and resourceVersion, so a pod changed since is kept,
// errc::conflict) and no look at the pod's policy (owned, it goes with the pod; unowned, the
// reaper's policy sweep takes it). One request per sandbox.
boost::asio::awaitable<Result<bool>> delete_listed(StatePtr st, boost::json::object pod, bool remove_namespace);
boost::asio::awaitable<Result<void>> patch_annotations(StatePtr st, std::string ns, std::string pod,
                                                       boost::json::object annotations);
boost::asio::awaitable<Result<void>> patch_activity(StatePtr st, std::string ns, std::string pod);
boost::asio::awaitable<Result<std::vector<boost::json::object>>> list_all(StatePtr st, ResourcePath path,
                                                                          std::string selector);
std::unique_ptr<PodExecSandbox> make_sandbox(const StatePtr& st, const std::string& ns, const std::string& pod,
                                             const std::string& id);
void record_activity(const StatePtr& st, const std::string& id);

// warm_pool.cpp
boost::asio::awaitable<Result<int>> fill_pool(StatePtr st);
void spawn_refill(const StatePtr& st);
struct ClaimedPod {
    std::string ns;
    std::string name;
    std::string uid;
};
// A Ready warm pod of this configuration, claimed for the caller; nullopt when none was free.
// `caller_id`: the id it will serve under a binding (bound_identity); nullopt: its own name.
boost::asio::awaitable<Result<std::optional<ClaimedPod>>> claim_warm(StatePtr st,
                                                                     std::map<std::string, std::string> user_labels,
                                                                     std::optional<std::int64_t> ttl,
                                                                     std::optional<std::int64_t> ttl_idle,
                                                                     std::optional<std::string> caller_id);

// cleanup.cpp
boost::asio::awaitable<Result<CleanupResult>> cleanup(StatePtr st, CleanupOptions options);

}  // namespace raw
}  // namespace kubesandbox
