// Sans-IO core of the agent-sandbox provider: the SandboxClaim it creates, what a claim's status
// says (pending, ready, failed for good), and the claim as a SandboxInfo.
#pragma once

#include <kubesandbox/agent_sandbox_provider.hpp>

#include "providers/agent_sandbox/claim_shape.hpp"

#include <boost/json/object.hpp>

#include <string>

namespace kubesandbox::agent_sandbox {

ResourcePath claims_path(const std::string& namespace_name, const std::string& api_version);

// The claim: our labels/annotations (`labels`, `annotations`), the pool or template reference of
// `shape`, lifecycle.shutdownTime (now + ttl, policy Delete) and additionalPodMetadata / env.
boost::json::object build_claim(const AgentSandboxProviderOptions& options, const ClaimShape& shape,
                                const std::string& name, boost::json::object labels, boost::json::object annotations,
                                std::optional<std::int64_t> ttl_seconds, std::chrono::system_clock::time_point now);

struct ClaimState {
    enum class Kind { pending, ready, failed } kind = Kind::pending;
    std::string sandbox_name;  // status.sandbox.name (or the older .Name)
    std::string pod_ip;        // first IPv4 of status.sandbox.podIPs, else the first
    std::string service_fqdn;  // status.sandbox.serviceFQDN (controllers ≥ 1.0, with a Service)
    std::string reason, message;
};

// Ready = a sandbox name and Ready=True. Failed = a terminal reason (InvalidMetadata,
// EnvVarsInjectionRejected, VolumeClaimTemplatesError, ClaimExpired, SandboxExpired,
// TemplateNotFound, WarmPoolNotFound, PodFailed, PodSucceeded) or the claim being deleted.
ClaimState evaluate_claim(const boost::json::object& claim);

// Where a client inside the cluster reaches the sandbox's runtime without the router:
// http://<serviceFQDN>:port when the controller reported one (it follows a replaced pod), else
// the pod IP, else the Sandbox's DNS name in `namespace_name`. Values that are not a plain
// hostname or IP are not used.
std::string in_cluster_url(const ClaimState& state, const std::string& namespace_name, std::uint16_t port);

// pending | running | terminated | failed, as SandboxInfo::status.
SandboxInfo claim_info(const boost::json::object& claim);

}  // namespace kubesandbox::agent_sandbox
