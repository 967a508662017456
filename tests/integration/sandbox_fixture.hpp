// PodExecSandbox and KubeClient against the embedded local cluster: real pods, real exec
// WebSockets, real faults injected into the API server. One suite, SandboxTest, in two files:
// sandbox_test.cpp (commands: results, timeouts, cancellation, faults) and
// sandbox_transfer_test.cpp (files in and out, streamed output and input).
#pragma once

#include <kubesandbox/local_cluster.hpp>
#include <kubesandbox/pod_exec_sandbox.hpp>
#include <kubesandbox/raw_provider.hpp>

#include "../support/local_cluster_fixture.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <stdexcept>

namespace kubesandbox::test::sandbox {

namespace asio = boost::asio;
namespace json = boost::json;
using namespace std::chrono_literals;

// The sandbox's processes whose `ps` line matches the grep -E pattern, polled up to 10 s until
// none is left (a killed process takes a moment to go); what is still there, "?" if ps failed.
inline asio::awaitable<std::string> processes_left(Sandbox& s, std::string pattern) {
    std::string left = "?";
    for (int i = 0; i < 100 && !left.empty(); ++i) {
        auto ps = co_await s.execute("ps | grep -E '" + pattern + "' | grep -v grep || true");
        left = ps ? ps->output : "?";
        if (!left.empty()) co_await sleep_for(100ms);
    }
    co_return left;
}

class SandboxTest : public LocalClusterTest {
protected:
    RawProvider provider(std::string image = "busybox") {
        RawProviderOptions cfg;
        cfg.image = std::move(image);
        cfg.startup_timeout = 60s;
        return RawProvider(client(), cfg);
    }

    // Runs `body` (a coroutine taking the PodExecSandbox&) on a new busybox sandbox, bounded like
    // run(), and deletes the sandbox once it returns (not if it throws or overruns the bound).
    template <class Body>
    void with_sandbox(Body body) {
        with_sandbox(GetOrCreateOptions{}, std::move(body));
    }
    template <class Body>
    void with_sandbox(GetOrCreateOptions options, Body body) {
        auto p = provider();
        run([&]() -> asio::awaitable<void> {
            auto sb = co_await p.get_or_create_pod(options);
            EXPECT_TRUE(sb.has_value()) << (sb ? "" : sb.error().describe());
            if (!sb) co_return;
            co_await body(**sb);
            co_await p.delete_sandbox((*sb)->pod_name());
        });
    }
};

}  // namespace kubesandbox::test::sandbox
