// Sans-IO core of the agent-sandbox provider: the SandboxClaim it creates, what a claim's status
// says (pending, ready, failed for good), and the claim as a SandboxInfo.
#pragma once

#include <kubesandbox/agent_sandbox_provider.hpp>

#include <boost/json/object.hpp>

#include <string>

namespace kubesandbox::agent_sandbox {

ResourcePath claims_path(const AgentSandboxProviderOptions& options);

// The claim: our labels/annotations (`labels`, `annotations`), the pool or template reference,
// lifecycle.shutdownTime (now + ttl, policy Delete) and additionalPodMetadata / env.
boost::json::object build_claim(const AgentSandboxProviderOptions& options, const std::string& name,
                                boost::json::object labels, boost::json::object annotations,
                                std::optional<std::int64_t> ttl_seconds, std::chrono::system_clock::time_point now);

struct ClaimState {
    enum class Kind { pending, ready, failed } kind = Kind::pending;
    std::string sandbox_name;  // status.sandbox.name (or the older .Name)
    std::string pod_ip;        // first IPv4 of status.sandbox.podIPs, else the first
    std::string reason, message;
};

// Ready = a sandbox name and Ready=True. Failed = a terminal reason (InvalidMetadata,
// EnvVarsInjectionRejected, VolumeClaimTemplatesError, ClaimExpired, SandboxExpired,
// TemplateNotFound, WarmPoolNotFound, PodFailed, PodSucceeded) or the claim being deleted.
ClaimState evaluate_claim(const boost::json::object& claim);

// pending | running | terminated | failed, as SandboxInfo::status.
SandboxInfo claim_info(const boost::json::object& claim);

}  // namespace kubesandbox::agent_sandbox
