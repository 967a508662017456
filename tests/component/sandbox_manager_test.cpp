// SandboxManager over an in-memory provider: single flight, independence of threads, failures
// not remembered, loss reported, busy sandboxes spared by the reaper, its back-off, shutdown,
// and a multi-threaded io_context.
#include <kubesandbox/sandbox_manager.hpp>

#include "../support/fake_provider.hpp"
#include "../support/run_test.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>
#include <vector>

namespace {

namespace asio = boost::asio;
using namespace kubesandbox;
using namespace std::chrono_literals;
using test::FakeProvider;

asio::awaitable<void> sleep_for(std::chrono::milliseconds d) {
    asio::steady_timer t(co_await asio::this_coro::executor, d);
    co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
}

class SandboxManagerTest : public ::testing::Test {
protected:
    SandboxManagerTest() : provider_(std::make_shared<FakeProvider>()), world_(provider_->world()) {}

    std::unique_ptr<SandboxManager> manager(SandboxManagerOptions o = {}) {
        o.logger = Logger::silent();
        return std::make_unique<SandboxManager>(io_.get_executor(), provider_, std::move(o));
    }

    template <class F>
    void run(F f, std::chrono::seconds deadline = 30s) {
        test::run_coroutine_test(io_, f, deadline);
    }

    asio::io_context io_;
    std::shared_ptr<FakeProvider> provider_;
    std::shared_ptr<FakeProvider::World> world_;
};

TEST_F(SandboxManagerTest, ConcurrentGetsOfOneThreadShareOneAcquisition) {
    auto m = manager();
    run([&]() -> asio::awaitable<void> {
        auto ex = co_await asio::this_coro::executor;
        std::vector<std::string> ids;
        std::vector<AcquireKind> kinds;
        int done = 0;
        for (int i = 0; i < 100; ++i)
            asio::co_spawn(
                ex,
                [&]() -> asio::awaitable<void> {
                    auto lease = co_await m->get("conversation-1");
                    EXPECT_TRUE(lease) << lease.error().describe();
                    if (lease) {
                        ids.push_back(lease->id());
                        kinds.push_back(lease->kind());
                    }
                    ++done;
                },
                asio::detached);
        while (done < 100) co_await sleep_for(2ms);
        EXPECT_EQ(world_->acquisitions.load(), 1);
        EXPECT_EQ(std::set<std::string>(ids.begin(), ids.end()).size(), 1u);
        EXPECT_EQ(ids.size(), 100u);
        for (auto k : kinds) EXPECT_EQ(k, AcquireKind::created);
        // Later gets use the bound sandbox.
        auto again = co_await m->get("conversation-1");
        EXPECT_TRUE(again && again->kind() == AcquireKind::cached);
        EXPECT_EQ(world_->acquisitions.load(), 1);
    });
}

TEST_F(SandboxManagerTest, AProviderThatAnswersWithoutSuspendingIsServed) {
    world_->instant = true;
    world_->fail_next_acquisitions = 1;
    auto m = manager();
    run([&]() -> asio::awaitable<void> {
        auto failed = co_await m->get("t");
        EXPECT_FALSE(failed);
        auto lease = co_await m->get("t");
        EXPECT_TRUE(lease) << lease.error().describe();
        auto again = co_await m->get("t");
        EXPECT_TRUE(again && again->kind() == AcquireKind::cached);
    });
}

TEST_F(SandboxManagerTest, ThreadsNeverWaitOnEachOther) {
    auto m = manager();
    {
        std::lock_guard lock(world_->mutex);
        world_->gated_ids.insert(m->sandbox_id_for("slow"));
    }
    world_->gate_closed = true;
    run([&]() -> asio::awaitable<void> {
        auto ex = co_await asio::this_coro::executor;
        bool slow_done = false;
        asio::co_spawn(
            ex,
            [&]() -> asio::awaitable<void> {
                auto lease = co_await m->get("slow");
                EXPECT_TRUE(lease);
                slow_done = true;
            },
            asio::detached);
        co_await sleep_for(5ms);
        // The slow thread's acquisition is held at the gate; another thread goes through.
        auto fast = co_await m->get("fast");
        EXPECT_TRUE(fast) << fast.error().describe();
        EXPECT_FALSE(slow_done);
        auto stats = co_await m->stats();
        EXPECT_EQ(stats.acquisitions_in_flight, 1u);
        world_->gate_closed = false;
        while (!slow_done) co_await sleep_for(2ms);
    });
}

TEST_F(SandboxManagerTest, AFailedAcquisitionReachesEveryWaiterAndIsNotRemembered) {
    auto m = manager();
    world_->fail_next_acquisitions = 1;
    run([&]() -> asio::awaitable<void> {
        auto ex = co_await asio::this_coro::executor;
        int failed = 0, done = 0;
        for (int i = 0; i < 5; ++i)
            asio::co_spawn(
                ex,
                [&]() -> asio::awaitable<void> {
                    auto lease = co_await m->get("t");
                    if (!lease && lease.error().is(errc::internal_error)) ++failed;
                    ++done;
                },
                asio::detached);
        while (done < 5) co_await sleep_for(2ms);
        EXPECT_EQ(failed, 5);
        EXPECT_EQ(world_->acquisitions.load(), 1);
        EXPECT_EQ((co_await m->stats()).failed, 1u);  // one acquisition failed, for five callers
        auto retry = co_await m->get("t");
        EXPECT_TRUE(retry) << retry.error().describe();
        EXPECT_EQ(retry->kind(), AcquireKind::created);  // nothing was lost: it never existed
        EXPECT_EQ(world_->acquisitions.load(), 2);
    });
}

// remove() while the thread's acquisition is held: the delete waits for it, so the sandbox it
// creates does not survive the remove.
TEST_F(SandboxManagerTest, RemoveWaitsForTheThreadsAcquisitionInFlight) {
    auto m = manager();
    world_->gate_closed = true;
    run([&]() -> asio::awaitable<void> {
        auto ex = co_await asio::this_coro::executor;
        std::optional<Result<SandboxLease>> got;
        std::optional<Result<bool>> removed;
        asio::co_spawn(
            ex, [&]() -> asio::awaitable<void> { got = co_await m->get("t"); }, asio::detached);
        co_await sleep_for(5ms);
        asio::co_spawn(
            ex, [&]() -> asio::awaitable<void> { removed = co_await m->remove("t"); }, asio::detached);
        co_await sleep_for(20ms);
        EXPECT_FALSE(removed.has_value());  // still waiting for the acquisition
        EXPECT_EQ(world_->deletes.load(), 0);
        world_->gate_closed = false;
        for (int i = 0; i < 1000 && !(got && removed); ++i) co_await sleep_for(2ms);
        EXPECT_TRUE(got && *got) << (got && !*got ? got->error().describe() : "no answer");
        EXPECT_TRUE(removed && *removed && **removed) << (removed && !*removed ? removed->error().describe() : "");
        {
            std::lock_guard lock(world_->mutex);
            EXPECT_EQ(world_->sandboxes.count(m->sandbox_id_for("t")), 0u);
        }
        // The thread's next get creates a new sandbox.
        auto next = co_await m->get("t");
        EXPECT_TRUE(next && next->kind() == AcquireKind::created) << (next ? "" : next.error().describe());
    });
}

TEST_F(SandboxManagerTest, ALostSandboxIsRecreatedAndSaidSo) {
    auto m = manager();
    run([&]() -> asio::awaitable<void> {
        auto first = co_await m->get("t");
        EXPECT_TRUE(first);
        if (!first) co_return;
        auto ok = co_await first->execute("echo 1");
        EXPECT_TRUE(ok && ok->output == "ran: echo 1");
        {
            std::lock_guard lock(world_->mutex);
            world_->sandboxes.clear();  // deleted behind the manager's back
        }
        auto gone = co_await first->execute("echo 2");
        EXPECT_FALSE(gone);
        first->release();
        auto second = co_await m->get("t");
        EXPECT_TRUE(second);
        if (!second) co_return;
        EXPECT_EQ(second->kind(), AcquireKind::recreated);
        EXPECT_TRUE(second->created());
        auto stats = co_await m->stats();
        EXPECT_EQ(stats.lost, 1u);
        EXPECT_EQ(stats.recreated, 1u);
    });
}

TEST_F(SandboxManagerTest, AStaleBindingIsCheckedAgainstTheCluster) {
    SandboxManagerOptions o;
    o.verify_after = 0ms;
    auto m = manager(o);
    run([&]() -> asio::awaitable<void> {
        auto first = co_await m->get("t");
        EXPECT_TRUE(first && first->kind() == AcquireKind::created);
        auto same = co_await m->get("t");
        EXPECT_TRUE(same && same->kind() == AcquireKind::cached);
        {
            // Re-created by someone else under the same id: a new, empty incarnation.
            std::lock_guard lock(world_->mutex);
            world_->sandboxes.begin()->second.instance = "uid-someone-else";
        }
        auto next = co_await m->get("t");
        EXPECT_TRUE(next && next->kind() == AcquireKind::recreated) << (next ? to_string(next->kind()) : "error");
        auto after = co_await m->get("t");
        EXPECT_TRUE(after && after->kind() == AcquireKind::cached);
    });
}

TEST_F(SandboxManagerTest, ALostSandboxIsATypedErrorUnderTheErrorPolicy) {
    SandboxManagerOptions o;
    o.on_lost = OnLost::error;
    auto m = manager(o);
    run([&]() -> asio::awaitable<void> {
        auto first = co_await m->get("t");
        EXPECT_TRUE(first);
        if (!first) co_return;
        {
            std::lock_guard lock(world_->mutex);
            world_->sandboxes.clear();
        }
        auto gone = co_await first->execute("x");
        EXPECT_FALSE(gone);
        auto lost = co_await m->get("t");
        EXPECT_FALSE(lost);
        if (!lost) {
            EXPECT_TRUE(lost.error().is(errc::sandbox_lost)) << lost.error().describe();
        }
        {
            std::lock_guard lock(world_->mutex);
            EXPECT_TRUE(world_->sandboxes.empty()) << "the error policy created a sandbox";
        }
        // The host decides: a new sandbox on request.
        GetOptions fresh;
        fresh.on_lost = OnLost::recreate;
        auto again = co_await m->get("t", fresh);
        EXPECT_TRUE(again && again->kind() == AcquireKind::recreated);
    });
}

TEST_F(SandboxManagerTest, CallersJoiningAnAcquisitionKeepTheirOwnPolicy) {
    auto m = manager();
    run([&]() -> asio::awaitable<void> {
        auto ex = co_await asio::this_coro::executor;
        // The thread had a sandbox; it is gone.
        auto first = co_await m->get("t");
        EXPECT_TRUE(first);
        {
            std::lock_guard lock(world_->mutex);
            world_->sandboxes.clear();
            world_->gated_ids.insert(m->sandbox_id_for("t"));
            world_->gated_ids.insert(m->sandbox_id_for("n"));
        }
        if (first) {
            EXPECT_FALSE(co_await first->execute("x"));  // found gone: the binding is lost
            first->release();
        }
        world_->gate_closed = true;
        GetOptions strict;
        strict.on_lost = OnLost::error;
        GetOptions knows;
        knows.expect_existing = true;
        knows.on_lost = OnLost::error;
        std::optional<Result<SandboxLease>> a, b, c, d;
        auto get_into = [&](std::optional<Result<SandboxLease>>& out, std::string thread,
                            GetOptions o) -> asio::awaitable<void> { out = co_await m->get(thread, o); };
        // The starter only looks (error policy); a joiner that wants a new sandbox gets one.
        asio::co_spawn(ex, get_into(a, "t", strict), asio::detached);
        co_await sleep_for(5ms);
        asio::co_spawn(ex, get_into(b, "t", GetOptions()), asio::detached);
        // The starter creates; a joiner that knows the thread had one hears of the loss.
        asio::co_spawn(ex, get_into(c, "n", GetOptions()), asio::detached);
        co_await sleep_for(5ms);
        asio::co_spawn(ex, get_into(d, "n", knows), asio::detached);
        co_await sleep_for(5ms);
        world_->gate_closed = false;
        for (int i = 0; i < 1000 && !(a && b && c && d); ++i) co_await sleep_for(2ms);
        EXPECT_TRUE(a && !*a && (*a).error().is(errc::sandbox_lost));
        EXPECT_TRUE(b && *b && (**b).kind() == AcquireKind::recreated);
        EXPECT_TRUE(c && *c && (**c).kind() == AcquireKind::created);
        EXPECT_TRUE(d && !*d && (*d).error().is(errc::sandbox_lost));
    });
}

TEST_F(SandboxManagerTest, TheHostsWordMakesAMissingSandboxALoss) {
    SandboxManagerOptions o;
    o.on_lost = OnLost::error;
    auto m = manager(o);
    run([&]() -> asio::awaitable<void> {
        GetOptions known;
        known.expect_existing = true;
        auto lost = co_await m->get("restored-thread", known);
        EXPECT_FALSE(lost);
        if (!lost) {
            EXPECT_TRUE(lost.error().is(errc::sandbox_lost));
        }
        auto plain = co_await m->get("new-thread");
        EXPECT_TRUE(plain && plain->kind() == AcquireKind::created);
    });
}

TEST_F(SandboxManagerTest, TheReaperSparesBusySandboxesAndForgetsReapedOnes) {
    SandboxManagerOptions o;
    o.idle_ttl = 0s;  // only the lease protects
    auto m = manager(o);
    run([&]() -> asio::awaitable<void> {
        auto busy = co_await m->get("busy");
        auto idle = co_await m->get("idle");
        EXPECT_TRUE(busy && idle);
        idle->release();
        {
            std::lock_guard lock(world_->mutex);
            for (auto& [id, r] : world_->sandboxes) r.expired = true;
        }
        auto pass = co_await m->cleanup();
        EXPECT_TRUE(pass);
        if (pass) {
            EXPECT_EQ(pass->deleted, std::vector<std::string>{m->sandbox_id_for("idle")});
            EXPECT_EQ(pass->kept, 1);
        }
        // A command in flight keeps it busy even without the lease.
        auto ex = co_await asio::this_coro::executor;
        bool ran = false;
        asio::co_spawn(
            ex,
            [&, lease = std::move(*busy)]() mutable -> asio::awaitable<void> {
                auto r = co_await lease.execute("sleep-ms 50");
                ran = r.has_value();
            },
            asio::detached);
        co_await sleep_for(5ms);
        auto during = co_await m->cleanup();
        EXPECT_TRUE(during && during->deleted.empty());
        while (!ran) co_await sleep_for(2ms);
        co_await sleep_for(2ms);  // the detached coroutine's frame (and its lease) is gone
        auto after = co_await m->cleanup();
        EXPECT_TRUE(after && after->deleted.size() == 1u);
        // The reaped thread's next sandbox is new, and the manager says its files are gone.
        auto back = co_await m->get("idle");
        EXPECT_TRUE(back && back->kind() == AcquireKind::recreated);
        auto stats = co_await m->stats();
        EXPECT_EQ(stats.reaped, 2u);
    });
}

// A lease's streamed transfers reach its sandbox, and one in flight keeps it busy by itself:
// the lease is released while the upload waits on its source.
TEST_F(SandboxManagerTest, AStreamedTransferKeepsItsSandboxBusy) {
    SandboxManagerOptions o;
    o.idle_ttl = 0s;
    auto m = manager(o);
    run([&]() -> asio::awaitable<void> {
        auto lease = co_await m->get("t");
        EXPECT_TRUE(lease);
        if (!lease) co_return;
        auto missing =
            co_await lease->download_to("/x", [](std::string_view) -> asio::awaitable<bool> { co_return true; });
        EXPECT_TRUE(missing && missing->error == file_error::file_not_found);
        {
            std::lock_guard lock(world_->mutex);
            for (auto& [id, r] : world_->sandboxes) r.expired = true;
        }
        bool source_waiting = false, source_go = false;
        ByteSource held_back = [&, calls = 0]() mutable -> asio::awaitable<Result<std::string_view>> {
            if (calls++ > 0) co_return std::string_view{};
            source_waiting = true;
            while (!source_go) co_await sleep_for(1ms);
            co_return std::string_view("abc");
        };
        std::optional<Result<FileUploadResponse>> uploaded;
        asio::co_spawn(
            co_await asio::this_coro::executor,
            [&]() -> asio::awaitable<void> { uploaded = co_await lease->upload_from("/f", 3, held_back); },
            asio::detached);
        while (!source_waiting) co_await sleep_for(1ms);
        lease->release();  // only the upload in flight holds the sandbox now
        auto during = co_await m->cleanup();
        EXPECT_TRUE(during && during->deleted.empty());
        source_go = true;
        while (!uploaded) co_await sleep_for(1ms);
        EXPECT_TRUE(*uploaded && !(*uploaded)->error && (*uploaded)->path == "/f");
        auto after = co_await m->cleanup();
        EXPECT_TRUE(after && after->deleted.size() == 1u);
    });
}

TEST_F(SandboxManagerTest, TheReaperKeepsGoingThroughErrorsAndStopsOnShutdown) {
    SandboxManagerOptions o;
    o.reap_interval = 5ms;
    o.backoff_initial = 1ms;
    o.backoff_max = 4ms;
    o.idle_ttl = 0s;
    auto m = manager(o);
    world_->fail_next_cleanups = 3;
    run([&]() -> asio::awaitable<void> {
        auto ex = co_await asio::this_coro::executor;
        auto lease = co_await m->get("t");
        EXPECT_TRUE(lease);
        lease->release();
        {
            std::lock_guard lock(world_->mutex);
            world_->sandboxes.begin()->second.expired = true;
        }
        bool returned = false;
        asio::co_spawn(
            ex,
            [&]() -> asio::awaitable<void> {
                co_await m->run();
                returned = true;
            },
            asio::detached);
        ManagerStats s;
        for (int i = 0; i < 2000 && s.reaped == 0; ++i) {
            co_await sleep_for(2ms);
            s = co_await m->stats();
        }
        EXPECT_EQ(s.reaper_errors, 3u);
        EXPECT_EQ(s.reaped, 1u);
        auto report = co_await m->shutdown();
        EXPECT_TRUE(report.drained);
        for (int i = 0; i < 100 && !returned; ++i) co_await sleep_for(2ms);
        EXPECT_TRUE(returned) << "run() did not return after shutdown()";
        auto refused = co_await m->get("t");
        EXPECT_FALSE(refused);
        if (!refused) {
            EXPECT_TRUE(refused.error().is(errc::cancelled));
        }
    });
}

TEST_F(SandboxManagerTest, ShutdownWaitsForLeasesAndCanDeleteTheSandboxes) {
    auto m = manager();
    run([&]() -> asio::awaitable<void> {
        auto ex = co_await asio::this_coro::executor;
        auto a = co_await m->get("a");
        auto b = co_await m->get("b");
        EXPECT_TRUE(a && b);
        asio::co_spawn(
            ex,
            [&, lease = std::move(*a)]() mutable -> asio::awaitable<void> { co_await lease.execute("sleep-ms 30"); },
            asio::detached);
        b->release();
        ShutdownOptions so;
        so.delete_sandboxes = true;
        so.graceful = 5s;
        auto report = co_await m->shutdown(so);
        EXPECT_TRUE(report.drained);
        EXPECT_EQ(report.deleted, 2u);
        EXPECT_TRUE(report.errors.empty());
        std::lock_guard lock(world_->mutex);
        EXPECT_TRUE(world_->sandboxes.empty());
    });
}

TEST_F(SandboxManagerTest, ListShowsThreadIdsOfThisScopeOnly) {
    SandboxManagerOptions other;
    other.scope = "other";
    auto m = manager();
    auto n = manager(other);
    run([&]() -> asio::awaitable<void> {
        EXPECT_TRUE(co_await m->get("x/y"));
        EXPECT_TRUE(co_await m->get("z"));
        EXPECT_TRUE(co_await n->get("x/y"));
        auto page = co_await m->list();
        EXPECT_TRUE(page);
        if (!page) co_return;
        std::set<std::string> threads;
        for (auto& item : page->items) threads.insert(item.id);
        EXPECT_EQ(threads, (std::set<std::string>{"x/y", "z"}));
        auto removed = co_await m->remove("z");
        EXPECT_TRUE(removed && *removed);
        auto fresh = co_await m->get("z");
        EXPECT_TRUE(fresh && fresh->kind() == AcquireKind::created) << "a removal is not a loss";
    });
}

TEST_F(SandboxManagerTest, BadThreadIdsAndScopesAreTypedErrors) {
    SandboxManagerOptions bad;
    bad.scope = "Bad Scope";
    auto m = manager();
    auto n = manager(bad);
    run([&]() -> asio::awaitable<void> {
        auto empty = co_await m->get("");
        EXPECT_TRUE(!empty && empty.error().is(errc::invalid_argument));
        auto nul = co_await m->get(std::string("a\0b", 3));
        EXPECT_TRUE(!nul && nul.error().is(errc::invalid_argument));
        auto scope = co_await n->get("t");
        EXPECT_TRUE(!scope && scope.error().is(errc::invalid_config));
        EXPECT_EQ(world_->acquisitions.load(), 0);
    });
}

TEST_F(SandboxManagerTest, EventsTellTheHostWhatHappened) {
    std::vector<std::string> events;
    SandboxManagerOptions o;
    o.idle_ttl = 0s;
    o.on_event = [&](const ManagerEvent& e) {
        events.push_back(std::string(to_string(e.kind)) + " " + e.thread_id + (e.error ? " (error)" : ""));
    };
    auto m = manager(o);
    world_->fail_next_acquisitions = 1;
    run([&]() -> asio::awaitable<void> {
        EXPECT_FALSE(co_await m->get("t"));
        EXPECT_TRUE(co_await m->get("t"));  // created
        EXPECT_TRUE(co_await m->get("t"));  // cached: no event
        {
            std::lock_guard lock(world_->mutex);
            world_->sandboxes.begin()->second.expired = true;
        }
        EXPECT_TRUE(co_await m->cleanup());  // reaped
        EXPECT_TRUE(co_await m->get("t"));   // lost, recreated
    });
    EXPECT_EQ(events, (std::vector<std::string>{"failed t (error)", "created t", "reaped t", "lost t", "recreated t"}));
}

TEST_F(SandboxManagerTest, FindLooksWithoutCreating) {
    auto m = manager();
    run([&]() -> asio::awaitable<void> {
        auto none = co_await m->find("t");
        EXPECT_TRUE(none && !*none);
        EXPECT_EQ(world_->acquisitions.load(), 0);
        EXPECT_TRUE(co_await m->get("t"));
        auto found = co_await m->find("t");
        EXPECT_TRUE(found && *found && (*found)->id == "t");
        EXPECT_EQ(world_->acquisitions.load(), 1);
    });
}

TEST_F(SandboxManagerTest, SafeOnAMultiThreadedIoContext) {
    asio::io_context pool_io(4);
    auto m = std::make_unique<SandboxManager>(pool_io.get_executor(), provider_, SandboxManagerOptions{});
    std::atomic<int> ok{0}, done{0};
    std::mutex ids_mutex;
    std::map<std::string, std::set<std::string>> ids;  // thread -> sandbox ids seen
    constexpr int calls = 400;
    for (int i = 0; i < calls; ++i) {
        asio::co_spawn(
            pool_io,
            [&, i]() -> asio::awaitable<void> {
                std::string thread = "t" + std::to_string(i % 20);
                auto lease = co_await m->get(thread);
                if (lease) {
                    auto r = co_await lease->execute("echo " + std::to_string(i));
                    if (r) ++ok;
                    std::lock_guard lock(ids_mutex);
                    ids[thread].insert(lease->id());
                }
                ++done;
            },
            asio::detached);
    }
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) threads.emplace_back([&] { pool_io.run_for(30s); });
    auto deadline = std::chrono::steady_clock::now() + 30s;
    while (done.load() < calls && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
    pool_io.stop();
    for (auto& t : threads) t.join();
    ASSERT_EQ(done.load(), calls) << "calls did not finish within 30 s";
    EXPECT_EQ(ok.load(), calls);
    EXPECT_EQ(world_->acquisitions.load(), 20);
    EXPECT_EQ(ids.size(), 20u);
    for (auto& [thread, set] : ids) EXPECT_EQ(set.size(), 1u) << thread;
}

}  // namespace
