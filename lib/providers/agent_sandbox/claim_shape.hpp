// Sans-IO: which SandboxClaim shape a cluster's agent-sandbox takes. v1beta1 (agent-sandbox ≥ 0.5,
// the only version from 1.0) names a SandboxWarmPool (spec.warmPoolRef, required) and reaches the
// template through it; v1alpha1 names a SandboxTemplate (spec.sandboxTemplateRef) and a pool
// choice (spec.warmpool: none | default | a pool's name).
#pragma once

#include <kubesandbox/agent_sandbox_provider.hpp>
#include <kubesandbox/error.hpp>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

#include <string>
#include <vector>

namespace kubesandbox::agent_sandbox {

inline constexpr const char* claims_group = "extensions.agents.x-k8s.io";

struct ClaimShape {
    std::string api_version;    // of the claims, and of the pools the provider reads
    std::string warm_pool;      // the pool named (v1beta1 always; v1alpha1 when one is chosen)
    std::string template_name;  // v1alpha1: spec.sandboxTemplateRef.name
    bool cold = false;          // v1alpha1: spec.warmpool "none"
};

// The versions an APIGroup discovery document lists (versions[].version), in its order.
std::vector<std::string> served_versions(const boost::json::object& api_group);

// The version to speak: options.claim_api_version when set, else v1beta1 when the cluster serves
// it, else v1alpha1. Where both are served (agent-sandbox 0.5), v1alpha1 claims pass a conversion
// webhook that names the pool "shadow-pool-<template>", which may not exist; so a template goes
// through the pool that serves it there too. `served` empty: the group is not served.
Result<std::string> choose_claim_version(const AgentSandboxProviderOptions& options,
                                         const std::vector<std::string>& served);

// Whether the shape for `version` needs the namespace's SandboxWarmPools: v1beta1 asked for a
// template (the pool that serves it), v1alpha1 asked for a pool (the template behind it).
bool shape_needs_pools(const AgentSandboxProviderOptions& options, const std::string& version);

// The shape for `version`. `pools` (SandboxWarmPool objects) are read only when
// shape_needs_pools said so. v1beta1 for a template takes options.warm_pool when that pool serves
// the template, else the first by name that does; with none, errc::invalid_config.
Result<ClaimShape> complete_claim_shape(const AgentSandboxProviderOptions& options, const std::string& version,
                                        const boost::json::array& pools);

}  // namespace kubesandbox::agent_sandbox
