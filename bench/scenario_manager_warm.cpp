// Scenario 6, continued: SandboxManager acquisition throughput with a warm pool, threads served
// warm next to the same number served cold, in both modes: agent-sandbox (each thread id names
// its claim, which the controller binds to a SandboxWarmPool's sandbox) and raw (each thread id's
// binding names a claimed warm pod).
#include "support.hpp"

#include <kubesandbox/agent_sandbox_provider.hpp>
#include <kubesandbox/kube_client.hpp>
#include <kubesandbox/local_cluster.hpp>
#include <kubesandbox/raw_provider.hpp>
#include <kubesandbox/router_connection.hpp>
#include <kubesandbox/sandbox_manager.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/json/object.hpp>

#include <algorithm>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace kubesandbox::bench {

namespace asio = boost::asio;
namespace json = boost::json;
using namespace std::chrono_literals;

namespace {

// Forwards to a provider and counts the acquisitions it served from its warm pool.
class CountingProvider final : public SandboxProvider {
public:
    explicit CountingProvider(std::shared_ptr<SandboxProvider> inner) : inner_(std::move(inner)) {}
    int served_warm = 0;

    asio::awaitable<Result<Acquisition>> acquire(GetOrCreateOptions o) override {
        auto a = co_await inner_->acquire(std::move(o));
        if (a && a->origin == SandboxOrigin::claimed_warm) ++served_warm;
        co_return a;
    }
    asio::awaitable<Result<SandboxInfo>> describe(std::string id) override {
        co_return co_await inner_->describe(std::move(id));
    }
    asio::awaitable<Result<SandboxPage>> list(ListSandboxesOptions o) override {
        co_return co_await inner_->list(std::move(o));
    }
    asio::awaitable<Result<bool>> delete_sandbox(std::string id) override {
        co_return co_await inner_->delete_sandbox(std::move(id));
    }
    asio::awaitable<Result<CleanupResult>> cleanup(CleanupOptions o) override {
        co_return co_await inner_->cleanup(std::move(o));
    }
    asio::awaitable<Result<PoolStatus>> pool_status() override { co_return co_await inner_->pool_status(); }
    asio::awaitable<Result<ProviderStats>> stats() override { co_return co_await inner_->stats(); }
    void record_activity(const std::string& id) override { inner_->record_activity(id); }

private:
    std::shared_ptr<SandboxProvider> inner_;
};

// Built outside the coroutine: g++ 12 and braced temporaries in coroutines do not mix.
json::object pool_body(int replicas) {
    return json::object{{"apiVersion", "extensions.agents.x-k8s.io/v1beta1"},
                        {"kind", "SandboxWarmPool"},
                        {"metadata", json::object{{"name", "bench-manager-warm"}}},
                        {"spec", json::object{{"replicas", replicas},
                                              {"sandboxTemplateRef", json::object{{"name", "busybox-runtime"}}}}}};
}

// n threads through a manager over `provider`; threads/s, or 0 after recording a failure.
asio::awaitable<double> acquire_through_manager(std::shared_ptr<SandboxProvider> provider, std::string scope, int n,
                                                std::string what) {
    auto ex = co_await asio::this_coro::executor;
    SandboxManagerOptions mo;
    mo.logger = Logger::silent();
    mo.scope = std::move(scope);
    SandboxManager manager(ex, provider, mo);
    int done = 0, ok = 0;
    std::string first_error;
    auto t0 = Clock::now();
    for (int i = 0; i < n; ++i)
        asio::co_spawn(
            ex,
            [&, i]() -> asio::awaitable<void> {
                auto lease = co_await manager.get("thread-" + std::to_string(i));
                if (lease) ++ok;
                else if (first_error.empty()) first_error = lease.error().describe();
                ++done;
            },
            asio::detached);
    while (done < n) co_await sleep_for(2ms);
    double seconds = seconds_since(t0);
    ShutdownOptions so;
    so.delete_sandboxes = true;
    co_await manager.shutdown(so);
    if (ok != n) {
        failures.push_back(what + ": " + std::to_string(n - ok) + " of " + std::to_string(n) +
                           " acquisitions failed, first: " + first_error);
        co_return 0.0;
    }
    co_return n / seconds;
}

// The pair of rows: warm against cold (the peer), and a check that warm threads were served warm.
void record_warm_vs_cold(const std::string& scenario, int n, double warm_rate, double cold_rate, int served_warm,
                         int cold_served_warm, const std::string& what) {
    if (warm_rate <= 0 || cold_rate <= 0) return;
    if (served_warm != n || cold_served_warm != 0)
        failures.push_back(what + ": " + std::to_string(served_warm) + " of " + std::to_string(n) +
                           " warm threads were served from the pool, " + std::to_string(cold_served_warm) +
                           " cold ones");
    Row cold = single_row(scenario, "SandboxManager::get, cold (peer)", "threads/s", cold_rate);
    Row warm = single_row(scenario, "SandboxManager::get, warm pool", "threads/s", warm_rate);
    cold.n = warm.n = static_cast<std::size_t>(n);
    compare_to_peer(warm, cold, "cold");
    rows.push_back(cold);
    rows.push_back(warm);
}

}  // namespace

void scenario_manager_warm(asio::io_context& io, LocalCluster& cluster, const Sizes& sz) {
    const int n = sz.manager_threads;
    std::cerr << "[6] manager over agent-sandbox: " << n << " threads at once, warm pool vs cold\n";
    // The cluster's pace, not the client-side rate limit (50 requests/s by default), is measured.
    KubeClientOptions unthrottled;
    unthrottled.qps = 0;
    KubeClient kube(io.get_executor(), cluster.kube_config(), unthrottled);
    DirectConnectionOptions direct;
    direct.url = cluster.router_url();
    direct.token = cluster.token();
    auto connection = make_direct_connection(io.get_executor(), direct);
    if (!connection) {
        failures.push_back("scenario 6 warm: " + connection.error().describe());
        return;
    }
    AgentSandboxProviderOptions warm_options;
    warm_options.warm_pool = "bench-manager-warm";
    warm_options.connection = *connection;
    warm_options.ready_timeout = 300s;
    AgentSandboxProviderOptions cold_options = warm_options;
    // v1alpha1 claims naming the template and no pool: always a new Sandbox.
    cold_options.warm_pool.clear();
    cold_options.template_name = "busybox-runtime";
    cold_options.claim_api_version = "v1alpha1";
    auto warm_provider = std::make_shared<CountingProvider>(std::make_shared<AgentSandboxProvider>(kube, warm_options));
    auto cold_provider = std::make_shared<CountingProvider>(std::make_shared<AgentSandboxProvider>(kube, cold_options));
    const ResourcePath pools{"extensions.agents.x-k8s.io", "v1beta1", "sandboxwarmpools", "default", ""};

    double warm_rate = 0, cold_rate = 0;
    run_on(
        io,
        [&]() -> asio::awaitable<void> {
            auto ex = co_await asio::this_coro::executor;
            // Cold first, before the pool exists, so its filling and refilling compete with neither.
            for (auto* provider : {cold_provider.get(), warm_provider.get()}) {
                const bool warm = provider == warm_provider.get();
                if (warm) {
                    auto made = co_await kube.create(pools, pool_body(n));
                    if (!made) {
                        failures.push_back("scenario 6 warm: pool: " + made.error().describe());
                        co_return;
                    }
                    bool filled = false;
                    for (int i = 0; i < 3000 && !filled; ++i) {
                        auto ps = co_await warm_provider->pool_status();
                        filled = ps && ps->available >= n;
                        if (!filled) co_await sleep_for(100ms);
                    }
                    if (!filled) {
                        failures.push_back("scenario 6 warm: the pool did not fill");
                        co_return;
                    }
                }
                // Named first: g++ 12 destroys a conditional's temporary in a co_await twice.
                std::shared_ptr<SandboxProvider> through = warm ? warm_provider : cold_provider;
                std::string scope = warm ? "bench-warm" : "bench-cold";
                double rate = co_await acquire_through_manager(through, scope, n, "scenario 6 warm");
                if (rate <= 0) co_return;
                (warm ? warm_rate : cold_rate) = rate;
            }
            co_await kube.remove(pools.with_name("bench-manager-warm"));
        },
        900s, "scenario 6 warm pool");
    record_warm_vs_cold("6 manager acquisition, agent-sandbox", n, warm_rate, cold_rate, warm_provider->served_warm,
                        cold_provider->served_warm, "scenario 6 warm");
}

void scenario_manager_warm_raw(asio::io_context& io, LocalCluster& cluster, const Sizes& sz) {
    const int n = sz.manager_threads;
    std::cerr << "[6] manager over raw mode: " << n << " threads at once, warm pool vs cold\n";
    KubeClientOptions unthrottled;
    unthrottled.qps = 0;
    KubeClient kube(io.get_executor(), cluster.kube_config(), unthrottled);
    RawProviderOptions cold_options;
    cold_options.image = "busybox";
    cold_options.startup_timeout = 300s;
    cold_options.logger = Logger::silent();
    RawProviderOptions warm_options = cold_options;
    warm_options.warm_pool_size = n;
    auto warm_raw = std::make_shared<RawProvider>(kube, warm_options);
    auto warm_provider = std::make_shared<CountingProvider>(warm_raw);
    auto cold_provider = std::make_shared<CountingProvider>(std::make_shared<RawProvider>(kube, cold_options));
    double warm_rate = 0, cold_rate = 0;
    run_on(
        io,
        [&]() -> asio::awaitable<void> {
            std::shared_ptr<SandboxProvider> cold = cold_provider, warm = warm_provider;
            cold_rate = co_await acquire_through_manager(cold, "bench-raw-cold", n, "scenario 6 raw cold");
            if (cold_rate <= 0) co_return;
            // The pool filled before the clock starts; its refill after the claims runs alongside.
            auto filled = co_await warm_raw->ensure_warm_pool();
            if (!filled) {
                failures.push_back("scenario 6 raw warm: pool: " + filled.error().describe());
                co_return;
            }
            auto pool_ready = [&]() -> asio::awaitable<bool> {
                for (int i = 0; i < 3000; ++i) {
                    auto ps = co_await warm_raw->pool_status();
                    if (ps && ps->available >= n) co_return true;
                    co_await sleep_for(100ms);
                }
                co_return false;
            };
            if (!co_await pool_ready()) {
                failures.push_back("scenario 6 raw warm: the pool did not fill");
                co_return;
            }
            warm_rate = co_await acquire_through_manager(warm, "bench-raw-warm", n, "scenario 6 raw warm");
            // The refill started by the claims ends once the pool is full again: then nothing is
            // left running to re-create what is deleted here.
            co_await pool_ready();
            co_await delete_all_sandboxes(*warm_raw);
        },
        900s, "scenario 6 raw warm pool");
    record_warm_vs_cold("6 manager acquisition, raw", n, warm_rate, cold_rate, warm_provider->served_warm,
                        cold_provider->served_warm, "scenario 6 raw warm");
}

}  // namespace kubesandbox::bench
