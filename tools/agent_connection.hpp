// How the CLI reaches agent-sandbox sandboxes (--connection): through the router at a URL found
// in flags, the environment or beside a kubesandbox-local kubeconfig (direct); at the router's
// cluster DNS name (in-cluster); at the address a Gateway publishes (gateway); through a
// port-forward to the router's Service via the API server (tunnel) or via a kubectl child
// (kubectl-tunnel); or with no router, a port-forward to each sandbox's pod (pod-tunnel) or, inside
// the cluster, its address (pod-direct).
#pragma once

#include <kubesandbox/agent_sandbox_provider.hpp>

#include <string>

namespace kubesandbox {
class LocalCluster;
}

namespace kubesandbox::cli {

struct AgentConnectionFlags {
    std::string connection{
        "direct"};  // direct | in-cluster | gateway | tunnel | kubectl-tunnel | pod-tunnel | pod-direct
    std::string router_url, router_token;
    std::string gateway_name{"sandbox-router-gateway"}, gateway_namespace{"default"};
    std::string router_service{"agent-sandbox-system/sandbox-router-svc:8080"};  // NS/NAME[:PORT]
    std::string kubeconfig;  // --kubeconfig, for the .router file beside it (and kubectl)
    std::string context;     // --context, for kubectl
};

// Sets agent.connection (made with `client`'s executor and credentials), agent.tunnel_to_pods
// (pod-tunnel) or agent.direct_to_pods (pod-direct). errc::invalid_config
// with a message for the user when the router cannot be found or the choice is unknown.
Result<void> choose_agent_connection(const AgentConnectionFlags& flags, const LocalCluster* cluster, KubeClient& client,
                                     AgentSandboxProviderOptions& agent);

}  // namespace kubesandbox::cli
