// The objects raw mode creates, as JSON: the hardened sandbox Pod, its deny-all NetworkPolicy,
// the per-sandbox Namespace with its ResourceQuota and LimitRange, the labels and annotations
// that make the cluster the only state. Pure functions; the caller supplies times and tokens.
#pragma once

#include <kubesandbox/error.hpp>
#include <kubesandbox/raw_provider.hpp>

#include <boost/json/object.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace kubesandbox::raw {

// Labels and annotations of one sandbox: computed once, used for creation or a warm claim.
struct Identity {
    std::string id;              // caller id, or the pod name
    std::string label;           // sanitised id
    boost::json::object labels;  // full pod labels (without pool-status)
    boost::json::object annotations;
};

// Fails with invalid_argument for reserved or invalid user label keys.
Result<Identity> make_identity(const RawProviderOptions& options, const std::string& id,
                               const std::map<std::string, std::string>& user_labels, std::optional<std::int64_t> ttl,
                               std::optional<std::int64_t> ttl_idle, const std::string& created_at);

boost::json::object build_pod(const RawProviderOptions& options, const std::string& name, boost::json::object labels,
                              boost::json::object annotations);

// The deny-all policy; `owner_uid` (when known) makes it the pod's dependent, so it goes with
// the pod even when the pod is deleted behind our back.
boost::json::object build_network_policy(const RawProviderOptions& options, const std::string& pod,
                                         const std::string& sandbox_label, const std::string& token,
                                         const std::string& owner_uid, const std::string& created_at);
// A merge patch that makes the policy the pod's dependent.
boost::json::object owner_patch(const std::string& pod, const std::string& uid);

boost::json::object build_namespace(const std::string& name, const std::string& sandbox_label, const std::string& token,
                                    const std::string& created_at);
boost::json::object build_resource_quota(const RawProviderOptions& options, const std::string& sandbox_label);
boost::json::object build_limit_range(const RawProviderOptions& options, const std::string& sandbox_label);

// The merge patch that claims a warm pod: a resourceVersion precondition, the claimer's
// identity, pool-status active and a claim token unique to the call.
boost::json::object warm_claim_patch(const Identity& identity, const std::string& resource_version,
                                     const std::string& token, const std::string& now,
                                     std::optional<std::int64_t> active_deadline);
// The activeDeadlineSeconds a claimed warm pod gets: its absolute TTL counted from the claim
// (the pod has run `running_for` seconds), never above the configured deadline; nullopt: no TTL.
std::optional<std::int64_t> claimed_deadline(const Identity& identity, std::optional<std::int64_t> configured,
                                             std::int64_t running_for);

// The identity a warm pod takes when claimed for a caller id under a binding: the caller's
// labels and TTLs, the id in its id annotation, but the pod's own sandbox-id label, which its
// deny-all NetworkPolicy selects (relabelling would open the pod's network).
Identity bound_identity(Identity caller, const std::string& pod);

// Shared-namespace mode binds a caller id to the pod serving it with a ConfigMap named like the
// id's own pod: creating it claims the id (409: someone else did), its data names the pod (the
// id's own pod name, or a claimed warm pod, which then owns the binding).
boost::json::object build_binding(const RawProviderOptions& options, const std::string& name,
                                  const std::string& sandbox_label, const std::string& pod, const std::string& pod_uid,
                                  const std::string& token, const std::string& created_at);
// The pod a binding names; "" when it names none validly.
std::string bound_pod(const boost::json::object& binding);

// Why a sandbox pod spec (after pod_template_overrides) is weaker than the hardening: host
// namespaces, a mounted service-account token, hostPath volumes, a container that may be
// privileged, escalate, run as root or keep capabilities; nullopt when it is not.
std::optional<std::string> hardening_problem(const boost::json::object& spec);
boost::json::object annotations_patch(boost::json::object annotations);

// What makes warm pods interchangeable: the whole pod spec, the namespace mode, network
// blocking and the setup script.
std::string config_hash(const RawProviderOptions& options);

}  // namespace kubesandbox::raw
