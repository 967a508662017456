// Shared by the scenarios: sizes, statistics, the results table, child processes, helpers.
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
#include <boost/json/serialize.hpp>

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

extern char** environ;

namespace kubesandbox::bench {

namespace asio = boost::asio;
namespace json = boost::json;
using namespace std::chrono_literals;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// ---------------------------------------------------------------------------------------------
// Sizes

Sizes quick_sizes() {
    Sizes s;
    s.create_n = 2;
    s.exec_n = 5;
    s.exec_rt_n = 5;
    s.throughput_bytes = 10'000'000;
    s.list_pods = 1000;
    s.list_page = 50;
    s.concurrent_calls = 100;
    s.concurrent_sandboxes = 5;
    s.manager_threads = 10;
    s.manager_entries = 10'000;
    s.server_clients = 16;
    s.reaper_sandboxes = 1000;
    return s;
}

Sizes smoke_sizes() {
    Sizes s;
    s.create_n = 1;
    s.exec_n = 2;
    s.exec_rt_n = 2;
    s.throughput_bytes = 1'000'000;
    s.throughput_reps = 1;
    s.list_pods = 12;
    s.list_page = 5;
    s.list_reps = 1;
    s.concurrent_calls = 10;
    s.concurrent_sandboxes = 2;
    s.manager_threads = 3;
    s.manager_entries = 1000;
    s.server_clients = 3;
    s.reaper_sandboxes = 10;
    return s;
}

// ---------------------------------------------------------------------------------------------
// Statistics and the results table

Summary summarize(std::vector<double> v) {
    Summary s;
    s.n = v.size();
    if (v.empty()) return s;
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    s.median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    // Nearest rank: with fewer than 100 samples p99 is the maximum.
    std::size_t rank = static_cast<std::size_t>(std::ceil(0.99 * static_cast<double>(n)));
    s.p99 = v[std::max<std::size_t>(rank, 1) - 1];
    s.min = v.front();
    s.max = v.back();
    s.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(n);
    return s;
}

Row make_row(std::string scenario, std::string variant, std::size_t n, std::string unit) {
    Row r;
    r.scenario = std::move(scenario);
    r.variant = std::move(variant);
    r.n = n;
    r.unit = std::move(unit);
    return r;
}

std::string fmt(double v) {
    char buf[64];
    if (v >= 100) std::snprintf(buf, sizeof buf, "%.0f", v);
    else if (v >= 10) std::snprintf(buf, sizeof buf, "%.1f", v);
    else std::snprintf(buf, sizeof buf, "%.2f", v);
    return buf;
}

// Latencies in seconds -> a row in milliseconds (p99 = slow tail, best = fastest).
Row latency_row(std::string scenario, std::string variant, const std::vector<double>& secs) {
    auto s = summarize(secs);
    Row r = make_row(std::move(scenario), std::move(variant), s.n, "ms");
    r.median = s.median * 1e3;
    r.p99 = s.p99 * 1e3;
    r.best = s.min * 1e3;
    r.mean = s.mean * 1e3;
    return r;
}

// Durations of transfers of `bytes` -> MB/s (p99 = the slowest run's rate, best = the fastest).
Row throughput_row(std::string scenario, std::string variant, const std::vector<double>& secs, double bytes) {
    auto s = summarize(secs);
    Row r = make_row(std::move(scenario), std::move(variant), s.n, "MB/s");
    auto rate = [&](double d) { return d > 0 ? bytes / 1e6 / d : 0.0; };
    r.median = rate(s.median);
    r.p99 = rate(s.p99);
    r.best = rate(s.min);
    r.mean = rate(s.mean);
    return r;
}

Row single_row(std::string scenario, std::string variant, std::string unit, double value) {
    Row r = make_row(std::move(scenario), std::move(variant), 1, std::move(unit));
    r.median = r.p99 = r.best = r.mean = value;
    return r;
}

// "x2.5 vs kubectl": how many times faster the first row is than the second, by the median.
void compare_to_peer(Row& ours, const Row& peer, const std::string& peer_name, bool cpu) {
    if (ours.median <= 0 || peer.median <= 0) return;
    const bool rate = ours.unit.ends_with("/s");  // MB/s, threads/s: more is better
    double f = rate ? ours.median / peer.median : peer.median / ours.median;
    char buf[96];
    const char* better = cpu ? "less CPU" : "faster";
    const char* worse = cpu ? "more CPU" : "slower";
    if (f >= 1) std::snprintf(buf, sizeof buf, "%.2fx %s than %s", f, better, peer_name.c_str());
    else std::snprintf(buf, sizeof buf, "%.2fx %s than %s", 1 / f, worse, peer_name.c_str());
    ours.versus = buf;
    ours.peer = peer_name;
    ours.ratio = f;
}

std::vector<Row> rows;
std::vector<std::string> failures;

void print_table(std::ostream& out) {
    out << "| scenario | variant | n | median | p99 | best | mean | unit | vs peer (median) |\n";
    out << "|---|---|---:|---:|---:|---:|---:|---|---|\n";
    for (const auto& r : rows) {
        out << "| " << r.scenario << " | " << r.variant << " | " << r.n << " | " << fmt(r.median) << " | " << fmt(r.p99)
            << " | " << fmt(r.best) << " | " << fmt(r.mean) << " | " << r.unit << " | " << r.versus << " |\n";
    }
}

void write_json_lines(std::ostream& out) {
    for (const auto& r : rows) {
        json::object o{{"scenario", r.scenario}, {"variant", r.variant}, {"metric", "median"}, {"n", r.n},
                       {"value", r.median},      {"p99", r.p99},         {"best", r.best},     {"mean", r.mean},
                       {"unit", r.unit}};
        if (!r.peer.empty()) {
            o["peer"] = r.peer;
            o["ratio"] = r.ratio;
        }
        out << json::serialize(o) << "\n";
    }
}

// ---------------------------------------------------------------------------------------------
// Child processes (kubectl, and this program's own exec client)

double cpu_of(const struct rusage& ru) {
    return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

// Spawns argv (PATH search) with `extra_env` added, stdin from /dev/null, stdout captured or sent
// to /dev/null, stderr inherited, and waits for it. Blocks the calling thread.
double thread_cpu() {
    struct rusage ru {};
    ::getrusage(RUSAGE_THREAD, &ru);
    return cpu_of(ru);
}

Row in_micros(Row r) {
    r.unit = "us";
    for (double* v : {&r.median, &r.p99, &r.best, &r.mean}) *v *= 1000;
    return r;
}

ProcResult run_process(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env, bool capture) {
    ProcResult res;
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) {
        std::string_view entry(*e);
        bool overridden = false;
        for (const auto& x : extra_env) {
            auto key = x.substr(0, x.find('=') + 1);
            if (entry.substr(0, key.size()) == key) overridden = true;
        }
        if (!overridden) env.emplace_back(entry);
    }
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    std::vector<char*> envp, args;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<std::string> argv_copy = argv;
    for (auto& a : argv_copy) args.push_back(a.data());
    args.push_back(nullptr);

    int fds[2] = {-1, -1};
    if (capture && ::pipe2(fds, O_CLOEXEC) != 0) return res;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (capture) posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    else posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    // Our sockets and pidfds (Asio does not set CLOEXEC) stay out of the peer: a descriptor the
    // child holds keeps its epoll registration alive in the cluster after we close it.
    posix_spawn_file_actions_addclosefrom_np(&fa, 3);

    pid_t pid = 0;
    auto t0 = Clock::now();
    int rc = ::posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    if (capture) ::close(fds[1]);
    if (rc != 0) {
        if (capture) ::close(fds[0]);
        return res;
    }
    res.spawned = true;
    if (capture) {
        char buf[65536];
        for (;;) {
            ssize_t n = ::read(fds[0], buf, sizeof buf);
            if (n > 0) res.out.append(buf, static_cast<std::size_t>(n));
            else if (n < 0 && errno == EINTR) continue;
            else break;
        }
        ::close(fds[0]);
    }
    int status = 0;
    struct rusage ru {};
    while (::wait4(pid, &status, 0, &ru) < 0 && errno == EINTR) {}
    res.seconds = seconds_since(t0);
    res.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    res.max_rss_kb = ru.ru_maxrss;
    res.cpu_seconds = cpu_of(ru);
    return res;
}

void describe_pod(const Env& env, const std::string& ns, const std::string& pod) {
    if (!env.kubectl) return;
    auto status = run_process({"kubectl", "get", "pod", "-n", ns, pod, "-o",
                               "jsonpath={.status.phase} {.status.reason} {.status.containerStatuses[0].state} "
                               "{.status.containerStatuses[0].lastState}"},
                              env.kubectl_env(), true);
    std::cerr << "pod " << ns << "/" << pod << ": " << status.out << "\n";
    auto logs = run_process({"kubectl", "logs", "-n", ns, pod, "--tail=20"}, env.kubectl_env(), true);
    std::cerr << "pod " << ns << "/" << pod << " log:\n" << logs.out << "\n";
}

// ---------------------------------------------------------------------------------------------
// Driving coroutines from the synchronous benchmark flow

std::string transfer_payload(long long n) {
    std::string s(static_cast<std::size_t>(n), '\0');
    std::uint32_t x = 2463534242u;
    for (auto& c : s) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        c = static_cast<char>(x);
    }
    return s;
}

ByteSource memory_pieces(const std::string& data) {
    auto at = std::make_shared<std::size_t>(0);
    return [&data, at]() -> asio::awaitable<Result<std::string_view>> {
        std::string_view piece = std::string_view(data).substr(*at, 1 << 20);
        *at += piece.size();
        co_return piece;
    };
}

ByteSink ComparingSink::sink() {
    return [this](std::string_view piece) -> asio::awaitable<bool> {
        same_ = same_ && std::string_view(data_).substr(compared_, piece.size()) == piece;
        compared_ += piece.size();
        co_return true;
    };
}

bool ComparingSink::matches() const { return same_ && compared_ == data_.size(); }

asio::awaitable<void> sleep_for(std::chrono::milliseconds d) {
    asio::steady_timer t(co_await asio::this_coro::executor);
    t.expires_after(d);
    co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
}

ResourcePath pods_in(std::string ns) {
    ResourcePath p;
    p.plural = "pods";
    p.namespace_name = std::move(ns);
    return p;
}

ResourcePath namespaces_path() {
    ResourcePath p;
    p.plural = "namespaces";
    return p;
}

// Bodies are built outside coroutines: g++ 12 miscompiles brace-initialised JSON in them.
json::object pod_body(const std::string& name, const std::string& image) {
    json::object container;
    container["name"] = "c";
    container["image"] = image;
    json::array cmd;
    cmd.emplace_back("sleep");
    cmd.emplace_back("infinity");
    container["command"] = std::move(cmd);
    json::array containers;
    containers.emplace_back(std::move(container));
    json::object spec;
    spec["containers"] = std::move(containers);
    spec["restartPolicy"] = "Never";
    spec["terminationGracePeriodSeconds"] = 0;
    json::object meta;
    meta["name"] = name;
    meta["labels"].emplace_object()["app"] = "kubesandbox-bench";
    json::object pod;
    pod["apiVersion"] = "v1";
    pod["kind"] = "Pod";
    pod["metadata"] = std::move(meta);
    pod["spec"] = std::move(spec);
    return pod;
}

json::object namespace_body(const std::string& name) {
    json::object o;
    o["apiVersion"] = "v1";
    o["kind"] = "Namespace";
    o["metadata"].emplace_object()["name"] = name;
    return o;
}

std::string str_at(const json::object& o, const char* a, const char* b) {
    auto ia = o.find(a);
    if (ia == o.end() || !ia->value().is_object()) return {};
    const auto& inner = ia->value().get_object();
    auto ib = inner.find(b);
    if (ib == inner.end() || !ib->value().is_string()) return {};
    return std::string(ib->value().get_string());
}

bool pod_ready(const json::object& pod) {
    auto st = pod.find("status");
    if (st == pod.end() || !st->value().is_object()) return false;
    auto conds = st->value().get_object().find("conditions");
    if (conds == st->value().get_object().end() || !conds->value().is_array()) return false;
    for (const auto& c : conds->value().get_array()) {
        if (!c.is_object()) continue;
        const auto& co = c.get_object();
        auto t = co.find("type");
        auto s = co.find("status");
        if (t != co.end() && s != co.end() && t->value() == "Ready" && s->value() == "True") return true;
    }
    return false;
}

std::optional<KubeConfig> load_kubeconfig_file(const std::string& path, const char* who) {
    KubeConfigLoadOptions lo;
    lo.paths.emplace_back(path);
    auto cfg = load_kubeconfig(lo);
    if (!cfg) {
        std::cerr << who << ": " << cfg.error().describe() << "\n";
        return std::nullopt;
    }
    return std::move(*cfg);
}

}  // namespace kubesandbox::bench
