// What the benchmark scenarios share: sizes, statistics and the results table (rows and
// failures collected by every scenario), child processes (kubectl, the exec client), driving
// coroutines from the synchronous flow, and small Kubernetes helpers.
#pragma once

#include <kubesandbox/kube_client.hpp>
#include <kubesandbox/local_cluster.hpp>
#include <kubesandbox/raw_provider.hpp>
#include <kubesandbox/sandbox.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/json/object.hpp>

#include <sys/resource.h>

#include <chrono>
#include <exception>
#include <filesystem>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace kubesandbox::bench {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0);

struct Sizes {
    int create_n = 20;  // raw create->Ready, provider cold create, warm claim: each
    int exec_n = 50;
    // Calls timed for scenario 2's round trips but kubectl's (a process each): sub-millisecond
    // medians of 50 moved by 10 % from run to run.
    int exec_rt_n = 200;
    long long throughput_bytes = 100'000'000;
    int throughput_reps = 3;
    int list_pods = 10'000;
    int list_page = 500;
    int list_reps = 5;
    int concurrent_calls = 1000;
    int concurrent_sandboxes = 50;
    int manager_threads = 50;       // cold acquisitions, through the manager and direct
    int manager_entries = 100'000;  // bound threads for memory per thread
    int server_clients = 64;        // concurrent clients of the example server (scenario 10)
    int reaper_sandboxes = 10'000;  // sandboxes one reaper pass looks at, half expired (scenario 11)
};

struct Summary {
    std::size_t n = 0;
    double median = 0, p99 = 0, min = 0, max = 0, mean = 0;
};

struct Row {
    std::string scenario;
    std::string variant;
    std::size_t n = 0;
    std::string unit;
    double median = 0, p99 = 0, best = 0, mean = 0;
    std::string versus{};  // speed-up against the peer row, "" when none
    std::string peer{};    // the peer's name when compared
    double ratio = 0;      // > 1: better than the peer by that factor (time, rate or CPU)
};

struct ProcResult {
    bool spawned = false;
    int status = -1;  // exit code, or -1
    double seconds = 0;
    std::string out{};  // stdout when captured
    long max_rss_kb = 0;
    double cpu_seconds = 0;  // user + system of the child itself
};

Sizes quick_sizes();
Sizes smoke_sizes();

Summary summarize(std::vector<double> v);
Row make_row(std::string scenario, std::string variant, std::size_t n, std::string unit);
std::string fmt(double v);
Row latency_row(std::string scenario, std::string variant, const std::vector<double>& secs);
Row throughput_row(std::string scenario, std::string variant, const std::vector<double>& secs, double bytes);
Row single_row(std::string scenario, std::string variant, std::string unit, double value);
// Fills ours.versus/peer/ratio from the two medians.
void compare_to_peer(Row& ours, const Row& peer, const std::string& peer_name, bool cpu = false);

extern std::vector<Row> rows;              // the results table, in scenario order
extern std::vector<std::string> failures;  // any entry makes the run fail
void print_table(std::ostream& out);
// One JSON object per row: scenario, variant, metric, n, value (median), p99, best, mean, unit,
// peer, ratio.
void write_json_lines(std::ostream& out);

double cpu_of(const struct rusage& ru);
double thread_cpu();  // this thread's user + system seconds
// A per-call CPU row in microseconds (milliseconds with two decimals hide the differences).
Row in_micros(Row r);
// heap_counter.cpp: bytes this thread holds through operator new right now; -1 when not
// counted (under AddressSanitizer).
long long thread_heap_bytes();
// The most this thread held since reset_thread_heap_peak(); -1 when not counted.
void reset_thread_heap_peak();
long long thread_heap_peak_bytes();
ProcResult run_process(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env, bool capture);

// Runs one coroutine to completion (or the deadline) on `io`; background coroutines spawned by
// it (warm-pool refills) stay suspended between calls and resume on the next one.
template <class MakeAwaitable>
bool run_on(boost::asio::io_context& io, MakeAwaitable make, std::chrono::seconds deadline, const std::string& what) {
    bool done = false;
    std::exception_ptr error;
    boost::asio::co_spawn(io, make(), [&](std::exception_ptr e) {
        done = true;
        error = e;
        io.stop();
    });
    io.restart();
    io.run_for(deadline);
    io.restart();
    if (!done) {
        failures.push_back(what + ": did not finish within " + std::to_string(deadline.count()) + " s");
        return false;
    }
    if (error) {
        try {
            std::rethrow_exception(error);
        } catch (const std::exception& e) {
            failures.push_back(what + ": exception: " + e.what());
        }
        return false;
    }
    return true;
}

// `n` bytes to move in transfer scenarios. Not all zeros: a transport that compressed or skipped
// runs of zeros would look faster.
std::string transfer_payload(long long n);
// `data` (which must outlive it) in MiB pieces: a file streamed from memory.
ByteSource memory_pieces(const std::string& data);
// A download's sink that compares what it is handed with `data`.
class ComparingSink {
public:
    explicit ComparingSink(const std::string& data) : data_(data) {}
    ByteSink sink();       // valid while this object lives
    bool matches() const;  // everything came, and it was `data`
private:
    const std::string& data_;
    std::size_t compared_ = 0;
    bool same_ = true;
};

boost::asio::awaitable<void> sleep_for(std::chrono::milliseconds d);
ResourcePath pods_in(std::string ns);
ResourcePath namespaces_path();
// Bodies are built outside coroutines: g++ 12 miscompiles brace-initialised JSON in them.
boost::json::object pod_body(const std::string& name, const std::string& image);
boost::json::object namespace_body(const std::string& name);
std::string str_at(const boost::json::object& o, const char* a, const char* b);
bool pod_ready(const boost::json::object& pod);

// Where the peers run: kubectl against the cluster's kubeconfig, this program as exec client.
struct Env {
    std::filesystem::path kubeconfig;
    bool kubectl = false;
    std::string self_exe;
    std::vector<std::string> kubectl_env() const { return {"KUBECONFIG=" + kubeconfig.string()}; }
};
// When a scenario's pod stops answering: its phase, container state and log, to stderr.
void describe_pod(const Env& env, const std::string& ns, const std::string& pod);
inline std::vector<std::string> kubectl_exec_argv(const std::string& ns, const std::string& pod,
                                                  const std::vector<std::string>& cmd) {
    std::vector<std::string> a{"kubectl", "exec", "-n", ns, pod, "-c", "sandbox", "--"};
    a.insert(a.end(), cmd.begin(), cmd.end());
    return a;
}

// Deletes every sandbox the provider lists (scenario 1 and 2 clean up with it).
boost::asio::awaitable<void> delete_all_sandboxes(RawProvider& p);

void scenario_create_ready(boost::asio::io_context& io, LocalCluster& cluster, const Sizes& sz);
void scenario_cold_warm(boost::asio::io_context& io, LocalCluster& cluster, const Sizes& sz);
void scenario_exec(boost::asio::io_context& io, LocalCluster& cluster, const Env& env, const Sizes& sz);
void scenario_list(boost::asio::io_context& io, LocalCluster& cluster, const Env& env, const Sizes& sz);
void scenario_concurrent(boost::asio::io_context& io, LocalCluster& cluster, const Env& env, const Sizes& sz);
void scenario_manager(boost::asio::io_context& io, LocalCluster& cluster, const Sizes& sz);
void scenario_manager_warm(boost::asio::io_context& io, LocalCluster& cluster, const Sizes& sz);
void scenario_manager_warm_raw(boost::asio::io_context& io, LocalCluster& cluster, const Sizes& sz);
void scenario_files(boost::asio::io_context& io, LocalCluster& cluster, const Sizes& sz);
void scenario_agent_sandbox(boost::asio::io_context& io, LocalCluster& cluster, const Sizes& sz);
void scenario_tunnels(boost::asio::io_context& io, LocalCluster& cluster, const Env& env, const Sizes& sz);
void scenario_server(boost::asio::io_context& io, LocalCluster& cluster, const Env& env, const Sizes& sz,
                     const std::string& server_program);
void scenario_reaper(boost::asio::io_context& io, LocalCluster& cluster, const Env& env, const Sizes& sz);
void scenario_transfer(boost::asio::io_context& io, LocalCluster& cluster, const Env& env, const Sizes& sz);
void scenario_router_transfer(boost::asio::io_context& io, LocalCluster& cluster, const Sizes& sz);
// The profiling modes' kubeconfig: the file at `path`, or nullopt after printing why, prefixed
// with `who`.
std::optional<KubeConfig> load_kubeconfig_file(const std::string& path, const char* who);
int exec_client_main(int argc, char** argv);
// --router-client KUBECONFIG CALLS: execute("true") CALLS times through the router of a running
// kubesandbox-local (KUBECONFIG.router), one warm busybox-runtime claim; prints client CPU per
// call. A loop to profile (perf, callgrind: run it with two CALLS and subtract).
int router_client_main(int argc, char** argv);
// --exec-loop KUBECONFIG NAMESPACE POD CALLS: execute("true") CALLS times in a row on POD of a
// running kubesandbox-local (shell sessions, as scenario 2); prints the median wall and client
// CPU per call. A loop to profile with strace or perf.
int exec_loop_main(int argc, char** argv);

}  // namespace kubesandbox::bench
