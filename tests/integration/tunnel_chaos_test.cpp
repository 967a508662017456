// The native tunnel under chaos: when the API server restarts, the call in flight fails as cut
// short and is not sent again, calls meanwhile fail at once (the back-off), and the tunnel comes
// back by itself; when the router's pod is replaced, health checks see it and the tunnel follows.
#include <kubesandbox/router_connection.hpp>
#include <kubesandbox/router_sandbox.hpp>

#include "../support/local_cluster_fixture.hpp"
#include "../support/runtime_pod.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
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
                    *in_flight = co_await sb->execute("echo ran >> /app/count; sleep 2; echo done", 20s);
                },
                asio::detached);
            // Cut once the command runs in the pod (a cut before would leave nothing to check).
            for (int i = 0; i < 200; ++i) {
                auto seen = co_await sb->execute("cat /app/count 2>/dev/null");
                if (seen && seen->output == "ran\n") break;
                co_await test::sleep_for(20ms);
            }
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

// As on a cluster running agent-sandbox: agent-sandbox-system/sandbox-router-svc:8080 reached
// through the native tunnel (no kubectl), health-checked; its router pod replaced (the old one
// gone with its connections, a new pod under another name) is found through the EndpointSlices.
TEST_F(TunnelChaosTest, TheRouterServiceIsHealthCheckedAndFollowedToAReplacementPod) {
    run(
        [&]() -> asio::awaitable<void> {
            auto kube = client();
            auto created = co_await test::create_runtime_pod(kube, "default", "tc-routed", "busybox-runtime", "/app");
            EXPECT_TRUE(created) << (created ? "" : created.error().describe());
            if (!created) co_return;
            TunnelConnectionOptions native;
            native.namespace_name = "agent-sandbox-system";
            native.service = "sandbox-router-svc";
            native.port = 8080;
            native.token = cluster_->token();
            native.open_backoff_max = 400ms;
            auto connection = make_tunnel_connection(kube, native);
            EXPECT_TRUE(connection);
            if (!connection) co_return;
            RouterSandboxOptions options;
            options.sandbox_name = "tc-routed";
            RouterSandbox sb(*connection, options);
            Result<ExecuteResponse> r = fail(errc::timeout, "not run");
            // The router's pod becomes Ready (and an endpoint) shortly after the cluster starts.
            for (int i = 0; i < 100; ++i) {
                r = co_await sb.execute("echo routed", 20s);
                if (r) break;
                co_await test::sleep_for(100ms);
            }
            EXPECT_TRUE(r && r->output == "routed\n") << (r ? r->output : r.error().describe());
            HealthCheckOptions health;
            health.timeout = 5s;
            health.interval = 100ms;
            auto healthy = co_await check_health(**connection, health);
            EXPECT_TRUE(healthy) << (healthy ? "" : healthy.error().describe());

            // The health loop runs throughout and reports each change.
            auto changes = std::make_shared<std::vector<std::string>>();
            auto ended = std::make_shared<bool>(false);
            asio::cancellation_signal stop;
            asio::co_spawn(io_,
                           run_health_checks(*connection, health,
                                             [changes](const Result<void>& h) {
                                                 changes->push_back(h ? "ok" : h.error().describe());
                                             }),
                           asio::bind_cancellation_slot(stop.slot(), [ended](std::exception_ptr) { *ended = true; }));

            // The router pod goes, and its router with it (connections through it are cut).
            ResourcePath routers{"", "v1", "pods", "agent-sandbox-system", ""};
            auto old_pod = co_await kube.get(routers.with_name("sandbox-router"));
            EXPECT_TRUE(old_pod);
            if (!old_pod) co_return;
            DeleteOptions now;
            now.grace_period_seconds = 0;
            auto removed = co_await kube.remove(routers.with_name("sandbox-router"), now);
            EXPECT_TRUE(removed) << (removed ? "" : removed.error().describe());
            cluster_->restart_router();
            for (int i = 0; i < 200 && changes->size() < 2; ++i) co_await test::sleep_for(50ms);
            EXPECT_EQ(changes->size(), 2u);
            auto down = co_await sb.execute("echo nowhere", 5s);
            EXPECT_TRUE(!down && (down.error().code == errc::service_unavailable ||
                                  down.error().code == errc::connection_failed))
                << (down ? down->output : down.error().describe());

            // A new router pod under another name: the tunnel finds it through the EndpointSlices.
            boost::json::object pod = *old_pod;
            pod.erase("status");
            boost::json::object metadata{{"name", "sandbox-router-2"},
                                         {"labels", pod["metadata"].as_object().at("labels")}};
            pod["metadata"] = std::move(metadata);
            auto made = co_await kube.create(routers, pod);
            EXPECT_TRUE(made) << (made ? "" : made.error().describe());
            bool back = false;
            for (int i = 0; i < 300 && !back; ++i) {
                r = co_await sb.execute("echo back", 20s);
                back = r && r->output == "back\n";
                if (!back) co_await test::sleep_for(100ms);
            }
            EXPECT_TRUE(back) << (r ? r->output : r.error().describe());
            for (int i = 0; i < 100 && changes->size() < 3; ++i) co_await test::sleep_for(50ms);
            stop.emit(asio::cancellation_type::terminal);
            for (int i = 0; i < 100 && !*ended; ++i) co_await test::sleep_for(50ms);
            EXPECT_TRUE(*ended);
            EXPECT_EQ(changes->size(), 3u);
            if (changes->size() == 3) {
                EXPECT_EQ((*changes)[0], "ok");
                EXPECT_NE((*changes)[1], "ok");
                EXPECT_EQ((*changes)[2], "ok");
            }
            // The replacement carries on as the router's pod for the tests after this one.
            ResourcePath pod_path{"", "v1", "pods", "default", "tc-routed"};
            co_await kube.remove(pod_path);
        },
        120s);
}

}  // namespace
