// agent-sandbox mode with several sandboxes at once against the local cluster: sandboxes that
// share one router connection stay apart, and the manager's reaper ends idle claims.
#include <kubesandbox/agent_sandbox_provider.hpp>
#include <kubesandbox/sandbox_manager.hpp>

#include "agent_sandbox_fixture.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>

#include <gtest/gtest.h>

namespace {
namespace asio = boost::asio;
using namespace kubesandbox;
using namespace std::chrono_literals;
using test::agent::AgentSandboxTest;

// One keep-alive connection to the router for both sandboxes: their calls queue for it and each
// reaches its own pod.
TEST_F(AgentSandboxTest, TwoSandboxesShareOneRouterConnectionAndStayApart) {
    DirectConnectionOptions direct;
    direct.url = cluster_->router_url();
    direct.token = cluster_->token();
    direct.max_connections = 1;
    auto connection = make_direct_connection(io_.get_executor(), direct);
    ASSERT_TRUE(connection);
    AgentSandboxProviderOptions options = busybox();
    options.connection = *connection;
    options.ready_timeout = 60s;
    auto p = std::make_shared<AgentSandboxProvider>(client(), options);
    run([&]() -> asio::awaitable<void> {
        GetOrCreateOptions a_options, b_options;
        a_options.sandbox_id = "share-a";
        b_options.sandbox_id = "share-b";
        auto a = co_await p->acquire(a_options);
        auto b = co_await p->acquire(b_options);
        EXPECT_TRUE(a && b) << (a ? (b ? "" : b.error().describe()) : a.error().describe());
        if (!a || !b) co_return;
        EXPECT_NE(a->sandbox->id(), b->sandbox->id());
        auto writer = [](Sandbox& sandbox, std::string name) -> asio::awaitable<int> {
            int ok = 0;
            for (int i = 0; i < 15; ++i) {
                auto r =
                    co_await sandbox.execute("echo " + name + std::to_string(i) + " >> /app/shared-log; echo " + name);
                if (r && r->exit_code == 0 && r->output == name + "\n") ++ok;
            }
            co_return ok;
        };
        using namespace asio::experimental::awaitable_operators;
        auto [wrote_a, wrote_b] = co_await (writer(*a->sandbox, "a") && writer(*b->sandbox, "b"));
        EXPECT_EQ(wrote_a, 15);
        EXPECT_EQ(wrote_b, 15);
        std::string expect_a, expect_b;
        for (int i = 0; i < 15; ++i) {
            expect_a += "a" + std::to_string(i) + "\n";
            expect_b += "b" + std::to_string(i) + "\n";
        }
        auto log_a = co_await a->sandbox->execute("cat /app/shared-log");
        auto log_b = co_await b->sandbox->execute("cat /app/shared-log");
        EXPECT_TRUE(log_a && log_a->output == expect_a) << (log_a ? log_a->output : log_a.error().describe());
        EXPECT_TRUE(log_b && log_b->output == expect_b) << (log_b ? log_b->output : log_b.error().describe());
        EXPECT_TRUE(co_await p->delete_sandbox("share-a"));
        EXPECT_TRUE(co_await p->delete_sandbox("share-b"));
    });
}

// The manager's reaper works on claims as on pods: an idle claim is deleted, a claim whose
// command outlasts the idle TTL is spared while it runs and reaped once idle.
TEST_F(AgentSandboxTest, TheManagersReaperEndsIdleClaimsAndSparesBusyOnes) {
    auto p = provider(busybox());
    SandboxManagerOptions o;
    o.scope = "agent-reap";
    o.idle_ttl = 2s;
    o.reap_interval = 300ms;
    auto m = std::make_shared<SandboxManager>(io_.get_executor(), p, o);
    run(
        [&]() -> asio::awaitable<void> {
            auto ex = co_await asio::this_coro::executor;
            bool reaper_returned = false;
            asio::co_spawn(
                ex,
                [&]() -> asio::awaitable<void> {
                    co_await m->run();
                    reaper_returned = true;
                },
                asio::detached);
            auto idle = co_await m->get("idle");
            auto busy = co_await m->get("busy");
            EXPECT_TRUE(idle && busy) << (idle ? (busy ? "" : busy.error().describe()) : idle.error().describe());
            if (!idle || !busy) co_return;
            const std::string idle_claim = AgentSandboxProvider::claim_name_for(m->sandbox_id_for("idle"));
            const std::string busy_claim = AgentSandboxProvider::claim_name_for(m->sandbox_id_for("busy"));
            EXPECT_EQ(co_await claims_named(idle_claim), 1u);
            idle->release();
            bool finished = false;
            asio::co_spawn(
                ex,
                [&, lease = std::move(*busy)]() mutable -> asio::awaitable<void> {
                    // Longer than the idle TTL: only this process knows the claim is in use.
                    auto r = co_await lease.execute("sleep 5; echo done");
                    EXPECT_TRUE(r && r->output == "done\n") << (r ? r->output : r.error().describe());
                    finished = true;
                },
                asio::detached);
            bool idle_gone = false;
            for (int i = 0; i < 150 && !idle_gone; ++i) {
                co_await test::sleep_for(100ms);
                idle_gone = co_await claims_named(idle_claim) == 0;
            }
            EXPECT_TRUE(idle_gone) << "the idle claim was not reaped";
            while (!finished) co_await test::sleep_for(50ms);
            EXPECT_EQ(co_await claims_named(busy_claim), 1u) << "reaped while a command ran";
            bool busy_gone = false;
            for (int i = 0; i < 150 && !busy_gone; ++i) {
                co_await test::sleep_for(100ms);
                busy_gone = co_await claims_named(busy_claim) == 0;
            }
            EXPECT_TRUE(busy_gone) << "the claim was not reaped once idle";
            auto stats = co_await m->stats();
            for (int i = 0; i < 100 && stats.reaped < 2; ++i) {
                co_await test::sleep_for(50ms);
                stats = co_await m->stats();
            }
            EXPECT_EQ(stats.reaped, 2u);
            auto report = co_await m->shutdown();
            EXPECT_TRUE(report.drained);
            while (!reaper_returned) co_await test::sleep_for(10ms);
        },
        120s);
}

}  // namespace
