// RawBindingTest, claiming: a caller id is served by a warm pod through its binding, replicas
// converge on one pod per id warm or cold, managers serve threads from the pool
// (raw_binding_fixture.hpp).
#include "raw_binding_fixture.hpp"

namespace {
using namespace kubesandbox;
using namespace kubesandbox::test::raw_binding;
using kubesandbox::test::sleep_for;

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
            co_await wait_refills(*p);  // nothing is still being made
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
