// Scenario 6: the SandboxManager. Cold acquisition throughput against the local cluster next to
// the provider called directly (the peer: what the manager adds on top), the cost of a get of a
// bound thread, and heap bytes per managed thread with 100,000 threads bound.
#include "support.hpp"

#include <kubesandbox/kube_client.hpp>
#include <kubesandbox/local_cluster.hpp>
#include <kubesandbox/pod_exec_sandbox.hpp>
#include <kubesandbox/raw_provider.hpp>
#include <kubesandbox/sandbox_manager.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/this_coro.hpp>

#include <algorithm>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace kubesandbox::bench {

namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

// Hands out real PodExecSandbox handles without touching the cluster, so the memory measured is
// the manager's and the handle's, not a cluster's.
class HandleOnlyProvider final : public SandboxProvider {
public:
    explicit HandleOnlyProvider(KubeClient client) : client_(std::move(client)) {}

    asio::awaitable<Result<Acquisition>> acquire(GetOrCreateOptions o) override {
        co_return handle_for(o.sandbox_id.value_or("random"));
    }
    asio::awaitable<Result<SandboxInfo>> describe(std::string) override { co_return fail(errc::not_found, "none"); }
    asio::awaitable<Result<SandboxPage>> list(ListSandboxesOptions) override { co_return SandboxPage{}; }
    asio::awaitable<Result<bool>> delete_sandbox(std::string) override { co_return true; }
    asio::awaitable<Result<CleanupResult>> cleanup(CleanupOptions) override { co_return CleanupResult{}; }
    asio::awaitable<Result<PoolStatus>> pool_status() override { co_return PoolStatus{}; }
    asio::awaitable<Result<ProviderStats>> stats() override { co_return ProviderStats{}; }
    void record_activity(const std::string&) override {}

private:
    // Outside the coroutine: g++ 12 and braced temporaries in coroutines do not mix.
    Acquisition handle_for(const std::string& id) {
        std::string name = RawProvider::pod_name_for(id);
        return Acquisition{std::make_unique<PodExecSandbox>(client_, "default", name, PodExecSandboxOptions{}),
                           SandboxOrigin::created, name};
    }

    KubeClient client_;
};

// N threads acquired at once; returns the seconds it took, or a negative value on failure.
template <class Acquire>
double acquire_all(asio::io_context& io, int n, const std::string& what, Acquire acquire) {
    double seconds = -1;
    run_on(
        io,
        [&]() -> asio::awaitable<void> {
            auto ex = co_await asio::this_coro::executor;
            int done = 0, ok = 0;
            auto t0 = Clock::now();
            for (int i = 0; i < n; ++i)
                asio::co_spawn(
                    ex,
                    [&, i]() -> asio::awaitable<void> {
                        ok += co_await acquire(i);
                        ++done;
                    },
                    asio::detached);
            while (done < n) co_await sleep_for(2ms);
            if (ok == n) seconds = seconds_since(t0);
            else failures.push_back(what + ": " + std::to_string(n - ok) + " of " + std::to_string(n) + " failed");
        },
        300s, what);
    return seconds;
}

}  // namespace

void scenario_manager(asio::io_context& io, LocalCluster& cluster, const Sizes& sz) {
    std::cerr << "scenario 6: SandboxManager\n";
    auto silent = [] {
        RawProviderOptions po;
        po.image = "busybox";
        po.startup_timeout = 120s;
        po.logger = Logger::silent();
        return po;
    };

    // Cold acquisitions: the manager over raw mode and raw mode alone, the same number of new
    // ids each, in alternating order on an emptied cluster (the order would favour one side).
    {
        auto provider = std::make_shared<RawProvider>(KubeClient(io.get_executor(), cluster.kube_config()), silent());
        SandboxManagerOptions mo;
        mo.logger = Logger::silent();
        const int n = sz.manager_threads;
        std::vector<double> ours, peer;
        for (int round = 0; round < 2; ++round) {
            for (int side = 0; side < 2; ++side) {
                bool manager_side = (side == 0) == (round == 0);
                std::string tag = std::to_string(round);
                double seconds = -1;
                if (manager_side) {
                    SandboxManager manager(io.get_executor(), provider, mo);
                    seconds = acquire_all(io, n, "manager cold acquisitions", [&](int i) -> asio::awaitable<bool> {
                        auto lease = co_await manager.get("bench-" + tag + "-" + std::to_string(i));
                        co_return lease.has_value();
                    });
                } else {
                    seconds = acquire_all(io, n, "provider cold creates", [&](int i) -> asio::awaitable<bool> {
                        GetOrCreateOptions o;
                        o.sandbox_id = "direct-" + tag + "-" + std::to_string(i);
                        auto sb = co_await provider->get_or_create(o);
                        co_return sb.has_value();
                    });
                }
                if (seconds > 0) (manager_side ? ours : peer).push_back(n / seconds);
                run_on(
                    io, [&]() -> asio::awaitable<void> { co_await delete_all_sandboxes(*provider); }, 300s,
                    "scenario 6 cleanup");
                io.restart();
                io.poll();  // the manager's last posted handler
            }
        }
        if (ours.size() == 2 && peer.size() == 2) {
            Row direct = single_row("6 manager acquisition, cold", "RawProvider::get_or_create (peer)", "threads/s",
                                    (peer[0] + peer[1]) / 2);
            Row mine =
                single_row("6 manager acquisition, cold", "SandboxManager::get", "threads/s", (ours[0] + ours[1]) / 2);
            direct.n = mine.n = static_cast<std::size_t>(n);
            direct.best = std::max(peer[0], peer[1]);
            direct.p99 = std::min(peer[0], peer[1]);
            mine.best = std::max(ours[0], ours[1]);
            mine.p99 = std::min(ours[0], ours[1]);
            compare_to_peer(mine, direct, "provider direct");
            rows.push_back(direct);
            rows.push_back(mine);
        }
    }

    // Memory per bound thread and the cost of a get of a bound thread, without a cluster behind.
    {
        KubeClient client(io.get_executor(), cluster.kube_config());
        const int n = sz.manager_entries;
        long long before = thread_heap_bytes();
        std::vector<std::unique_ptr<Sandbox>> handles;
        handles.reserve(static_cast<std::size_t>(n));
        for (int i = 0; i < n; ++i)
            handles.push_back(std::make_unique<PodExecSandbox>(
                client, "default", RawProvider::pod_name_for("thread:bench-" + std::to_string(i)),
                PodExecSandboxOptions{}));
        long long handles_only = thread_heap_bytes() - before;
        handles.clear();
        handles.shrink_to_fit();

        auto provider = std::make_shared<HandleOnlyProvider>(client);
        SandboxManagerOptions mo;
        mo.logger = Logger::silent();
        before = thread_heap_bytes();
        auto manager = std::make_unique<SandboxManager>(io.get_executor(), provider, mo);
        std::vector<double> get_seconds;
        run_on(
            io,
            [&]() -> asio::awaitable<void> {
                for (int i = 0; i < n; ++i) {
                    auto lease = co_await manager->get("bench-" + std::to_string(i));
                    if (!lease) {
                        failures.push_back("scenario 6: get: " + lease.error().describe());
                        co_return;
                    }
                }
                // Gets of bound threads: the path every turn of a conversation takes.
                const int reps = std::min(n, 20'000);
                for (int i = 0; i < reps; ++i) {
                    auto t0 = Clock::now();
                    auto lease = co_await manager->get("bench-" + std::to_string(i));
                    get_seconds.push_back(seconds_since(t0));
                    if (!lease || lease->kind() != AcquireKind::cached) {
                        failures.push_back("scenario 6: a bound thread was not served from the table");
                        co_return;
                    }
                }
            },
            600s, "scenario 6 memory");
        long long with_manager = thread_heap_bytes() - before;
        if (thread_heap_bytes() < 0) std::cerr << "  memory per bound thread: not counted under a sanitizer\n";
        if (!get_seconds.empty() && thread_heap_bytes() >= 0) {
            Row peer = single_row("6 memory per bound thread", "PodExecSandbox handle alone (peer)", "bytes",
                                  static_cast<double>(handles_only) / n);
            Row mine = single_row("6 memory per bound thread", "SandboxManager entry incl. handle", "bytes",
                                  static_cast<double>(with_manager) / n);
            peer.n = mine.n = static_cast<std::size_t>(n);
            rows.push_back(peer);
            rows.push_back(mine);
        }
        if (!get_seconds.empty())
            rows.push_back(latency_row("6 get of a bound thread", "SandboxManager::get (cached)", get_seconds));
        manager.reset();
        io.restart();
        io.poll();  // the manager's last posted handler
    }
}

}  // namespace kubesandbox::bench
