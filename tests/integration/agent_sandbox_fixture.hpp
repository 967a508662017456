// AgentSandboxTest: a local cluster with the agent-sandbox controller, router and runtime (warm
// pools of 2), and providers reaching it through the local router.
#pragma once

#include <kubesandbox/agent_sandbox_provider.hpp>

#include "../support/local_cluster_fixture.hpp"
#include "../support/runtime_pod.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace kubesandbox::test::agent {

namespace asio = boost::asio;
using namespace std::chrono_literals;

class AgentSandboxTest : public LocalClusterTest {
protected:
    static void SetUpTestSuite() {
        LocalClusterOptions options;
        options.agent_sandbox = true;
        options.agent_sandbox_pool_replicas = 2;
        start_suite(options);
    }

    std::shared_ptr<AgentSandboxProvider> provider(AgentSandboxProviderOptions options) {
        if (!options.tunnel_to_pods) options.connection = local_router(*cluster_, io_.get_executor());
        options.ready_timeout = 60s;
        return std::make_shared<AgentSandboxProvider>(client(), std::move(options));
    }

    AgentSandboxProviderOptions busybox() {
        AgentSandboxProviderOptions o;
        o.warm_pool = "busybox-runtime";
        return o;
    }

    // Until the provider's warm pool has a ready sandbox (bounded by the test's deadline).
    asio::awaitable<void> pool_filled(AgentSandboxProvider& p) {
        for (;;) {
            auto ps = co_await p.pool_status();
            if (ps && ps->available >= 1) co_return;
            co_await sleep_for(50ms);
        }
    }

    asio::awaitable<std::size_t> claims_named(std::string name) {
        auto kube = client();
        ResourcePath p{"extensions.agents.x-k8s.io", "v1beta1", "sandboxclaims", "default", ""};
        auto got = co_await kube.get(p.with_name(name));
        co_return got ? 1u : 0u;
    }
};

}  // namespace kubesandbox::test::agent
