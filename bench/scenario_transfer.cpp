// Scenario 12: a file of throughput_bytes up and down through PodExecSandbox, whole
// (upload_files/download_files) and streamed (upload_from/download_to), against `kubectl cp` (a
// tar stream over the same exec protocol) on the same pod in the same run.
#include "support.hpp"

#include <kubesandbox/kube_client.hpp>
#include <kubesandbox/local_cluster.hpp>
#include <kubesandbox/pod_exec_sandbox.hpp>
#include <kubesandbox/raw_provider.hpp>

#include <boost/asio/io_context.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace kubesandbox::bench {

namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

// The upload is given its bytes in memory and the download returns them there; kubectl reads
// and writes a local file, which the page cache holds at this size.
struct Timing {
    std::vector<double> up, down, up_cpu, down_cpu;
    std::vector<double> stream_up, stream_down, stream_up_cpu, stream_down_cpu;  // upload_from, download_to
};

}  // namespace

void scenario_transfer(asio::io_context& io, LocalCluster& cluster, const Env& env, const Sizes& sz) {
    const long long bytes = sz.throughput_bytes;
    std::cerr << "[12] upload and download of " << bytes << " bytes x" << sz.throughput_reps << "\n";
    RawProvider provider(KubeClient(io.get_executor(), cluster.kube_config()), RawProviderOptions());
    std::unique_ptr<PodExecSandbox> sb;
    run_on(
        io,
        [&]() -> asio::awaitable<void> {
            GetOrCreateOptions o;
            o.sandbox_id = "bench-transfer";
            auto r = co_await provider.get_or_create_pod(o);
            if (!r) failures.push_back("transfer sandbox: " + r.error().describe());
            else sb = std::move(*r);
        },
        300s, "transfer sandbox");
    if (!sb) return;
    const std::string ns = sb->namespace_name();
    const std::string pod = sb->pod_name();
    const std::string data = transfer_payload(bytes);
    const std::string remote = "/tmp/bench-transfer.bin";

    Timing ours;
    run_on(
        io,
        [&]() -> asio::awaitable<void> {
            for (int i = 0; i < sz.throughput_reps; ++i) {
                std::vector<std::pair<std::string, std::string>> files{{remote, data}};
                double c0 = thread_cpu();
                auto t0 = Clock::now();
                auto up = co_await sb->upload_files(std::move(files));
                ours.up.push_back(seconds_since(t0));
                ours.up_cpu.push_back(thread_cpu() - c0);
                if (!up || up->size() != 1 || (*up)[0].error) {
                    failures.push_back("upload: " +
                                       (up ? (up->empty() ? std::string("no result") : (*up)[0].error.value_or("?"))
                                           : up.error().describe()));
                    co_return;
                }
                std::vector<std::string> paths{remote};
                c0 = thread_cpu();
                t0 = Clock::now();
                auto down = co_await sb->download_files(std::move(paths));
                ours.down.push_back(seconds_since(t0));
                ours.down_cpu.push_back(thread_cpu() - c0);
                if (!down || down->size() != 1 || !(*down)[0].content || *(*down)[0].content != data) {
                    failures.push_back("download: the bytes that came back differ from the upload");
                    co_return;
                }
                // The same file streamed: from memory in MiB pieces, into a sink that compares.
                ByteSource source = memory_pieces(data);
                c0 = thread_cpu();
                t0 = Clock::now();
                auto streamed_up = co_await sb->upload_from(remote, data.size(), source);
                ours.stream_up.push_back(seconds_since(t0));
                ours.stream_up_cpu.push_back(thread_cpu() - c0);
                if (!streamed_up || streamed_up->error) {
                    failures.push_back("upload_from: " + (streamed_up ? streamed_up->error.value_or("?")
                                                                      : streamed_up.error().describe()));
                    co_return;
                }
                ComparingSink compare(data);
                c0 = thread_cpu();
                t0 = Clock::now();
                auto streamed_down = co_await sb->download_to(remote, compare.sink());
                ours.stream_down.push_back(seconds_since(t0));
                ours.stream_down_cpu.push_back(thread_cpu() - c0);
                if (!streamed_down || streamed_down->error || !compare.matches()) {
                    failures.push_back("download_to: the bytes that came back differ from the upload");
                    co_return;
                }
            }
        },
        1800s, "upload and download");

    const std::string name = "12 file transfer " + std::to_string(bytes / 1'000'000) + " MB";
    Row up = throughput_row(name, "PodExecSandbox::upload_files", ours.up, static_cast<double>(bytes));
    Row down = throughput_row(name, "PodExecSandbox::download_files", ours.down, static_cast<double>(bytes));
    Row up_cpu = latency_row(name, "client CPU per run: upload_files", ours.up_cpu);
    Row down_cpu = latency_row(name, "client CPU per run: download_files", ours.down_cpu);
    Row s_up = throughput_row(name, "PodExecSandbox::upload_from", ours.stream_up, static_cast<double>(bytes));
    Row s_down = throughput_row(name, "PodExecSandbox::download_to", ours.stream_down, static_cast<double>(bytes));
    Row s_up_cpu = latency_row(name, "client CPU per run: upload_from", ours.stream_up_cpu);
    Row s_down_cpu = latency_row(name, "client CPU per run: download_to", ours.stream_down_cpu);
    if (!env.kubectl || ours.stream_down.size() != static_cast<std::size_t>(sz.throughput_reps)) {
        for (auto* r : {&up, &down, &up_cpu, &down_cpu, &s_up, &s_down, &s_up_cpu, &s_down_cpu}) rows.push_back(*r);
    } else {
        const auto dir =
            std::filesystem::temp_directory_path() / ("kubesandbox-bench-cp-" + std::to_string(::getpid()));
        std::filesystem::create_directories(dir);
        const auto local = dir / "upload.bin", back = dir / "download.bin";
        std::ofstream(local, std::ios::binary).write(data.data(), static_cast<std::streamsize>(data.size()));
        Timing theirs;
        const std::string target = ns + "/" + pod + ":" + remote + ".kubectl";
        for (int i = 0; i < sz.throughput_reps; ++i) {
            auto u = run_process({"kubectl", "cp", "-c", "sandbox", local.string(), target}, env.kubectl_env(), false);
            std::filesystem::remove(back);
            auto d = run_process({"kubectl", "cp", "-c", "sandbox", target, back.string()}, env.kubectl_env(), false);
            std::error_code ec;
            if (!u.spawned || u.status != 0 || !d.spawned || d.status != 0 ||
                std::filesystem::file_size(back, ec) != static_cast<std::uintmax_t>(bytes)) {
                failures.push_back("kubectl cp: exit " + std::to_string(u.status) + " / " + std::to_string(d.status));
                break;
            }
            theirs.up.push_back(u.seconds);
            theirs.up_cpu.push_back(u.cpu_seconds);
            theirs.down.push_back(d.seconds);
            theirs.down_cpu.push_back(d.cpu_seconds);
        }
        std::filesystem::remove_all(dir);
        Row peer_up = throughput_row(name, "kubectl cp (upload)", theirs.up, static_cast<double>(bytes));
        Row peer_down = throughput_row(name, "kubectl cp (download)", theirs.down, static_cast<double>(bytes));
        Row peer_up_cpu = latency_row(name, "client CPU per run: kubectl cp (upload)", theirs.up_cpu);
        Row peer_down_cpu = latency_row(name, "client CPU per run: kubectl cp (download)", theirs.down_cpu);
        if (!theirs.down.empty()) {
            compare_to_peer(up, peer_up, "kubectl cp");
            compare_to_peer(down, peer_down, "kubectl cp");
            compare_to_peer(up_cpu, peer_up_cpu, "kubectl cp", true);
            compare_to_peer(down_cpu, peer_down_cpu, "kubectl cp", true);
            compare_to_peer(s_up, peer_up, "kubectl cp");
            compare_to_peer(s_down, peer_down, "kubectl cp");
            compare_to_peer(s_up_cpu, peer_up_cpu, "kubectl cp", true);
            compare_to_peer(s_down_cpu, peer_down_cpu, "kubectl cp", true);
        }
        for (auto* r : {&up, &s_up, &peer_up, &down, &s_down, &peer_down, &up_cpu, &s_up_cpu, &peer_up_cpu, &down_cpu,
                        &s_down_cpu, &peer_down_cpu})
            rows.push_back(*r);
    }
    run_on(
        io, [&]() -> asio::awaitable<void> { co_await delete_all_sandboxes(provider); }, 120s, "transfer cleanup");
}

}  // namespace kubesandbox::bench
