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

// ---------------------------------------------------------------------------------------------
// Scenarios 2 and 3: exec round trip and stdout throughput, against kubectl exec

void scenario_exec(asio::io_context& io, LocalCluster& cluster, const Env& env, const Sizes& sz) {
    std::cerr << "[2,3] exec round trip x" << sz.exec_n << ", throughput " << sz.throughput_bytes << " bytes x"
              << sz.throughput_reps << "\n";
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
    std::vector<double> ours, theirs;
    run_on(
        io,
        [&]() -> asio::awaitable<void> {
            for (int i = 0; i <= sz.exec_n; ++i) {
                auto t0 = Clock::now();
                auto r = co_await sb->execute("true", std::chrono::seconds(120));
                double d = seconds_since(t0);
                if (!r || r->exit_code != 0) {
                    std::string why =
                        r ? "exit code " + std::to_string(r->exit_code.value_or(-1)) : r.error().describe();
                    failures.push_back("execute true: " + why);
                    describe_pod(env, ns, pod);
                    co_return;
                }
                if (i > 0) ours.push_back(d);
            }
        },
        600s, "execute true");
    Row our_rt = latency_row("2 exec round trip `true`", "PodExecSandbox::execute", ours);
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
    if (!their_cpu.empty()) {
        Row peer_cpu = latency_row(tp_name, "client CPU per run: kubectl process", their_cpu);
        compare_to_peer(our_cpu_row, peer_cpu, "kubectl", true);
        rows.push_back(our_cpu_row);
        rows.push_back(peer_cpu);
    } else {
        rows.push_back(our_cpu_row);
    }

    run_on(
        io, [&]() -> asio::awaitable<void> { co_await delete_all_sandboxes(provider); }, 120s, "exec cleanup");
}

}  // namespace kubesandbox::bench
