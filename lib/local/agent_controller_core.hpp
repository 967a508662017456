// Sans-IO rules of the local cluster's agent-sandbox controller (shared/spec/agent-sandbox.md
// §1, §5): the objects it makes (Pods for Sandboxes, Sandboxes for claims and warm pools), the
// patch that adopts a warm Sandbox for a claim, and the status it reports. JSON in, JSON out.
#pragma once

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kubesandbox::local::agents {

namespace json = boost::json;

inline constexpr const char* sandbox_api = "agents.x-k8s.io/v1beta1";
inline constexpr const char* extensions_api = "extensions.agents.x-k8s.io/v1beta1";
inline constexpr const char* name_hash_label = "agents.x-k8s.io/sandbox-name-hash";
inline constexpr const char* warm_pool_label = "agents.x-k8s.io/warm-pool-sandbox";
inline constexpr const char* launch_type_label = "agents.x-k8s.io/launch-type";
inline constexpr const char* claim_uid_label = "agents.x-k8s.io/claim-uid";
inline constexpr const char* created_by_label = "agents.x-k8s.io/created-by";
inline constexpr const char* template_ref_hash_label = "agents.x-k8s.io/sandbox-template-ref-hash";
inline constexpr const char* pod_name_annotation = "agents.x-k8s.io/pod-name";
inline constexpr const char* sandbox_name_annotation = "agents.x-k8s.io/sandbox-name";
inline constexpr const char* template_ref_annotation = "agents.x-k8s.io/sandbox-template-ref";

// FNV-1a 32-bit of `name`, 8 lowercase hex digits (the sandbox-name-hash label).
std::string name_hash(std::string_view name);

// A controller ownerReference to `owner` (its apiVersion, kind, name, uid).
json::object controller_ref(const json::object& owner);
// Whether `object` names `owner_uid` as its controller.
bool controlled_by(const json::object& object, std::string_view owner_uid);

// The Pod a Sandbox runs: named like it, its pod template, owned by it.
json::object pod_for_sandbox(const json::object& sandbox);

// A metav1.Condition list with `type` set; lastTransitionTime kept when the status is unchanged.
json::array set_condition(const json::array& conditions, std::string_view type, bool status, std::string_view reason,
                          std::string_view message, std::int64_t generation, const std::string& now);

// The Sandbox's status from its Pod (null when there is none) and expiry.
json::object sandbox_status(const json::object& sandbox, const json::object* pod, bool expired, const std::string& now,
                            const json::object* service = nullptr);
bool sandbox_ready(const json::object& sandbox);

// spec.service: true = the Sandbox wants its headless Service, false = delete it, unset = keep
// whatever exists (create none).
std::optional<bool> sandbox_wants_service(const json::object& sandbox);

// That Service: named after the Sandbox and owned by it, headless, selecting its pod by name
// hash, one port per container port (named after it, else p-<port>-<protocol>).
json::object service_for_sandbox(const json::object& sandbox);
json::array sandbox_pod_ips(const json::object& sandbox);

// A warm pool's Sandbox: generateName "<pool>-", the template's blueprint, owned by the pool.
json::object warm_sandbox(const json::object& pool, const json::object& sandbox_template);

// Why a claim cannot be served (reason, message), from the pool and template it names (null when
// missing) — TemplateNotFound, WarmPoolNotFound, EnvVarsInjectionRejected, InvalidMetadata.
struct ClaimFailure {
    std::string reason, message;
};
std::optional<ClaimFailure> claim_failure(const json::object& claim, const json::object* pool,
                                          const json::object* sandbox_template);

// The pool a claim names (spec.warmPoolRef.name), or for a v1alpha1-shaped claim
// (spec.sandboxTemplateRef) "" with the template name in `template_name`.
std::string claim_pool_name(const json::object& claim, std::string& template_name);

// Whether the claim must start cold (env or volumeClaimTemplates set).
bool claim_forces_cold(const json::object& claim);

// The cold-start Sandbox for a claim: named like it, the template's blueprint with the claim's
// env and pod metadata, owned by it.
json::object cold_sandbox(const json::object& claim, const json::object& sandbox_template);

// The merge patch that hands a warm pool Sandbox to a claim.
json::object adoption_patch(const json::object& sandbox, const json::object& claim);

// The claim's status: bound sandbox name, pod IPs and the Sandbox's Ready condition forwarded
// (null sandbox: Ready=False with `reason`/`message`).
json::object claim_status(const json::object& claim, const json::object* sandbox, std::string_view reason,
                          std::string_view message, const std::string& now);

// RFC 3339 spec.lifecycle.shutdownTime (claim) or spec.shutdownTime (sandbox) as Unix seconds.
std::optional<std::int64_t> shutdown_time(const json::object& object, bool claim);

// The warm pool's status from the ready and total counts.
json::object pool_status(const json::object& pool, int replicas, int ready);

}  // namespace kubesandbox::local::agents
