// Scenarios 2 and 3: exec round trip and stdout throughput, against kubectl exec.
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

namespace {

// argv: kubeconfig namespace pod n. Prints the CPU seconds of the n calls, then each call's wall
// seconds; one untimed warm-up call first (connection set-up, lazy imports).
constexpr const char* python_exec = R"PY(import sys, time
from kubernetes import client, config
from kubernetes.stream import stream
config.load_kube_config(sys.argv[1])
ns, pod, n = sys.argv[2], sys.argv[3], int(sys.argv[4])
v1 = client.CoreV1Api()
def call():
    return stream(v1.connect_get_namespaced_pod_exec, pod, ns, container="sandbox", command=["true"],
                  stderr=True, stdin=False, stdout=True, tty=False)
call()
walls = []
c0 = time.process_time()
for _ in range(n):
    t0 = time.monotonic()
    call()
    walls.append(time.monotonic() - t0)
print(time.process_time() - c0, *walls)
)PY";

// Wall and thread CPU seconds of `n` executes of `true` on `sandbox`, after one untimed call.
struct TimedCalls {
    std::vector<double> walls, cpus;
    std::optional<std::string> failure;
};

asio::awaitable<void> time_true(PodExecSandbox& sandbox, int n, TimedCalls& out) {
    for (int i = 0; i <= n; ++i) {
        auto t0 = Clock::now();
        double c0 = thread_cpu();
        auto r = co_await sandbox.execute("true", std::chrono::seconds(120));
        const double wall = seconds_since(t0), cpu = thread_cpu() - c0;
        if (!r || r->exit_code != 0) {
            out.failure = r ? "exit code " + std::to_string(r->exit_code.value_or(-1)) : r.error().describe();
            co_return;
        }
        if (i == 0) continue;
        out.walls.push_back(wall);
        out.cpus.push_back(cpu);
    }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Scenarios 2 and 3: exec round trip and stdout throughput, against kubectl exec

void scenario_exec(asio::io_context& io, LocalCluster& cluster, const Env& env, const Sizes& sz) {
    std::cerr << "[2,3] exec round trip x" << sz.exec_rt_n << " (kubectl x" << sz.exec_n << "), throughput "
              << sz.throughput_bytes << " bytes x" << sz.throughput_reps << "\n";
    RawProvider provider(KubeClient(io.get_executor(), cluster.kube_config()), RawProviderOptions());
    std::unique_ptr<PodExecSandbox> sb;
    run_on(
        io,
        [&]() -> asio::awaitable<void> {
            GetOrCreateOptions o;
            o.sandbox_id = "bench-exec";
            auto r = co_await provider.get_or_create_pod(o);
            if (!r) failures.push_back("exec sandbox: " + r.error().describe());
            else sb = std::move(*r);
        },
        300s, "exec sandbox");
    if (!sb) return;
    const std::string ns = sb->namespace_name();
    const std::string pod = sb->pod_name();

    // Round trip of `true`. One untimed warm-up each (kubectl fills its discovery cache).
    std::vector<double> theirs;
    TimedCalls ours;
    run_on(
        io, [&]() -> asio::awaitable<void> { co_await time_true(*sb, sz.exec_rt_n, ours); }, 600s, "execute true");
    if (ours.failure) {
        failures.push_back("execute true: " + *ours.failure);
        describe_pod(env, ns, pod);
    }
    const std::vector<double>& our_exec_cpu = ours.cpus;
    Row our_rt = latency_row("2 exec round trip `true`", "PodExecSandbox::execute", ours.walls);
    // The same calls with an exec each (no shell sessions): what the sessions buy.
    {
        PodExecSandboxOptions per_exec;
        per_exec.idle_shell_sessions = 0;
        PodExecSandbox plain(KubeClient(io.get_executor(), cluster.kube_config()), ns, pod, per_exec);
        TimedCalls each_exec;
        run_on(
            io, [&]() -> asio::awaitable<void> { co_await time_true(plain, sz.exec_rt_n, each_exec); }, 600s,
            "execute true, an exec each");
        if (each_exec.failure) failures.push_back("execute true, an exec each: " + *each_exec.failure);
        const std::vector<double>& walls = each_exec.walls;
        const std::vector<double>& cpus = each_exec.cpus;
        if (sb->shell_sessions_opened() != 1)
            failures.push_back("scenario 2: execute opened " + std::to_string(sb->shell_sessions_opened()) +
                               " shell sessions for sequential calls (expected 1)");
        Row ours_again = our_rt;
        ours_again.variant = "PodExecSandbox::execute (same figures)";
        Row each =
            latency_row("2 exec round trip `true`", "PodExecSandbox::execute, an exec each (sessions off)", walls);
        compare_to_peer(ours_again, each, "an exec per command");
        rows.push_back(ours_again);
        rows.push_back(each);
        rows.push_back(in_micros(
            latency_row("2 client CPU per execute", "PodExecSandbox::execute, an exec each (sessions off)", cpus)));
    }
    if (env.kubectl) {
        auto argv = kubectl_exec_argv(ns, pod, {"true"});
        for (int i = 0; i <= sz.exec_n; ++i) {
            auto r = run_process(argv, env.kubectl_env(), false);
            if (!r.spawned || r.status != 0) {
                failures.push_back("kubectl exec true: exit " + std::to_string(r.status));
                break;
            }
            if (i > 0) theirs.push_back(r.seconds);
        }
        Row peer = latency_row("2 exec round trip `true`", "kubectl exec (process incl.)", theirs);
        compare_to_peer(our_rt, peer, "kubectl");
        rows.push_back(our_rt);
        rows.push_back(peer);
    } else {
        rows.push_back(our_rt);
    }
    // python-kubernetes' kubernetes.stream on the same pod, as the Python raw-mode peers call it:
    // wall per call and the interpreter's CPU per call, imports and set-up left out.
    {
        auto script = std::filesystem::temp_directory_path() / ("ksb-exec-" + std::to_string(getpid()) + ".py");
        std::ofstream(script) << python_exec;
        auto r = run_process(
            {"/usr/bin/python3", script.string(), env.kubeconfig.string(), ns, pod, std::to_string(sz.exec_rt_n)}, {},
            true);
        std::filesystem::remove(script);
        std::istringstream out(r.out);
        double cpu = -1;
        out >> cpu;
        std::vector<double> walls;
        for (double w; out >> w;) walls.push_back(w);
        if (!r.spawned || r.status != 0 || cpu < 0 || walls.size() != static_cast<std::size_t>(sz.exec_rt_n)) {
            failures.push_back("scenario 2: python-kubernetes exec: exit " + std::to_string(r.status) + ", output " +
                               r.out.substr(0, 300));
        } else {
            Row ours_py = our_rt;
            ours_py.variant = "PodExecSandbox::execute (same figures)";
            Row py = latency_row("2 exec round trip `true`", "python-kubernetes stream() (peer)", walls);
            compare_to_peer(ours_py, py, "python-kubernetes");
            rows.push_back(ours_py);
            rows.push_back(py);
            Row our_cpu_row =
                in_micros(latency_row("2 client CPU per execute", "PodExecSandbox::execute", our_exec_cpu));
            // The peer's figure is a mean (its process CPU over n calls): compared with ours, the
            // mean of the same calls, not the median.
            Row our_mean_row = our_cpu_row;
            our_mean_row.variant = "PodExecSandbox::execute, mean per call (compared by mean)";
            our_mean_row.median = our_mean_row.mean;
            std::vector<double> per_call(1, cpu / sz.exec_rt_n);
            Row py_cpu = in_micros(
                latency_row("2 client CPU per execute", "python-kubernetes stream() (peer), mean per call", per_call));
            compare_to_peer(our_mean_row, py_cpu, "python-kubernetes", true);
            rows.push_back(our_cpu_row);
            rows.push_back(our_mean_row);
            rows.push_back(py_cpu);
        }
    }
    // The floor the issue measures against: one fork+exec of `sh -c true` on this machine, now.
    {
        std::vector<double> forks;
        const std::vector<std::string> sh_true{"/bin/sh", "-c", "true"};
        for (int i = 0; i <= sz.exec_rt_n; ++i) {
            auto r = run_process(sh_true, {}, false);
            if (i > 0 && r.spawned) forks.push_back(r.seconds);
        }
        Row ours_again = our_rt;
        ours_again.variant = "PodExecSandbox::execute (same figures)";
        Row floor = latency_row("2 exec round trip `true`", "fork+exec `sh -c true` (no cluster)", forks);
        compare_to_peer(ours_again, floor, "fork+exec");
        rows.push_back(ours_again);
        rows.push_back(floor);
    }

    // Stdout throughput: our output lands in memory, kubectl's in /dev/null.
    const long long bytes = sz.throughput_bytes;
    const std::string cmd = "head -c " + std::to_string(bytes) + " /dev/zero";
    PodExecSandboxOptions big;
    big.max_output_bytes = static_cast<std::size_t>(bytes) + 1024 * 1024;
    PodExecSandbox bulk(KubeClient(io.get_executor(), cluster.kube_config()), ns, pod, big);
    std::vector<double> our_tp, their_tp, our_cpu, their_cpu;
    run_on(
        io,
        [&]() -> asio::awaitable<void> {
            for (int i = 0; i < sz.throughput_reps; ++i) {
                // The client runs on this thread alone (the cluster has its own): its CPU time.
                struct rusage c0 {
                }, c1{};
                ::getrusage(RUSAGE_THREAD, &c0);
                auto t0 = Clock::now();
                auto r = co_await bulk.execute(cmd, std::chrono::seconds(600));
                double d = seconds_since(t0);
                ::getrusage(RUSAGE_THREAD, &c1);
                our_cpu.push_back(cpu_of(c1) - cpu_of(c0));
                if (!r || r->exit_code != 0 || r->output.size() != static_cast<std::size_t>(bytes) || r->truncated) {
                    std::string why = r ? "got " + std::to_string(r->output.size()) + " bytes, exit " +
                                              std::to_string(r->exit_code.value_or(-1))
                                        : r.error().describe();
                    failures.push_back("execute throughput: " + why);
                    co_return;
                }
                our_tp.push_back(d);
            }
        },
        1800s, "execute throughput");
    const std::string tp_name = "3 exec stdout " + std::to_string(bytes / 1'000'000) + " MB";
    Row our_row = throughput_row(tp_name, "PodExecSandbox::execute", our_tp, static_cast<double>(bytes));
    if (env.kubectl) {
        auto argv = kubectl_exec_argv(ns, pod, {"head", "-c", std::to_string(bytes), "/dev/zero"});
        for (int i = 0; i < sz.throughput_reps; ++i) {
            auto r = run_process(argv, env.kubectl_env(), false);
            if (!r.spawned || r.status != 0) {
                failures.push_back("kubectl exec head: exit " + std::to_string(r.status));
                break;
            }
            their_tp.push_back(r.seconds);
            their_cpu.push_back(r.cpu_seconds);
        }
        Row peer = throughput_row(tp_name, "kubectl exec > /dev/null", their_tp, static_cast<double>(bytes));
        compare_to_peer(our_row, peer, "kubectl");
        rows.push_back(our_row);
        rows.push_back(peer);
    } else {
        rows.push_back(our_row);
    }
    Row our_cpu_row = latency_row(tp_name, "client CPU per run: PodExecSandbox::execute", our_cpu);
    Row peer_cpu = latency_row(tp_name, "client CPU per run: kubectl process", their_cpu);
    if (!their_cpu.empty()) compare_to_peer(our_cpu_row, peer_cpu, "kubectl", true);
    rows.push_back(our_cpu_row);

    // The same bytes through run() and an OutputSink that drops them, as kubectl's go to
    // /dev/null: nothing is collected, so this is the transport's own rate and CPU.
    std::vector<double> streamed_tp, streamed_cpu;
    run_on(
        io,
        [&]() -> asio::awaitable<void> {
            const std::vector<std::string> argv{"head", "-c", std::to_string(bytes), "/dev/zero"};
            for (int i = 0; i < sz.throughput_reps; ++i) {
                std::size_t seen = 0;
                OutputSink drop = [&seen](int, std::string_view data) -> asio::awaitable<bool> {
                    seen += data.size();
                    co_return true;
                };
                std::string no_input;
                struct rusage c0 {
                }, c1{};
                ::getrusage(RUSAGE_THREAD, &c0);
                auto t0 = Clock::now();
                auto r = co_await bulk.run(argv, no_input, std::chrono::seconds(600), std::move(drop));
                double d = seconds_since(t0);
                ::getrusage(RUSAGE_THREAD, &c1);
                if (!r || r->exit_code != 0 || seen != static_cast<std::size_t>(bytes)) {
                    failures.push_back("streamed throughput: " + (r ? "got " + std::to_string(seen) + " bytes, exit " +
                                                                          std::to_string(r->exit_code.value_or(-1))
                                                                    : r.error().describe()));
                    co_return;
                }
                streamed_tp.push_back(d);
                streamed_cpu.push_back(cpu_of(c1) - cpu_of(c0));
            }
        },
        1800s, "streamed throughput");
    if (!streamed_tp.empty()) {
        Row streamed = throughput_row(tp_name, "PodExecSandbox::run into a dropping OutputSink", streamed_tp,
                                      static_cast<double>(bytes));
        Row streamed_cpu_row = latency_row(tp_name, "client CPU per run: run into a dropping OutputSink", streamed_cpu);
        if (env.kubectl) {
            compare_to_peer(streamed, throughput_row(tp_name, "kubectl", their_tp, static_cast<double>(bytes)),
                            "kubectl");
            compare_to_peer(streamed_cpu_row, peer_cpu, "kubectl", true);
        }
        rows.push_back(streamed);
        rows.push_back(streamed_cpu_row);
    }
    if (!their_cpu.empty()) rows.push_back(peer_cpu);

    run_on(
        io, [&]() -> asio::awaitable<void> { co_await delete_all_sandboxes(provider); }, 120s, "exec cleanup");
}

int exec_loop_main(int argc, char** argv) {
    // --exec-loop KUBECONFIG NAMESPACE POD CALLS
    if (argc < 6) return 2;
    auto cfg = load_kubeconfig_file(argv[2], "exec loop");
    if (!cfg) return 1;
    const int calls = std::max(1, std::atoi(argv[5]));
    asio::io_context io(1);
    PodExecSandbox sandbox(KubeClient(io.get_executor(), *cfg), argv[3], argv[4], PodExecSandboxOptions());
    TimedCalls timed;
    const bool ran = run_on(
        io,
        [&]() -> asio::awaitable<void> {
            TimedCalls warm_up;
            co_await time_true(sandbox, 5, warm_up);
            if (warm_up.failure) timed.failure = "warm-up: " + *warm_up.failure;
            else co_await time_true(sandbox, calls, timed);
        },
        600s, "exec loop");
    if (!ran || timed.failure || timed.walls.empty()) {
        std::cerr << "exec loop: " << timed.failure.value_or("did not finish") << "\n";
        return 1;
    }
    std::sort(timed.walls.begin(), timed.walls.end());
    std::sort(timed.cpus.begin(), timed.cpus.end());
    std::cout << "calls " << timed.walls.size() << "\nwall_us_median " << timed.walls[timed.walls.size() / 2] * 1e6
              << "\nclient_cpu_us_median " << timed.cpus[timed.cpus.size() / 2] * 1e6 << "\n";
    return 0;
}

}  // namespace kubesandbox::bench
