// Scenario 5: many concurrent executes on one io_context thread, in a child process.
#include "support.hpp"

#include <kubesandbox/kube_client.hpp>
#include <kubesandbox/kube_config.hpp>
#include <kubesandbox/local_cluster.hpp>
#include <kubesandbox/pod_exec_sandbox.hpp>
#include <kubesandbox/raw_provider.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace kubesandbox::bench {

namespace asio = boost::asio;
namespace json = boost::json;
using namespace std::chrono_literals;

// ---------------------------------------------------------------------------------------------
// Scenario 5: many concurrent executes on one io_context thread, in a child process so that its
// peak RSS is the client's alone (the cluster runs in this process).

// "VmHWM"/"VmRSS" of this process in KiB. ru_maxrss is no use in a posix_spawn child: exec folds
// the parent's high-water mark (the shared vfork mm) into it, so it reports the cluster's RSS.
long proc_status_kb(const char* key) {
    std::ifstream in("/proc/self/status");
    std::string line;
    const std::string prefix = std::string(key) + ":";
    while (std::getline(in, line)) {
        if (line.rfind(prefix, 0) == 0) return std::atol(line.c_str() + prefix.size());
    }
    return -1;
}

int exec_client_main(int argc, char** argv) {
    // --exec-client KUBECONFIG NAMESPACE CALLS POD...
    if (argc < 6) return 2;
    KubeConfigLoadOptions lo;
    lo.paths.emplace_back(argv[2]);
    auto cfg = load_kubeconfig(lo);
    if (!cfg) {
        std::cerr << "exec client: " << cfg.error().describe() << "\n";
        return 1;
    }
    const std::string ns = argv[3];
    const int calls = std::atoi(argv[4]);
    asio::io_context io(1);
    std::vector<std::unique_ptr<PodExecSandbox>> sandboxes;
    for (int i = 5; i < argc; ++i) {
        sandboxes.push_back(std::make_unique<PodExecSandbox>(KubeClient(io.get_executor(), *cfg), ns, argv[i],
                                                             PodExecSandboxOptions()));
    }
    const long hwm_before_kb = proc_status_kb("VmHWM");
    std::vector<double> lat(static_cast<std::size_t>(calls), 0.0);
    int done = 0, errors = 0;
    std::string first_error;
    auto t0 = Clock::now();
    double wall = 0;
    auto one = [&](int i) -> asio::awaitable<void> {
        auto& sb = *sandboxes[static_cast<std::size_t>(i) % sandboxes.size()];
        auto t = Clock::now();
        auto r = co_await sb.execute("true", std::chrono::seconds(300));
        lat[static_cast<std::size_t>(i)] = seconds_since(t);
        if (!r || r->exit_code != 0) {
            if (errors++ == 0)
                first_error = r ? "exit code " + std::to_string(r->exit_code.value_or(-1)) : r.error().describe();
        }
    };
    auto finished = [&](std::exception_ptr e) {
        if (e) ++errors;
        if (++done == calls) {
            wall = seconds_since(t0);
            io.stop();
        }
    };
    for (int i = 0; i < calls; ++i) asio::co_spawn(io, one(i), finished);
    io.run_for(std::chrono::seconds(900));
    if (done != calls) {
        std::cerr << "exec client: only " << done << " of " << calls << " calls finished\n";
        return 1;
    }
    if (errors) std::cerr << "exec client: " << errors << " errors, first: " << first_error << "\n";
    std::cout << "wall " << wall << "\nerrors " << errors << "\nbase_hwm_kb " << hwm_before_kb << "\npeak_hwm_kb "
              << proc_status_kb("VmHWM") << "\nlat";
    for (double l : lat) std::cout << ' ' << l;
    std::cout << "\n";
    return errors ? 1 : 0;
}

void scenario_concurrent(asio::io_context& io, LocalCluster& cluster, const Env& env, const Sizes& sz) {
    std::cerr << "[5] " << sz.concurrent_calls << " concurrent executes over " << sz.concurrent_sandboxes
              << " sandboxes\n";
    RawProvider provider(KubeClient(io.get_executor(), cluster.kube_config()), RawProviderOptions());
    std::vector<std::string> pods;
    std::string ns;
    run_on(
        io,
        [&]() -> asio::awaitable<void> {
            int pending = sz.concurrent_sandboxes;
            auto make = [&](int i) -> asio::awaitable<void> {
                GetOrCreateOptions o;
                o.sandbox_id = "bench-conc-" + std::to_string(i);
                auto r = co_await provider.get_or_create_pod(o);
                if (!r) failures.push_back("concurrent sandbox: " + r.error().describe());
                else {
                    pods.push_back((*r)->pod_name());
                    ns = (*r)->namespace_name();
                }
            };
            auto ex = co_await asio::this_coro::executor;
            for (int i = 0; i < sz.concurrent_sandboxes; ++i) {
                asio::co_spawn(ex, make(i), [&](std::exception_ptr) { --pending; });
            }
            while (pending > 0) co_await sleep_for(50ms);
        },
        900s, "concurrent sandboxes");
    if (pods.size() == static_cast<std::size_t>(sz.concurrent_sandboxes)) {
        std::vector<std::string> argv{env.self_exe, "--exec-client", env.kubeconfig.string(), ns,
                                      std::to_string(sz.concurrent_calls)};
        argv.insert(argv.end(), pods.begin(), pods.end());
        struct rusage self0 {
        }, kids0{}, self1{}, kids1{};
        ::getrusage(RUSAGE_SELF, &self0);
        ::getrusage(RUSAGE_CHILDREN, &kids0);
        auto r = run_process(argv, {}, true);
        ::getrusage(RUSAGE_SELF, &self1);
        ::getrusage(RUSAGE_CHILDREN, &kids1);
        std::istringstream in(r.out);
        double wall = 0, base_kb = 0, peak_kb = 0;
        int errors = -1;
        std::vector<double> lat;
        std::string key;
        while (in >> key) {
            if (key == "wall") in >> wall;
            else if (key == "errors") in >> errors;
            else if (key == "base_hwm_kb") in >> base_kb;
            else if (key == "peak_hwm_kb") in >> peak_kb;
            else if (key == "lat") {
                double v = 0;
                while (in >> v) lat.push_back(v);
            }
        }
        if (!r.spawned || r.status != 0 || errors != 0 || wall <= 0 ||
            lat.size() != static_cast<std::size_t>(sz.concurrent_calls)) {
            failures.push_back("exec client: exit " + std::to_string(r.status) + ", errors " + std::to_string(errors));
            for (const auto& p : pods) describe_pod(env, ns, p);
        } else {
            const std::string name = "5 " + std::to_string(sz.concurrent_calls) + " concurrent execute, " +
                                     std::to_string(sz.concurrent_sandboxes) + " sandboxes, 1 thread";
            rows.push_back(latency_row(name, "latency per call", lat));
            rows.push_back(single_row(name, "throughput", "calls/s", sz.concurrent_calls / wall));
            rows.push_back(single_row(name, "client peak RSS (VmHWM)", "MiB", peak_kb / 1024));
            rows.push_back(single_row(name, "client peak RSS before the calls", "MiB", base_kb / 1024));
            rows.push_back(
                single_row(name, "client CPU (user+sys) / its lifetime", "%", 100 * r.cpu_seconds / r.seconds));
            // This process is blocked on the child meanwhile: its CPU is the cluster's (API
            // server, kubelet) plus the exec processes it reaped.
            double cluster_cpu = (cpu_of(self1) - cpu_of(self0)) + (cpu_of(kids1) - cpu_of(kids0)) - r.cpu_seconds;
            rows.push_back(single_row(name, "cluster CPU (server + exec processes) / same time", "%",
                                      100 * cluster_cpu / r.seconds));
        }
    }
    run_on(
        io, [&]() -> asio::awaitable<void> { co_await delete_all_sandboxes(provider); }, 600s, "concurrent cleanup");
}

}  // namespace kubesandbox::bench
