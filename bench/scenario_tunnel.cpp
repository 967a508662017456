// Scenario 9: the router reached from outside the cluster. The native tunnel (pods/portforward
// over WebSocket through the API server, to the router Service's pod) against `kubectl
// port-forward` (make_kubectl_tunnel_connection, and kubectl + curl for a download): set-up,
// execute("true") round trips, and a 100 MB download.
#include "support.hpp"

#include <kubesandbox/router_connection.hpp>
#include <kubesandbox/router_sandbox.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

#include <sys/stat.h>

#include <fstream>
#include <iostream>
#include <sstream>

namespace kubesandbox::bench {

namespace asio = boost::asio;
namespace json = boost::json;
using namespace std::chrono_literals;

namespace {

constexpr const char* pod_name = "bench-tunnel";

json::object runtime_pod_body() {
    json::object probe_get;
    probe_get["path"] = "/";
    probe_get["port"] = 8888;
    json::object probe;
    probe["httpGet"] = std::move(probe_get);
    probe["periodSeconds"] = 1;
    json::object port;
    port["containerPort"] = 8888;
    json::array ports;
    ports.emplace_back(std::move(port));
    json::object container;
    container["name"] = "runtime";
    container["image"] = "busybox-runtime";
    container["ports"] = std::move(ports);
    container["readinessProbe"] = std::move(probe);
    json::array containers;
    containers.emplace_back(std::move(container));
    json::object pod;
    pod["apiVersion"] = "v1";
    pod["kind"] = "Pod";
    pod["metadata"].emplace_object()["name"] = pod_name;
    pod["spec"].emplace_object()["containers"] = std::move(containers);
    return pod;
}

// kubectl port-forward to the router Service, then curl downloading `path` `reps` times; curl's
// time_total of each download, one per line (the port-forward's start is not in them).
std::vector<double> kubectl_curl_downloads(const Env& env, const std::filesystem::path& headers, int reps) {
    const std::string script = R"(
kubectl port-forward --address=127.0.0.1 -n agent-sandbox-system svc/sandbox-router-svc :8080 >"$1.log" 2>&1 &
pf=$!
port=
for _ in $(seq 400); do
  port=$(sed -n 's/^Forwarding from 127.0.0.1:\([0-9]*\) .*/\1/p' "$1.log" | head -n 1)
  [ -n "$port" ] && break
  sleep 0.05
done
for _ in $(seq "$2"); do
  curl -sS -o /dev/null -H @"$1" -w '%{time_total}\n' "http://127.0.0.1:$port/download/big.bin"
done
kill $pf
)";
    auto run = run_process({"sh", "-c", script, "sh", headers.string(), std::to_string(reps)}, env.kubectl_env(), true);
    std::vector<double> times;
    std::istringstream lines(run.out);
    for (std::string line; std::getline(lines, line);) {
        if (!line.empty()) times.push_back(std::stod(line));
    }
    return times;
}

}  // namespace

void scenario_tunnels(asio::io_context& io, LocalCluster& cluster, const Env& env, const Sizes& sz) {
    if (!env.kubectl) {
        failures.push_back("scenario 9: kubectl is needed as the peer");
        return;
    }
    KubeClient kube(io.get_executor(), cluster.kube_config());
    TunnelConnectionOptions native_options;
    native_options.namespace_name = "agent-sandbox-system";
    native_options.service = "sandbox-router-svc";
    native_options.port = 8080;
    native_options.token = cluster.token();
    KubectlTunnelOptions kubectl_options;
    kubectl_options.kubeconfig = env.kubeconfig.string();
    kubectl_options.namespace_name = "agent-sandbox-system";
    kubectl_options.target = "svc/sandbox-router-svc";
    kubectl_options.port = 8080;
    kubectl_options.token = cluster.token();
    RouterSandboxOptions sandbox_options;
    sandbox_options.sandbox_name = pod_name;
    sandbox_options.max_file_bytes = 512 * 1024 * 1024;

    const long long bytes = std::max<long long>(sz.throughput_bytes, 1'000'000);
    const int reps = std::max(1, sz.throughput_reps);
    std::vector<double> native_setup, kubectl_setup, native_wall, kubectl_wall, native_cpu, kubectl_cpu,
        native_download;
    bool ok = run_on(
        io,
        [&]() -> asio::awaitable<void> {
            auto made = co_await kube.create(pods_in("default"), runtime_pod_body());
            if (!made) {
                failures.push_back("scenario 9: pod: " + made.error().describe());
                co_return;
            }
            for (int i = 0; i < 600; ++i) {
                auto got = co_await kube.get(pods_in("default").with_name(pod_name));
                if (got && pod_ready(*got)) break;
                co_await sleep_for(50ms);
            }
            // Set-up: the first execute on a new connection (a kubectl process each time for the peer).
            for (int i = 0; i < 3; ++i) {
                auto native = make_tunnel_connection(kube, native_options);
                auto kubectl = make_kubectl_tunnel_connection(io.get_executor(), kubectl_options);
                if (!native || !kubectl) {
                    failures.push_back("scenario 9: a tunnel could not be made");
                    co_return;
                }
                for (auto* c : {&*native, &*kubectl}) {
                    RouterSandbox once(*c, sandbox_options);
                    auto t0 = Clock::now();
                    auto r = co_await once.execute("true");
                    (c == &*native ? native_setup : kubectl_setup).push_back(seconds_since(t0));
                    if (!r || r->exit_code != 0)
                        failures.push_back("scenario 9: first execute failed: " +
                                           (r ? r->output : r.error().describe()));
                }
            }
            auto native = make_tunnel_connection(kube, native_options);
            auto kubectl = make_kubectl_tunnel_connection(io.get_executor(), kubectl_options);
            RouterSandbox over_native(*native, sandbox_options);
            RouterSandbox over_kubectl(*kubectl, sandbox_options);
            co_await over_native.execute("true");
            co_await over_kubectl.execute("true");
            const int calls = std::max(8, sz.exec_n * 2);
            for (int block = 0; block < 4; ++block) {
                for (auto* sb : {&over_native, &over_kubectl}) {
                    for (int i = 0; i < calls / 4; ++i) {
                        double c0 = thread_cpu();
                        auto t0 = Clock::now();
                        auto r = co_await sb->execute("true");
                        (sb == &over_native ? native_wall : kubectl_wall).push_back(seconds_since(t0));
                        (sb == &over_native ? native_cpu : kubectl_cpu).push_back(thread_cpu() - c0);
                        if (!r || r->exit_code != 0) failures.push_back("scenario 9: execute(true) failed");
                    }
                }
            }
            // The download: a file of `bytes` random bytes in the runtime's base directory.
            auto written = co_await over_native.execute("head -c " + std::to_string(bytes) +
                                                        " /dev/urandom > /app/big.bin && wc -c < /app/big.bin");
            if (!written || written->output != std::to_string(bytes) + "\n") {
                failures.push_back("scenario 9: the file to download was not written");
                co_return;
            }
            for (int i = 0; i < reps; ++i) {
                std::vector<std::string> paths{"/app/big.bin"};
                auto t0 = Clock::now();
                auto down = co_await over_native.download_files(paths);
                native_download.push_back(seconds_since(t0));
                if (!down || down->size() != 1 || !(*down)[0].content ||
                    (*down)[0].content->size() != static_cast<std::size_t>(bytes))
                    failures.push_back("scenario 9: the download over the native tunnel came back short");
            }
        },
        600s, "scenario 9");
    // The peer's download: curl through kubectl port-forward, with the same headers (in a 0600
    // file, so the token is not on a command line).
    const auto headers = env.kubeconfig.parent_path() / "bench-tunnel-headers";
    {
        std::ofstream out(headers);
        out << "Authorization: Bearer " << cluster.token() << "\nX-Sandbox-ID: " << pod_name
            << "\nX-Sandbox-Namespace: default\nX-Sandbox-Port: 8888\n";
    }
    ::chmod(headers.c_str(), 0600);
    std::vector<double> kubectl_download = ok ? kubectl_curl_downloads(env, headers, reps) : std::vector<double>{};
    std::error_code ec;
    std::filesystem::remove(headers, ec);
    run_on(
        io, [&]() -> asio::awaitable<void> { co_await kube.remove(pods_in("default").with_name(pod_name)); }, 60s,
        "scenario 9 cleanup");
    if (!ok || native_wall.empty()) return;

    Row native_setup_row =
        latency_row("9 tunnel set-up (first execute)", "native (pods/portforward WebSocket)", native_setup);
    Row kubectl_setup_row = latency_row("9 tunnel set-up (first execute)", "kubectl port-forward child", kubectl_setup);
    compare_to_peer(native_setup_row, kubectl_setup_row, "kubectl port-forward");
    rows.push_back(native_setup_row);
    rows.push_back(kubectl_setup_row);
    Row native_row = latency_row("9 execute(true) over a tunnel", "native tunnel", native_wall);
    Row kubectl_row = latency_row("9 execute(true) over a tunnel", "kubectl port-forward", kubectl_wall);
    compare_to_peer(native_row, kubectl_row, "kubectl port-forward");
    rows.push_back(native_row);
    rows.push_back(kubectl_row);
    rows.push_back(in_micros(latency_row("9 execute(true) over a tunnel", "client CPU, native tunnel", native_cpu)));
    rows.push_back(in_micros(latency_row("9 execute(true) over a tunnel",
                                         "client CPU, kubectl port-forward (ours only, not kubectl's)", kubectl_cpu)));
    if (kubectl_download.size() != static_cast<std::size_t>(reps)) {
        failures.push_back("scenario 9: kubectl port-forward + curl did not download " + std::to_string(reps) +
                           " times");
        return;
    }
    Row native_down = throughput_row("9 download over a tunnel", "native tunnel, RouterSandbox::download_files",
                                     native_download, static_cast<double>(bytes));
    Row kubectl_down = throughput_row("9 download over a tunnel", "kubectl port-forward + curl", kubectl_download,
                                      static_cast<double>(bytes));
    compare_to_peer(native_down, kubectl_down, "kubectl port-forward + curl");
    rows.push_back(native_down);
    rows.push_back(kubectl_down);
}

}  // namespace kubesandbox::bench
