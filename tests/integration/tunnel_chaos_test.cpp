// The native tunnel when the API server restarts: the call in flight fails as cut short and is
// not sent again; calls meanwhile fail at once (the back-off); the tunnel comes back by itself.
#include <kubesandbox/router_connection.hpp>
#include <kubesandbox/router_sandbox.hpp>

#include "../support/local_cluster_fixture.hpp"
#include "../support/runtime_pod.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include <gtest/gtest.h>

namespace {
namespace asio = boost::asio;
using namespace kubesandbox;
using namespace std::chrono_literals;

class TunnelChaosTest : public test::LocalClusterTest {};

TEST_F(TunnelChaosTest, AnApiServerRestartFailsTheCallInFlightAndTheTunnelComesBack) {
    run(
        [&]() -> asio::awaitable<void> {
            auto kube = client();
            auto created = co_await test::create_runtime_pod(kube, "default", "tc-restart", "busybox-runtime", "/app");
            EXPECT_TRUE(created) << (created ? "" : created.error().describe());
            if (!created) co_return;
            TunnelConnectionOptions tunnel;
            tunnel.pod = "tc-restart";
            tunnel.port = 8888;
            auto connection = make_tunnel_connection(kube, tunnel);
            EXPECT_TRUE(connection);
            if (!connection) co_return;
            RouterSandboxOptions options;
            options.sandbox_name = "tc-restart";
            auto sb = std::make_shared<RouterSandbox>(*connection, options);
            auto r = co_await sb->execute("echo ok");
            EXPECT_TRUE(r && r->output == "ok\n") << (r ? r->output : r.error().describe());
            // A call in flight when the API server goes down for 500 ms.
            auto in_flight = std::make_shared<std::optional<Result<ExecuteResponse>>>();
            asio::co_spawn(
                io_,
                [sb, in_flight]() -> asio::awaitable<void> {
                    *in_flight = co_await sb->execute("echo ran >> /app/count; sleep 1; echo done", 20s);
                },
                asio::detached);
            co_await test::sleep_for(300ms);
            cluster_->restart_api_server(500ms);
            for (int i = 0; i < 200 && !in_flight->has_value(); ++i) co_await test::sleep_for(50ms);
            EXPECT_TRUE(in_flight->has_value());
            if (in_flight->has_value()) {
                const auto& cut = **in_flight;
                EXPECT_TRUE(!cut && cut.error().code == errc::connection_closed)
                    << (cut ? cut->output : cut.error().describe());
            }
            // Until it is back, calls fail (at once while paused); then the tunnel is there again.
            bool back = false;
            int failed = 0;
            for (int i = 0; i < 200 && !back; ++i) {
                r = co_await sb->execute("sleep 1; cat /app/count", 20s);
                back = r.has_value();
                if (!back) {
                    ++failed;
                    EXPECT_TRUE(r.error().code == errc::connection_failed || r.error().code == errc::connection_closed)
                        << r.error().describe();
                    co_await test::sleep_for(50ms);
                }
            }
            EXPECT_TRUE(back);
            // The command that was cut ran once: it was not sent again.
            if (back) {
                EXPECT_EQ(r->output, "ran\n");
            }
            ResourcePath pod{"", "v1", "pods", "default", "tc-restart"};
            co_await kube.remove(pod);
        },
        120s);
}

}  // namespace
