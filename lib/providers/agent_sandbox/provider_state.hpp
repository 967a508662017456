// The agent-sandbox provider's shared state and its I/O around one claim: the claims' API
// version and shape (read once), waiting for a claim to be ready, deleting one, recording
// activity, and the Sandbox for a ready claim. Internal to the provider.
#pragma once

#include <kubesandbox/agent_sandbox_provider.hpp>

#include "providers/agent_sandbox/claims.hpp"

#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace kubesandbox {

struct AgentSandboxProvider::State {
    State(KubeClient c, AgentSandboxProviderOptions o) : client(std::move(c)), options(std::move(o)) {}
    KubeClient client;
    AgentSandboxProviderOptions options;
    std::mutex mutex;
    // Claim name -> when its last-activity PATCH went out.
    std::map<std::string, std::chrono::steady_clock::time_point> activity_sent;
    std::optional<std::string> version;              // the claims' API version, once known
    std::optional<agent_sandbox::ClaimShape> shape;  // dropped when the pool or template went
    std::uint64_t shape_generation = 0;              // counts the drops
};

namespace agent_sandbox {

using StatePtr = std::shared_ptr<AgentSandboxProvider::State>;

// The claims' API version: the option, or the cluster's choice read once from discovery.
boost::asio::awaitable<Result<std::string>> claim_version(StatePtr st);
// What a new claim names (pool or template), read from the namespace's pools when the options
// name the other one; kept until forget_shape().
boost::asio::awaitable<Result<ClaimShape>> claim_shape(StatePtr st);
void forget_shape(const StatePtr& st);
// The claims' collection in the provider's namespace, at the claims' version.
boost::asio::awaitable<Result<ResourcePath>> claims_path(StatePtr st);

// Debounced, detached PATCH of the claim's last-activity annotation.
void record_claim_activity(const StatePtr& st, const std::string& claim);
// The Sandbox for a ready claim (through the provider's connection, a tunnel or the pod).
std::unique_ptr<Sandbox> make_sandbox(const StatePtr& st, const std::string& claim, const ClaimState& state);
// Waits with one watch (re-established from the last resourceVersion, after one read on 410)
// until the claim `uid` names is ready, has failed for good, or the deadline passes.
boost::asio::awaitable<Result<ClaimState>> wait_ready(StatePtr st, std::string claim, std::string uid,
                                                      std::string resource_version,
                                                      std::chrono::steady_clock::time_point deadline);
// Deletes the claim `uid` names: a claim made again under its name by another caller meanwhile stays.
boost::asio::awaitable<void> delete_quietly(StatePtr st, std::string claim, std::string uid);

}  // namespace agent_sandbox

}  // namespace kubesandbox
