// The local cluster's agent-sandbox controller: a client of the cluster's own API (list-watch of
// claims, warm pools, templates, sandboxes and their pods) that does what the kubernetes-sigs
// controller does — Pods for Sandboxes, warm pools kept filled, claims bound warm (adopting a
// pool Sandbox, renamed as upstream) or cold, conditions and terminal reasons, shutdownTime.
// Rules in agent_controller_core.hpp. Runs on the cluster's executor.
#pragma once

#include <kubesandbox/kube_client.hpp>
#include <kubesandbox/logger.hpp>

#include <boost/asio/any_io_executor.hpp>

#include <functional>
#include <memory>

namespace kubesandbox::local {

struct AgentControllerOptions {
    // The SandboxTemplates python-runtime and busybox-runtime and their SandboxWarmPools (same
    // names) in namespace default, created at start.
    bool create_defaults = true;
    int default_pool_replicas = 1;
};

class AgentController {
public:
    AgentController(boost::asio::any_io_executor executor, KubeClient client, AgentControllerOptions options,
                    Logger logger);
    ~AgentController();

    // `defaults_created` is called (on the executor) once the default templates and pools exist.
    void start(std::function<void()> defaults_created = {});
    void stop();  // on the executor

    struct Impl;

private:
    std::shared_ptr<Impl> impl_;
};

}  // namespace kubesandbox::local
