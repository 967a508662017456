// The fixture of the RouterSandbox tests (router_sandbox_test.cpp, router_transfer_test.cpp): a
// local cluster, runtime pods on it, and sandboxes through its router.
#pragma once

#include <kubesandbox/router_sandbox.hpp>

#include "../support/local_cluster_fixture.hpp"
#include "../support/runtime_pod.hpp"

#include <boost/asio/awaitable.hpp>

#include <memory>
#include <string>

namespace kubesandbox::test::router {

namespace asio = boost::asio;

class RouterSandboxTest : public LocalClusterTest {
protected:
    // A runtime pod named `name` and a sandbox on it through the cluster's router, with options_.
    // (No default argument: g++ 12 mishandles them on coroutines.)
    asio::awaitable<std::unique_ptr<RouterSandbox>> sandbox(std::string name) {
        RouterSandboxOptions options = options_;
        auto kube = client();
        auto created = co_await test::create_runtime_pod(kube, "default", name, "busybox-runtime", "/app");
        EXPECT_TRUE(created) << (created ? "" : created.error().describe());
        if (!created) co_return nullptr;
        options.sandbox_name = name;
        co_return std::make_unique<RouterSandbox>(test::local_router(*cluster_, io_.get_executor()), options);
    }

    asio::awaitable<void> remove(std::string name) {
        auto kube = client();
        ResourcePath pod{"", "v1", "pods", "default", name};
        co_await kube.remove(pod);
    }

    RouterSandboxOptions options_;
};

}  // namespace kubesandbox::test::router
