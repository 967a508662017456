// RawProvider against the embedded local cluster: the warm pool: claims that never share a pod, lost claim answers,
// dead and foreign warm pods. The suite's fixture and helpers are in raw_provider_fixture.hpp.
#include "raw_provider_fixture.hpp"

namespace {

using namespace kubesandbox;
using namespace kubesandbox::test::raw;
using kubesandbox::test::sleep_for;
using kubesandbox::test::raw::RawProviderTest;

TEST_F(RawProviderTest, TwoProvidersClaimingFromOneWarmPoolNeverShare) {
    RawProviderOptions cfg;
    cfg.warm_pool_size = 3;
    auto a = provider(cfg);
    auto b = provider(cfg);
    std::vector<std::string> names;
    run(
        [&]() -> asio::awaitable<void> {
            auto filled = co_await a->ensure_warm_pool();
            EXPECT_TRUE(filled) << filled.error().describe();
            if (filled) {
                EXPECT_EQ(*filled, 3);
            }
            auto ps = co_await a->pool_status();
            EXPECT_TRUE(ps);
            if (ps) {
                EXPECT_EQ(ps->available, 3);
                EXPECT_EQ(ps->target, 3);
            }
            // Warm pods carry TTL bookkeeping like every sandbox.
            ListSandboxesOptions wl;
            wl.status = "warm";
            auto warm = co_await a->list(wl);
            EXPECT_TRUE(warm);
            if (warm) {
                EXPECT_EQ(warm->items.size(), 3u);
                for (auto& w : warm->items) EXPECT_FALSE(w.created_at.empty());
            }
            int done = 0;
            auto claim = [&](RawProvider* p) -> asio::awaitable<void> {
                auto sb = co_await p->get_or_create_pod();
                if (sb) names.push_back((*sb)->pod_name());
                else ADD_FAILURE() << sb.error().describe();
                ++done;
            };
            auto ex = co_await asio::this_coro::executor;
            for (int i = 0; i < 3; ++i) {
                asio::co_spawn(ex, claim(a.get()), asio::detached);
                asio::co_spawn(ex, claim(b.get()), asio::detached);
            }
            for (int i = 0; i < 900 && done < 6; ++i) co_await sleep_for(100ms);
            EXPECT_EQ(done, 6);
            // Refill happens in the background: wait until the pool is back to 3 available.
            for (int i = 0; i < 600; ++i) {
                auto s = co_await a->pool_status();
                if (s && s->available >= 3) break;
                co_await sleep_for(200ms);
            }
            auto after = co_await a->pool_status();
            EXPECT_TRUE(after);
            if (after) {
                EXPECT_GE(after->available, 3);  // two providers refilling at once may overshoot
                EXPECT_GE(after->active, 6);
            }
            // Delete everything of this test (claimed and warm) once both refills are over: one still
            // running would create warm pods after the list.
            for (auto* p : {a.get(), b.get()}) {
                for (int i = 0; i < 1200; ++i) {
                    auto s = co_await p->pool_status();
                    if (s && !s->refilling) break;
                    co_await sleep_for(100ms);
                }
            }
            ListSandboxesOptions all;
            all.include_warm = true;
            auto page = co_await a->list(all);
            EXPECT_TRUE(page);
            if (page)
                for (auto& i : page->items) {
                    auto d = co_await a->delete_sandbox(i.id);
                    EXPECT_TRUE(d);
                }
        },
        300s);
    EXPECT_EQ(names.size(), 6u);
    EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size()) << "a pod was claimed twice";
}

// Review 3a: a warm claim whose PATCH went through but whose response was lost is retried by
// the client and answered 409: that is still our claim, not someone else's.
TEST_F(RawProviderTest, LostClaimResponseIsStillOurClaim) {
    RawProviderOptions cfg;
    cfg.warm_pool_size = 1;
    cfg.env["POOL"] = "lost-claim";  // a config (hash) of its own
    auto p = provider(cfg, quick_timeouts());
    run([&]() -> asio::awaitable<void> {
        auto filled = co_await p->ensure_warm_pool();
        EXPECT_TRUE(filled && *filled == 1);
        ListSandboxesOptions wl;
        wl.status = "warm";
        auto warm = co_await p->list(wl);
        EXPECT_TRUE(warm && warm->items.size() == 1u);
        if (!warm || warm->items.size() != 1u) co_return;
        const std::string warm_pod = warm->items[0].pod_name;

        FaultRule rule;
        rule.path_contains = "/pods/" + warm_pod;
        rule.method = "PATCH";
        rule.count = 1;
        rule.action = FaultRule::Action::drop_mid_body;  // applied, response cut
        cluster_->add_fault(rule);
        auto sb = co_await p->get_or_create_pod();
        cluster_->clear_faults();
        EXPECT_TRUE(sb) << sb.error().describe();
        if (sb) {
            EXPECT_EQ((*sb)->pod_name(), warm_pod) << "the claimed warm pod was orphaned, a new one created";
        }
        // Let the refill finish, then: exactly one active pod of this config.
        for (int i = 0; i < 300; ++i) {
            auto s = co_await p->pool_status();
            if (s && s->available >= 1 && !s->refilling) break;
            co_await sleep_for(200ms);
        }
        ListSandboxesOptions all;
        all.include_warm = true;
        auto page = co_await p->list(all);
        EXPECT_TRUE(page);
        int active = 0;
        if (page)
            for (auto& i : page->items)
                if (i.status == "running") ++active;
        EXPECT_EQ(active, 1);
        if (page)
            for (auto& i : page->items) {
                auto d = co_await p->delete_sandbox(i.id);
                EXPECT_TRUE(d) << d.error().describe();
            }
    });
}

// A warm pod that died can never be claimed: topping the pool up deletes it and starts a
// replacement, instead of counting it out and leaving the pool short for good.
TEST_F(RawProviderTest, DeadWarmPodsAreReplacedWhenThePoolIsToppedUp) {
    RawProviderOptions cfg;
    cfg.command = {"sh", "-c", "sleep 2; exit 1"};
    cfg.warm_pool_size = 1;
    cfg.env["POOL"] = "dead-warm";  // a config (hash) of its own
    auto p = provider(cfg);
    run([&]() -> asio::awaitable<void> {
        auto filled = co_await p->ensure_warm_pool();
        EXPECT_TRUE(filled && *filled == 1);
        ListSandboxesOptions all;
        all.include_warm = true;
        std::string dead;
        for (int i = 0; i < 100 && dead.empty(); ++i) {
            co_await sleep_for(200ms);
            auto page = co_await p->list(all);
            if (page)
                for (auto& item : page->items)
                    if (item.status == "failed") dead = item.id;
        }
        EXPECT_FALSE(dead.empty());
        auto refilled = co_await p->ensure_warm_pool();
        EXPECT_TRUE(refilled && *refilled == 1) << (refilled ? std::to_string(*refilled) : refilled.error().describe());
        auto page = co_await p->list(all);
        EXPECT_TRUE(page);
        if (page) {
            for (auto& item : page->items) EXPECT_NE(item.id, dead) << "the dead warm pod is still there";
        }
        auto r = co_await p->cleanup();
        EXPECT_TRUE(r) << r.error().describe();
        if (page)
            for (auto& item : page->items) co_await p->delete_sandbox(item.id);
    });
}

// Review 6: warm pods of another config (image here) are neither counted nor claimed.
TEST_F(RawProviderTest, WarmPodsOfAnotherConfigAreNeverClaimed) {
    RawProviderOptions cfg_a;
    cfg_a.warm_pool_size = 1;
    RawProviderOptions cfg_b = cfg_a;
    cfg_b.image = "debian:12";
    auto a = provider(cfg_a);
    auto b = provider(cfg_b);
    run(
        [&]() -> asio::awaitable<void> {
            auto fa = co_await a->ensure_warm_pool();
            EXPECT_TRUE(fa && *fa == 1);
            auto fb = co_await b->ensure_warm_pool();
            EXPECT_TRUE(fb && *fb == 1) << "b counted a's warm pod as its own";
            auto pa = co_await a->pool_status();
            EXPECT_TRUE(pa && pa->available == 1);
            auto image_of = [&](const std::string& pod) -> asio::awaitable<std::string> {
                const ResourcePath pp = pods("default").with_name(pod);
                auto got = co_await client_->get(pp);
                if (!got) co_return std::string();
                co_return std::string(
                    (*got)["spec"].as_object()["containers"].as_array()[0].as_object()["image"].as_string());
            };
            auto sb = co_await b->get_or_create_pod();
            EXPECT_TRUE(sb) << sb.error().describe();
            if (sb) {
                auto img = co_await image_of((*sb)->pod_name());
                EXPECT_EQ(img, "debian:12");
            }
            auto sa = co_await a->get_or_create_pod();
            EXPECT_TRUE(sa) << sa.error().describe();
            if (sa) {
                auto img = co_await image_of((*sa)->pod_name());
                EXPECT_EQ(img, "python:3.12-slim");
            }
            std::array<RawProvider*, 2> both{a.get(), b.get()};
            for (auto* p : both)
                for (int i = 0; i < 300; ++i) {
                    auto s = co_await p->pool_status();
                    if (s && s->available >= 1 && !s->refilling) break;
                    co_await sleep_for(200ms);
                }
            ListSandboxesOptions all;
            all.include_warm = true;
            auto page = co_await a->list(all);
            EXPECT_TRUE(page);
            if (page)
                for (auto& i : page->items) {
                    auto d = co_await a->delete_sandbox(i.id);
                    EXPECT_TRUE(d) << d.error().describe();
                }
        },
        240s);
}

}  // namespace
