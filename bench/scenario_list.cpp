// Scenario 4: list N pods in pages, against kubectl get --chunk-size.
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
// Scenario 4: list N pods in pages, against kubectl get --chunk-size

void scenario_list(asio::io_context& io, LocalCluster& cluster, const Env& env, const Sizes& sz) {
    std::cerr << "[4] list " << sz.list_pods << " pods in pages of " << sz.list_page << "\n";
    const std::string ns = "bench-list";
    KubeClientOptions bulk_opts;
    bulk_opts.qps = 0;  // filling the namespace is setup, not the measurement
    KubeClient bulk(io.get_executor(), cluster.kube_config(), bulk_opts);
    KubeClient client(io.get_executor(), cluster.kube_config());
    double fill_seconds = 0;
    bool filled = run_on(
        io,
        [&]() -> asio::awaitable<void> {
            const ResourcePath nsp = namespaces_path();
            json::object nsb = namespace_body(ns);
            auto created = co_await bulk.create(nsp, std::move(nsb));
            if (!created) {
                failures.push_back("create namespace: " + created.error().describe());
                co_return;
            }
            // An image the cluster does not know: pods stay Pending (ErrImagePull), no processes.
            int next = 0, running = 0, errors = 0;
            auto worker = [&]() -> asio::awaitable<void> {
                const ResourcePath col = pods_in(ns);
                while (next < sz.list_pods && errors == 0) {
                    char name[32];
                    std::snprintf(name, sizeof name, "p-%05d", next++);
                    json::object body = pod_body(name, "registry.invalid/kubesandbox/bench-none:1");
                    auto r = co_await bulk.create(col, std::move(body));
                    if (!r) {
                        if (errors++ == 0)
                            failures.push_back(std::string("create ") + name + ": " + r.error().describe());
                    }
                }
                --running;
            };
            auto ex = co_await asio::this_coro::executor;
            auto t0 = Clock::now();
            for (int i = 0; i < 16; ++i) {
                ++running;
                asio::co_spawn(ex, worker(), [](std::exception_ptr) {});
            }
            while (running > 0) co_await sleep_for(20ms);
            fill_seconds = seconds_since(t0);
            co_await sleep_for(3000ms);  // the kubelet's ErrImagePull/BackOff status writes settle
        },
        1800s, "fill namespace");
    if (!filled || fill_seconds == 0) return;
    rows.push_back(single_row("4 list setup", "create " + std::to_string(sz.list_pods) + " pods, 16 in flight",
                              "pods/s", sz.list_pods / fill_seconds));

    std::vector<double> ours, theirs;
    run_on(
        io,
        [&]() -> asio::awaitable<void> {
            const ResourcePath col = pods_in(ns);
            for (int rep = 0; rep <= sz.list_reps; ++rep) {  // rep 0 is a warm-up
                auto t0 = Clock::now();
                std::size_t count = 0;
                std::string token;
                for (;;) {
                    ListOptions lo;
                    lo.limit = sz.list_page;
                    lo.continue_token = token;
                    auto page = co_await client.list(col, lo);
                    if (!page) {
                        failures.push_back("list page: " + page.error().describe());
                        co_return;
                    }
                    count += page->items.size();
                    token = page->continue_token;
                    if (token.empty()) break;
                }
                double d = seconds_since(t0);
                if (count != static_cast<std::size_t>(sz.list_pods)) {
                    failures.push_back("list returned " + std::to_string(count) + " pods");
                    co_return;
                }
                if (rep > 0) ours.push_back(d);
            }
        },
        1800s, "list");
    const std::string name =
        "4 list " + std::to_string(sz.list_pods) + " pods, pages of " + std::to_string(sz.list_page);
    Row our_row = latency_row(name, "KubeClient::list + continue", ours);
    if (env.kubectl) {
        std::vector<std::string> argv{
            "kubectl", "get", "pods", "-n", ns, "--chunk-size=" + std::to_string(sz.list_page), "-o", "name"};
        for (int rep = 0; rep <= sz.list_reps; ++rep) {
            auto r = run_process(argv, env.kubectl_env(), true);
            auto lines = std::count(r.out.begin(), r.out.end(), '\n');
            if (!r.spawned || r.status != 0 || lines != sz.list_pods) {
                failures.push_back("kubectl get pods: exit " + std::to_string(r.status) + ", " + std::to_string(lines) +
                                   " lines");
                break;
            }
            if (rep > 0) theirs.push_back(r.seconds);
        }
        Row peer = latency_row(name, "kubectl get --chunk-size -o name", theirs);
        compare_to_peer(our_row, peer, "kubectl");
        rows.push_back(our_row);
        rows.push_back(peer);
    } else {
        rows.push_back(our_row);
    }

    run_on(
        io,
        [&]() -> asio::awaitable<void> {
            const ResourcePath p = namespaces_path().with_name(ns);
            auto r = co_await client.remove(p);
            if (!r) failures.push_back("delete namespace: " + r.error().describe());
        },
        120s, "list cleanup");
}

}  // namespace kubesandbox::bench
