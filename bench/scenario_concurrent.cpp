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
#include <cctype>
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
#include <iterator>
#include <map>
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
    auto cfg = load_kubeconfig_file(argv[2], "exec client");
    if (!cfg) return 1;
    const std::string ns = argv[3];
    const int calls = std::atoi(argv[4]);
    asio::io_context io(1);
    // One client for all pods, as a provider shares its own. Scenario 5 also runs it with no
    // bound on connections being opened at once, to show what the bound saves.
    KubeClientOptions options;
    if (const char* bound = std::getenv("KUBESANDBOX_BENCH_MAX_CONNECTS"))
        options.max_concurrent_connects = static_cast<std::size_t>(std::atoi(bound));
    KubeClient client(io.get_executor(), *cfg, options);
    std::vector<std::unique_ptr<PodExecSandbox>> sandboxes;
    // ... and with no shell sessions (an exec per call), to compare them in the same run.
    PodExecSandboxOptions sandbox_options;
    if (const char* sessions = std::getenv("KUBESANDBOX_BENCH_SHELL_SESSIONS"))
        sandbox_options.idle_shell_sessions = static_cast<std::size_t>(std::atoi(sessions));
    for (int i = 5; i < argc; ++i)
        sandboxes.push_back(std::make_unique<PodExecSandbox>(client, ns, argv[i], sandbox_options));
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

namespace {

struct ExecClientRun {
    double wall = 0, base_kb = 0, peak_kb = 0, cpu_seconds = 0, seconds = 0, cluster_cpu = 0;
    std::vector<double> lat;
};

// CPU seconds so far of the pods' exec spawners (our children serving with --serve), theirs and
// their reaped commands', by pid: the commands are the spawners' children, not ours, so this
// process's usage does not show them until a spawner ends with its pod.
std::map<pid_t, double> spawner_cpu() {
    std::map<pid_t, double> out;
    const double tick = static_cast<double>(::sysconf(_SC_CLK_TCK));
    const std::string serving("\0--serve\0", 9);
    for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
        const std::string name = entry.path().filename();
        if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
        std::ifstream cmd(entry.path() / "cmdline");
        std::string cmdline((std::istreambuf_iterator<char>(cmd)), std::istreambuf_iterator<char>());
        if (cmdline.find(serving) == std::string::npos) continue;
        std::ifstream st(entry.path() / "stat");
        std::string stat((std::istreambuf_iterator<char>(st)), std::istreambuf_iterator<char>());
        auto close_paren = stat.rfind(')');
        if (close_paren == std::string::npos) continue;
        // Fields after the command name: state, ppid, ..., utime (14), stime, cutime, cstime (17).
        std::istringstream rest(stat.substr(close_paren + 2));
        std::vector<std::string> f{std::istream_iterator<std::string>(rest), std::istream_iterator<std::string>()};
        if (f.size() < 15 || std::atol(f[1].c_str()) != ::getpid()) continue;
        double ticks = 0;
        for (int i = 11; i <= 14; ++i) ticks += std::atof(f[static_cast<std::size_t>(i)].c_str());
        out[static_cast<pid_t>(std::atol(name.c_str()))] = ticks / tick;
    }
    return out;
}

double spawner_cpu_since(const std::map<pid_t, double>& before) {
    double sum = 0;
    for (const auto& [pid, seconds] : spawner_cpu()) {
        auto it = before.find(pid);
        sum += seconds - (it == before.end() ? 0.0 : it->second);
    }
    return sum;
}

// Runs the exec client as its own process (its peak RSS is then the client's alone).
std::optional<ExecClientRun> run_exec_client(const Env& env, const std::vector<std::string>& argv,
                                             const std::vector<std::string>& extra_env,
                                             const std::vector<std::string>& pods, const std::string& ns) {
    struct rusage self0 {
    }, kids0{}, self1{}, kids1{};
    ::getrusage(RUSAGE_SELF, &self0);
    ::getrusage(RUSAGE_CHILDREN, &kids0);
    const auto spawners0 = spawner_cpu();
    auto r = run_process(argv, extra_env, true);
    ::getrusage(RUSAGE_SELF, &self1);
    ::getrusage(RUSAGE_CHILDREN, &kids1);
    const double spawners = spawner_cpu_since(spawners0);
    std::istringstream in(r.out);
    ExecClientRun run;
    int errors = -1;
    std::string key;
    while (in >> key) {
        if (key == "wall") in >> run.wall;
        else if (key == "errors") in >> errors;
        else if (key == "base_hwm_kb") in >> run.base_kb;
        else if (key == "peak_hwm_kb") in >> run.peak_kb;
        else if (key == "lat") {
            double v = 0;
            while (in >> v) run.lat.push_back(v);
        }
    }
    const std::size_t calls = argv.size() > 4 ? static_cast<std::size_t>(std::atoi(argv[4].c_str())) : 0;
    if (!r.spawned || r.status != 0 || errors != 0 || run.wall <= 0 || run.lat.size() != calls) {
        std::string with = extra_env.empty() ? "" : " (" + extra_env.front() + ")";
        failures.push_back("exec client" + with + ": exit " + std::to_string(r.status) + ", errors " +
                           std::to_string(errors));
        for (const auto& p : pods) describe_pod(env, ns, p);
        return std::nullopt;
    }
    run.cpu_seconds = r.cpu_seconds;
    run.seconds = r.seconds;
    // This process is blocked on the child meanwhile: its CPU is the cluster's (API server,
    // kubelet) plus the processes it reaped, plus the pods' spawners with the commands they reaped.
    run.cluster_cpu = (cpu_of(self1) - cpu_of(self0)) + (cpu_of(kids1) - cpu_of(kids0)) - r.cpu_seconds + spawners;
    return run;
}

}  // namespace

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
        const std::string name = "5 " + std::to_string(sz.concurrent_calls) + " concurrent execute, " +
                                 std::to_string(sz.concurrent_sandboxes) + " sandboxes, 1 thread";
        auto bounded = run_exec_client(env, argv, {}, pods, ns);
        auto unbounded = run_exec_client(env, argv, {"KUBESANDBOX_BENCH_MAX_CONNECTS=0"}, pods, ns);
        auto per_exec = run_exec_client(env, argv, {"KUBESANDBOX_BENCH_SHELL_SESSIONS=0"}, pods, ns);
        if (bounded && unbounded && per_exec) {
            const double calls = sz.concurrent_calls;
            rows.push_back(latency_row(name, "latency per call", bounded->lat));
            rows.push_back(single_row(name, "throughput", "calls/s", calls / bounded->wall));
            rows.push_back(single_row(name, "client peak RSS (VmHWM)", "MiB", bounded->peak_kb / 1024));
            rows.push_back(single_row(name, "client peak RSS before the calls", "MiB", bounded->base_kb / 1024));
            Row per_call = single_row(name, "client memory per call in flight ((peak - before) / calls)", "KiB",
                                      (bounded->peak_kb - bounded->base_kb) / calls);
            Row per_call_unbounded =
                single_row(name, "... with no bound on connections being opened at once (max_concurrent_connects = 0)",
                           "KiB", (unbounded->peak_kb - unbounded->base_kb) / calls);
            if (per_call.median > 0 && per_call_unbounded.median > 0) {
                per_call.ratio = per_call_unbounded.median / per_call.median;
                per_call.peer = "no bound";
                char buf[64];
                std::snprintf(buf, sizeof buf, "%.2fx less memory than no bound", per_call.ratio);
                per_call.versus = buf;
            }
            rows.push_back(per_call);
            rows.push_back(per_call_unbounded);
            rows.push_back(single_row(name, "throughput with no bound", "calls/s", calls / unbounded->wall));
            Row sessions_off = single_row(name, "throughput with an exec per call (idle_shell_sessions = 0)", "calls/s",
                                          calls / per_exec->wall);
            rows.push_back(sessions_off);
            rows.push_back(single_row(name, "client memory per call in flight with an exec per call", "KiB",
                                      (per_exec->peak_kb - per_exec->base_kb) / calls));
            rows.push_back(single_row(name, "client CPU / its lifetime with an exec per call", "%",
                                      100 * per_exec->cpu_seconds / per_exec->seconds));
            rows.push_back(single_row(name, "client CPU (user+sys) / its lifetime", "%",
                                      100 * bounded->cpu_seconds / bounded->seconds));
            rows.push_back(single_row(name, "cluster CPU (server + exec processes) / same time", "%",
                                      100 * bounded->cluster_cpu / bounded->seconds));
        }
    }
    run_on(
        io, [&]() -> asio::awaitable<void> { co_await delete_all_sandboxes(provider); }, 600s, "concurrent cleanup");
}

}  // namespace kubesandbox::bench
