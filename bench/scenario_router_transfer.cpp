// Scenario 12, agent-sandbox part: a file of throughput_bytes up and down through the router,
// RouterSandbox streaming it (upload_from from memory in MiB pieces, download_to into a sink
// that compares) against the minimal client sending the same multipart POST /upload from a
// prebuilt string and reading GET /download by its length. The same sandbox, alternating.
#include "minimal_client.hpp"
#include "support.hpp"

#include <kubesandbox/agent_sandbox_provider.hpp>
#include <kubesandbox/router_sandbox.hpp>

#include "sandbox/runtime_files.hpp"
#include "sandbox/runtime_protocol.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/url/parse.hpp>

#include <iostream>
#include <string>
#include <vector>

namespace kubesandbox::bench {

namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

std::string router_request(const std::string& head_line, const std::string& host_port, const std::string& token,
                           const std::string& sandbox, const std::string& content_type, const std::string& body) {
    std::string r = head_line + "\r\nHost: " + host_port + "\r\nAuthorization: Bearer " + token +
                    "\r\nX-Sandbox-ID: " + sandbox + "\r\nX-Sandbox-Namespace: default\r\nX-Sandbox-Port: 8888\r\n";
    if (!content_type.empty()) r += "Content-Type: " + content_type + "\r\n";
    if (!body.empty()) r += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    return r + "\r\n" + body;
}

}  // namespace

void scenario_router_transfer(asio::io_context& io, LocalCluster& cluster, const Sizes& sz) {
    const long long bytes = sz.throughput_bytes;
    std::cerr << "[12] upload and download of " << bytes << " bytes through the router x" << sz.throughput_reps << "\n";
    const std::string router_url = cluster.router_url();  // the parsed view points into it
    auto url = boost::urls::parse_absolute_uri(router_url);
    if (!url) {
        failures.push_back("scenario 12 (router): bad router URL " + router_url);
        return;
    }
    const std::string host(url->host());
    const int port = std::stoi(std::string(url->port()));
    DirectConnectionOptions direct;
    direct.url = router_url;
    direct.token = cluster.token();
    auto connection = make_direct_connection(io.get_executor(), direct);
    if (!connection) {
        failures.push_back("scenario 12 (router): " + connection.error().describe());
        return;
    }
    KubeClient kube(io.get_executor(), cluster.kube_config());
    AgentSandboxProviderOptions options;
    options.warm_pool = "busybox-runtime";
    options.connection = *connection;
    options.ready_timeout = 120s;
    AgentSandboxProvider provider(kube, options);

    const std::string data = transfer_payload(bytes);
    const std::string name = "bench-router-transfer.bin";
    std::vector<double> up, down, up_cpu, down_cpu, peer_up, peer_down, peer_up_cpu, peer_down_cpu;
    run_on(
        io,
        [&]() -> asio::awaitable<void> {
            GetOrCreateOptions o;
            o.sandbox_id = "bench-router-transfer";
            auto a = co_await provider.acquire(o);
            if (!a) {
                failures.push_back("scenario 12 (router): " + a.error().describe());
                co_return;
            }
            auto* routed = dynamic_cast<RouterSandbox*>(a->sandbox.get());
            if (!routed) {
                failures.push_back("scenario 12 (router): not a RouterSandbox");
                co_return;
            }
            const std::string base = routed->options().base_dir;
            const std::string path = (base.size() > 1 ? base : "") + "/" + name;
            const std::string sandbox_name = routed->options().sandbox_name;
            const std::string host_port = host + ":" + std::to_string(port);
            auto multipart = runtime_protocol::multipart_file(name, data, "kubesandbox-bench-boundary");
            const std::string upload_request = router_request("POST /upload HTTP/1.1", host_port, cluster.token(),
                                                              sandbox_name, multipart.content_type, multipart.body);
            std::string().swap(multipart.body);
            const std::string download_request =
                router_request("GET /download/" + name + " HTTP/1.1", host_port, cluster.token(), sandbox_name, "", "");
            MinimalClient peer(host, port);
            for (int i = 0; i < sz.throughput_reps; ++i) {
                ByteSource source = memory_pieces(data);
                double c0 = thread_cpu();
                auto t0 = Clock::now();
                auto sent = co_await routed->upload_from(path, data.size(), source);
                up.push_back(seconds_since(t0));
                up_cpu.push_back(thread_cpu() - c0);
                if (!sent || sent->error) {
                    failures.push_back("scenario 12 (router): upload_from: " +
                                       (sent ? sent->error.value_or("?") : sent.error().describe()));
                    co_return;
                }
                ComparingSink compare(data);
                c0 = thread_cpu();
                t0 = Clock::now();
                auto got = co_await routed->download_to(path, compare.sink());
                down.push_back(seconds_since(t0));
                down_cpu.push_back(thread_cpu() - c0);
                if (!got || got->error || !compare.matches()) {
                    failures.push_back("scenario 12 (router): download_to: the bytes that came back differ");
                    co_return;
                }
                std::size_t body = 0;
                c0 = thread_cpu();
                t0 = Clock::now();
                bool ok = peer.round_trip(upload_request, body);
                peer_up.push_back(seconds_since(t0));
                peer_up_cpu.push_back(thread_cpu() - c0);
                c0 = thread_cpu();
                t0 = Clock::now();
                ok = ok && peer.round_trip(download_request, body);
                peer_down.push_back(seconds_since(t0));
                peer_down_cpu.push_back(thread_cpu() - c0);
                if (!ok || body != data.size()) {
                    failures.push_back("scenario 12 (router): the minimal client failed: " + peer.last_head);
                    co_return;
                }
            }
            co_await provider.delete_sandbox("bench-router-transfer");
        },
        1800s, "scenario 12 (router)");
    if (down.size() != static_cast<std::size_t>(sz.throughput_reps) || peer_down.size() != down.size()) return;
    const std::string scenario = "12 file transfer via router " + std::to_string(bytes / 1'000'000) + " MB";
    const double size = static_cast<double>(bytes);
    Row ours_up = throughput_row(scenario, "RouterSandbox::upload_from", up, size);
    Row theirs_up = throughput_row(scenario, "minimal client, same POST /upload", peer_up, size);
    Row ours_down = throughput_row(scenario, "RouterSandbox::download_to", down, size);
    Row theirs_down = throughput_row(scenario, "minimal client, same GET /download", peer_down, size);
    Row ours_up_cpu = latency_row(scenario, "client CPU per run: upload_from", up_cpu);
    Row theirs_up_cpu = latency_row(scenario, "client CPU per run: minimal client upload", peer_up_cpu);
    Row ours_down_cpu = latency_row(scenario, "client CPU per run: download_to", down_cpu);
    Row theirs_down_cpu = latency_row(scenario, "client CPU per run: minimal client download", peer_down_cpu);
    compare_to_peer(ours_up, theirs_up, "minimal client");
    compare_to_peer(ours_down, theirs_down, "minimal client");
    compare_to_peer(ours_up_cpu, theirs_up_cpu, "minimal client", true);
    compare_to_peer(ours_down_cpu, theirs_down_cpu, "minimal client", true);
    for (auto* r : {&ours_up, &theirs_up, &ours_down, &theirs_down, &ours_up_cpu, &theirs_up_cpu, &ours_down_cpu,
                    &theirs_down_cpu})
        rows.push_back(*r);
}

}  // namespace kubesandbox::bench
