// RawBindingTest, recovery: a bound pod deleted or dead is never handed out again, no pod under
// a binding on its way out, cleanup sweeps what lost its other half (raw_binding_fixture.hpp).
#include "raw_binding_fixture.hpp"

namespace {
using namespace kubesandbox;
using namespace kubesandbox::test::raw_binding;
using kubesandbox::test::sleep_for;

TEST_F(RawBindingTest, ABoundPodDeletedBehindTheProvidersBackIsNeverHandedOutAgain) {
    auto p = provider(1);
    run(
        [&]() -> asio::awaitable<void> {
            co_await p->ensure_warm_pool();
            co_await wait_pool(*p, 1);
            GetOrCreateOptions o;
            o.sandbox_id = "lost-1";
            auto got = co_await p->acquire(o);
            EXPECT_TRUE(got && got->origin == SandboxOrigin::claimed_warm);
            if (!got) co_return;
            const std::string pod = dynamic_cast<PodExecSandbox&>(*got->sandbox).pod_name();
            auto kc = client();
            DeleteOptions now;
            now.grace_period_seconds = 0;
            auto d = co_await kc.remove(in_default("pods", pod), now);
            EXPECT_TRUE(d);
            for (int i = 0; i < 100; ++i) {
                auto g = co_await kc.get(in_default("pods", pod));
                if (!g && g.error().is(errc::not_found)) break;
                co_await sleep_for(100ms);
            }
            GetOrCreateOptions only = o;
            only.create_if_missing = false;
            auto none = co_await p->acquire(only);
            EXPECT_TRUE(!none && none.error().is(errc::not_found));
            auto fresh = co_await p->acquire(o);
            EXPECT_TRUE(fresh) << fresh.error().describe();
            if (fresh) {
                // Its binding went with the pod (owner reference): a new sandbox under the id, which
                // the instance tells apart (the manager reports it as recreated).
                EXPECT_TRUE(fresh->origin == SandboxOrigin::claimed_warm || fresh->origin == SandboxOrigin::created)
                    << static_cast<int>(fresh->origin);
                EXPECT_NE(fresh->instance, got->instance);
                auto r = co_await fresh->sandbox->execute("echo alive");
                EXPECT_TRUE(r && r->output == "alive\n");
            }
            co_await delete_all(*p);
        },
        240s);
}

TEST_F(RawBindingTest, ADeadBoundPodIsReplacedAndSaysSo) {
    auto dying = provider(1, {"sh", "-c", "sleep 3; exit 1"});
    auto healthy = provider(0);
    run(
        [&]() -> asio::awaitable<void> {
            co_await dying->ensure_warm_pool();
            co_await wait_pool(*dying, 1);
            GetOrCreateOptions o;
            o.sandbox_id = "phoenix";
            auto got = co_await dying->acquire(o);
            EXPECT_TRUE(got && got->origin == SandboxOrigin::claimed_warm);
            if (!got) co_return;
            const std::string pod = dynamic_cast<PodExecSandbox&>(*got->sandbox).pod_name();
            auto kc = client();
            bool dead = false;
            for (int i = 0; i < 100 && !dead; ++i) {
                auto p = co_await kc.get(in_default("pods", pod));
                dead = p && at(*p, {"status", "phase"}) == "Failed";
                if (!dead) co_await sleep_for(200ms);
            }
            EXPECT_TRUE(dead) << "the pod did not die";
            // Another replica (no warm pool) finds the binding naming a dead pod: it replaces it.
            auto fresh = co_await healthy->acquire(o);
            EXPECT_TRUE(fresh) << fresh.error().describe();
            if (fresh) {
                EXPECT_EQ(fresh->origin, SandboxOrigin::replaced);
                EXPECT_NE(fresh->instance, got->instance);
                auto r = co_await fresh->sandbox->execute("echo alive");
                EXPECT_TRUE(r && r->output == "alive\n");
                auto b = co_await kc.get(in_default("configmaps", RawProvider::pod_name_for("phoenix")));
                EXPECT_TRUE(b && at(*b, {"data", "pod"}) == dynamic_cast<PodExecSandbox&>(*fresh->sandbox).pod_name());
            }
            co_await delete_all(*dying);
        },
        240s);
}

// A binding whose owner is gone is on its way out (the garbage collector removes it, here within
// the cluster's next turn, on a real cluster within seconds): a pod made under it would lose its
// binding while in use. The id is bound afresh instead.
TEST_F(RawBindingTest, NoPodIsMadeUnderABindingOwnedByAGonePod) {
    auto p = provider(0);
    run(
        [&]() -> asio::awaitable<void> {
            auto kc = client();
            const std::string own = RawProvider::pod_name_for("orphaned");
            json::object hand{
                {"apiVersion", "v1"},
                {"kind", "ConfigMap"},
                {"metadata", json::object{{"name", own},
                                          {"labels", json::object{{"kubesandbox.io/managed-by", "kubesandbox"},
                                                                  {"kubesandbox.io/sandbox-id", "orphaned"},
                                                                  {"kubesandbox.io/namespace-mode", "shared"}}},
                                          {"ownerReferences", json::array{json::object{{"apiVersion", "v1"},
                                                                                       {"kind", "Pod"},
                                                                                       {"name", own},
                                                                                       {"uid", "a-pod-long-gone"}}}}}},
                {"data", json::object{{"pod", own}}}};
            auto made = co_await kc.create(in_default("configmaps"), hand);
            EXPECT_TRUE(made) << made.error().describe();
            if (!made) co_return;
            GetOrCreateOptions o;
            o.sandbox_id = "orphaned";
            auto got = co_await p->acquire(o);
            EXPECT_TRUE(got) << got.error().describe();
            if (!got) co_return;
            auto binding = co_await kc.get(in_default("configmaps", own));
            EXPECT_TRUE(binding);
            if (binding) {
                EXPECT_NE(at(*binding, {"metadata", "uid"}), at(*made, {"metadata", "uid"}))
                    << "the pod was made under the dying binding";
                const auto* refs = binding->at("metadata").as_object().if_contains("ownerReferences");
                EXPECT_TRUE(refs && refs->is_array() && refs->as_array().size() == 1 &&
                            at(refs->as_array()[0].as_object(), {"uid"}) == got->instance);
            }
            // Bound again by hand removal: a live pod at the id's name is bound as it is.
            auto removed = co_await kc.remove(in_default("configmaps", own));
            EXPECT_TRUE(removed);
            auto again = co_await p->acquire(o);
            EXPECT_TRUE(again && again->origin == SandboxOrigin::existing && again->instance == got->instance);
            auto rebound = co_await kc.get(in_default("configmaps", own));
            EXPECT_TRUE(rebound && at(*rebound, {"data", "pod"}) == own);
            co_await delete_all(*p);
        },
        240s);
}

TEST_F(RawBindingTest, CleanupSweepsStaleBindingsAndClaimsNoBindingNames) {
    auto p = provider(1);
    run(
        [&]() -> asio::awaitable<void> {
            auto kc = client();
            // A binding whose pod is long gone, and a young one (an acquisition in flight).
            auto binding = [](const std::string& name, const char* created) {
                json::object o;
                o["apiVersion"] = "v1";
                o["kind"] = "ConfigMap";
                o["metadata"] = json::object{{"name", name},
                                             {"labels", json::object{{"kubesandbox.io/managed-by", "kubesandbox"},
                                                                     {"kubesandbox.io/sandbox-id", name},
                                                                     {"kubesandbox.io/namespace-mode", "shared"}}},
                                             {"annotations", json::object{{"kubesandbox.io/created-at", created}}}};
                o["data"] = json::object{{"pod", "ksb-bcdfghjklm"}};
                return o;
            };
            auto s1 = co_await kc.create(in_default("configmaps"), binding("ksb-stale", "2020-01-01T00:00:00.000Z"));
            auto s2 = co_await kc.create(in_default("configmaps"), binding("ksb-young", "2100-01-01T00:00:00.000Z"));
            EXPECT_TRUE(s1 && s2);
            // A warm pod claimed for an id whose binding is gone (its claimer stopped midway),
            // long enough ago.
            co_await p->ensure_warm_pool();
            co_await wait_pool(*p, 1);
            GetOrCreateOptions o;
            o.sandbox_id = "half-claimed";
            auto got = co_await p->acquire(o);
            EXPECT_TRUE(got && got->origin == SandboxOrigin::claimed_warm);
            if (!got) co_return;
            const std::string pod = dynamic_cast<PodExecSandbox&>(*got->sandbox).pod_name();
            auto rb = co_await kc.remove(in_default("configmaps", RawProvider::pod_name_for("half-claimed")));
            EXPECT_TRUE(rb);
            json::object aged{{"metadata", json::object{{"annotations", json::object{{"kubesandbox.io/created-at",
                                                                                      "2020-01-01T00:00:00.000Z"}}}}}};
            auto pa = co_await kc.patch(in_default("pods", pod), aged, PatchType::merge);
            EXPECT_TRUE(pa) << pa.error().describe();

            auto r = co_await p->cleanup();
            EXPECT_TRUE(r) << r.error().describe();
            if (r) {
                std::vector<std::string> want{"configmap default/ksb-stale", "pod default/" + pod};
                EXPECT_EQ(r->orphans_deleted, want);
                EXPECT_TRUE(r->errors.empty());
            }
            auto young = co_await kc.get(in_default("configmaps", "ksb-young"));
            EXPECT_TRUE(young) << "a young binding (acquisition in flight) was swept";
            co_await kc.remove(in_default("configmaps", "ksb-young"));
            co_await delete_all(*p);
        },
        240s);
}

}  // namespace
