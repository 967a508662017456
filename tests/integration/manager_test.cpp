// SandboxManager over raw mode against the embedded local cluster: managers that share nothing
// but the cluster converge on one sandbox per thread, a sandbox deleted behind a manager's back
// is reported, and the reaper deletes idle sandboxes while sparing busy ones.
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
using namespace kubesandbox;
using namespace std::chrono_literals;
using kubesandbox::test::sleep_for;

class ManagerTest : public kubesandbox::test::LocalClusterTest {
protected:
    // Each manager gets its own client and provider: they share nothing but the cluster, as
    // replicas in separate processes do.
    std::unique_ptr<SandboxManager> manager(SandboxManagerOptions o = {}, KubeClientOptions co = {}) {
        RawProviderOptions po;
        po.startup_timeout = 60s;
        po.logger = Logger::silent();
        o.logger = Logger::silent();
        auto provider = std::make_shared<RawProvider>(client(std::move(co)), po);
        return std::make_unique<SandboxManager>(io_.get_executor(), provider, std::move(o));
    }

    // Pods of the scope, by sandbox-id label value.
    asio::awaitable<std::size_t> pods_of_scope(std::string scope) {
        ResourcePath pods;
        pods.plural = "pods";
        pods.namespace_name = "default";
        ListOptions lo;
        lo.label_selector = "kubesandbox.io/scope=" + scope;
        auto kc = client();
        auto list = co_await kc.list(pods, lo);
        EXPECT_TRUE(list) << list.error().describe();
        co_return list ? list->items.size() : 0;
    }

    asio::awaitable<bool> pod_exists(std::string sandbox_id) {
        ResourcePath pod;
        pod.plural = "pods";
        pod.namespace_name = "default";
        pod.name = RawProvider::pod_name_for(sandbox_id);
        auto kc = client();
        auto got = co_await kc.get(pod);
        co_return got.has_value();
    }
};

TEST_F(ManagerTest, ManagersSharingOnlyTheClusterConvergeOnOneSandboxPerThread) {
    SandboxManagerOptions o;
    o.scope = "converge";
    auto a = manager(o);
    auto b = manager(o);
    run([&]() -> asio::awaitable<void> {
        auto ex = co_await asio::this_coro::executor;
        constexpr int threads = 4;
        std::map<std::string, std::vector<SandboxLease>> leases;
        int done = 0;
        for (int i = 0; i < threads; ++i) {
            for (SandboxManager* m : {a.get(), b.get()}) {
                std::string thread = "conversation " + std::to_string(i) + " / \"quoted\" $HOME";
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
        }
        while (done < 2 * threads) co_await sleep_for(20ms);
        EXPECT_EQ(co_await pods_of_scope("converge"), static_cast<std::size_t>(threads));
        for (auto& [thread, pair] : leases) {
            EXPECT_EQ(pair.size(), 2u) << thread;
            if (pair.size() != 2) continue;
            EXPECT_EQ(pair[0].id(), pair[1].id()) << thread;
            int created = 0;
            for (auto& l : pair) created += l.kind() == AcquireKind::created;
            EXPECT_EQ(created, 1) << thread << ": " << to_string(pair[0].kind()) << ", " << to_string(pair[1].kind());
            // What one manager writes, the other reads: one sandbox.
            auto w = co_await pair[0].execute("echo from-a > /workspace/who");
            EXPECT_TRUE(w && w->exit_code == 0);
            auto r = co_await pair[1].execute("cat /workspace/who");
            EXPECT_TRUE(r && r->output == "from-a\n");
        }
        leases.clear();
        auto listed = co_await a->list();
        EXPECT_TRUE(listed && listed->items.size() == static_cast<std::size_t>(threads));
        ShutdownOptions so;
        so.delete_sandboxes = true;
        auto report = co_await a->shutdown(so);
        EXPECT_EQ(report.deleted, static_cast<std::size_t>(threads));
        EXPECT_TRUE(report.errors.empty());
        EXPECT_EQ(co_await pods_of_scope("converge"), 0u);
    });
}

TEST_F(ManagerTest, ASandboxDeletedBehindTheManagersBackIsReportedNotSilentlyReplaced) {
    SandboxManagerOptions o;
    o.scope = "lost";
    auto m = manager(o);
    SandboxManagerOptions strict = o;
    strict.on_lost = OnLost::error;
    auto s = manager(strict);
    run([&]() -> asio::awaitable<void> {
        auto lease = co_await m->get("t1");
        EXPECT_TRUE(lease) << lease.error().describe();
        if (!lease) co_return;
        EXPECT_EQ(lease->kind(), AcquireKind::created);
        auto w = co_await lease->execute("echo keep > /workspace/file");
        EXPECT_TRUE(w && w->exit_code == 0);
        auto strict_lease = co_await s->get("t1");
        EXPECT_TRUE(strict_lease && strict_lease->kind() == AcquireKind::reconnected);

        ResourcePath pod;
        pod.plural = "pods";
        pod.namespace_name = "default";
        pod.name = RawProvider::pod_name_for(m->sandbox_id_for("t1"));
        DeleteOptions now;
        now.grace_period_seconds = 0;
        auto kc = client();
        auto d = co_await kc.remove(pod, now);
        EXPECT_TRUE(d) << d.error().describe();

        auto failed = co_await lease->execute("cat /workspace/file");
        EXPECT_FALSE(failed && failed->exit_code == 0) << "a command ran in a deleted sandbox";
        auto strict_failed = co_await strict_lease->execute("true");
        EXPECT_FALSE(strict_failed && strict_failed->exit_code == 0);
        lease->release();
        strict_lease->release();

        // The error policy says so and creates nothing.
        auto lost = co_await s->get("t1");
        EXPECT_FALSE(lost);
        if (!lost) {
            EXPECT_TRUE(lost.error().is(errc::sandbox_lost)) << lost.error().describe();
        }
        EXPECT_FALSE(co_await pod_exists(m->sandbox_id_for("t1")));
        auto found = co_await m->find("t1");
        EXPECT_TRUE(found && !*found) << "find() of a deleted sandbox";

        // The recreate policy makes a new one and says its files are gone.
        auto again = co_await m->get("t1");
        EXPECT_TRUE(again) << again.error().describe();
        if (!again) co_return;
        EXPECT_EQ(again->kind(), AcquireKind::recreated);
        auto described = co_await m->find("t1");
        EXPECT_TRUE(described && *described && (*described)->id == "t1" && (*described)->status == "running");
        auto gone = co_await again->execute("cat /workspace/file");
        EXPECT_TRUE(gone && gone->exit_code != 0);
        again->release();
        auto removed = co_await m->remove("t1");
        EXPECT_TRUE(removed && *removed);
    });
}

TEST_F(ManagerTest, ASandboxReCreatedByAnotherReplicaIsReported) {
    SandboxManagerOptions o;
    o.scope = "replaced";
    o.verify_after = 0ms;
    auto a = manager(o);
    auto b = manager(o);
    run([&]() -> asio::awaitable<void> {
        auto first = co_await a->get("t");
        EXPECT_TRUE(first && first->kind() == AcquireKind::created);
        if (!first) co_return;
        auto w = co_await first->execute("echo mine > /workspace/file");
        EXPECT_TRUE(w && w->exit_code == 0);
        first->release();
        ResourcePath pod;
        pod.plural = "pods";
        pod.namespace_name = "default";
        pod.name = RawProvider::pod_name_for(a->sandbox_id_for("t"));
        DeleteOptions now;
        now.grace_period_seconds = 0;
        auto kc = client();
        EXPECT_TRUE(co_await kc.remove(pod, now));
        // Replica B, which never saw the thread, makes a new sandbox under the same name.
        auto other = co_await b->get("t");
        EXPECT_TRUE(other && other->kind() == AcquireKind::created);
        // A must not use it as if it were the old one.
        auto again = co_await a->get("t");
        EXPECT_TRUE(again) << again.error().describe();
        if (!again) co_return;
        EXPECT_EQ(again->kind(), AcquireKind::recreated);
        auto r = co_await again->execute("cat /workspace/file");
        EXPECT_TRUE(r && r->exit_code != 0);
        again->release();
        if (other) other->release();
        EXPECT_TRUE(co_await a->remove("t"));
    });
}

TEST_F(ManagerTest, TheReaperDeletesIdleSandboxesAndSparesBusyOnes) {
    SandboxManagerOptions o;
    o.scope = "reap";
    o.idle_ttl = 2s;
    o.reap_interval = 300ms;
    auto m = manager(o);
    run([&]() -> asio::awaitable<void> {
        auto ex = co_await asio::this_coro::executor;
        bool reaper_returned = false;
        asio::co_spawn(
            ex,
            [&]() -> asio::awaitable<void> {
                co_await m->run();
                reaper_returned = true;
            },
            asio::detached);
        auto idle = co_await m->get("idle");
        auto busy = co_await m->get("busy");
        EXPECT_TRUE(idle && busy);
        if (!idle || !busy) co_return;
        idle->release();
        bool finished = false;
        asio::co_spawn(
            ex,
            [&, lease = std::move(*busy)]() mutable -> asio::awaitable<void> {
                // Longer than the idle TTL: the cluster sees no activity, only this process knows.
                auto r = co_await lease.execute("sleep 5; echo done");
                EXPECT_TRUE(r && r->output == "done\n");
                finished = true;
            },
            asio::detached);
        bool idle_gone = false;
        for (int i = 0; i < 100 && !idle_gone; ++i) {
            co_await sleep_for(100ms);
            idle_gone = !(co_await pod_exists(m->sandbox_id_for("idle")));
        }
        EXPECT_TRUE(idle_gone) << "the idle sandbox was not reaped";
        EXPECT_TRUE(co_await pod_exists(m->sandbox_id_for("busy")));
        while (!finished) co_await sleep_for(50ms);
        EXPECT_TRUE(co_await pod_exists(m->sandbox_id_for("busy"))) << "reaped while a command ran";
        bool busy_gone = false;
        for (int i = 0; i < 100 && !busy_gone; ++i) {
            co_await sleep_for(100ms);
            busy_gone = !(co_await pod_exists(m->sandbox_id_for("busy")));
        }
        EXPECT_TRUE(busy_gone) << "the sandbox was not reaped once idle";
        // The pod disappears while the reaper's delete call is still finishing (it then removes
        // the policy and records the reap): wait for the count, bounded.
        auto stats = co_await m->stats();
        for (int i = 0; i < 100 && stats.reaped < 2; ++i) {
            co_await sleep_for(50ms);
            stats = co_await m->stats();
        }
        EXPECT_EQ(stats.reaped, 2u);
        auto back = co_await m->get("idle");
        EXPECT_TRUE(back && back->kind() == AcquireKind::recreated);
        if (back) back->release();
        auto report = co_await m->shutdown();
        EXPECT_TRUE(report.drained);
        while (!reaper_returned) co_await sleep_for(10ms);
        auto removed = co_await m->remove("idle");
        EXPECT_TRUE(removed);
    });
}

TEST_F(ManagerTest, AnAbsoluteTtlEndsEvenASandboxInUse) {
    SandboxManagerOptions o;
    o.scope = "absolute";
    o.idle_ttl = std::nullopt;
    o.absolute_ttl = 4s;  // room for a slow cold start and several turns before it ends
    o.reap_interval = 200ms;
    auto m = manager(o);
    run([&]() -> asio::awaitable<void> {
        auto ex = co_await asio::this_coro::executor;
        asio::co_spawn(ex, m->run(), asio::detached);
        bool gone = false;
        int turns = 0;
        for (int i = 0; i < 60 && !gone; ++i) {
            {
                auto lease = co_await m->get("t");  // a turn: used, then released
                EXPECT_TRUE(lease) << lease.error().describe();
                if (lease && lease->kind() == AcquireKind::recreated) gone = true;
                if (lease) {
                    auto r = co_await lease->execute("true");
                    turns += r.has_value();
                }
            }
            co_await sleep_for(200ms);
        }
        EXPECT_TRUE(gone) << "the absolute TTL never ended the sandbox";
        EXPECT_GE(turns, 2) << "the sandbox was not in use when the TTL ended it";
        auto report = co_await m->shutdown();
        EXPECT_TRUE(report.drained);
        EXPECT_TRUE(co_await m->remove("t"));
    });
}

TEST_F(ManagerTest, TheReaperKeepsGoingThroughApiFaults) {
    SandboxManagerOptions o;
    o.scope = "faults";
    o.idle_ttl = 1s;
    o.reap_interval = 200ms;
    o.backoff_initial = 100ms;
    o.backoff_max = 400ms;
    KubeClientOptions quick;  // the client's own retries would only slow the test down
    quick.max_retries = 1;
    quick.retry_initial_backoff = 10ms;
    auto m = manager(o, quick);
    run([&]() -> asio::awaitable<void> {
        auto lease = co_await m->get("t");
        EXPECT_TRUE(lease) << lease.error().describe();
        if (lease) lease->release();
        // Every list of pods fails (beyond the client's retries) until cleared.
        FaultRule broken;
        broken.path_contains = "/pods?";
        broken.method = "GET";
        broken.count = -1;
        broken.status = 500;
        cluster_->add_fault(broken);
        auto ex = co_await asio::this_coro::executor;
        asio::co_spawn(ex, m->run(), asio::detached);
        ManagerStats s;
        for (int i = 0; i < 200 && s.reaper_errors < 2; ++i) {
            co_await sleep_for(50ms);
            s = co_await m->stats();
        }
        EXPECT_GE(s.reaper_errors, 2u);
        EXPECT_EQ(s.reaped, 0u);
        cluster_->clear_faults();
        for (int i = 0; i < 200 && s.reaped == 0; ++i) {
            co_await sleep_for(50ms);
            s = co_await m->stats();
        }
        EXPECT_EQ(s.reaped, 1u) << "the reaper did not recover once the API did";
        EXPECT_FALSE(co_await pod_exists(m->sandbox_id_for("t")));
        co_await m->shutdown();
    });
}

TEST_F(ManagerTest, ShutdownDuringAnAcquisitionLeavesNothingBehind) {
    SandboxManagerOptions o;
    o.scope = "mid-shutdown";
    auto m = manager(o);
    FaultRule slow;
    slow.path_contains = "/pods";
    slow.method = "POST";
    slow.count = -1;
    slow.action = FaultRule::Action::latency;
    slow.latency = 1500ms;
    const std::size_t faults_before = cluster_->faults_applied();
    cluster_->add_fault(slow);
    run([&]() -> asio::awaitable<void> {
        auto ex = co_await asio::this_coro::executor;
        bool finished = false;
        asio::co_spawn(
            ex,
            [&]() -> asio::awaitable<void> {
                auto lease = co_await m->get("t");
                EXPECT_FALSE(lease) << "an acquisition outlived shutdown(delete_sandboxes)";
                if (!lease) {
                    EXPECT_TRUE(lease.error().is(errc::cancelled)) << lease.error().describe();
                }
                finished = true;
            },
            asio::detached);
        // Shut down once the pod's creation is held up in the API server.
        while (cluster_->faults_applied() == faults_before && !finished) co_await sleep_for(10ms);
        ShutdownOptions so;
        so.graceful = 100ms;
        so.delete_sandboxes = true;
        auto report = co_await m->shutdown(so);
        EXPECT_FALSE(report.drained);
        cluster_->clear_faults();
        while (!finished) co_await sleep_for(50ms);
        EXPECT_EQ(co_await pods_of_scope("mid-shutdown"), 0u);
    });
}

}  // namespace
