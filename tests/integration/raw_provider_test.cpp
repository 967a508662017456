// RawProvider against the embedded local cluster: the lifecycle of one sandbox: create, reconnect, exec, delete, and
// creations that fail, are cancelled or lose their answers. The suite's fixture and helpers are in
// raw_provider_fixture.hpp.
#include "raw_provider_fixture.hpp"

namespace {

using namespace kubesandbox;
using namespace kubesandbox::test::raw;
using kubesandbox::test::sleep_for;
using kubesandbox::test::raw::RawProviderTest;

bool pod_condition_true(const json::object& pod, std::string_view type) {
    const auto* status = pod.if_contains("status");
    const auto* conditions = status && status->is_object() ? status->get_object().if_contains("conditions") : nullptr;
    if (!conditions || !conditions->is_array()) return false;
    for (const auto& c : conditions->get_array()) {
        const auto* o = c.if_object();
        const auto* t = o ? o->if_contains("type") : nullptr;
        const auto* v = o ? o->if_contains("status") : nullptr;
        if (t && t->is_string() && t->get_string() == type && v && v->is_string() && v->get_string() == "True")
            return true;
    }
    return false;
}

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
            // b comes once a's pod is Ready, while its 3 s setup still runs.
            const ResourcePath setup_pod = pods("default").with_name(RawProvider::pod_name_for("setup-wait"));
            for (bool ready = false; !ready && done == 0;) {
                auto pod = co_await client_->get(setup_pod);
                ready = pod && pod_condition_true(*pod, "Ready");
                if (!ready) co_await sleep_for(20ms);
            }
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

}  // namespace
