// Macro benchmarks against the embedded local cluster (issues 3 and 4): pod create -> Ready,
// cold create vs warm-pool claim, exec round trip, exec stdout throughput, list paging, many
// concurrent executes on one io_context thread, the SandboxManager (issue 9) and the file
// operations (issue 13), agent-sandbox mode (8), tunnels, native vs kubectl (9), and the example
// agent host against the library (10), a reaper pass over 10,000 sandboxes against
// python-kubernetes (11), and a 100 MB upload and download against kubectl cp, and through the
// router against a minimal HTTP client (12). Where a
// peer exists (real kubectl) it is measured in the same run against the same cluster, so ratios
// compare like with like.
//
//   kubesandbox_bench [--quick | --smoke] [--only=1,2,...] [--json=FILE]
//
// --quick scales every size down 10x, --smoke runs each scenario with tiny sizes (a test that
// keeps this program from rotting). Results go to stdout as a Markdown table (and with --json to
// FILE as JSON lines, one per row, with the peer and ratio); progress to stderr.
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

// ---------------------------------------------------------------------------------------------

std::string cpu_model() {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("model name", 0) == 0) {
            auto c = line.find(':');
            if (c != std::string::npos) return line.substr(c + 2);
        }
    }
    return "unknown";
}

}  // namespace

}  // namespace kubesandbox::bench

using namespace kubesandbox;
using namespace kubesandbox::bench;

int main(int argc, char** argv) {
    if (argc >= 2 && std::string(argv[1]) == "--exec-client") return exec_client_main(argc, argv);
    if (argc >= 2 && std::string(argv[1]) == "--router-client") return router_client_main(argc, argv);
    if (argc >= 2 && std::string(argv[1]) == "--exec-loop") return exec_loop_main(argc, argv);

    Sizes sz;
    std::string mode = "full";
    std::set<int> only;
    std::string json_path;
    // The example agent host (scenario 10): beside this program in the build tree by default.
    std::string server_program;
    {
        std::error_code ec;
        auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
        if (!ec) server_program = (self.parent_path().parent_path() / "examples" / "sandbox_server").string();
    }
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--quick") {
            sz = quick_sizes();
            mode = "quick";
        } else if (a == "--smoke") {
            sz = smoke_sizes();
            mode = "smoke";
        } else if (a.rfind("--json=", 0) == 0) {
            json_path = a.substr(7);
        } else if (a.rfind("--sandbox-server=", 0) == 0) {
            server_program = a.substr(17);
        } else if (a.rfind("--only=", 0) == 0) {
            std::stringstream ss(a.substr(7));
            std::string item;
            while (std::getline(ss, item, ',')) only.insert(std::atoi(item.c_str()));
        } else {
            std::cerr << "usage: kubesandbox_bench [--quick | --smoke] [--only=1,2,...,12] [--sandbox-server=PATH] "
                         "[--json=FILE]\n";
            return 2;
        }
    }
    auto want = [&](int s) { return only.empty() || only.count(s) > 0; };

    // 1,000 concurrent execs need a few thousand descriptors between client and cluster.
    struct rlimit rl {};
    if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        ::setrlimit(RLIMIT_NOFILE, &rl);
    }

    Env env;
    std::error_code ec;
    env.self_exe = std::filesystem::read_symlink("/proc/self/exe", ec).string();
    // Pods run as other uids: their data directory must be reachable (mkdtemp's 0700 is not).
    auto data_dir = std::filesystem::temp_directory_path() / ("ksb-bench-" + std::to_string(::getpid()));
    std::filesystem::create_directories(data_dir);
    std::filesystem::permissions(data_dir, std::filesystem::perms(0755));
    env.kubeconfig = data_dir / "kubeconfig";

    LocalClusterOptions options;
    options.data_dir = data_dir / "cluster";
    auto started = LocalCluster::start(options);
    if (!started) {
        std::cerr << "cannot start the local cluster: " << started.error().describe() << "\n";
        std::filesystem::remove_all(data_dir, ec);
        return 1;
    }
    std::unique_ptr<LocalCluster> cluster = std::move(*started);
    if (auto w = cluster->write_kubeconfig(env.kubeconfig); !w) {
        std::cerr << "cannot write kubeconfig: " << w.error().describe() << "\n";
        return 1;
    }
    std::vector<std::string> version_argv{"kubectl", "version", "--client"};
    auto kv = run_process(version_argv, {}, true);
    env.kubectl = kv.spawned && kv.status == 0;
    if (!env.kubectl) std::cerr << "kubectl not found: peer rows are skipped\n";

    std::cout << "# kubesandbox_bench (" << mode << ")\n\n";
    std::cout << "- machine: " << ::sysconf(_SC_NPROCESSORS_ONLN) << " CPUs, " << cpu_model() << "\n";
    std::cout << "- local cluster: " << cluster->url() << ", isolation "
              << (cluster->isolation_available() ? "bubblewrap" : "UNAVAILABLE") << "\n";
    if (env.kubectl) {
        std::string v = kv.out.substr(0, kv.out.find('\n'));
        std::cout << "- peer: " << v << "\n";
    }
    std::cout << "\n" << std::flush;

    auto total0 = Clock::now();
    {
        asio::io_context io;
        if (want(1)) {
            scenario_create_ready(io, *cluster, sz);
            scenario_cold_warm(io, *cluster, sz);
        }
        if (want(2) || want(3)) scenario_exec(io, *cluster, env, sz);
        if (want(5)) scenario_concurrent(io, *cluster, env, sz);
        if (want(6)) {
            scenario_manager(io, *cluster, sz);
            scenario_manager_warm(io, *cluster, sz);
            scenario_manager_warm_raw(io, *cluster, sz);
        }
        if (want(7)) scenario_files(io, *cluster, sz);
        if (want(8)) scenario_agent_sandbox(io, *cluster, sz);
        if (want(9)) scenario_tunnels(io, *cluster, env, sz);
        if (want(10)) scenario_server(io, *cluster, env, sz, server_program);
        if (want(11)) scenario_reaper(io, *cluster, env, sz);
        if (want(12)) {
            scenario_transfer(io, *cluster, env, sz);
            scenario_router_transfer(io, *cluster, sz);
        }
        if (want(4)) scenario_list(io, *cluster, env, sz);  // last: 10,000 pods slow down the rest
    }

    print_table(std::cout);
    std::cout << "\np99: nearest rank (the maximum below 100 samples); for MB/s rows p99 and best are the rates of\n"
                 "the slowest and fastest runs. Speed-up: the peer's median time over ours, or our MB/s over the\n"
                 "peer's. kubectl rows include starting the kubectl process, as a user pays it.\n";
    std::cout << "total " << fmt(seconds_since(total0)) << " s\n";
    if (!json_path.empty()) {
        std::ofstream json_out(json_path);
        write_json_lines(json_out);
        if (!json_out) failures.push_back("cannot write " + json_path);
    }
    for (const auto& f : failures) std::cerr << "FAILED: " << f << "\n";

    cluster.reset();
    std::filesystem::remove_all(data_dir, ec);
    return failures.empty() ? 0 : 1;
}
