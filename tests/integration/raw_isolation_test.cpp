// RawProvider against the embedded local cluster: isolation: a namespace per sandbox, Pod Security admission, and the
// deny-all NetworkPolicy that lives as long as its pod. The suite's fixture and helpers are in
// raw_provider_fixture.hpp.
#include "raw_provider_fixture.hpp"

namespace {

using namespace kubesandbox;
using namespace kubesandbox::test::raw;
using kubesandbox::test::sleep_for;
using kubesandbox::test::raw::RawProviderTest;

TEST_F(RawProviderTest, NamespacePerSandbox) {
    RawProviderOptions cfg;
    cfg.namespace_per_sandbox = true;
    auto p = provider(cfg);
    run([&]() -> asio::awaitable<void> {
        GetOrCreateOptions o;
        o.sandbox_id = "own-ns";
        auto sb = co_await p->get_or_create_pod(o);
        EXPECT_TRUE(sb) << sb.error().describe();
        if (!sb) co_return;
        std::string ns = (*sb)->namespace_name();
        EXPECT_EQ(ns, (*sb)->pod_name());
        ResourcePath q;
        q.plural = "resourcequotas";
        q.namespace_name = ns;
        const ResourcePath rp16 = q.with_name("ksb-quota");
        auto quota = co_await client_->get(rp16);
        EXPECT_TRUE(quota);
        ResourcePath l;
        l.plural = "limitranges";
        l.namespace_name = ns;
        const ResourcePath rp17 = l.with_name("ksb-limits");
        auto lr = co_await client_->get(rp17);
        EXPECT_TRUE(lr);
        auto page = co_await p->list();  // cluster-wide
        EXPECT_TRUE(page);
        if (page) {
            EXPECT_EQ(page->items.size(), 1u);
            if (page->items.size() == 1) {
                EXPECT_EQ(page->items[0].namespace_name, ns);
            }
        }
        std::string id18 = "own-ns";
        auto d = co_await p->delete_sandbox(id18);
        EXPECT_TRUE(d && *d);
    });
}

TEST_F(RawProviderTest, NetworkPolicyFailureIsFailClosed) {
    auto p = provider();
    FaultRule rule;
    rule.path_contains = "/networkpolicies";
    rule.method = "POST";
    rule.count = -1;
    rule.status = 403;
    cluster_->add_fault(rule);
    run([&]() -> asio::awaitable<void> {
        GetOrCreateOptions o;
        o.sandbox_id = "np-denied";
        auto sb = co_await p->get_or_create_pod(o);
        EXPECT_FALSE(sb) << "a sandbox started without its NetworkPolicy";
        if (!sb) {
            EXPECT_TRUE(sb.error().is(errc::forbidden)) << sb.error().describe();
        }
        const ResourcePath pod_path = pods("default").with_name(RawProvider::pod_name_for("np-denied"));
        auto pod = co_await client_->get(pod_path);
        EXPECT_FALSE(pod);
    });
    cluster_->clear_faults();
}

// A namespace that enforces the restricted Pod Security level admits sandbox pods (init
// containers included) and refuses a plain pod, as a real API server does.
TEST_F(RawProviderTest, SandboxesAreAdmittedByARestrictedNamespace) {
    RawProviderOptions cfg;
    cfg.image = "busybox";
    cfg.namespace_name = "strict";
    cfg.init_containers.push_back(
        json::object{{"name", "prepare"}, {"image", "busybox"}, {"command", json::array{"true"}}});
    auto p = provider(cfg);
    run([&]() -> asio::awaitable<void> {
        json::object ns{
            {"metadata", json::object{{"name", "strict"},
                                      {"labels", json::object{{"pod-security.kubernetes.io/enforce", "restricted"}}}}}};
        auto made = co_await client_->create(namespaces(), ns);
        EXPECT_TRUE(made) << made.error().describe();
        json::object plain{
            {"metadata", json::object{{"name", "plain"}}},
            {"spec", json::object{{"containers", json::array{json::object{{"name", "c"}, {"image", "busybox"}}}}}}};
        auto refused = co_await client_->create(pods("strict"), plain);
        EXPECT_TRUE(!refused && refused.error().is(errc::forbidden));
        if (!refused) {
            EXPECT_NE(refused.error().message.find("violates PodSecurity \"restricted:latest\""), std::string::npos)
                << refused.error().message;
        }
        auto sb = co_await p->get_or_create_pod();
        EXPECT_TRUE(sb) << sb.error().describe();
        if (sb) {
            auto r = co_await (*sb)->execute("id -u");
            EXPECT_TRUE(r && r->output == "1000\n");
            co_await p->delete_sandbox((*sb)->id());
        }
        co_await client_->remove(namespaces().with_name("strict"));
    });
}

// Review 4c: the NetworkPolicy is its pod's dependent: deleting the pod behind the provider's
// back removes the policy too (the cluster's garbage collector).
TEST_F(RawProviderTest, NetworkPolicyIsOwnedByItsPod) {
    auto p = provider();
    run([&]() -> asio::awaitable<void> {
        GetOrCreateOptions o;
        o.sandbox_id = "owned";
        auto sb = co_await p->get_or_create_pod(o);
        EXPECT_TRUE(sb) << sb.error().describe();
        if (!sb) co_return;
        const ResourcePath pp = pods("default").with_name((*sb)->pod_name());
        auto pod = co_await client_->get(pp);
        EXPECT_TRUE(pod);
        const ResourcePath npp = netpols("default").with_name((*sb)->pod_name() + "-deny-all");
        auto np = co_await client_->get(npp);
        EXPECT_TRUE(np);
        if (pod && np) {
            auto& refs = (*np)["metadata"].as_object()["ownerReferences"];
            EXPECT_TRUE(refs.is_array() && refs.as_array().size() == 1u) << json::serialize(*np);
            if (refs.is_array() && refs.as_array().size() == 1u) {
                EXPECT_EQ(str(refs.as_array()[0].as_object(), {"uid"}), str(*pod, {"metadata", "uid"}));
                EXPECT_EQ(str(refs.as_array()[0].as_object(), {"kind"}), "Pod");
            }
        }
        DeleteOptions now;
        now.grace_period_seconds = 0;
        auto d = co_await client_->remove(pp, now);
        EXPECT_TRUE(d);
        bool gone = false;
        for (int i = 0; i < 100 && !gone; ++i) {
            auto n = co_await client_->get(npp);
            gone = !n && n.error().is(errc::not_found);
            if (!gone) co_await sleep_for(100ms);
        }
        EXPECT_TRUE(gone) << "the policy outlived its pod";
        std::string id = "owned";
        auto d2 = co_await p->delete_sandbox(id);
        EXPECT_TRUE(d2);
    });
}

// The deny-all policy outlives a terminating pod (the pod may still run during its grace
// period), and a reconnect restores a policy someone deleted instead of handing out an open pod.
TEST_F(RawProviderTest, PolicyStaysUntilThePodIsGoneAndReconnectRestoresIt) {
    RawProviderOptions cfg;
    cfg.image = "busybox";
    cfg.command = {"sh", "-c", "trap '' TERM; while :; do sleep 1; done"};
    cfg.delete_grace_period = 3s;
    auto p = provider(cfg);
    run([&]() -> asio::awaitable<void> {
        GetOrCreateOptions o;
        o.sandbox_id = "np-keep";
        auto sb = co_await p->get_or_create_pod(o);
        EXPECT_TRUE(sb) << sb.error().describe();
        if (!sb) co_return;
        const ResourcePath pp = pods("default").with_name((*sb)->pod_name());
        const ResourcePath npp = netpols("default").with_name((*sb)->pod_name() + "-deny-all");
        auto removed = co_await client_->remove(npp);
        EXPECT_TRUE(removed);
        auto again = co_await p->get_or_create_pod(o);
        EXPECT_TRUE(again) << again.error().describe();
        auto np = co_await client_->get(npp);
        EXPECT_TRUE(np) << "reconnect handed out a pod without its policy";
        auto pod_now = co_await client_->get(pp);
        if (np && pod_now) {
            auto& refs = (*np)["metadata"].as_object()["ownerReferences"];
            EXPECT_TRUE(refs.is_array() && refs.as_array().size() == 1u &&
                        str(refs.as_array()[0].as_object(), {"uid"}) == str(*pod_now, {"metadata", "uid"}))
                << json::serialize(*np);
        }

        std::string id = "np-keep";
        auto d = co_await p->delete_sandbox(id);
        EXPECT_TRUE(d && *d);
        auto terminating = co_await client_->get(pp);
        EXPECT_TRUE(terminating && str(*terminating, {"metadata", "deletionTimestamp"}) != "")
            << "the pod should still be terminating (it ignores SIGTERM)";
        auto during = co_await client_->get(npp);
        EXPECT_TRUE(during) << "the policy went while its pod was still terminating";
        bool pod_gone = false, policy_gone = false;
        for (int i = 0; i < 150 && !policy_gone; ++i) {
            // Policy first: when it is gone, the pod must already be gone too.
            auto pol = co_await client_->get(npp);
            policy_gone = !pol && pol.error().is(errc::not_found);
            auto pod = co_await client_->get(pp);
            pod_gone = !pod && pod.error().is(errc::not_found);
            EXPECT_TRUE(pod_gone || !policy_gone) << "policy gone before the pod";
            if (!policy_gone) co_await sleep_for(100ms);
        }
        EXPECT_TRUE(pod_gone && policy_gone);
    });
}

}  // namespace
