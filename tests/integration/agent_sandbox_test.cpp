// agent-sandbox mode end to end on the local cluster: SandboxClaims bound warm or cold by the
// local controller, the data plane through the local router, the provider's lifecycle, and the
// SandboxManager and file operations over it unchanged.
#include <kubesandbox/agent_sandbox_provider.hpp>
#include <kubesandbox/file_ops.hpp>
#include <kubesandbox/sandbox_manager.hpp>

#include "agent_sandbox_fixture.hpp"
#include "connection/router_connection.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/json/serialize.hpp>

#include <gtest/gtest.h>

namespace {
namespace asio = boost::asio;
namespace json = boost::json;
using namespace kubesandbox;
using namespace std::chrono_literals;
using test::agent::AgentSandboxTest;

struct BodySink final : ResponseSink {
    void on_head(unsigned, std::string_view) override {}
    bool on_body(std::string_view chunk) override {
        body.append(chunk);
        return body.size() < 4096;
    }
    std::string body;
};

TEST_F(AgentSandboxTest, ClaimsAreServedWarmThenColdAndReconnected) {
    auto p = provider(busybox());
    run([&]() -> asio::awaitable<void> {
        co_await pool_filled(*p);
        GetOrCreateOptions first;
        first.sandbox_id = "conversation-1";
        auto a = co_await p->acquire(first);
        EXPECT_TRUE(a) << (a ? "" : a.error().describe());
        if (!a) co_return;
        EXPECT_EQ(a->origin, SandboxOrigin::claimed_warm);
        EXPECT_EQ(a->sandbox->id(), "default/" + AgentSandboxProvider::claim_name_for("conversation-1"));
        auto r = co_await a->sandbox->execute("echo hi; id -u; pwd");
        EXPECT_TRUE(r && r->output == "hi\n1000\n/app\n") << (r ? r->output : r.error().describe());

        auto again = co_await p->acquire(first);
        EXPECT_TRUE(again && again->origin == SandboxOrigin::existing && again->instance == a->instance);
        auto by_id = co_await p->reconnect(a->sandbox->id());
        EXPECT_TRUE(by_id) << (by_id ? "" : by_id.error().describe());
        auto info = co_await p->describe("conversation-1");
        EXPECT_TRUE(info && info->status == "running" && info->id == "conversation-1" && !info->pod_name.empty());
        // No router at all: the same sandbox through a port-forward tunnel to its pod.
        auto without_router = busybox();
        without_router.tunnel_to_pods = true;
        auto tunnelled = provider(without_router);
        auto t = co_await tunnelled->reconnect("conversation-1");
        EXPECT_TRUE(t) << (t ? "" : t.error().describe());
        if (t) {
            auto tr = co_await (*t)->execute("echo via tunnel; id -u");
            EXPECT_TRUE(tr && tr->output == "via tunnel\n1000\n") << (tr ? tr->output : tr.error().describe());
        }

        // env cannot reach a warm pod: the controller starts this one cold, named like the claim.
        auto with_env = busybox();
        with_env.env = {{"GREETING", "hello from env"}};
        auto cold = provider(with_env);
        GetOrCreateOptions second;
        second.sandbox_id = "conversation-2";
        auto c = co_await cold->acquire(second);
        EXPECT_TRUE(c && c->origin == SandboxOrigin::created) << (c ? "" : c.error().describe());
        if (c) {
            auto e = co_await c->sandbox->execute("echo \"$GREETING\"");
            EXPECT_TRUE(e && e->output == "hello from env\n") << (e ? e->output : e.error().describe());
        }
        // Caller ids may hold '/': they are still caller ids, listed as given.
        GetOrCreateOptions slashed;
        slashed.sandbox_id = "team/42";
        auto s = co_await p->acquire(slashed);
        EXPECT_TRUE(s) << (s ? "" : s.error().describe());
        auto page = co_await p->list();
        EXPECT_TRUE(page && page->items.size() >= 3);
        bool listed = false;
        if (page) {
            for (const auto& item : page->items) listed = listed || item.id == "team/42";
        }
        EXPECT_TRUE(listed);
        EXPECT_TRUE(co_await p->delete_sandbox("team/42"));
        EXPECT_TRUE(co_await p->delete_sandbox("conversation-1"));
        EXPECT_TRUE(co_await p->delete_sandbox("conversation-2"));
        auto gone = co_await p->delete_sandbox("conversation-2");
        EXPECT_TRUE(gone && !*gone);
        auto missing = co_await p->reconnect("conversation-1");
        EXPECT_TRUE(!missing && missing.error().code == errc::not_found);
    });
}

TEST_F(AgentSandboxTest, TerminalReasonsFailFastAndLeaveNoClaim) {
    auto no_pool = busybox();
    no_pool.warm_pool = "no-such-pool";
    auto p = provider(no_pool);
    run([&]() -> asio::awaitable<void> {
        GetOrCreateOptions o;
        o.sandbox_id = "doomed";
        auto begun = std::chrono::steady_clock::now();
        auto a = co_await p->acquire(o);
        EXPECT_TRUE(!a && a.error().code == errc::invalid_config) << (a ? "acquired" : a.error().describe());
        if (!a) {
            EXPECT_NE(a.error().message.find("WarmPoolNotFound"), std::string::npos);
        }
        EXPECT_LT(std::chrono::steady_clock::now() - begun, 10s);
        EXPECT_EQ(co_await claims_named(AgentSandboxProvider::claim_name_for("doomed")), 0u);

        // A template that refuses env injection.
        auto kube = client();
        json::object tmpl{
            {"apiVersion", "extensions.agents.x-k8s.io/v1beta1"},
            {"kind", "SandboxTemplate"},
            {"metadata", json::object{{"name", "strict"}}},
            {"spec", json::object{
                         {"podTemplate",
                          json::object{{"spec", json::object{{"containers",
                                                              json::array{json::object{
                                                                  {"name", "r"}, {"image", "busybox-runtime"}}}}}}}}}}};
        json::object pool{
            {"apiVersion", "extensions.agents.x-k8s.io/v1beta1"},
            {"kind", "SandboxWarmPool"},
            {"metadata", json::object{{"name", "strict"}}},
            {"spec", json::object{{"replicas", 0}, {"sandboxTemplateRef", json::object{{"name", "strict"}}}}}};
        ResourcePath templates{"extensions.agents.x-k8s.io", "v1beta1", "sandboxtemplates", "default", ""};
        ResourcePath pools{"extensions.agents.x-k8s.io", "v1beta1", "sandboxwarmpools", "default", ""};
        EXPECT_TRUE(co_await kube.create(templates, tmpl));
        EXPECT_TRUE(co_await kube.create(pools, pool));
        auto strict = busybox();
        strict.warm_pool = "strict";
        strict.env = {{"A", "b"}};
        auto sp = provider(strict);
        o.sandbox_id = "strict-env";
        a = co_await sp->acquire(o);
        EXPECT_TRUE(!a && a.error().code == errc::invalid_config &&
                    a.error().message.find("EnvVarsInjectionRejected") != std::string::npos)
            << (a ? "acquired" : a.error().describe());
        // The same pool without env: replicas 0 means every claim starts cold.
        strict.env.clear();
        auto plain = provider(strict);
        a = co_await plain->acquire(o);
        EXPECT_TRUE(a && a->origin == SandboxOrigin::created) << (a ? "" : a.error().describe());
        if (a) {
            EXPECT_TRUE(co_await plain->delete_sandbox("strict-env"));
        }
    });
}

// A template with spec.service: true (built outside the coroutine: g++ 12 and braced JSON).
json::object service_template() {
    json::object container{{"name", "runtime"},
                           {"image", "busybox-runtime"},
                           {"ports", json::array{json::object{{"containerPort", 8888}}}},
                           {"readinessProbe", json::object{{"httpGet", json::object{{"path", "/"}, {"port", 8888}}},
                                                           {"periodSeconds", 1}}}};
    return json::object{
        {"apiVersion", "extensions.agents.x-k8s.io/v1beta1"},
        {"kind", "SandboxTemplate"},
        {"metadata", json::object{{"name", "with-service"}}},
        {"spec",
         json::object{{"service", true},
                      {"podTemplate", json::object{{"spec", json::object{{"containers", json::array{container}}}}}}}}};
}

json::object service_pool() {
    return json::object{
        {"apiVersion", "extensions.agents.x-k8s.io/v1beta1"},
        {"kind", "SandboxWarmPool"},
        {"metadata", json::object{{"name", "with-service"}}},
        {"spec", json::object{{"replicas", 0}, {"sandboxTemplateRef", json::object{{"name", "with-service"}}}}}};
}

// spec.service: the controller gives the Sandbox a headless Service, reports its FQDN on the
// claim, and that Service leads to the sandbox (here through a tunnel to it).
TEST_F(AgentSandboxTest, ASandboxWithAServiceIsReachedThroughItsServiceAndReportsItsName) {
    run([&]() -> asio::awaitable<void> {
        auto kube = client();
        ResourcePath templates{"extensions.agents.x-k8s.io", "v1beta1", "sandboxtemplates", "default", ""};
        ResourcePath pools{"extensions.agents.x-k8s.io", "v1beta1", "sandboxwarmpools", "default", ""};
        EXPECT_TRUE(co_await kube.create(templates, service_template()));
        EXPECT_TRUE(co_await kube.create(pools, service_pool()));
        auto options = busybox();
        options.warm_pool = "with-service";
        auto p = provider(options);
        GetOrCreateOptions o;
        o.sandbox_id = "with-service-1";
        auto a = co_await p->acquire(o);
        EXPECT_TRUE(a) << (a ? "" : a.error().describe());
        if (!a) co_return;
        ResourcePath claims{"extensions.agents.x-k8s.io", "v1beta1", "sandboxclaims", "default", ""};
        auto claim = co_await kube.get(claims.with_name(AgentSandboxProvider::claim_name_for("with-service-1")));
        EXPECT_TRUE(claim);
        if (!claim) co_return;
        const auto& bound = claim->at("status").at("sandbox").as_object();
        const std::string sandbox_name(bound.at("name").as_string());
        EXPECT_EQ(bound.at("serviceFQDN"), json::value(sandbox_name + ".default.svc.cluster.local"));
        ResourcePath services{"", "v1", "services", "default", ""};
        auto service = co_await kube.get(services.with_name(sandbox_name));
        EXPECT_TRUE(service && service->at("spec").at("clusterIP") == "None");
        TunnelConnectionOptions tunnel;
        tunnel.service = sandbox_name;
        tunnel.port = 8888;
        auto connection = make_tunnel_connection(kube, tunnel);
        EXPECT_TRUE(connection);
        if (!connection) co_return;
        RouterSandboxOptions sb_options;
        sb_options.sandbox_name = sandbox_name;
        RouterSandbox through_service(*connection, sb_options);
        Result<ExecuteResponse> r = fail(errc::timeout, "not run");
        for (int i = 0; i < 100; ++i) {  // until the EndpointSlice lists the pod
            r = co_await through_service.execute("echo via-sandbox-service", 10s);
            if (r) break;
            co_await test::sleep_for(50ms);
        }
        EXPECT_TRUE(r && r->output == "via-sandbox-service\n") << (r ? r->output : r.error().describe());
        EXPECT_TRUE(co_await p->delete_sandbox("with-service-1"));
        bool gone = false;
        for (int i = 0; i < 200 && !gone; ++i) {
            auto left = co_await kube.get(services.with_name(sandbox_name));
            gone = !left && left.error().is(errc::not_found);
            if (!gone) co_await test::sleep_for(50ms);
        }
        EXPECT_TRUE(gone);
        co_await kube.remove(pools.with_name("with-service"));
        co_await kube.remove(templates.with_name("with-service"));
    });
}

// A template whose pods never pass their readiness probe (nothing listens on port 9): its
// claims stay pending until they are deleted or the caller gives up.
json::object never_ready_template() {
    json::object container{
        {"name", "runtime"},
        {"image", "busybox-runtime"},
        {"readinessProbe", json::object{{"tcpSocket", json::object{{"port", 9}}}, {"periodSeconds", 1}}}};
    return json::object{
        {"apiVersion", "extensions.agents.x-k8s.io/v1beta1"},
        {"kind", "SandboxTemplate"},
        {"metadata", json::object{{"name", "never-ready"}}},
        {"spec",
         json::object{{"podTemplate", json::object{{"spec", json::object{{"containers", json::array{container}}}}}}}}};
}

json::object never_ready_pool() {
    return json::object{
        {"apiVersion", "extensions.agents.x-k8s.io/v1beta1"},
        {"kind", "SandboxWarmPool"},
        {"metadata", json::object{{"name", "never-ready"}}},
        {"spec", json::object{{"replicas", 0}, {"sandboxTemplateRef", json::object{{"name", "never-ready"}}}}}};
}

// The claim's watch loses its history (410) and the claim is deleted around the time the
// provider watches again: the deletion is seen at once (a fresh watch alone starts from what
// exists and would wait for the whole ready timeout).
TEST_F(AgentSandboxTest, AClaimDeletedWhileItsWatchIsReestablishedFailsAtOnce) {
    using namespace boost::asio::experimental::awaitable_operators;
    run([&]() -> asio::awaitable<void> {
        auto kube = client();
        ResourcePath templates{"extensions.agents.x-k8s.io", "v1beta1", "sandboxtemplates", "default", ""};
        ResourcePath pools{"extensions.agents.x-k8s.io", "v1beta1", "sandboxwarmpools", "default", ""};
        ResourcePath claims{"extensions.agents.x-k8s.io", "v1beta1", "sandboxclaims", "default", ""};
        EXPECT_TRUE(co_await kube.create(templates, never_ready_template()));
        EXPECT_TRUE(co_await kube.create(pools, never_ready_pool()));
        auto options = busybox();
        options.warm_pool = "never-ready";
        auto p = provider(options);  // ready timeout 60 s
        const std::string claim = AgentSandboxProvider::claim_name_for("deleted-in-gap");
        auto acquire = [&]() -> asio::awaitable<Result<Acquisition>> {
            GetOrCreateOptions o;
            o.sandbox_id = "deleted-in-gap";
            co_return co_await p->acquire(o);
        };
        const std::size_t watches_before = cluster_->open_watches("sandboxclaims");
        auto expire_and_delete = [&]() -> asio::awaitable<void> {
            // Once the provider watches its claim, its watch is ended and the claim deleted.
            while (co_await claims_named(claim) == 0 || cluster_->open_watches("sandboxclaims") == watches_before)
                co_await test::sleep_for(20ms);
            cluster_->expire_watches();
            EXPECT_TRUE(co_await kube.remove(claims.with_name(claim)));
        };
        auto begun = std::chrono::steady_clock::now();
        auto a = co_await (acquire() && expire_and_delete());
        EXPECT_TRUE(!a && a.error().code == errc::sandbox_lost) << (a ? "acquired" : a.error().describe());
        EXPECT_LT(std::chrono::steady_clock::now() - begun, 20s);
        co_await kube.remove(pools.with_name("never-ready"));
        co_await kube.remove(templates.with_name("never-ready"));
    });
}

TEST_F(AgentSandboxTest, TwoProvidersAskingForOneThreadShareOneClaim) {
    auto p1 = provider(busybox());
    auto p2 = provider(busybox());
    run([&]() -> asio::awaitable<void> {
        GetOrCreateOptions o;
        o.sandbox_id = "shared-thread";
        std::optional<Result<Acquisition>> r1, r2;
        auto one = [&](std::shared_ptr<AgentSandboxProvider> p,
                       std::optional<Result<Acquisition>>& out) -> asio::awaitable<void> {
            out.emplace(co_await p->acquire(o));
        };
        using namespace asio::experimental::awaitable_operators;
        co_await (one(p1, r1) && one(p2, r2));
        EXPECT_TRUE(*r1 && *r2) << (*r1 ? "" : (*r1).error().describe()) << (*r2 ? "" : (*r2).error().describe());
        if (*r1 && *r2) {
            EXPECT_EQ((**r1).instance, (**r2).instance);
            auto w = co_await (**r1).sandbox->execute("echo shared > /app/mark");
            auto r = co_await (**r2).sandbox->execute("cat /app/mark");
            EXPECT_TRUE(w && r && r->output == "shared\n");
        }
        EXPECT_TRUE(co_await p1->delete_sandbox("shared-thread"));
    });
}

TEST_F(AgentSandboxTest, ExpiredClaimsAreCleanedUpAndDeletedClaimsReported) {
    auto p = provider(busybox());
    run([&]() -> asio::awaitable<void> {
        co_await pool_filled(*p);  // a warm bind: the earlier tests may have emptied the pool
        GetOrCreateOptions o;
        o.sandbox_id = "short-lived";
        o.ttl_seconds = 3;  // long enough to be bound first on a slow machine
        auto a = co_await p->acquire(o);
        EXPECT_TRUE(a) << (a ? "" : a.error().describe());
        GetOrCreateOptions k;
        k.sandbox_id = "kept";
        auto kept = co_await p->acquire(k);
        EXPECT_TRUE(kept);
        co_await test::sleep_for(4100ms);  // past the shutdownTime, rounded up to a whole second
        auto swept = co_await p->cleanup();
        EXPECT_TRUE(swept) << (swept ? "" : swept.error().describe());
        if (swept) {
            // The controller may have expired it first (lifecycle.shutdownTime): gone either way.
            bool deleted =
                std::find(swept->deleted.begin(), swept->deleted.end(), "short-lived") != swept->deleted.end();
            EXPECT_TRUE(deleted || co_await claims_named(AgentSandboxProvider::claim_name_for("short-lived")) == 0u);
            EXPECT_TRUE(std::find(swept->deleted.begin(), swept->deleted.end(), "kept") == swept->deleted.end());
        }
        // A claim deleted behind the sandbox's back: commands fail with a typed error.
        if (kept) {
            EXPECT_TRUE(co_await p->delete_sandbox("kept"));
            bool failed = false;
            for (int i = 0; i < 100 && !failed; ++i) {
                auto r = co_await kept->sandbox->execute("true");
                failed = !r;
                if (failed) {
                    EXPECT_TRUE(r.error().code == errc::service_unavailable) << r.error().describe();
                } else {
                    co_await test::sleep_for(50ms);
                }
            }
            EXPECT_TRUE(failed);
        }
    });
}

TEST_F(AgentSandboxTest, ManagerAndFileOperationsWorkUnchanged) {
    auto p = provider(busybox());
    run([&]() -> asio::awaitable<void> {
        SandboxManager manager(io_.get_executor(), p);
        auto lease = co_await manager.get("thread-7");
        EXPECT_TRUE(lease) << (lease ? "" : lease.error().describe());
        if (!lease) co_return;
        FileOps files(*lease);
        auto w = co_await files.write("/app/notes/a.txt", "line one\nline two\n");
        EXPECT_TRUE(w && !w->error) << (w ? w->error.value_or("") : w.error().describe());
        auto e = co_await files.edit("/app/notes/a.txt", "two", "2", false);
        EXPECT_TRUE(e && !e->error);
        auto r = co_await files.read("/app/notes/a.txt", 0, 10);
        EXPECT_TRUE(r && r->file_data && r->file_data->content == "line one\nline 2")
            << (r && r->file_data ? r->file_data->content : "");
        auto g = co_await files.grep("line", "/app", "", std::nullopt);
        EXPECT_TRUE(g && g->matches && g->matches->size() == 2);
        lease->release();
        EXPECT_TRUE(co_await manager.remove("thread-7"));
        co_await manager.shutdown();
    });
}

TEST_F(AgentSandboxTest, AnotherRuntimeProtocolPlugsInWithoutTouchingTheProvider) {
    // A stand-in for a sandboxd client: it sees each ready claim's endpoint and serves the
    // sandbox its own way (here: RouterSandbox with a base directory of its choosing), and it can
    // reach another port of the sandbox, as sandboxd's process service needs.
    auto options = busybox();
    int made = 0;
    std::string seen_name;
    std::function<Result<std::shared_ptr<RouterConnection>>(std::uint16_t)> connect_port;
    options.runtime = [&](RuntimeEndpoint endpoint) {
        ++made;
        seen_name = endpoint.options.sandbox_name;
        connect_port = endpoint.connect_port;
        endpoint.options.base_dir = "/tmp";
        return std::unique_ptr<Sandbox>(
            std::make_unique<RouterSandbox>(std::move(endpoint.connection), std::move(endpoint.options)));
    };
    auto p = provider(options);
    run([&]() -> asio::awaitable<void> {
        GetOrCreateOptions o;
        o.sandbox_id = "seam";
        auto a = co_await p->acquire(o);
        EXPECT_TRUE(a) << (a ? "" : a.error().describe());
        if (!a) co_return;
        EXPECT_EQ(made, 1);
        EXPECT_FALSE(seen_name.empty());
        auto* routed = dynamic_cast<RouterSandbox*>(a->sandbox.get());
        EXPECT_TRUE(routed && routed->options().base_dir == "/tmp");
        auto r = co_await a->sandbox->execute("echo via the seam");
        EXPECT_TRUE(r && r->output == "via the seam\n");
        // A second server in the sandbox, on port 9090 (busybox httpd puts itself in the background).
        auto served = co_await a->sandbox->execute(
            "mkdir -p /tmp/www && echo second port > /tmp/www/hello.txt && busybox httpd -p 9090 -h /tmp/www");
        EXPECT_TRUE(served && served->exit_code == 0) << (served ? served->output : served.error().describe());
        auto second = connect_port(9090);
        EXPECT_TRUE(second) << (second ? "" : second.error().describe());
        if (!second) co_return;
        std::string body;
        for (int i = 0; i < 100 && body.empty(); ++i) {
            RouterRequest request;
            request.method = "GET";
            request.target = "/hello.txt";
            request.add_header("X-Sandbox-ID", seen_name);
            request.add_header("X-Sandbox-Namespace", "default");
            request.add_header("X-Sandbox-Port", "9090");
            BodySink sink;
            auto status =
                co_await (*second)->impl().send(std::move(request), std::chrono::steady_clock::now() + 5s, sink);
            if (status && *status == 200) body = sink.body;
            else co_await test::sleep_for(50ms);  // until httpd listens
        }
        EXPECT_EQ(body, "second port\n");
        EXPECT_TRUE(co_await p->delete_sandbox("seam"));
    });
}

TEST_F(AgentSandboxTest, ControllerSurvivesClaimsDeletedWhileItWorks) {
    auto p = provider(busybox());
    run([&]() -> asio::awaitable<void> {
        // Claims made and deleted at once, some naming a pool that does not exist: the controller
        // meets objects vanishing under every step of its reconcile.
        auto kube = client();
        ResourcePath claims{"extensions.agents.x-k8s.io", "v1beta1", "sandboxclaims", "default", ""};
        for (int i = 0; i < 30; ++i) {
            std::string name = "churn-" + std::to_string(i);
            json::object body{
                {"apiVersion", "extensions.agents.x-k8s.io/v1beta1"},
                {"kind", "SandboxClaim"},
                {"metadata", json::object{{"name", name}}},
                {"spec", json::object{{"warmPoolRef", json::object{{"name", i % 2 ? "busybox-runtime" : "gone"}}}}}};
            EXPECT_TRUE(co_await kube.create(claims, body));
            if (i % 3) co_await test::sleep_for(std::chrono::milliseconds(i % 7));
            EXPECT_TRUE(co_await kube.remove(claims.with_name(name)));
        }
        // Still serving claims afterwards.
        GetOrCreateOptions o;
        o.sandbox_id = "after-churn";
        auto a = co_await p->acquire(o);
        EXPECT_TRUE(a) << (a ? "" : a.error().describe());
        if (a) {
            auto r = co_await a->sandbox->execute("echo alive");
            EXPECT_TRUE(r && r->output == "alive\n");
            EXPECT_TRUE(co_await p->delete_sandbox("after-churn"));
        }
    });
}

}  // namespace
