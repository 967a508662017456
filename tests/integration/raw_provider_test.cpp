// RawProvider against the embedded local cluster: real pods (bubblewrap processes), real API
// server, real watches. Every test removes what it created; the suite checks nothing is left.
#include <kubesandbox/local_cluster.hpp>
#include <kubesandbox/raw_provider.hpp>

#include "../support/run_test.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <gtest/gtest.h>

#include <unistd.h>

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

asio::awaitable<void> sleep_for(std::chrono::milliseconds d) {
    asio::steady_timer t(co_await asio::this_coro::executor);
    t.expires_after(d);
    co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
}

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

class RawProviderTest : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        // Pods run as other uids: their data directory must be reachable (mkdtemp's 0700 is not).
        data_dir_ = std::filesystem::temp_directory_path() / ("ksb-integration-" + std::to_string(::getpid()));
        std::filesystem::create_directories(data_dir_);
        std::filesystem::permissions(data_dir_, std::filesystem::perms(0755));
        LocalClusterOptions options;
        options.data_dir = data_dir_;
        auto c = LocalCluster::start(options);
        ASSERT_TRUE(c) << c.error().describe();
        cluster_ = std::move(*c);
    }

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
        cluster_.reset();
        std::error_code ec;
        std::filesystem::remove_all(data_dir_, ec);
    }

    void SetUp() override {
        ASSERT_TRUE(cluster_);
        client_ = std::make_unique<KubeClient>(io_.get_executor(), cluster_->kube_config());
    }

    std::unique_ptr<RawProvider> provider(RawProviderConfig cfg = {}) {
        if (cfg.startup_timeout == 120s) cfg.startup_timeout = 60s;
        return std::make_unique<RawProvider>(KubeClient(io_.get_executor(), cluster_->kube_config()), std::move(cfg));
    }

    template <class F>
    void run(F f, std::chrono::seconds deadline = 120s) {
        kubesandbox::test::run_coroutine_test(io_, f, deadline);
    }

    static inline std::unique_ptr<LocalCluster> cluster_{};
    static inline std::filesystem::path data_dir_{};
    asio::io_context io_;
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
        auto sb = co_await p->get_or_create(o);
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
        auto again = co_await p->get_or_create(o);
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
        auto nf = co_await p->get_or_create(missing);
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
            auto sb = co_await p->get_or_create(o);
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
    RawProviderConfig cfg;
    cfg.image = "no-such-registry.invalid/nothing:1";
    auto p = provider(cfg);
    run([&]() -> asio::awaitable<void> {
        GetOrCreateOptions o;
        o.sandbox_id = "bad-image";
        auto t0 = std::chrono::steady_clock::now();
        auto sb = co_await p->get_or_create(o);
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
    run([&]() -> asio::awaitable<void> {
        std::vector<std::string> ids;
        for (int i = 0; i < 5; ++i) {
            GetOrCreateOptions o;
            o.sandbox_id = "page-" + std::to_string(i);
            o.labels["suite"] = "pagination";
            auto sb = co_await p->get_or_create(o);
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
    }, 240s);
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
        auto a = co_await p->get_or_create(shortlived);
        auto b = co_await p->get_or_create(keeper);
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

TEST_F(RawProviderTest, TwoProvidersClaimingFromOneWarmPoolNeverShare) {
    RawProviderConfig cfg;
    cfg.warm_pool_size = 3;
    auto a = provider(cfg);
    auto b = provider(cfg);
    std::vector<std::string> names;
    run([&]() -> asio::awaitable<void> {
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
            auto sb = co_await p->get_or_create();
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
        co_await sleep_for(500ms);  // let the refill coroutines finish their bookkeeping
        // Delete everything of this test (claimed and warm).
        ListSandboxesOptions all;
        all.include_warm = true;
        auto page = co_await a->list(all);
        EXPECT_TRUE(page);
        if (page)
            for (auto& i : page->items) {
                auto d = co_await a->delete_sandbox(i.id);
                EXPECT_TRUE(d);
            }
    }, 300s);
    EXPECT_EQ(names.size(), 6u);
    EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size()) << "a pod was claimed twice";
}

TEST_F(RawProviderTest, SetupScriptFailureDeletesSandbox) {
    RawProviderConfig cfg;
    cfg.setup_script = "echo setting-up; echo broken >&2; exit 7";
    auto p = provider(cfg);
    run([&]() -> asio::awaitable<void> {
        GetOrCreateOptions o;
        o.sandbox_id = "setup-fails";
        auto sb = co_await p->get_or_create(o);
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
    RawProviderConfig cfg;
    cfg.namespace_per_sandbox = true;
    auto p = provider(cfg);
    run([&]() -> asio::awaitable<void> {
        GetOrCreateOptions o;
        o.sandbox_id = "own-ns";
        auto sb = co_await p->get_or_create(o);
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
        auto sb = co_await p->get_or_create(o);
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
    RawProviderConfig cfg;
    cfg.read_only_root_filesystem = true;
    auto p = provider(cfg);
    run([&]() -> asio::awaitable<void> {
        GetOrCreateOptions o;
        o.sandbox_id = "read-only";
        auto sb = co_await p->get_or_create(o);
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
    RawProviderConfig cfg;
    cfg.activity_debounce = std::chrono::seconds(60);
    auto p = provider(cfg);
    run([&]() -> asio::awaitable<void> {
        GetOrCreateOptions o;
        o.sandbox_id = "activity";
        auto sb = co_await p->get_or_create(o);
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
