// RawProvider against the embedded local cluster: real pods (bubblewrap processes), real API
// server, real watches. Every test removes what it created; the suite checks nothing is left.
#include <kubesandbox/local_cluster.hpp>
#include <kubesandbox/raw_provider.hpp>

#include "../support/local_cluster_fixture.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/serialize.hpp>

#include <gtest/gtest.h>

#include <unistd.h>

#include <array>
#include <chrono>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace {

namespace asio = boost::asio;
namespace json = boost::json;
using namespace kubesandbox;
using namespace std::chrono_literals;

using kubesandbox::test::sleep_for;

ResourcePath pods(std::string ns) {
    ResourcePath p;
    p.plural = "pods";
    p.namespace_name = std::move(ns);
    return p;
}
ResourcePath netpols(std::string ns) {
    ResourcePath p;
    p.group = "networking.k8s.io";
    p.plural = "networkpolicies";
    p.namespace_name = std::move(ns);
    return p;
}
ResourcePath namespaces() {
    ResourcePath p;
    p.plural = "namespaces";
    return p;
}

std::string str(const json::object& o, std::initializer_list<const char*> path) {
    const json::value* v = nullptr;
    const json::object* cur = &o;
    for (const char* k : path) {
        if (!cur) return {};
        auto it = cur->find(k);
        if (it == cur->end()) return {};
        v = &it->value();
        cur = v->is_object() ? &v->get_object() : nullptr;
    }
    return v && v->is_string() ? std::string(v->get_string()) : std::string();
}

const std::string managed_selector = "kubesandbox.io/managed-by=kubesandbox";

class RawProviderTest : public kubesandbox::test::LocalClusterTest {
protected:
    static void TearDownTestSuite() {
        if (!cluster_) return;
        // Nothing labelled may be left: pods, NetworkPolicies, namespaces (all namespaces).
        asio::io_context io;
        KubeClient client(io.get_executor(), cluster_->kube_config());
        std::size_t left_pods = 99, left_nps = 99, left_ns = 99;
        auto check = [&]() -> asio::awaitable<void> {
            for (int i = 0; i < 40; ++i) {
                ListOptions lo;
                lo.label_selector = managed_selector;
                const ResourcePath rp1 = pods("");
                auto p = co_await client.list(rp1, lo);
                const ResourcePath rp2 = netpols("");
                auto n = co_await client.list(rp2, lo);
                const ResourcePath rp3 = namespaces();
                auto s = co_await client.list(rp3, lo);
                if (p && n && s) {
                    left_pods = p->items.size();
                    left_nps = n->items.size();
                    left_ns = s->items.size();
                    if (left_pods + left_nps + left_ns == 0) co_return;
                }
                co_await sleep_for(250ms);
            }
        };
        kubesandbox::test::run_coroutine_test(io, check, 30s);
        EXPECT_EQ(left_pods, 0u) << "labelled pods left behind";
        EXPECT_EQ(left_nps, 0u) << "labelled NetworkPolicies left behind";
        EXPECT_EQ(left_ns, 0u) << "labelled namespaces left behind";
        LocalClusterTest::TearDownTestSuite();
    }

    void SetUp() override {
        LocalClusterTest::SetUp();
        client_ = std::make_unique<KubeClient>(client());
    }

    std::unique_ptr<RawProvider> provider(RawProviderOptions cfg = {}, KubeClientOptions copts = {}) {
        if (cfg.startup_timeout == 120s) cfg.startup_timeout = 60s;
        return std::make_unique<RawProvider>(client(std::move(copts)), std::move(cfg));
    }

    // Lost responses surface as a request timeout: keep it short.
    static KubeClientOptions quick_timeouts() {
        KubeClientOptions o;
        o.request_timeout = 3s;
        return o;
    }

    std::unique_ptr<KubeClient> client_;
};

TEST_F(RawProviderTest, CreateLabelsReconnectExecDelete) {
    auto p = provider();
    run([&]() -> asio::awaitable<void> {
        GetOrCreateOptions o;
        o.sandbox_id = "Thread/ABC 1";
        o.labels["team"] = "Red Team!";
        o.ttl_seconds = 3600;
        o.ttl_idle_seconds = 600;
        auto sb = co_await p->get_or_create_pod(o);
        EXPECT_TRUE(sb) << sb.error().describe();
        if (!sb) co_return;
        std::string name = (*sb)->pod_name();
        EXPECT_EQ(name, RawProvider::pod_name_for("Thread/ABC 1"));
        EXPECT_EQ(name.rfind("ksb-thread-abc-1-", 0), 0u) << name;
        EXPECT_EQ((*sb)->id(), "default/" + name);

        const ResourcePath rp4 = pods("default").with_name(name);
        auto pod = co_await client_->get(rp4);
        EXPECT_TRUE(pod);
        if (!pod) co_return;
        EXPECT_EQ(str(*pod, {"metadata", "labels", "kubesandbox.io/managed-by"}), "kubesandbox");
        EXPECT_EQ(str(*pod, {"metadata", "labels", "kubesandbox.io/pool-status"}), "active");
        std::string sid = str(*pod, {"metadata", "labels", "kubesandbox.io/sandbox-id"});
        EXPECT_FALSE(sid.empty());
        EXPECT_NE(sid, "Thread/ABC 1");  // not a valid label value: hashed
        EXPECT_EQ(str(*pod, {"metadata", "annotations", "kubesandbox.io/thread-id-original"}), "Thread/ABC 1");
        std::string team = str(*pod, {"metadata", "labels", "kubesandbox.io/team"});
        EXPECT_NE(team, "Red Team!");
        EXPECT_FALSE(team.empty());
        EXPECT_FALSE(str(*pod, {"metadata", "annotations", "kubesandbox.io/created-at"}).empty());
        EXPECT_EQ(str(*pod, {"metadata", "annotations", "kubesandbox.io/ttl-seconds"}), "3600");
        EXPECT_EQ(str(*pod, {"metadata", "annotations", "kubesandbox.io/ttl-idle-seconds"}), "600");
        EXPECT_EQ(str(*pod, {"spec", "restartPolicy"}), "Never");
        EXPECT_EQ((*pod)["spec"].at("automountServiceAccountToken"), json::value(false));
        EXPECT_EQ((*pod)["spec"].at("enableServiceLinks"), json::value(false));

        const ResourcePath rp5 = netpols("default").with_name(name + "-deny-all");
        auto np = co_await client_->get(rp5);
        EXPECT_TRUE(np) << "deny-all NetworkPolicy missing";

        // Listing shows the original id and labels.
        ListSandboxesOptions lo;
        lo.labels["team"] = "Red Team!";
        auto page = co_await p->list(lo);
        EXPECT_TRUE(page);
        if (page) {
            EXPECT_EQ(page->items.size(), 1u);
            if (page->items.size() == 1) {
                EXPECT_EQ(page->items[0].id, "Thread/ABC 1");
                EXPECT_EQ(page->items[0].labels["team"], "Red Team!");
                EXPECT_EQ(page->items[0].status, "running");
            }
        }

        auto out = co_await (*sb)->execute("echo hello; echo err >&2; exit 3");
        EXPECT_TRUE(out) << out.error().describe();
        if (out) {
            EXPECT_EQ(out->output, "hello\n\nerr\n");
            EXPECT_EQ(out->exit_code, 3);
        }

        // Reconnect: same pod, last-activity written.
        auto again = co_await p->get_or_create_pod(o);
        EXPECT_TRUE(again);
        if (again) {
            EXPECT_EQ((*again)->pod_name(), name);
        }
        const ResourcePath rp6 = pods("default").with_name(name);
        auto pod2 = co_await client_->get(rp6);
        EXPECT_TRUE(pod2);
        if (pod2) {
            EXPECT_FALSE(str(*pod2, {"metadata", "annotations", "kubesandbox.io/last-activity"}).empty());
        }

        // Not found when asked not to create.
        GetOrCreateOptions missing;
        missing.sandbox_id = "never-created";
        missing.create_if_missing = false;
        auto nf = co_await p->get_or_create_pod(missing);
        EXPECT_FALSE(nf);
        if (!nf) {
            EXPECT_TRUE(nf.error().is(errc::not_found)) << nf.error().describe();
        }

        std::string id7 = "Thread/ABC 1";
        auto d = co_await p->delete_sandbox(id7);
        EXPECT_TRUE(d);
        if (d) {
            EXPECT_TRUE(*d);
        }
        const ResourcePath rp8 = netpols("default").with_name(name + "-deny-all");
        auto gone_np = co_await client_->get(rp8);
        EXPECT_FALSE(gone_np);
        std::string id9 = "Thread/ABC 1";
        auto d2 = co_await p->delete_sandbox(id9);
        EXPECT_TRUE(d2);
        if (d2) {
            EXPECT_FALSE(*d2);
        }
    });
}

TEST_F(RawProviderTest, FiftyConcurrentGetOrCreateMakeOnePod) {
    auto p = provider();
    std::vector<std::string> names;
    int errors = 0;
    run([&]() -> asio::awaitable<void> {
        auto one = [&]() -> asio::awaitable<void> {
            GetOrCreateOptions o;
            o.sandbox_id = "race-1";
            auto sb = co_await p->get_or_create_pod(o);
            if (sb) names.push_back((*sb)->pod_name());
            else {
                ++errors;
                ADD_FAILURE() << sb.error().describe();
            }
        };
        auto ex = co_await asio::this_coro::executor;
        for (int i = 0; i < 50; ++i) asio::co_spawn(ex, one(), asio::detached);
        for (int i = 0; i < 600 && names.size() + errors < 50; ++i) co_await sleep_for(100ms);
        ListOptions lo;
        lo.label_selector = managed_selector + ",kubesandbox.io/sandbox-id=race-1";
        const ResourcePath rp10 = pods("default");
        auto list = co_await client_->list(rp10, lo);
        EXPECT_TRUE(list);
        if (list) {
            EXPECT_EQ(list->items.size(), 1u);
        }
        std::string id11 = "race-1";
        auto d = co_await p->delete_sandbox(id11);
        EXPECT_TRUE(d && *d);
    });
    EXPECT_EQ(errors, 0);
    ASSERT_EQ(names.size(), 50u);
    EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), 1u);
}

TEST_F(RawProviderTest, UnknownImageFailsFastAndLeavesNothing) {
    RawProviderOptions cfg;
    cfg.image = "no-such-registry.invalid/nothing:1";
    auto p = provider(cfg);
    run([&]() -> asio::awaitable<void> {
        GetOrCreateOptions o;
        o.sandbox_id = "bad-image";
        auto t0 = std::chrono::steady_clock::now();
        auto sb = co_await p->get_or_create_pod(o);
        auto took = std::chrono::steady_clock::now() - t0;
        EXPECT_FALSE(sb);
        if (!sb) {
            EXPECT_TRUE(sb.error().is(errc::image_pull_failed)) << sb.error().describe();
        }
        EXPECT_LT(took, 20s);
        std::string name = RawProvider::pod_name_for("bad-image");
        const ResourcePath rp12 = pods("default").with_name(name);
        auto pod = co_await client_->get(rp12);
        EXPECT_FALSE(pod);
        const ResourcePath rp13 = netpols("default").with_name(name + "-deny-all");
        auto np = co_await client_->get(rp13);
        EXPECT_FALSE(np);
    });
}

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
        shortlived.ttl_seconds = 1;
        GetOrCreateOptions keeper;
        keeper.sandbox_id = "ttl-keep";
        keeper.ttl_idle_seconds = 3600;
        auto a = co_await p->get_or_create_pod(shortlived);
        auto b = co_await p->get_or_create_pod(keeper);
        EXPECT_TRUE(a && b);
        co_await sleep_for(2100ms);
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
            o.ttl_seconds = 1;
            auto sb = co_await a->get_or_create_pod(o);
            EXPECT_TRUE(sb) << sb.error().describe();
        }
        co_await sleep_for(2100ms);
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

TEST_F(RawProviderTest, SetupScriptFailureDeletesSandbox) {
    RawProviderOptions cfg;
    cfg.setup_script = "echo setting-up; echo broken >&2; exit 7";
    auto p = provider(cfg);
    run([&]() -> asio::awaitable<void> {
        GetOrCreateOptions o;
        o.sandbox_id = "setup-fails";
        auto sb = co_await p->get_or_create_pod(o);
        EXPECT_FALSE(sb);
        if (!sb) {
            EXPECT_TRUE(sb.error().is(errc::pod_failed)) << sb.error().describe();
            EXPECT_NE(sb.error().message.find("broken"), std::string::npos) << sb.error().message;
        }
        const ResourcePath rp15 = pods("default").with_name(RawProvider::pod_name_for("setup-fails"));
        auto pod = co_await client_->get(rp15);
        EXPECT_FALSE(pod);
    });
}

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

TEST_F(RawProviderTest, ReadOnlyRootHasWritableWorkdirAndTmp) {
    RawProviderOptions cfg;
    cfg.read_only_root_filesystem = true;
    auto p = provider(cfg);
    run([&]() -> asio::awaitable<void> {
        GetOrCreateOptions o;
        o.sandbox_id = "read-only";
        auto sb = co_await p->get_or_create_pod(o);
        EXPECT_TRUE(sb) << sb.error().describe();
        if (!sb) co_return;
        auto out = co_await (*sb)->execute("pwd && touch a /tmp/b && echo ok");
        EXPECT_TRUE(out);
        if (out) {
            EXPECT_EQ(out->output, "/workspace\nok\n");
            EXPECT_EQ(out->exit_code, 0);
        }
        auto st = co_await p->stats();
        EXPECT_TRUE(st);
        if (st) {
            EXPECT_EQ(st->running, 1);
        }
        std::string id = "read-only";
        auto d = co_await p->delete_sandbox(id);
        EXPECT_TRUE(d && *d);
    });
}

TEST_F(RawProviderTest, ActivityIsRecordedDebouncedAfterExecute) {
    RawProviderOptions cfg;
    cfg.activity_debounce = std::chrono::seconds(60);
    auto p = provider(cfg);
    run([&]() -> asio::awaitable<void> {
        GetOrCreateOptions o;
        o.sandbox_id = "activity";
        auto sb = co_await p->get_or_create_pod(o);
        EXPECT_TRUE(sb) << sb.error().describe();
        if (!sb) co_return;
        const ResourcePath path = pods("default").with_name((*sb)->pod_name());
        auto before = co_await client_->get(path);
        EXPECT_TRUE(before);
        if (before) {
            EXPECT_EQ(str(*before, {"metadata", "annotations", "kubesandbox.io/last-activity"}), "");
        }
        auto out = co_await (*sb)->execute("true");
        EXPECT_TRUE(out);
        std::string first;
        for (int i = 0; i < 50 && first.empty(); ++i) {
            co_await sleep_for(100ms);
            auto pod = co_await client_->get(path);
            if (pod) first = str(*pod, {"metadata", "annotations", "kubesandbox.io/last-activity"});
        }
        EXPECT_FALSE(first.empty()) << "last-activity not written after execute";
        co_await sleep_for(20ms);
        auto out2 = co_await (*sb)->execute("true");
        EXPECT_TRUE(out2);
        co_await sleep_for(500ms);
        auto pod = co_await client_->get(path);
        EXPECT_TRUE(pod);
        if (pod) {
            EXPECT_EQ(str(*pod, {"metadata", "annotations", "kubesandbox.io/last-activity"}), first) << "not debounced";
        }
        std::string id = "activity";
        auto d = co_await p->delete_sandbox(id);
        EXPECT_TRUE(d && *d);
    });
}

}  // namespace

// ---- review fixes: each test fails without its fix ---------------------------------------------

namespace {

ResourcePath core(std::string plural, std::string ns) {
    ResourcePath p;
    p.plural = std::move(plural);
    p.namespace_name = std::move(ns);
    return p;
}

json::object object_meta(const std::string& name, json::object labels, json::object annotations) {
    json::object m;
    m["name"] = name;
    if (!labels.empty()) m["labels"] = std::move(labels);
    if (!annotations.empty()) m["annotations"] = std::move(annotations);
    return m;
}

// A plain pod made by hand (not through a provider).
json::object hand_pod(const std::string& name, json::object labels, json::object annotations,
                      const std::string& image = "busybox") {
    json::object c;
    c["name"] = "sandbox";
    c["image"] = image;
    c["command"] = json::array{"sleep", "3600"};
    json::object spec;
    spec["containers"] = json::array{std::move(c)};
    spec["restartPolicy"] = "Never";
    spec["terminationGracePeriodSeconds"] = 0;
    json::object pod;
    pod["apiVersion"] = "v1";
    pod["kind"] = "Pod";
    pod["metadata"] = object_meta(name, std::move(labels), std::move(annotations));
    pod["spec"] = std::move(spec);
    return pod;
}

json::object hand_namespace(const std::string& name, json::object labels, json::object annotations) {
    json::object o;
    o["apiVersion"] = "v1";
    o["kind"] = "Namespace";
    o["metadata"] = object_meta(name, std::move(labels), std::move(annotations));
    return o;
}

json::object hand_policy(const std::string& name, json::object labels, json::object annotations) {
    json::object match;
    match["kubesandbox.io/sandbox-id"] = "ghost";
    json::object sel;
    sel["matchLabels"] = std::move(match);
    json::object spec;
    spec["podSelector"] = std::move(sel);
    spec["policyTypes"] = json::array{"Ingress", "Egress"};
    json::object o;
    o["apiVersion"] = "networking.k8s.io/v1";
    o["kind"] = "NetworkPolicy";
    o["metadata"] = object_meta(name, std::move(labels), std::move(annotations));
    o["spec"] = std::move(spec);
    return o;
}

const char* long_ago = "2020-01-01T00:00:00.000Z";

}  // namespace

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
        o.ttl_seconds = 1;
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
        co_await sleep_for(1100ms);

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

// Review 2: sb->id() ("<ns>/<pod>") is accepted wherever an id is, and caller ids never share
// a pod name with each other or with random sandboxes.
TEST_F(RawProviderTest, SandboxIdFormIsAcceptedEverywhere) {
    EXPECT_NE(RawProvider::pod_name_for("abc"), RawProvider::pod_name_for("ksb-abc"));
    EXPECT_NE(RawProvider::pod_name_for("x-0123456789"), RawProvider::pod_name_for("X"));
    auto p = provider();
    run([&]() -> asio::awaitable<void> {
        auto sb = co_await p->get_or_create_pod();
        EXPECT_TRUE(sb) << sb.error().describe();
        if (!sb) co_return;
        const std::string id = (*sb)->id();
        const std::string pod = (*sb)->pod_name();
        EXPECT_EQ(id, "default/" + pod);

        GetOrCreateOptions again;
        again.sandbox_id = id;
        again.create_if_missing = false;
        auto re = co_await p->get_or_create_pod(again);
        EXPECT_TRUE(re) << re.error().describe();
        if (re) {
            EXPECT_EQ((*re)->pod_name(), pod);
            EXPECT_EQ((*re)->id(), id);
        }
        again.create_if_missing = true;
        auto re2 = co_await p->get_or_create_pod(again);
        EXPECT_TRUE(re2) << re2.error().describe();
        if (re2) {
            EXPECT_EQ((*re2)->pod_name(), pod) << "reconnecting by id() created a second sandbox";
        }
        ListSandboxesOptions lo;
        auto page = co_await p->list(lo);
        EXPECT_TRUE(page);
        std::string listed_id;
        if (page)
            for (auto& i : page->items)
                if (i.pod_name == pod) listed_id = i.id;
        EXPECT_EQ(listed_id, pod);     // random sandboxes are listed under their pod name...
        GetOrCreateOptions by_listed;  // ...which is accepted as an id too
        by_listed.sandbox_id = listed_id;
        by_listed.create_if_missing = false;
        auto bl = co_await p->get_or_create_pod(by_listed);
        EXPECT_TRUE(bl && (*bl)->pod_name() == pod);

        // A reference into another namespace is refused, not mapped to a new sandbox.
        GetOrCreateOptions elsewhere;
        elsewhere.sandbox_id = "kube-system/" + pod;
        auto wrong = co_await p->get_or_create_pod(elsewhere);
        EXPECT_FALSE(wrong);
        if (!wrong) {
            EXPECT_TRUE(wrong.error().is(errc::invalid_argument)) << wrong.error().describe();
        }

        auto d = co_await p->delete_sandbox(id);
        EXPECT_TRUE(d) << d.error().describe();
        if (d) {
            EXPECT_TRUE(*d) << "delete by id() found nothing";
        }
        const ResourcePath pp = pods("default").with_name(pod);
        auto gone = co_await client_->get(pp);
        EXPECT_FALSE(gone) << "delete by id() leaked the pod";
        const ResourcePath npp = netpols("default").with_name(pod + "-deny-all");
        auto gone_np = co_await client_->get(npp);
        EXPECT_FALSE(gone_np);

        // Caller ids: "coll" and "ksb-coll" are two sandboxes; id() of either reconnects.
        GetOrCreateOptions a;
        a.sandbox_id = "coll";
        GetOrCreateOptions b;
        b.sandbox_id = "ksb-coll";
        auto sa = co_await p->get_or_create_pod(a);
        auto sbb = co_await p->get_or_create_pod(b);
        EXPECT_TRUE(sa && sbb);
        if (sa && sbb) {
            EXPECT_NE((*sa)->pod_name(), (*sbb)->pod_name());
            GetOrCreateOptions by_id;
            by_id.sandbox_id = (*sbb)->id();
            auto r = co_await p->get_or_create_pod(by_id);
            EXPECT_TRUE(r);
            if (r) {
                EXPECT_EQ((*r)->pod_name(), (*sbb)->pod_name());
            }
            ListSandboxesOptions every;
            auto lst = co_await p->list(every);
            std::set<std::string> ids;
            if (lst)
                for (auto& i : lst->items) ids.insert(i.id);
            EXPECT_TRUE(ids.count("coll") && ids.count("ksb-coll"));
            auto d1 = co_await p->delete_sandbox((*sa)->id());
            EXPECT_TRUE(d1 && *d1);
            std::string kid = "ksb-coll";
            auto d2 = co_await p->delete_sandbox(kid);
            EXPECT_TRUE(d2 && *d2);
        }
    });
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

// Review 3b: a deterministic create whose POST went through but whose response was lost gets
// a 409 on the retry; it is still our pod, so the setup_script must run. And with many racers
// exactly one runs it.
TEST_F(RawProviderTest, LostCreateResponseStillRunsSetupExactlyOnce) {
    RawProviderOptions cfg;
    cfg.setup_script = "echo once >> /workspace/setup-marker";
    auto p = provider(cfg, quick_timeouts());
    run(
        [&]() -> asio::awaitable<void> {
            FaultRule rule;
            rule.path_contains = "/namespaces/default/pods?";
            rule.method = "POST";
            rule.count = 1;
            rule.action = FaultRule::Action::drop_mid_body;
            cluster_->add_fault(rule);
            GetOrCreateOptions o;
            o.sandbox_id = "lost-create";
            auto sb = co_await p->get_or_create_pod(o);
            cluster_->clear_faults();
            EXPECT_TRUE(sb) << sb.error().describe();
            if (sb) {
                auto out = co_await (*sb)->execute("cat /workspace/setup-marker");
                EXPECT_TRUE(out);
                if (out) {
                    EXPECT_EQ(out->output, "once\n") << "setup_script skipped after a lost create response";
                }
            }
            std::string id = "lost-create";
            auto d = co_await p->delete_sandbox(id);
            EXPECT_TRUE(d && *d);

            int done = 0;
            std::vector<std::unique_ptr<PodExecSandbox>> got;
            auto one = [&]() -> asio::awaitable<void> {
                GetOrCreateOptions r;
                r.sandbox_id = "setup-once";
                auto s = co_await p->get_or_create_pod(r);
                if (s) got.push_back(std::move(*s));
                else ADD_FAILURE() << s.error().describe();
                ++done;
            };
            auto ex = co_await asio::this_coro::executor;
            for (int i = 0; i < 8; ++i) asio::co_spawn(ex, one(), asio::detached);
            for (int i = 0; i < 900 && done < 8; ++i) co_await sleep_for(100ms);
            EXPECT_EQ(done, 8);
            if (!got.empty()) {
                auto out = co_await got.front()->execute("cat /workspace/setup-marker");
                EXPECT_TRUE(out);
                if (out) {
                    EXPECT_EQ(out->output, "once\n") << "setup_script ran more than once";
                }
            }
            std::string id2 = "setup-once";
            auto d2 = co_await p->delete_sandbox(id2);
            EXPECT_TRUE(d2 && *d2);
        },
        240s);
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

// The caller gives up while the sandbox is being made (here: its setup script runs): what the
// creation made (pod, policy) is removed on the side, nothing is leaked.
TEST_F(RawProviderTest, ACancelledCreationLeavesNothingBehind) {
    using namespace asio::experimental::awaitable_operators;
    RawProviderOptions cfg;
    cfg.image = "busybox";
    cfg.setup_script = "sleep 30";
    auto p = provider(cfg);
    run([&]() -> asio::awaitable<void> {
        GetOrCreateOptions o;
        o.sandbox_id = "abandoned";
        asio::steady_timer give_up(co_await asio::this_coro::executor, 1500ms);
        auto first = co_await (p->get_or_create_pod(o) || give_up.async_wait(asio::as_tuple(asio::use_awaitable)));
        EXPECT_EQ(first.index(), 1u);
        const ResourcePath pp = pods("default").with_name(RawProvider::pod_name_for("abandoned"));
        const ResourcePath npp = netpols("default").with_name(RawProvider::pod_name_for("abandoned") + "-deny-all");
        bool gone = false;
        for (int i = 0; i < 100 && !gone; ++i) {
            auto pod = co_await client_->get(pp);
            auto np = co_await client_->get(npp);
            gone = !pod && pod.error().is(errc::not_found) && !np && np.error().is(errc::not_found);
            if (!gone) co_await sleep_for(100ms);
        }
        EXPECT_TRUE(gone) << "the abandoned creation left its pod or policy behind";
    });
}

// Review 5: the readiness wait has its own deadline: a server that does not answer the watch
// (or ignores timeoutSeconds) cannot hold get_or_create past the startup timeout.
TEST_F(RawProviderTest, ReadinessWaitHonoursTheStartupTimeoutWhenTheServerStalls) {
    RawProviderOptions cfg;
    cfg.startup_timeout = 4s;
    auto p = provider(cfg);
    FaultRule rule;
    rule.path_contains = "watch=";
    rule.method = "GET";
    rule.count = -1;
    rule.action = FaultRule::Action::latency;
    rule.latency = 20s;
    cluster_->add_fault(rule);
    run([&]() -> asio::awaitable<void> {
        GetOrCreateOptions o;
        o.sandbox_id = "stalled-watch";
        auto t0 = std::chrono::steady_clock::now();
        auto sb = co_await p->get_or_create_pod(o);
        auto took = std::chrono::steady_clock::now() - t0;
        cluster_->clear_faults();
        EXPECT_LT(took, 12s) << "the readiness wait ignored its deadline";
        // Ready by then (found by the last look), or a typed timeout: never a hang.
        if (!sb) {
            EXPECT_TRUE(sb.error().is(errc::startup_timeout)) << sb.error().describe();
        }
        std::string id = "stalled-watch";
        auto d = co_await p->delete_sandbox(id);
        EXPECT_TRUE(d);
    });
    cluster_->clear_faults();
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

// Review 7: whoever reconnects to (or adopts) a sandbox gets it only after its creator's
// setup_script finished; a pod that is not ours is refused, never adopted or deleted.
TEST_F(RawProviderTest, ReconnectWaitsForTheCreatorsSetupAndRefusesForeignPods) {
    RawProviderOptions cfg;
    cfg.setup_script = "sleep 3; echo ready > /workspace/setup-marker";
    auto a = provider(cfg);
    auto b = provider(cfg);
    run(
        [&]() -> asio::awaitable<void> {
            int done = 0;
            std::string out_a, out_b;
            auto use = [&](RawProvider* p, std::string* out) -> asio::awaitable<void> {
                GetOrCreateOptions o;
                o.sandbox_id = "setup-wait";
                auto sb = co_await p->get_or_create_pod(o);
                if (sb) {
                    auto r = co_await (*sb)->execute("cat /workspace/setup-marker");
                    if (r) *out = r->output;
                } else {
                    ADD_FAILURE() << sb.error().describe();
                }
                ++done;
            };
            auto ex = co_await asio::this_coro::executor;
            asio::co_spawn(ex, use(a.get(), &out_a), asio::detached);
            co_await sleep_for(1500ms);  // b finds a's pod Ready, setup still running
            asio::co_spawn(ex, use(b.get(), &out_b), asio::detached);
            for (int i = 0; i < 600 && done < 2; ++i) co_await sleep_for(100ms);
            EXPECT_EQ(out_a, "ready\n");
            EXPECT_EQ(out_b, "ready\n") << "the reconnect returned before the creator's setup finished";
            std::string id = "setup-wait";
            auto d = co_await a->delete_sandbox(id);
            EXPECT_TRUE(d && *d);

            // A foreign pod under the name an id maps to.
            const std::string foreign = RawProvider::pod_name_for("foreign-one");
            const ResourcePath pp = pods("default");
            json::object foreign_pod = hand_pod(foreign, {}, {});
            auto made = co_await client_->create(pp, foreign_pod);
            EXPECT_TRUE(made) << made.error().describe();
            GetOrCreateOptions o;
            o.sandbox_id = "foreign-one";
            auto sb = co_await a->get_or_create_pod(o);
            EXPECT_FALSE(sb) << "a foreign pod was adopted";
            if (!sb) {
                EXPECT_TRUE(sb.error().is(errc::already_exists)) << sb.error().describe();
            }
            std::string fid = "foreign-one";
            auto fd = co_await a->delete_sandbox(fid);
            EXPECT_FALSE(fd) << "delete_sandbox deleted a foreign pod";
            const ResourcePath fp = pods("default").with_name(foreign);
            auto still = co_await client_->get(fp);
            EXPECT_TRUE(still);
            DeleteOptions now;
            now.grace_period_seconds = 0;
            auto rm = co_await client_->remove(fp, now);
            EXPECT_TRUE(rm);
        },
        180s);
}

// Review 8: a dead pod under a deterministic id is replaced instead of blocking the id forever.
TEST_F(RawProviderTest, DeadPodWithTheIdIsReplaced) {
    RawProviderOptions dying;
    dying.command = {"sh", "-c", "sleep 2; exit 1"};
    auto a = provider(dying);
    auto b = provider();
    run([&]() -> asio::awaitable<void> {
        GetOrCreateOptions o;
        o.sandbox_id = "phoenix";
        auto first = co_await a->get_or_create_pod(o);
        EXPECT_TRUE(first) << first.error().describe();
        if (!first) co_return;
        const ResourcePath pp = pods("default").with_name((*first)->pod_name());
        std::string old_uid;
        for (int i = 0; i < 100; ++i) {
            auto pod = co_await client_->get(pp);
            if (pod && str(*pod, {"status", "phase"}) == "Failed") {
                old_uid = str(*pod, {"metadata", "uid"});
                break;
            }
            co_await sleep_for(200ms);
        }
        EXPECT_FALSE(old_uid.empty()) << "the pod did not die";
        auto second = co_await b->get_or_create_pod(o);
        EXPECT_TRUE(second) << second.error().describe();
        if (second) {
            auto out = co_await (*second)->execute("echo alive");
            EXPECT_TRUE(out);
            if (out) {
                EXPECT_EQ(out->output, "alive\n");
            }
            auto pod = co_await client_->get(pp);
            EXPECT_TRUE(pod);
            if (pod) {
                EXPECT_NE(str(*pod, {"metadata", "uid"}), old_uid);
            }
            const ResourcePath npp = netpols("default").with_name((*second)->pod_name() + "-deny-all");
            auto np = co_await client_->get(npp);
            EXPECT_TRUE(np) << "the replacement runs without its NetworkPolicy";
        }
        std::string id = "phoenix";
        auto d = co_await b->delete_sandbox(id);
        EXPECT_TRUE(d && *d);
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
