// RawProvider against the embedded local cluster: listing and cleanup: pages, TTL reaping across replicas, dead pods,
// orphaned policies and namespaces. The suite's fixture and helpers are in raw_provider_fixture.hpp.
#include "raw_provider_fixture.hpp"

namespace {

using namespace kubesandbox;
using namespace kubesandbox::test::raw;
using kubesandbox::test::sleep_for;
using kubesandbox::test::raw::RawProviderTest;

TEST_F(RawProviderTest, ListPaginatesWithLimit) {
    auto p = provider();
    run(
        [&]() -> asio::awaitable<void> {
            std::vector<std::string> ids;
            for (int i = 0; i < 5; ++i) {
                GetOrCreateOptions o;
                o.sandbox_id = "page-" + std::to_string(i);
                o.labels["suite"] = "pagination";
                auto sb = co_await p->get_or_create_pod(o);
                EXPECT_TRUE(sb) << sb.error().describe();
                ids.push_back(*o.sandbox_id);
            }
            ListSandboxesOptions lo;
            lo.labels["suite"] = "pagination";
            lo.limit = 2;
            std::vector<std::size_t> sizes;
            std::set<std::string> seen;
            for (int guard = 0; guard < 10; ++guard) {
                auto page = co_await p->list(lo);
                EXPECT_TRUE(page);
                if (!page) break;
                sizes.push_back(page->items.size());
                for (auto& i : page->items) seen.insert(i.id);
                if (page->next_cursor.empty()) break;
                lo.cursor = page->next_cursor;
            }
            EXPECT_EQ(sizes, (std::vector<std::size_t>{2, 2, 1}));
            EXPECT_EQ(seen, std::set<std::string>(ids.begin(), ids.end()));
            for (auto& id : ids) {
                auto d = co_await p->delete_sandbox(id);
                EXPECT_TRUE(d && *d);
            }
        },
        240s);
}

TEST_F(RawProviderTest, CleanupDeletesExpired) {
    auto p = provider();
    run([&]() -> asio::awaitable<void> {
        GetOrCreateOptions shortlived;
        shortlived.sandbox_id = "ttl-short";
        // Two seconds, not one: the TTL is also the pod's activeDeadlineSeconds, counted from
        // the kubelet's acceptance, so it must outlast the pod's start on a loaded machine.
        shortlived.ttl_seconds = 2;
        GetOrCreateOptions keeper;
        keeper.sandbox_id = "ttl-keep";
        keeper.ttl_idle_seconds = 3600;
        auto a = co_await p->get_or_create_pod(shortlived);
        auto b = co_await p->get_or_create_pod(keeper);
        EXPECT_TRUE(a && b);
        co_await sleep_for(3100ms);
        auto r = co_await p->cleanup();
        EXPECT_TRUE(r) << r.error().describe();
        if (r) {
            EXPECT_EQ(r->deleted, std::vector<std::string>{"ttl-short"});
            EXPECT_GE(r->kept, 1);
            EXPECT_TRUE(r->errors.empty());
        }
        const ResourcePath rp14 = netpols("default").with_name(RawProvider::pod_name_for("ttl-short") + "-deny-all");
        auto gone = co_await client_->get(rp14);
        EXPECT_FALSE(gone);
        // An explicit idle threshold of 0 s reaps the keeper too.
        auto r2 = co_await p->cleanup(std::chrono::seconds(0));
        EXPECT_TRUE(r2);
        if (r2) {
            EXPECT_EQ(r2->deleted, std::vector<std::string>{"ttl-keep"});
        }
    });
}

TEST_F(RawProviderTest, ReplicasReapingTheSameSandboxesCountEachOnce) {
    auto a = provider();
    auto b = provider();
    run([&]() -> asio::awaitable<void> {
        constexpr int n = 3;
        for (int i = 0; i < n; ++i) {
            GetOrCreateOptions o;
            o.sandbox_id = "reaped-twice-" + std::to_string(i);
            o.ttl_seconds = 2;  // also the pod's activeDeadlineSeconds: it must outlast the start
            auto sb = co_await a->get_or_create_pod(o);
            EXPECT_TRUE(sb) << sb.error().describe();
        }
        co_await sleep_for(3100ms);
        auto ex = co_await asio::this_coro::executor;
        std::vector<Result<CleanupResult>> results;
        int done = 0;
        for (SandboxProvider* p : {static_cast<SandboxProvider*>(a.get()), static_cast<SandboxProvider*>(b.get())})
            asio::co_spawn(
                ex,
                [&, p]() -> asio::awaitable<void> {
                    results.push_back(co_await p->cleanup());
                    ++done;
                },
                asio::detached);
        while (done < 2) co_await sleep_for(20ms);
        std::size_t deleted = 0;
        for (auto& r : results) {
            EXPECT_TRUE(r) << r.error().describe();
            if (!r) continue;
            EXPECT_TRUE(r->errors.empty());
            deleted += r->deleted.size();
        }
        EXPECT_EQ(deleted, static_cast<std::size_t>(n)) << "a sandbox another replica reaped was counted as ours";
    });
}

TEST_F(RawProviderTest, CleanupAsksBeforeReapingAnExpiredSandbox) {
    auto p = provider();
    run([&]() -> asio::awaitable<void> {
        GetOrCreateOptions o;
        o.sandbox_id = "vetoed";
        o.ttl_idle_seconds = 1;  // an absolute TTL would also end the pod itself (activeDeadlineSeconds)
        auto sb = co_await p->get_or_create_pod(o);
        EXPECT_TRUE(sb) << sb.error().describe();
        co_await sleep_for(2100ms);
        std::vector<std::string> asked;
        CleanupOptions keep;
        keep.may_delete = [&](const SandboxInfo& info) {
            asked.push_back(info.id);
            return false;
        };
        auto kept = co_await p->cleanup(keep);
        EXPECT_TRUE(kept && kept->deleted.empty());
        EXPECT_EQ(asked, std::vector<std::string>{"vetoed"});
        const ResourcePath still = pods("default").with_name(RawProvider::pod_name_for("vetoed"));
        EXPECT_TRUE(co_await client_->get(still));
        auto reaped = co_await p->cleanup();
        EXPECT_TRUE(reaped && reaped->deleted == std::vector<std::string>{"vetoed"});
    });
}

// Review 1: a per-sandbox-namespace provider once read every kubesandbox pod cluster-wide and
// deleted the namespace of any expired one: a shared namespace with all its content.
TEST_F(RawProviderTest, PerSandboxCleanupNeverDeletesASharedNamespace) {
    RawProviderOptions shared_cfg;
    shared_cfg.namespace_name = "shared-team";
    auto shared = provider(shared_cfg);
    RawProviderOptions per_cfg;
    per_cfg.namespace_per_sandbox = true;
    auto per = provider(per_cfg);
    run([&]() -> asio::awaitable<void> {
        json::object nso = hand_namespace("shared-team", {}, {});
        const ResourcePath nsp = namespaces();
        auto made = co_await client_->create(nsp, nso);
        EXPECT_TRUE(made) << made.error().describe();
        json::object cm;
        cm["apiVersion"] = "v1";
        cm["kind"] = "ConfigMap";
        cm["metadata"] = object_meta("keep-me", {}, {});
        const ResourcePath cmp = core("configmaps", "shared-team");
        auto cmr = co_await client_->create(cmp, cm);
        EXPECT_TRUE(cmr) << cmr.error().describe();

        GetOrCreateOptions o;
        o.sandbox_id = "shared-expired";
        o.ttl_seconds = 2;  // also the pod's activeDeadlineSeconds: it must outlast the start
        auto sb = co_await shared->get_or_create_pod(o);
        EXPECT_TRUE(sb) << sb.error().describe();
        // And one labelled as a per-sandbox pod but living in the shared namespace.
        json::object labels;
        labels["kubesandbox.io/managed-by"] = "kubesandbox";
        labels["kubesandbox.io/sandbox-id"] = "impostor";
        labels["kubesandbox.io/pool-status"] = "active";
        labels["kubesandbox.io/namespace-mode"] = "per-sandbox";
        json::object ann;
        ann["kubesandbox.io/created-at"] = long_ago;
        ann["kubesandbox.io/ttl-seconds"] = "1";
        json::object impostor = hand_pod("ksb-impostor", std::move(labels), std::move(ann));
        const ResourcePath pp = pods("shared-team");
        auto ip = co_await client_->create(pp, impostor);
        EXPECT_TRUE(ip) << ip.error().describe();
        co_await sleep_for(3100ms);

        auto r = co_await per->cleanup(std::chrono::seconds(0));
        EXPECT_TRUE(r) << r.error().describe();
        if (r) {
            EXPECT_EQ(r->deleted, std::vector<std::string>{"impostor"});
            EXPECT_TRUE(r->errors.empty());
        }
        const ResourcePath nsn = namespaces().with_name("shared-team");
        auto still = co_await client_->get(nsn);
        EXPECT_TRUE(still) << "the shared namespace was deleted";
        if (still) {
            EXPECT_EQ(str(*still, {"status", "phase"}), "Active") << "the shared namespace is being deleted";
        }
        const ResourcePath cmn = core("configmaps", "shared-team").with_name("keep-me");
        auto kept = co_await client_->get(cmn);
        EXPECT_TRUE(kept) << "an unrelated object in the shared namespace was deleted";
        const ResourcePath sp = pods("shared-team").with_name(RawProvider::pod_name_for("shared-expired"));
        auto shared_pod = co_await client_->get(sp);
        EXPECT_TRUE(shared_pod) << "a shared-namespace sandbox was reaped by the per-namespace provider";

        std::string id = "shared-expired";
        auto d = co_await shared->delete_sandbox(id);
        EXPECT_TRUE(d && *d);
        auto dn = co_await client_->remove(nsn);
        EXPECT_TRUE(dn);
    });
}

// Review 4a: dead pods (container exited; warm ones too) are reaped without any TTL.
TEST_F(RawProviderTest, CleanupReapsDeadPodsAndFailedWarmPods) {
    RawProviderOptions cfg;
    cfg.command = {"sh", "-c", "sleep 2; exit 1"};
    cfg.warm_pool_size = 1;
    auto p = provider(cfg);
    run([&]() -> asio::awaitable<void> {
        GetOrCreateOptions o;
        o.sandbox_id = "dies";
        // It looks in the warm pool first, finds none free and starts the pool's refill: one
        // warm pod (also dying) besides the sandbox's own.
        auto sb = co_await p->get_or_create_pod(o);
        EXPECT_TRUE(sb) << sb.error().describe();
        ListSandboxesOptions all;
        all.include_warm = true;
        std::set<std::string> dead;
        for (int i = 0; i < 100; ++i) {
            co_await sleep_for(200ms);
            auto page = co_await p->list(all);
            dead.clear();
            if (page)
                for (auto& item : page->items)
                    if (item.status == "failed") dead.insert(item.id);
            if (dead.size() == 2) break;
        }
        EXPECT_EQ(dead.size(), 2u);
        auto r = co_await p->cleanup();
        EXPECT_TRUE(r) << r.error().describe();
        if (r) {
            EXPECT_EQ(std::set<std::string>(r->deleted.begin(), r->deleted.end()), dead);
            EXPECT_TRUE(r->errors.empty());
        }
        auto left = co_await p->list(all);
        EXPECT_TRUE(left && left->items.empty());
    });
}

// Review 4b: policies and per-sandbox namespaces whose pod is gone are swept (young ones are
// spared: a creation may be in flight).
TEST_F(RawProviderTest, CleanupSweepsOrphanPoliciesAndNamespaces) {
    auto shared = provider();
    RawProviderOptions per_cfg;
    per_cfg.namespace_per_sandbox = true;
    auto per = provider(per_cfg);
    run([&]() -> asio::awaitable<void> {
        json::object labels;
        labels["kubesandbox.io/managed-by"] = "kubesandbox";
        labels["kubesandbox.io/sandbox-id"] = "ghost";
        labels["kubesandbox.io/namespace-mode"] = "shared";
        json::object old_ann;
        old_ann["kubesandbox.io/created-at"] = long_ago;
        json::object new_ann;
        new_ann["kubesandbox.io/created-at"] = "2100-01-01T00:00:00.000Z";
        const ResourcePath npp = netpols("default");
        json::object ghost_np = hand_policy("ksb-ghost-deny-all", labels, old_ann);
        auto a = co_await client_->create(npp, ghost_np);
        EXPECT_TRUE(a) << a.error().describe();
        json::object young_np = hand_policy("ksb-young-deny-all", labels, new_ann);
        auto b = co_await client_->create(npp, young_np);
        EXPECT_TRUE(b) << b.error().describe();
        json::object nsl;
        nsl["kubesandbox.io/managed-by"] = "kubesandbox";
        nsl["kubesandbox.io/sandbox-id"] = "ghostns";
        nsl["kubesandbox.io/namespace-mode"] = "per-sandbox";
        const ResourcePath nsp = namespaces();
        json::object ghost_ns = hand_namespace("ksb-ghostns", nsl, old_ann);
        auto c = co_await client_->create(nsp, ghost_ns);
        EXPECT_TRUE(c) << c.error().describe();

        auto r = co_await shared->cleanup();
        EXPECT_TRUE(r) << r.error().describe();
        if (r) {
            EXPECT_EQ(r->orphans_deleted, std::vector<std::string>{"networkpolicy default/ksb-ghost-deny-all"});
            EXPECT_TRUE(r->errors.empty());
        }
        const ResourcePath ghost = netpols("default").with_name("ksb-ghost-deny-all");
        auto g = co_await client_->get(ghost);
        EXPECT_FALSE(g) << "orphan NetworkPolicy not swept";
        const ResourcePath young = netpols("default").with_name("ksb-young-deny-all");
        auto y = co_await client_->get(young);
        EXPECT_TRUE(y) << "a young policy (creation in flight) was swept";

        auto r2 = co_await per->cleanup();
        EXPECT_TRUE(r2) << r2.error().describe();
        if (r2) {
            EXPECT_EQ(r2->orphans_deleted, std::vector<std::string>{"namespace ksb-ghostns"});
        }
        const ResourcePath gns = namespaces().with_name("ksb-ghostns");
        bool ns_gone = false;
        for (int i = 0; i < 50 && !ns_gone; ++i) {
            auto n = co_await client_->get(gns);
            ns_gone = !n && n.error().is(errc::not_found);
            if (!ns_gone) co_await sleep_for(100ms);
        }
        EXPECT_TRUE(ns_gone) << "orphan per-sandbox namespace not swept";
        auto dy = co_await client_->remove(young);
        EXPECT_TRUE(dy);
    });
}

// Review 9: list() without a limit is paged too (100 per page), so its cursor works.
TEST_F(RawProviderTest, ListWithoutLimitIsPaged) {
    RawProviderOptions cfg;
    cfg.namespace_name = "paging-test";
    auto p = provider(cfg);
    run([&]() -> asio::awaitable<void> {
        const ResourcePath nsp = namespaces();
        json::object paging_ns = hand_namespace("paging-test", {}, {});
        auto made = co_await client_->create(nsp, paging_ns);
        EXPECT_TRUE(made) << made.error().describe();
        // 101 labelled pods that never start (no processes): cheap to make.
        const ResourcePath pp = pods("paging-test");
        for (int i = 0; i < 101; ++i) {
            json::object labels;
            labels["kubesandbox.io/managed-by"] = "kubesandbox";
            labels["kubesandbox.io/sandbox-id"] = "page-" + std::to_string(i);
            labels["kubesandbox.io/namespace-mode"] = "shared";
            json::object pod =
                hand_pod("ksb-page-" + std::to_string(i), std::move(labels), {}, "no-such-registry.invalid/nothing:1");
            auto r = co_await client_->create(pp, pod);
            EXPECT_TRUE(r) << r.error().describe();
        }
        auto first = co_await p->list();
        EXPECT_TRUE(first) << first.error().describe();
        std::set<std::string> seen;
        if (first) {
            EXPECT_EQ(first->items.size(), 100u);
            EXPECT_FALSE(first->next_cursor.empty());
            for (auto& i : first->items) seen.insert(i.id);
            ListSandboxesOptions lo;
            lo.cursor = first->next_cursor;
            auto second = co_await p->list(lo);
            EXPECT_TRUE(second);
            if (second) {
                EXPECT_EQ(second->items.size(), 1u);
                EXPECT_TRUE(second->next_cursor.empty());
                for (auto& i : second->items) seen.insert(i.id);
            }
        }
        EXPECT_EQ(seen.size(), 101u);
        const ResourcePath nsn = namespaces().with_name("paging-test");
        auto dn = co_await client_->remove(nsn);
        EXPECT_TRUE(dn);
        for (int i = 0; i < 100; ++i) {
            auto n = co_await client_->get(nsn);
            if (!n && n.error().is(errc::not_found)) break;
            co_await sleep_for(100ms);
        }
    });
}

}  // namespace
