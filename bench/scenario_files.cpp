// Scenario 7: the file operations on a busybox and a debian image, each as a multiple of one
// execute("true") round trip measured on the same pod in the same run, and the payload bytes
// moved per operation (command text, output, uploads and downloads, counted by a wrapper). Writes
// also through a sandbox without shell sessions, where every file takes an exec of its own.
#include "support.hpp"

#include <kubesandbox/file_ops.hpp>
#include <kubesandbox/pod_exec_sandbox.hpp>
#include <kubesandbox/raw_provider.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace kubesandbox::bench {

namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

// Counts what crosses the sandbox interface: the wire payload without the protocol framing.
class CountingSandbox final : public Sandbox {
public:
    explicit CountingSandbox(Sandbox& inner) : inner_(inner) {}
    const std::string& id() const override { return inner_.id(); }
    using Sandbox::execute;
    asio::awaitable<Result<ExecuteResponse>> execute(std::string command,
                                                     std::optional<std::chrono::seconds> timeout) override {
        bytes += command.size();
        auto r = co_await inner_.execute(std::move(command), timeout);
        if (r) bytes += r->output.size();
        co_return r;
    }
    asio::awaitable<Result<std::vector<FileUploadResponse>>> upload_files(
        std::vector<std::pair<std::string, std::string>> files) override {
        for (const auto& [p, c] : files) bytes += p.size() + c.size();
        co_return co_await inner_.upload_files(std::move(files));
    }
    asio::awaitable<Result<std::vector<FileDownloadResponse>>> download_files(std::vector<std::string> paths) override {
        for (const auto& p : paths) bytes += p.size();
        auto r = co_await inner_.download_files(std::move(paths));
        if (r)
            for (const auto& f : *r) bytes += f.content ? f.content->size() : 0;
        co_return r;
    }
    std::size_t bytes = 0;

private:
    Sandbox& inner_;
};

struct Measured {
    std::vector<double> secs;
    std::size_t bytes_per_op = 0;
};

// The corpus: `files` small files in 100 folders (one in 100 holds "needle"), a 400 KiB and a
// 1 MiB text file. Written with sh and busybox only.
std::string corpus_script(int files) {
    return "set -e; mkdir -p /workspace/b && cd /workspace/b\n"
           "awk -v n=" +
           std::to_string(files) +
           " 'BEGIN { for (i = 0; i < n; i++) { d = \"d\" (i % 100); if (i < 100) system(\"mkdir -p \" d);"
           " f = d \"/f\" i \".txt\"; printf \"line one %d\\n%s\\n\", i, (i % 100 == 0 ? \"needle here\" : \"hay\") > "
           "f;"
           " close(f) } }'\n"
           "awk 'BEGIN { for (i = 0; i < 6300; i++) printf \"%064d\\n\", i }' > /workspace/r400.txt\n"
           "awk 'BEGIN { for (i = 0; i < 16000; i++) printf \"%064d\\n\", i; print \"TOKEN0\" }' > /workspace/e1m.txt\n"
           "echo ok\n";
}

}  // namespace

void scenario_files(asio::io_context& io, LocalCluster& cluster, const Sizes& sz) {
    const int reps = std::max(3, sz.exec_n / 10);
    const int writes = sz.exec_n >= 50 ? 1000 : 20;
    const int files = sz.exec_n >= 50 ? 10000 : 200;
    std::cerr << "[7] file operations on busybox and debian: " << files << " files, " << writes << " writes, " << reps
              << " reps\n";
    for (const char* image : {"busybox", "debian:12"}) {
        RawProviderOptions options;
        options.image = image;
        RawProvider provider(KubeClient(io.get_executor(), cluster.kube_config()), options);
        std::unique_ptr<PodExecSandbox> sb;
        std::string tag = std::string("7 files ") + (std::string(image) == "busybox" ? "busybox" : "debian");
        run_on(
            io,
            [&]() -> asio::awaitable<void> {
                GetOrCreateOptions o;
                o.sandbox_id = std::string("bench-files-") + (std::string(image) == "busybox" ? "bb" : "deb");
                auto r = co_await provider.get_or_create_pod(o);
                if (!r) failures.push_back(tag + " sandbox: " + r.error().describe());
                else sb = std::move(*r);
                if (!sb) co_return;
                auto built = co_await sb->execute(corpus_script(files), 300s);
                if (!built || built->output != "ok\n")
                    failures.push_back(tag + " corpus: " + (built ? built->output : built.error().describe()));
            },
            600s, tag + " setup");
        if (!sb) continue;
        CountingSandbox counted(*sb);
        FileOps ops(counted);
        // Writes also through execs of their own, as every transfer went before shell sessions took
        // files up to 1 MiB: the same pod, sessions off.
        PodExecSandboxOptions no_sessions = sb->options();
        no_sessions.idle_shell_sessions = 0;
        PodExecSandbox unpooled(KubeClient(io.get_executor(), cluster.kube_config()), sb->namespace_name(),
                                sb->pod_name(), no_sessions);
        CountingSandbox counted_unpooled(unpooled);
        FileOps ops_unpooled(counted_unpooled);

        std::vector<double> exec_secs;
        std::vector<std::pair<std::string, Measured>> results;
        auto measure = [&](const std::string& name, int n, auto op) {
            Measured m;
            run_on(
                io,
                [&]() -> asio::awaitable<void> {
                    for (int i = 0; i <= n; ++i) {
                        counted.bytes = counted_unpooled.bytes = 0;
                        auto t0 = Clock::now();
                        bool ok = co_await op(i);
                        double d = seconds_since(t0);
                        if (!ok) {
                            failures.push_back(tag + " " + name + " failed");
                            co_return;
                        }
                        if (i > 0) m.secs.push_back(d);  // the first run is a warm-up
                        m.bytes_per_op = counted.bytes + counted_unpooled.bytes;
                    }
                },
                900s, tag + " " + name);
            results.emplace_back(name, std::move(m));
        };
        measure("execute(\"true\")", sz.exec_n, [&](int) -> asio::awaitable<bool> {
            auto r = co_await counted.execute("true");
            co_return r && r->exit_code == 0;
        });
        measure("read 400 KiB (2000 lines)", reps, [&](int) -> asio::awaitable<bool> {
            auto r = co_await ops.read("/workspace/r400.txt");
            co_return r && r->file_data && r->end_line == 2000;
        });
        measure("read small file", sz.exec_n, [&](int) -> asio::awaitable<bool> {
            auto r = co_await ops.read("/workspace/b/d1/f1.txt");
            co_return r && r->file_data && r->total_lines == 2;
        });
        measure("write small file", writes, [&](int i) -> asio::awaitable<bool> {
            auto r = co_await ops.write("/workspace/w/f" + std::to_string(i) + ".txt", "hello\n");
            co_return r && !r->error;
        });
        measure("write small file, sessions off", writes, [&](int i) -> asio::awaitable<bool> {
            auto r = co_await ops_unpooled.write("/workspace/w/g" + std::to_string(i) + ".txt", "hello\n");
            co_return r && !r->error;
        });
        std::string medium;
        for (int i = 0; i < 1024; ++i) medium.append(63, static_cast<char>('a' + i % 26)).push_back('\n');
        measure("write 64 KiB file", sz.exec_n, [&](int i) -> asio::awaitable<bool> {
            auto r = co_await ops.write("/workspace/w/m" + std::to_string(i) + ".txt", medium);
            co_return r && !r->error;
        });
        measure("write 64 KiB file, sessions off", sz.exec_n, [&](int i) -> asio::awaitable<bool> {
            auto r = co_await ops_unpooled.write("/workspace/w/n" + std::to_string(i) + ".txt", medium);
            co_return r && !r->error;
        });
        measure("edit small file", sz.exec_n, [&](int i) -> asio::awaitable<bool> {
            auto r =
                co_await ops.edit("/workspace/b/d1/f1.txt", i % 2 ? "straw" : "hay", i % 2 ? "hay" : "straw", false);
            co_return r && !r->error;
        });
        measure("edit 1 MiB file", reps, [&](int i) -> asio::awaitable<bool> {
            std::string from = "TOKEN" + std::to_string(i), to = "TOKEN" + std::to_string(i + 1);
            auto r = co_await ops.edit("/workspace/e1m.txt", from, to, false);
            co_return r && r->occurrences == 1;
        });
        measure("grep over " + std::to_string(files) + " files", reps, [&](int) -> asio::awaitable<bool> {
            auto r = co_await ops.grep("needle", "/workspace/b", "", std::nullopt);
            co_return r && r->matches && r->matches->size() == static_cast<std::size_t>(files / 100);
        });
        measure("glob **/*.txt over " + std::to_string(files) + " files", reps, [&](int) -> asio::awaitable<bool> {
            auto r = co_await ops.glob("**/*.txt", "/workspace/b");
            co_return r && r->matches && r->matches->size() == static_cast<std::size_t>(files);
        });
        measure("ls of a folder", sz.exec_n, [&](int) -> asio::awaitable<bool> {
            auto r = co_await ops.ls("/workspace/b/d1");
            co_return r && r->entries && !r->entries->empty();
        });

        if (results.empty() || results.front().second.secs.empty()) continue;
        Row exec_row = latency_row(tag, results.front().first, results.front().second.secs);
        for (auto& [name, m] : results) {
            if (m.secs.empty()) continue;
            Row row = latency_row(tag, name + ", " + std::to_string(m.bytes_per_op) + " B moved", m.secs);
            if (&m != &results.front().second) {
                char buf[64];
                std::snprintf(buf, sizeof buf, "%.2fx one execute", row.median / exec_row.median);
                row.versus = buf;
                row.peer = "execute(true)";
                row.ratio = exec_row.median / row.median;
            }
            rows.push_back(row);
        }
        run_on(
            io, [&]() -> asio::awaitable<void> { co_await provider.delete_sandbox(sb->pod_name()); }, 120s,
            tag + " delete");
    }
}

}  // namespace kubesandbox::bench
