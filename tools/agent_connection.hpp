// How the CLI reaches agent-sandbox sandboxes (--connection): through the router at a URL found
// in flags, the environment or beside a kubesandbox-local kubeconfig (direct); at the router's
// cluster DNS name (in-cluster); at the address a Gateway publishes (gateway); or through a
// port-forward tunnel to each sandbox's pod via the API server (tunnel, no router needed).
#pragma once

#include <kubesandbox/agent_sandbox_provider.hpp>

#include <string>

namespace kubesandbox {
class LocalCluster;
}

namespace kubesandbox::cli {

struct AgentConnectionFlags {
    std::string connection{"direct"};  // direct | in-cluster | gateway | tunnel
    std::string router_url, router_token;
    std::string gateway_name{"sandbox-router-gateway"}, gateway_namespace{"default"};
    std::string kubeconfig;  // --kubeconfig, for the .router file beside it
};

// Sets agent.connection (direct, in-cluster, gateway; made with `client`'s executor, the
// gateway watched with its credentials) or agent.tunnel_to_pods (tunnel). errc::invalid_config
// with a message for the user when the router cannot be found or the choice is unknown.
Result<void> choose_agent_connection(const AgentConnectionFlags& flags, const LocalCluster* cluster, KubeClient& client,
                                     AgentSandboxProviderOptions& agent);

}  // namespace kubesandbox::cli
