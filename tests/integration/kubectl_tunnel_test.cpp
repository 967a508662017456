// The kubectl tunnel against the local cluster with the real kubectl: a runtime pod reached
// through `kubectl port-forward`, the process restarted when it dies and stopped at the end.
#include <kubesandbox/router_connection.hpp>
#include <kubesandbox/router_sandbox.hpp>

#include "../support/local_cluster_fixture.hpp"
#include "../support/proc_scan.hpp"
#include "../support/runtime_pod.hpp"

#include <gtest/gtest.h>

#include <signal.h>

#include <fstream>
#include <iterator>

namespace {
namespace asio = boost::asio;
using namespace kubesandbox;
using namespace std::chrono_literals;

// The pids of kubectl processes whose command line holds `needle`.
std::vector<pid_t> kubectl_processes(const std::string& needle) {
    std::vector<pid_t> found;
    for (auto& p : test::processes()) {
        std::replace(p.cmdline.begin(), p.cmdline.end(), '\0', ' ');
        if (!p.zombie && p.cmdline.find("port-forward") != std::string::npos &&
            p.cmdline.find(needle) != std::string::npos)
            found.push_back(p.pid);
    }
    return found;
}

class KubectlTunnelTest : public test::LocalClusterTest {
protected:
    KubectlTunnelOptions options(std::string target) {
        const auto kubeconfig = data_dir_ / "kubectl-tunnel.kubeconfig";
        EXPECT_TRUE(cluster_->write_kubeconfig(kubeconfig));
        KubectlTunnelOptions o;
        o.kubeconfig = kubeconfig.string();
        o.target = std::move(target);
        o.port = 8888;
        o.ready_timeout = 20s;
        return o;
    }
};

TEST_F(KubectlTunnelTest, ReachesAPodRestartsKubectlWhenItDiesAndStopsItAtTheEnd) {
    run(
        [&]() -> asio::awaitable<void> {
            auto kube = client();
            auto created = co_await test::create_runtime_pod(kube, "default", "kt-pod", "busybox-runtime", "/app");
            EXPECT_TRUE(created) << (created ? "" : created.error().describe());
            if (!created) co_return;
            {
                auto connection = make_kubectl_tunnel_connection(io_.get_executor(), options("pod/kt-pod"));
                EXPECT_TRUE(connection);
                if (!connection) co_return;
                EXPECT_EQ((*connection)->describe(), "kubectl port-forward default/pod/kt-pod:8888");
                RouterSandboxOptions sb_options;
                sb_options.sandbox_name = "kt-pod";
                RouterSandbox sb(*connection, sb_options);
                auto r = co_await sb.execute("echo one > /app/f; cat /app/f");
                EXPECT_TRUE(r && r->output == "one\n") << (r ? r->output : r.error().describe());
                auto first = kubectl_processes("pod/kt-pod");
                EXPECT_EQ(first.size(), 1u);
                if (first.size() != 1) co_return;
                // kubectl dies: a call may fail (typed), and a later one starts a new kubectl.
                ::kill(first[0], SIGKILL);
                bool back = false;
                for (int i = 0; i < 100 && !back; ++i) {
                    r = co_await sb.execute("cat /app/f", 20s);
                    back = r && r->output == "one\n";
                    if (!r) {
                        EXPECT_TRUE(r.error().code == errc::connection_failed ||
                                    r.error().code == errc::connection_closed)
                            << r.error().describe();
                        co_await test::sleep_for(50ms);
                    }
                }
                EXPECT_TRUE(back);
                auto second = kubectl_processes("pod/kt-pod");
                EXPECT_EQ(second.size(), 1u);
                if (!second.empty()) {
                    EXPECT_NE(second[0], first[0]);
                }
            }
            // The connection is gone: so is its kubectl.
            bool stopped = false;
            for (int i = 0; i < 100 && !stopped; ++i) {
                stopped = kubectl_processes("pod/kt-pod").empty();
                if (!stopped) co_await test::sleep_for(50ms);
            }
            EXPECT_TRUE(stopped);
            ResourcePath pod{"", "v1", "pods", "default", "kt-pod"};
            co_await kube.remove(pod);
        },
        120s);
}

TEST_F(KubectlTunnelTest, AKubectlThatCannotForwardIsATypedErrorWithItsStderr) {
    run([&]() -> asio::awaitable<void> {
        auto connection = make_kubectl_tunnel_connection(io_.get_executor(), options("pod/kt-missing"));
        EXPECT_TRUE(connection);
        if (!connection) co_return;
        RouterSandboxOptions sb_options;
        sb_options.sandbox_name = "kt-missing";
        RouterSandbox sb(*connection, sb_options);
        auto r = co_await sb.execute("true", 30s);
        EXPECT_TRUE(!r && r.error().code == errc::connection_failed) << (r ? "ran" : r.error().describe());
        if (!r) {
            EXPECT_NE(r.error().message.find("kubectl port-forward exited"), std::string::npos) << r.error().message;
            EXPECT_NE(r.error().message.find("kt-missing"), std::string::npos) << r.error().message;
        }
        // Right after a failed start the next call fails at once instead of starting kubectl again.
        r = co_await sb.execute("true", 30s);
        EXPECT_TRUE(!r && r.error().message.find("after a pause") != std::string::npos)
            << (r ? "ran" : r.error().describe());
        // No kubectl program: a configuration error.
        auto o = options("pod/kt-missing");
        o.kubectl = "/nonexistent/kubectl";
        auto absent = make_kubectl_tunnel_connection(io_.get_executor(), o);
        EXPECT_TRUE(absent);
        if (absent) {
            RouterSandbox nowhere(*absent, sb_options);
            r = co_await nowhere.execute("true", 10s);
            EXPECT_TRUE(!r && r.error().message.find("program not found") != std::string::npos)
                << (r ? "ran" : r.error().describe());
        }
    });
}

// As on a cluster running agent-sandbox: agent-sandbox-system/sandbox-router-svc:8080 leads to
// the router through `kubectl port-forward svc/...` (the native tunnel's case is in tunnel_chaos_test).
TEST_F(KubectlTunnelTest, TheRouterServiceIsReachedThroughKubectl) {
    run(
        [&]() -> asio::awaitable<void> {
            auto kube = client();
            auto created = co_await test::create_runtime_pod(kube, "default", "kt-routed", "busybox-runtime", "/app");
            EXPECT_TRUE(created) << (created ? "" : created.error().describe());
            if (!created) co_return;
            RouterSandboxOptions sb_options;
            sb_options.sandbox_name = "kt-routed";
            auto o = options("svc/sandbox-router-svc");
            o.namespace_name = "agent-sandbox-system";
            o.port = 8080;
            o.token = cluster_->token();
            auto through_kubectl = make_kubectl_tunnel_connection(io_.get_executor(), o);
            EXPECT_TRUE(through_kubectl);
            if (!through_kubectl) co_return;
            RouterSandbox sb(*through_kubectl, sb_options);
            Result<ExecuteResponse> r = fail(errc::timeout, "not run");
            // The router's pod becomes Ready (and an endpoint) shortly after the cluster starts.
            for (int i = 0; i < 100; ++i) {
                r = co_await sb.execute("echo routed", 20s);
                if (r) break;
                co_await test::sleep_for(100ms);
            }
            EXPECT_TRUE(r && r->output == "routed\n")
                << (*through_kubectl)->describe() << ": " << (r ? r->output : r.error().describe());
            // The router's probe answers through kubectl too.
            HealthCheckOptions health;
            auto healthy = co_await check_health(**through_kubectl, health);
            EXPECT_TRUE(healthy) << (healthy ? "" : healthy.error().describe());
            ResourcePath pod{"", "v1", "pods", "default", "kt-routed"};
            co_await kube.remove(pod);
        },
        120s);
}

TEST(KubectlTunnelOptionsTest, TargetsAndNamespacesThatKubectlWouldReadAsFlagsAreRefused) {
    asio::io_context io;
    for (const char* target : {"--kubeconfig=/etc/passwd", "pod/-x", "pod", "/x", "pod/a b", "pod/x\ny", "Pod/x"}) {
        KubectlTunnelOptions o;
        o.target = target;
        auto made = make_kubectl_tunnel_connection(io.get_executor(), o);
        EXPECT_TRUE(!made && made.error().code == errc::invalid_config) << target;
    }
    KubectlTunnelOptions o;
    o.namespace_name = "--all";
    auto made = make_kubectl_tunnel_connection(io.get_executor(), o);
    EXPECT_TRUE(!made && made.error().code == errc::invalid_config);
    o.namespace_name = "agent-sandbox-system";
    made = make_kubectl_tunnel_connection(io.get_executor(), o);
    EXPECT_TRUE(made);
}

}  // namespace
