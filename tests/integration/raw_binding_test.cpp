// Caller ids served by warm pods (shared-namespace raw mode) against the embedded local cluster:
// the id's binding names the warm pod, replicas converge on one pod per id whichever of them
// claims or creates, a bound pod deleted or dead is never handed out again, and
// cleanup sweeps bindings and claims that lost their other half.
#include <kubesandbox/raw_provider.hpp>
#include <kubesandbox/sandbox_manager.hpp>

#include "../support/local_cluster_fixture.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/this_coro.hpp>

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

namespace {

namespace asio = boost::asio;
namespace json = boost::json;
using namespace kubesandbox;
using namespace std::chrono_literals;
using kubesandbox::test::sleep_for;

ResourcePath in_default(const char* plural, std::string name = {}) {
    ResourcePath p;
    p.plural = plural;
    p.namespace_name = "default";
    p.name = std::move(name);
    return p;
}

std::string at(const json::object& o, std::initializer_list<const char*> path) {
    const json::object* cur = &o;
    const json::value* v = nullptr;
    for (const char* k : path) {
        if (!cur) return {};
        v = cur->if_contains(k);
        if (!v) return {};
        cur = v->is_object() ? &v->get_object() : nullptr;
    }
    return v && v->is_string() ? std::string(v->get_string()) : std::string();
}

class RawBindingTest : public kubesandbox::test::LocalClusterTest {
protected:
    static void TearDownTestSuite() {
        if (!cluster_) return;
        // Nothing of ours may be left: pods, bindings.
        asio::io_context io;
        KubeClient kc(io.get_executor(), cluster_->kube_config());
        std::size_t left = 99;
        auto check = [&]() -> asio::awaitable<void> {
            for (int i = 0; i < 60; ++i) {
                ListOptions lo;
                lo.label_selector = "kubesandbox.io/managed-by=kubesandbox";
                auto p = co_await kc.list(in_default("pods"), lo);
                auto c = co_await kc.list(in_default("configmaps"), lo);
                if (p && c) {
                    left = p->items.size() + c->items.size();
                    if (left == 0) co_return;
                }
                co_await sleep_for(250ms);
            }
        };
        kubesandbox::test::run_coroutine_test(io, check, 30s);
        EXPECT_EQ(left, 0u) << "pods or bindings left behind";
        LocalClusterTest::TearDownTestSuite();
    }

    std::shared_ptr<RawProvider> provider(int warm, std::vector<std::string> command = {}) {
        RawProviderOptions po;
        if (!command.empty()) po.command = std::move(command);
        po.startup_timeout = 60s;
        po.warm_pool_size = warm;
        po.logger = Logger::silent();
        return std::make_shared<RawProvider>(client(), po);
    }

    // Deletes every sandbox of the provider's configuration, warm ones too, once the refills
    // its claims started are over (one still running would create warm pods after the list).
    asio::awaitable<void> delete_all(RawProvider& p) {
        co_await wait_refills(p);
        ListSandboxesOptions all;
        all.include_warm = true;
        auto page = co_await p.list(all);
        EXPECT_TRUE(page) << page.error().describe();
        if (!page) co_return;
        for (auto& i : page->items) {
            auto d = co_await p.delete_sandbox(i.id);
            EXPECT_TRUE(d) << i.id << ": " << d.error().describe();
        }
    }

    asio::awaitable<void> wait_refills(RawProvider& p) {
        for (int i = 0; i < 1200; ++i) {
            auto s = co_await p.pool_status();
            if (s && !s->refilling) co_return;
            co_await sleep_for(100ms);
        }
        ADD_FAILURE() << "the warm pool's refill never ended";
    }

    asio::awaitable<void> wait_pool(RawProvider& p, int n) {
        for (int i = 0; i < 600; ++i) {
            auto s = co_await p.pool_status();
            if (s && s->available >= n) co_return;
            co_await sleep_for(100ms);
        }
        ADD_FAILURE() << "the warm pool did not fill";
    }

    // Pods serving `id` (not being deleted): the bound warm pod, or one at the id's own name.
    asio::awaitable<std::vector<std::string>> pods_serving(std::string id) {
        ListOptions lo;
        lo.label_selector = "kubesandbox.io/managed-by=kubesandbox";
        auto kc = client();
        auto list = co_await kc.list(in_default("pods"), lo);
        EXPECT_TRUE(list);
        std::vector<std::string> out;
        if (!list) co_return out;
        for (auto& item : list->items) {
            const auto& pod = item.as_object();
            if (!at(pod, {"metadata", "deletionTimestamp"}).empty()) continue;
            if (at(pod, {"metadata", "annotations", "kubesandbox.io/thread-id-original"}) == id ||
                at(pod, {"metadata", "labels", "kubesandbox.io/sandbox-id"}) == id)
                out.push_back(at(pod, {"metadata", "name"}));
        }
        co_return out;
    }
};

TEST_F(RawBindingTest, ACallerIdIsServedByAWarmPodThroughItsBinding) {
    auto p = provider(2);
    run(
        [&]() -> asio::awaitable<void> {
            auto filled = co_await p->ensure_warm_pool();
            EXPECT_TRUE(filled) << filled.error().describe();
            co_await wait_pool(*p, 2);
            GetOrCreateOptions o;
            o.sandbox_id = "conversation 1 / \"quoted\" $HOME";
            o.labels = {{"team", "a"}};
            auto got = co_await p->acquire(o);
            EXPECT_TRUE(got) << got.error().describe();
            if (!got) co_return;
            EXPECT_EQ(got->origin, SandboxOrigin::claimed_warm);
            auto* sb = dynamic_cast<PodExecSandbox*>(got->sandbox.get());
            EXPECT_TRUE(sb);
            if (!sb) co_return;
            const std::string pod = sb->pod_name();
            const std::string own = RawProvider::pod_name_for(*o.sandbox_id);
            EXPECT_NE(pod, own) << "not served from the warm pool";

            // The binding: named like the id's own pod, naming the warm pod, owned by it.
            auto kc = client();
            auto binding = co_await kc.get(in_default("configmaps", own));
            EXPECT_TRUE(binding) << binding.error().describe();
            if (binding) {
                EXPECT_EQ(at(*binding, {"data", "pod"}), pod);
                const auto* refs = binding->at("metadata").as_object().if_contains("ownerReferences");
                EXPECT_TRUE(refs && refs->is_array() && refs->as_array().size() == 1);
                if (refs && refs->is_array() && !refs->as_array().empty()) {
                    EXPECT_EQ(at(refs->as_array()[0].as_object(), {"uid"}), got->instance);
                }
            }
            // The pod keeps the label its deny-all policy selects: claiming never opens its network.
            auto pod_obj = co_await kc.get(in_default("pods", pod));
            ResourcePath np_path = in_default("networkpolicies", pod + "-deny-all");
            np_path.group = "networking.k8s.io";
            auto np = co_await kc.get(np_path);
            EXPECT_TRUE(pod_obj && np);
            if (pod_obj && np) {
                EXPECT_EQ(at(*pod_obj, {"metadata", "labels", "kubesandbox.io/sandbox-id"}),
                          at(*np, {"spec", "podSelector", "matchLabels", "kubesandbox.io/sandbox-id"}));
                EXPECT_EQ(at(*pod_obj, {"metadata", "labels", "kubesandbox.io/team"}), "a");
            }

            auto w = co_await got->sandbox->execute("echo kept > /workspace/f");
            EXPECT_TRUE(w && w->exit_code == 0);
            // Again by id: the same pod, as it was left.
            auto again = co_await p->acquire(o);
            EXPECT_TRUE(again) << again.error().describe();
            if (again) {
                EXPECT_EQ(again->origin, SandboxOrigin::existing);
                EXPECT_EQ(again->instance, got->instance);
                auto r = co_await again->sandbox->execute("cat /workspace/f");
                EXPECT_TRUE(r && r->output == "kept\n");
            }
            auto info = co_await p->describe(*o.sandbox_id);
            EXPECT_TRUE(info) << info.error().describe();
            if (info) {
                EXPECT_EQ(info->id, *o.sandbox_id);
                EXPECT_EQ(info->pod_name, pod);
            }
            ListSandboxesOptions lo;
            lo.labels = {{"team", "a"}};
            auto listed = co_await p->list(lo);
            EXPECT_TRUE(listed && listed->items.size() == 1 && listed->items[0].id == *o.sandbox_id);

            auto d = co_await p->delete_sandbox(*o.sandbox_id);
            EXPECT_TRUE(d && *d);
            auto b2 = co_await kc.get(in_default("configmaps", own));
            EXPECT_TRUE(!b2 && b2.error().is(errc::not_found)) << "binding left after delete";
            EXPECT_TRUE((co_await pods_serving(*o.sandbox_id)).empty());
            GetOrCreateOptions only;
            only.sandbox_id = o.sandbox_id;
            only.create_if_missing = false;
            auto none = co_await p->acquire(only);
            EXPECT_TRUE(!none && none.error().is(errc::not_found));
            co_await delete_all(*p);
        },
        240s);
}

// A claim whose answer is lost, and the read after it fails too: the caller is served by a
// sandbox of its own, and the warm pod that claim took is released on the side instead of
// idling as a second sandbox for the id.
TEST_F(RawBindingTest, AWarmPodTakenByAClaimWhoseAnswerWasLostIsReleased) {
    auto p = provider(1);
    run(
        [&]() -> asio::awaitable<void> {
            auto filled = co_await p->ensure_warm_pool();
            EXPECT_TRUE(filled) << filled.error().describe();
            co_await wait_pool(*p, 1);
            auto kc = client();
            ListOptions lo;
            lo.label_selector = std::string(keys::pool_status) + "=warm";
            auto warm = co_await kc.list(in_default("pods"), lo);
            EXPECT_TRUE(warm && warm->items.size() == 1);
            if (!warm || warm->items.size() != 1) co_return;
            const std::string warm_pod = at(warm->items[0].as_object(), {"metadata", "name"});

            FaultRule lose_answer;  // applied, then the connection dies mid-body
            lose_answer.path_contains = "/pods/" + warm_pod;
            lose_answer.method = "PATCH";
            lose_answer.action = FaultRule::Action::drop_mid_body;
            FaultRule unreadable;  // every attempt of the one read after the PATCH, none after
            unreadable.path_contains = "/pods/" + warm_pod;
            unreadable.method = "GET";
            unreadable.count = KubeClientOptions{}.max_retries + 1;
            cluster_->add_fault(lose_answer);
            cluster_->add_fault(unreadable);
            GetOrCreateOptions o;
            o.sandbox_id = "lost-claim";
            auto got = co_await p->acquire(o);
            cluster_->clear_faults();
            EXPECT_TRUE(got) << got.error().describe();
            if (got) {
                EXPECT_EQ(got->origin, SandboxOrigin::created);
                auto* sb = dynamic_cast<PodExecSandbox*>(got->sandbox.get());
                EXPECT_TRUE(sb && sb->pod_name() != warm_pod);
            }
            bool released = false;
            for (int i = 0; i < 300 && !released; ++i) {
                auto pod = co_await kc.get(in_default("pods", warm_pod));
                released = (!pod && pod.error().is(errc::not_found)) ||
                           (pod && !at(*pod, {"metadata", "deletionTimestamp"}).empty());
                if (!released) co_await sleep_for(100ms);
            }
            EXPECT_TRUE(released) << "the warm pod the lost claim took was left";
            EXPECT_EQ((co_await pods_serving("lost-claim")).size(), 1u);
            co_await delete_all(*p);
        },
        240s);
}

TEST_F(RawBindingTest, ReplicasConvergeOnOnePodPerIdWhetherWarmOrCold) {
    // Fewer warm pods than ids: some ids get warm pods, the rest are created cold, and two
    // providers (replicas) race on every id.
    auto a = provider(3);
    auto b = provider(3);
    constexpr int ids = 8;
    std::map<std::string, std::vector<std::string>> served;  // id -> pod per acquisition
    std::map<std::string, std::vector<std::string>> instances;
    run(
        [&]() -> asio::awaitable<void> {
            auto filled = co_await a->ensure_warm_pool();
            EXPECT_TRUE(filled) << filled.error().describe();
            co_await wait_pool(*a, 3);
            auto ex = co_await asio::this_coro::executor;
            int done = 0;
            for (int i = 0; i < ids; ++i) {
                for (RawProvider* p : {a.get(), b.get()}) {
                    std::string id = "race-" + std::to_string(i);
                    asio::co_spawn(
                        ex,
                        [&, p, id]() -> asio::awaitable<void> {
                            GetOrCreateOptions o;
                            o.sandbox_id = id;
                            auto got = co_await p->acquire(o);
                            EXPECT_TRUE(got) << id << ": " << got.error().describe();
                            if (got) {
                                served[id].push_back(dynamic_cast<PodExecSandbox&>(*got->sandbox).pod_name());
                                instances[id].push_back(got->instance);
                            }
                            ++done;
                        },
                        asio::detached);
                }
            }
            for (int i = 0; i < 1800 && done < 2 * ids; ++i) co_await sleep_for(100ms);
            EXPECT_EQ(done, 2 * ids);
            int warm_served = 0;
            for (auto& [id, pods] : served) {
                EXPECT_EQ(pods.size(), 2u) << id;
                if (pods.size() != 2) continue;
                EXPECT_EQ(pods[0], pods[1]) << id << " is served by two pods";
                EXPECT_EQ(instances[id][0], instances[id][1]) << id;
                warm_served += pods[0] != RawProvider::pod_name_for(id);
                // Every binding is its pod's dependent, cold ones too (made so once the pod exists).
                auto kc = client();
                auto binding = co_await kc.get(in_default("configmaps", RawProvider::pod_name_for(id)));
                EXPECT_TRUE(binding) << id;
                if (binding) {
                    EXPECT_EQ(at(*binding, {"data", "pod"}), pods[0]) << id;
                    const auto* refs = binding->at("metadata").as_object().if_contains("ownerReferences");
                    const bool owned = refs && refs->is_array() && refs->as_array().size() == 1 &&
                                       at(refs->as_array()[0].as_object(), {"uid"}) == instances[id][0];
                    EXPECT_TRUE(owned) << id << " binding not owned by its pod";
                }
                // Exactly one live pod serves the id (claims that lost the race were released).
                std::vector<std::string> live;
                for (int w = 0; w < 100; ++w) {
                    live = co_await pods_serving(id);
                    if (live.size() == 1) break;
                    co_await sleep_for(100ms);
                }
                EXPECT_EQ(live, std::vector<std::string>{pods[0]}) << id;
            }
            EXPECT_GE(warm_served, 1) << "no id was served from the warm pool";
            EXPECT_LT(warm_served, ids) << "more warm pods served than the pool could have had ready";
            co_await wait_refills(*b);
            co_await delete_all(*a);
        },
        420s);
}

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

// A top-up while the refill started by a claim is running does not count the same shortfall
// again: the pool ends at its size, not above it.
TEST_F(RawBindingTest, ATopUpDuringARefillDoesNotOvershoot) {
    auto p = provider(2);
    run(
        [&]() -> asio::awaitable<void> {
            co_await p->ensure_warm_pool();
            co_await wait_pool(*p, 2);
            auto got = co_await p->get_or_create();  // claims one and starts the refill
            EXPECT_TRUE(got) << got.error().describe();
            auto topped = co_await p->ensure_warm_pool();
            EXPECT_TRUE(topped) << topped.error().describe();
            co_await wait_pool(*p, 2);
            co_await sleep_for(1500ms);  // anything still being made would show by now
            ListSandboxesOptions warm;
            warm.status = "warm";
            auto listed = co_await p->list(warm);
            EXPECT_TRUE(listed);
            if (listed) {
                EXPECT_EQ(listed->items.size(), 2u) << "warm pods beyond the pool's size";
            }
            co_await delete_all(*p);
        },
        240s);
}

// The warm pod's policy was made with it; deleted behind our back before the claim, it is back
// before the pod is handed out.
TEST_F(RawBindingTest, AClaimedWarmPodIsHandedOutWithItsPolicy) {
    auto p = provider(1);
    run(
        [&]() -> asio::awaitable<void> {
            co_await p->ensure_warm_pool();
            co_await wait_pool(*p, 1);
            ListSandboxesOptions warm;
            warm.status = "warm";
            auto listed = co_await p->list(warm);
            EXPECT_TRUE(listed && listed->items.size() == 1);
            if (!listed || listed->items.empty()) co_return;
            const std::string pod = listed->items[0].pod_name;
            auto kc = client();
            ResourcePath np_path = in_default("networkpolicies", pod + "-deny-all");
            np_path.group = "networking.k8s.io";
            auto removed = co_await kc.remove(np_path);
            EXPECT_TRUE(removed && removed->found);
            GetOrCreateOptions o;
            o.sandbox_id = "guarded";
            auto got = co_await p->acquire(o);
            EXPECT_TRUE(got) << got.error().describe();
            if (got) {
                EXPECT_EQ(got->origin, SandboxOrigin::claimed_warm);
                EXPECT_EQ(dynamic_cast<PodExecSandbox&>(*got->sandbox).pod_name(), pod);
            }
            auto np = co_await kc.get(np_path);
            auto pod_obj = co_await kc.get(in_default("pods", pod));
            EXPECT_TRUE(np && pod_obj) << "the claimed pod runs without its policy";
            if (np && pod_obj) {
                EXPECT_EQ(at(*np, {"spec", "podSelector", "matchLabels", "kubesandbox.io/sandbox-id"}),
                          at(*pod_obj, {"metadata", "labels", "kubesandbox.io/sandbox-id"}));
            }
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

// The manager over raw mode with a warm pool: first turns are served warm, and two managers
// (replicas) asking for the same threads get one sandbox per thread.
TEST_F(RawBindingTest, ManagersServeThreadsFromTheWarmPool) {
    auto pa = provider(4);
    auto pb = provider(4);
    SandboxManagerOptions mo;
    mo.scope = "warm";
    mo.logger = Logger::silent();
    SandboxManager a(io_.get_executor(), pa, mo);
    SandboxManager b(io_.get_executor(), pb, mo);
    run(
        [&]() -> asio::awaitable<void> {
            co_await pa->ensure_warm_pool();
            co_await wait_pool(*pa, 4);
            auto ex = co_await asio::this_coro::executor;
            constexpr int threads = 3;
            std::map<std::string, std::vector<SandboxLease>> leases;
            int done = 0;
            for (int i = 0; i < threads; ++i)
                for (SandboxManager* m : {&a, &b}) {
                    std::string thread = "t" + std::to_string(i);
                    asio::co_spawn(
                        ex,
                        [&, m, thread]() -> asio::awaitable<void> {
                            auto lease = co_await m->get(thread);
                            EXPECT_TRUE(lease) << lease.error().describe();
                            if (lease) leases[thread].push_back(std::move(*lease));
                            ++done;
                        },
                        asio::detached);
                }
            for (int i = 0; i < 1200 && done < 2 * threads; ++i) co_await sleep_for(100ms);
            EXPECT_EQ(done, 2 * threads);
            for (auto& [thread, pair] : leases) {
                EXPECT_EQ(pair.size(), 2u) << thread;
                if (pair.size() != 2) continue;
                EXPECT_EQ(pair[0].id(), pair[1].id()) << thread;
                int created = 0;
                for (auto& l : pair) created += l.kind() == AcquireKind::created;
                EXPECT_EQ(created, 1) << thread;
                auto w = co_await pair[0].execute("echo from-a > /workspace/who");
                EXPECT_TRUE(w && w->exit_code == 0);
                auto r = co_await pair[1].execute("cat /workspace/who");
                EXPECT_TRUE(r && r->output == "from-a\n");
            }
            auto stats = co_await a.stats();
            EXPECT_EQ(stats.threads, static_cast<std::size_t>(threads));
            leases.clear();
            ShutdownOptions so;
            so.delete_sandboxes = true;
            auto report = co_await a.shutdown(so);
            EXPECT_EQ(report.deleted, static_cast<std::size_t>(threads));
            co_await b.shutdown();
            co_await wait_refills(*pb);
            co_await delete_all(*pa);
        },
        300s);
}

}  // namespace
