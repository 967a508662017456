// Scenario 8: agent-sandbox mode on the local cluster. Claim latency served warm and cold;
// execute("true") through the router: wall and client CPU per call, next to a minimal keep-alive
// HTTP client (blocking POSIX sockets, no parsing beyond the framing) sending the very request
// RouterSandbox sends to the same router, and next to the same client written with Asio
// coroutines (the floor of any client built on Asio); client CPU for a 10 MB output.
#include "minimal_client.hpp"
#include "support.hpp"

#include <kubesandbox/agent_sandbox_provider.hpp>
#include <kubesandbox/router_sandbox.hpp>

#include "sandbox/runtime_protocol.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/url/parse.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace kubesandbox::bench {

namespace asio = boost::asio;
namespace json = boost::json;
using namespace std::chrono_literals;

namespace {

// The same client on Asio coroutines: what any Asio-based client pays at least (an epoll
// reactor, a coroutine resumption per completion) on top of the blocking one.
class AsioMinimalClient {
public:
    explicit AsioMinimalClient(asio::any_io_executor ex) : socket_(std::move(ex)) {}
    asio::awaitable<bool> connect(const std::string& host, int port) {
        asio::ip::tcp::endpoint to(asio::ip::make_address(host), static_cast<unsigned short>(port));
        auto [ec] = co_await socket_.async_connect(to, asio::as_tuple(asio::use_awaitable));
        if (!ec) socket_.set_option(asio::ip::tcp::no_delay(true), ec);
        co_return !ec;
    }
    asio::awaitable<bool> round_trip(const std::string& request) {
        constexpr auto tuple = asio::as_tuple(asio::use_awaitable);
        auto [wec, wn] = co_await asio::async_write(socket_, asio::buffer(request), tuple);
        if (wec) co_return false;
        head_.clear();
        std::size_t header_end = std::string::npos, length = 0;
        for (;;) {
            auto [ec, n] = co_await socket_.async_read_some(asio::buffer(buf_), tuple);
            if (ec) co_return false;
            head_.append(buf_, n);
            if (header_end == std::string::npos) {
                header_end = head_.find("\r\n\r\n");
                if (header_end == std::string::npos) continue;
                auto cl = head_.find("Content-Length: ");
                if (cl == std::string::npos) cl = head_.find("content-length: ");
                if (cl == std::string::npos || cl > header_end) co_return false;
                length = std::stoull(head_.substr(cl + 16));
            }
            if (head_.size() - header_end - 4 >= length) co_return head_.compare(0, 12, "HTTP/1.1 200") == 0;
        }
    }

private:
    asio::ip::tcp::socket socket_;
    std::string head_;
    char buf_[65536];
};

std::string execute_request(const std::string& host_port, const std::string& token, const std::string& sandbox,
                            const std::string& body) {
    return "POST /execute HTTP/1.1\r\nHost: " + host_port + "\r\nAuthorization: Bearer " + token +
           "\r\nX-Sandbox-ID: " + sandbox +
           "\r\nX-Sandbox-Namespace: default\r\nX-Sandbox-Port: 8888\r\nX-Sandbox-Timeout: 1805"
           "\r\nContent-Type: application/json\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
}

json::object warm_pool_body(int replicas) {
    return json::object{{"apiVersion", "extensions.agents.x-k8s.io/v1beta1"},
                        {"kind", "SandboxWarmPool"},
                        {"metadata", json::object{{"name", "bench-warm"}}},
                        {"spec", json::object{{"replicas", replicas},
                                              {"sandboxTemplateRef", json::object{{"name", "busybox-runtime"}}}}}};
}

}  // namespace

int router_client_main(int argc, char** argv) {
    if (argc < 4) return 2;
    const std::string kubeconfig = argv[2];
    const int calls = std::max(1, std::atoi(argv[3]));
    std::ifstream router_file(kubeconfig + ".router");
    std::stringstream text;
    text << router_file.rdbuf();
    boost::system::error_code ec;
    auto router = json::parse(text.str(), ec);
    if (ec || !router.is_object() || !router.as_object().if_contains("url")) {
        std::cerr << "router client: no router in " << kubeconfig << ".router\n";
        return 1;
    }
    auto cfg = load_kubeconfig_file(kubeconfig, "router client");
    if (!cfg) return 1;
    asio::io_context io(1);
    KubeClientOptions unthrottled;
    unthrottled.qps = 0;
    KubeClient kube(io.get_executor(), *cfg, unthrottled);
    DirectConnectionOptions direct;
    direct.url = std::string(router.at("url").as_string());
    direct.token = std::string(router.at("token").as_string());
    auto connection = make_direct_connection(io.get_executor(), direct);
    if (!connection) {
        std::cerr << "router client: " << connection.error().describe() << "\n";
        return 1;
    }
    int status = 1;
    bool ok = run_on(
        io,
        [&]() -> asio::awaitable<void> {
            AgentSandboxProviderOptions options;
            options.warm_pool = "busybox-runtime";
            options.connection = *connection;
            AgentSandboxProvider provider(kube, options);
            GetOrCreateOptions o;
            o.sandbox_id = "bench-router-client";
            auto a = co_await provider.acquire(o);
            if (!a) {
                std::cerr << "router client: " << a.error().describe() << "\n";
                co_return;
            }
            for (int i = 0; i < 5; ++i) co_await a->sandbox->execute("true");  // warm-up
            std::vector<double> cpu;
            int failed = 0;
            for (int i = 0; i < calls; ++i) {
                double c0 = thread_cpu();
                auto r = co_await a->sandbox->execute("true");
                cpu.push_back(thread_cpu() - c0);
                failed += !r || r->exit_code != 0;
            }
            std::sort(cpu.begin(), cpu.end());
            std::cout << "calls " << calls << "\nfailed " << failed << "\nclient_cpu_us_median "
                      << cpu[cpu.size() / 2] * 1e6 << "\n";
            co_await provider.delete_sandbox("bench-router-client");
            status = failed ? 1 : 0;
        },
        600s, "router client");
    return ok ? status : 1;
}

void scenario_agent_sandbox(asio::io_context& io, LocalCluster& cluster, const Sizes& sz) {
    std::cerr << "scenario 8: agent-sandbox mode\n";
    const std::string router_url = cluster.router_url();  // the parsed view points into it
    auto url = boost::urls::parse_absolute_uri(router_url);
    if (!url) {
        failures.push_back("scenario 8: bad router URL " + cluster.router_url());
        return;
    }
    const std::string host(url->host());
    const int port = std::stoi(std::string(url->port()));
    // Latency, not the client-side rate limit (50 QPS by default), is what is measured here.
    KubeClientOptions unthrottled;
    unthrottled.qps = 0;
    KubeClient kube(io.get_executor(), cluster.kube_config(), unthrottled);
    DirectConnectionOptions direct;
    direct.url = cluster.router_url();
    direct.token = cluster.token();
    auto connection = make_direct_connection(io.get_executor(), direct);
    if (!connection) {
        failures.push_back("scenario 8: " + connection.error().describe());
        return;
    }
    AgentSandboxProviderOptions warm_options;
    warm_options.warm_pool = "bench-warm";
    warm_options.connection = *connection;
    warm_options.ready_timeout = 120s;
    AgentSandboxProviderOptions cold_options = warm_options;
    cold_options.env = {{"BENCH", "cold"}};  // env cannot reach a warm pod: always cold

    const int n = std::max(2, sz.create_n / 2);
    std::vector<double> warm, cold, exec_wall, exec_cpu, peer_wall, peer_cpu, plain_wall, asio_wall, asio_cpu;
    std::vector<double> tunnel_wall, tunnel_cpu, tunnel_setup;
    double big_cpu = 0, big_peer_cpu = 0, big_peak_heap = 0;
    std::size_t big_bytes = 0;
    bool ok = run_on(
        io,
        [&]() -> asio::awaitable<void> {
            ResourcePath pools{"extensions.agents.x-k8s.io", "v1beta1", "sandboxwarmpools", "default", ""};
            auto made = co_await kube.create(pools, warm_pool_body(n));
            if (!made) {
                failures.push_back("scenario 8: warm pool: " + made.error().describe());
                co_return;
            }
            AgentSandboxProvider warm_provider(kube, warm_options);
            AgentSandboxProvider cold_provider(kube, cold_options);
            for (int i = 0; i < 600; ++i) {  // the pool filled and ready
                auto ps = co_await warm_provider.pool_status();
                if (ps && ps->available >= n) break;
                co_await sleep_for(100ms);
            }
            for (int i = 0; i < n; ++i) {
                for (auto* p : {&warm_provider, &cold_provider}) {
                    GetOrCreateOptions o;
                    o.sandbox_id = std::string(p == &warm_provider ? "bench-warm-" : "bench-cold-") + std::to_string(i);
                    auto t0 = Clock::now();
                    auto a = co_await p->acquire(o);
                    double took = seconds_since(t0);
                    if (!a) {
                        failures.push_back("scenario 8: acquire: " + a.error().describe());
                        co_return;
                    }
                    bool served_warm = a->origin == SandboxOrigin::claimed_warm;
                    if (served_warm != (p == &warm_provider)) {
                        failures.push_back("scenario 8: " + *o.sandbox_id + " was not served as expected");
                    }
                    (p == &warm_provider ? warm : cold).push_back(took);
                }
            }
            // The pool refills behind the warm claims: measure once the cluster is quiet again,
            // so its controllers' work lands in no one's calls.
            for (int i = 0; i < 600; ++i) {
                auto ps = co_await warm_provider.pool_status();
                if (ps && ps->available >= n) break;
                co_await sleep_for(100ms);
            }
            // Execute through the router: one sandbox, ours and the peers' calls interleaved.
            GetOrCreateOptions o;
            o.sandbox_id = "bench-warm-0";
            auto a = co_await warm_provider.acquire(o);
            if (!a) {
                failures.push_back("scenario 8: " + a.error().describe());
                co_return;
            }
            auto* routed = dynamic_cast<RouterSandbox*>(a->sandbox.get());
            const std::string sandbox_name = routed ? routed->options().sandbox_name : "";
            const std::string host_port = host + ":" + std::to_string(port);
            const std::string wrapped = execute_request(host_port, cluster.token(), sandbox_name,
                                                        runtime_protocol::execute_body(runtime_protocol::execute_argv(
                                                            "true", "kubesandbox-timeout-0123456789abcdef", 1800)));
            const std::string plain =
                execute_request(host_port, cluster.token(), sandbox_name, runtime_protocol::execute_body({"true"}));
            MinimalClient peer(host, port);
            AsioMinimalClient asio_peer(io.get_executor());
            if (!co_await asio_peer.connect(host, port) || !co_await asio_peer.round_trip(wrapped)) {
                failures.push_back("scenario 8: the Asio minimal client's warm-up request failed");
                co_return;
            }
            auto warmup = co_await a->sandbox->execute("true");
            std::size_t body = 0;
            if (!warmup) {
                failures.push_back("scenario 8: warm-up execute: " + warmup.error().describe());
                co_return;
            }
            if (!peer.round_trip(wrapped, body)) {
                failures.push_back("scenario 8: the minimal client's warm-up request failed: " + peer.last_head);
                co_return;
            }
            // The same sandbox through the API server: a port-forward tunnel to the router's
            // Service (agent-sandbox-system/sandbox-router-svc:8080, resolved through its
            // EndpointSlices), so both paths cross the router. Set-up = the first call on a fresh
            // connection.
            TunnelConnectionOptions tunnel_options;
            tunnel_options.namespace_name = "agent-sandbox-system";
            tunnel_options.service = "sandbox-router-svc";
            tunnel_options.port = 8080;
            tunnel_options.token = cluster.token();
            auto tunnel = make_tunnel_connection(kube, tunnel_options);
            if (!tunnel) {
                failures.push_back("scenario 8: tunnel: " + tunnel.error().describe());
                co_return;
            }
            RouterSandbox tunnelled(*tunnel, routed->options());
            for (int i = 0; i < 3; ++i) {
                auto fresh = make_tunnel_connection(kube, tunnel_options);
                RouterSandbox once(*fresh, routed->options());
                auto t0 = Clock::now();
                auto r = co_await once.execute("true");
                tunnel_setup.push_back(seconds_since(t0));
                if (!r || r->exit_code != 0) failures.push_back("scenario 8: first execute over a tunnel failed");
            }
            if (auto w = co_await tunnelled.execute("true"); !w) {
                failures.push_back("scenario 8: tunnel warm-up: " + w.error().describe());
                co_return;
            }
            // One call of each in turn, so that every client's calls meet the same moments of the
            // machine: in blocks of 100, a drift during one block showed as a difference of clients.
            const int calls = std::max(10, sz.exec_n * 8);
            for (int i = 0; i < calls; ++i) {
                {
                    double c0 = thread_cpu();
                    auto t0 = Clock::now();
                    auto r = co_await a->sandbox->execute("true");
                    exec_wall.push_back(seconds_since(t0));
                    exec_cpu.push_back(thread_cpu() - c0);
                    if (!r || r->exit_code != 0) failures.push_back("scenario 8: execute(true) failed");
                }
                {
                    double c0 = thread_cpu();
                    auto t0 = Clock::now();
                    if (!peer.round_trip(wrapped, body)) failures.push_back("scenario 8: peer request failed");
                    peer_wall.push_back(seconds_since(t0));
                    peer_cpu.push_back(thread_cpu() - c0);
                }
                {
                    double c0 = thread_cpu();
                    auto t0 = Clock::now();
                    auto r = co_await tunnelled.execute("true");
                    tunnel_wall.push_back(seconds_since(t0));
                    tunnel_cpu.push_back(thread_cpu() - c0);
                    if (!r || r->exit_code != 0) failures.push_back("scenario 8: execute(true) over the tunnel failed");
                }
                {
                    double c0 = thread_cpu();
                    auto t0 = Clock::now();
                    if (!co_await asio_peer.round_trip(wrapped)) failures.push_back("scenario 8: Asio peer failed");
                    asio_wall.push_back(seconds_since(t0));
                    asio_cpu.push_back(thread_cpu() - c0);
                }
                if (i % 2 == 0) {
                    auto t0 = Clock::now();
                    if (!peer.round_trip(plain, body)) failures.push_back("scenario 8: plain request failed");
                    plain_wall.push_back(seconds_since(t0));
                }
            }
            // 10 MB of output: ours keeps 16 MiB, the peer reads the same response unparsed.
            RouterSandboxOptions big_options = routed->options();
            big_options.max_output_bytes = 16 * 1024 * 1024;
            RouterSandbox big(*connection, big_options);
            const std::string big_command = "head -c 10000000 /dev/zero | tr '\\0' a";
            const long long heap_before = thread_heap_bytes();
            reset_thread_heap_peak();
            double c0 = thread_cpu();
            auto r = co_await big.execute(big_command);
            big_cpu = thread_cpu() - c0;
            big_peak_heap = static_cast<double>(thread_heap_peak_bytes() - heap_before);
            if (!r || r->output.size() != 10'000'000) failures.push_back("scenario 8: 10 MB output came back short");
            const std::string big_request =
                execute_request(host_port, cluster.token(), sandbox_name,
                                runtime_protocol::execute_body(runtime_protocol::execute_argv(
                                    big_command, "kubesandbox-timeout-0123456789abcdef", 1800)));
            c0 = thread_cpu();
            if (!peer.round_trip(big_request, big_bytes)) failures.push_back("scenario 8: peer 10 MB request failed");
            big_peer_cpu = thread_cpu() - c0;
            for (int i = 0; i < n; ++i) {
                co_await warm_provider.delete_sandbox("bench-warm-" + std::to_string(i));
                co_await cold_provider.delete_sandbox("bench-cold-" + std::to_string(i));
            }
            co_await kube.remove(pools.with_name("bench-warm"));
        },
        600s, "scenario 8");
    if (!ok || warm.empty() || exec_wall.empty()) return;
    Row warm_row = latency_row("8 agent-sandbox claim->usable", "warm (SandboxWarmPool)", warm);
    Row cold_row = latency_row("8 agent-sandbox claim->usable", "cold (env forces a new Sandbox)", cold);
    compare_to_peer(warm_row, cold_row, "cold claim");
    rows.push_back(warm_row);
    rows.push_back(cold_row);
    Row ours = latency_row("8 execute(true) via router", "kubesandbox RouterSandbox", exec_wall);
    Row peer = latency_row("8 execute(true) via router", "minimal keep-alive client, same request", peer_wall);
    compare_to_peer(ours, peer, "minimal client");
    rows.push_back(ours);
    rows.push_back(peer);
    rows.push_back(latency_row("8 execute(true) via router", "minimal Asio coroutine client, same request", asio_wall));
    Row direct_row = ours;
    direct_row.scenario = "8 execute(true), tunnel vs direct";
    direct_row.variant = "direct (router URL)";
    direct_row.versus.clear();
    Row tunnel_row = latency_row("8 execute(true), tunnel vs direct",
                                 "tunnel to the router Service (pods/portforward WebSocket)", tunnel_wall);
    compare_to_peer(tunnel_row, direct_row, "direct");
    rows.push_back(tunnel_row);
    rows.push_back(direct_row);
    Row tunnel_cpu_row =
        in_micros(latency_row("8 execute(true), tunnel vs direct", "client CPU per call over the tunnel", tunnel_cpu));
    Row direct_cpu_row =
        in_micros(latency_row("8 execute(true), tunnel vs direct", "client CPU per call, direct", exec_cpu));
    compare_to_peer(tunnel_cpu_row, direct_cpu_row, "direct", true);
    rows.push_back(tunnel_cpu_row);
    rows.push_back(direct_cpu_row);
    rows.push_back(latency_row("8 execute(true), tunnel vs direct", "first call on a new tunnel (WebSocket set-up)",
                               tunnel_setup));
    rows.push_back(
        latency_row("8 execute(true) via router", "minimal client, unwrapped {\"command\":\"true\"}", plain_wall));
    Row ours_cpu = in_micros(latency_row("8 client CPU per execute(true)", "kubesandbox RouterSandbox", exec_cpu));
    Row peer_cpu_row = in_micros(latency_row("8 client CPU per execute(true)", "minimal keep-alive client", peer_cpu));
    compare_to_peer(ours_cpu, peer_cpu_row, "minimal client", true);
    Row asio_cpu_row =
        in_micros(latency_row("8 client CPU per execute(true)", "minimal Asio coroutine client", asio_cpu));
    Row ours_vs_asio = ours_cpu;
    ours_vs_asio.variant = "kubesandbox RouterSandbox (vs the Asio floor)";
    compare_to_peer(ours_vs_asio, asio_cpu_row, "Asio minimal client", true);
    rows.push_back(ours_cpu);
    rows.push_back(peer_cpu_row);
    rows.push_back(ours_vs_asio);
    rows.push_back(asio_cpu_row);
    Row big_row = single_row("8 client CPU, 10 MB output", "kubesandbox (streamed JSON, base64 decoded)", "s", big_cpu);
    Row big_peer =
        single_row("8 client CPU, 10 MB output", "minimal client (bytes read, not parsed)", "s", big_peer_cpu);
    compare_to_peer(big_row, big_peer, "minimal client", true);
    rows.push_back(big_row);
    rows.push_back(big_peer);
    // Response bodies are parsed as they stream and decoded in place: the output is not held twice.
    if (big_peak_heap > 0)
        rows.push_back(single_row("8 peak client heap, 10 MB output", "kubesandbox, per byte of output", "x",
                                  big_peak_heap / 10'000'000));
}

}  // namespace kubesandbox::bench
