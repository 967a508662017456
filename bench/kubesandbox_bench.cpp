// Macro benchmarks against the embedded local cluster (issues 3 and 4): pod create -> Ready,
// cold create vs warm-pool claim, exec round trip, exec stdout throughput, list paging, and many
// concurrent executes on one io_context thread. Where a peer exists (real kubectl) it is measured
// in the same run against the same cluster, so ratios compare like with like.
//
//   kubesandbox_bench [--quick | --smoke] [--only=1,2,...]
//
// --quick scales every size down 10x, --smoke runs each scenario with tiny sizes (a test that
// keeps this program from rotting). Results go to stdout as a Markdown table; progress to stderr.
#include <kubesandbox/kube_client.hpp>
#include <kubesandbox/kube_config.hpp>
#include <kubesandbox/pod_exec_sandbox.hpp>
#include <kubesandbox/local_cluster.hpp>
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

namespace {

namespace asio = boost::asio;
namespace json = boost::json;
using namespace kubesandbox;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

// ---------------------------------------------------------------------------------------------
// Sizes

struct Sizes {
    int create_n = 20;  // raw create->Ready, provider cold create, warm claim: each
    int exec_n = 50;
    long long throughput_bytes = 100'000'000;
    int throughput_reps = 3;
    int list_pods = 10'000;
    int list_page = 500;
    int list_reps = 5;
    int concurrent_calls = 1000;
    int concurrent_sandboxes = 50;
};

Sizes quick_sizes() {
    Sizes s;
    s.create_n = 2;
    s.exec_n = 5;
    s.throughput_bytes = 10'000'000;
    s.list_pods = 1000;
    s.list_page = 50;
    s.concurrent_calls = 100;
    s.concurrent_sandboxes = 5;
    return s;
}

Sizes smoke_sizes() {
    Sizes s;
    s.create_n = 1;
    s.exec_n = 2;
    s.throughput_bytes = 1'000'000;
    s.throughput_reps = 1;
    s.list_pods = 12;
    s.list_page = 5;
    s.list_reps = 1;
    s.concurrent_calls = 10;
    s.concurrent_sandboxes = 2;
    return s;
}

// ---------------------------------------------------------------------------------------------
// Statistics and the results table

struct Summary {
    std::size_t n = 0;
    double median = 0, p99 = 0, min = 0, max = 0, mean = 0;
};

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

struct Row {
    std::string scenario;
    std::string variant;
    std::size_t n = 0;
    std::string unit;
    double median = 0, p99 = 0, best = 0, mean = 0;
    std::string versus{};  // speed-up against the peer row, "" when none
};

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
std::string speedup(const Row& ours, const Row& peer, const std::string& peer_name, bool cpu = false) {
    if (ours.median <= 0 || peer.median <= 0) return {};
    double f = ours.unit == "MB/s" ? ours.median / peer.median : peer.median / ours.median;
    char buf[96];
    const char* better = cpu ? "less CPU" : "faster";
    const char* worse = cpu ? "more CPU" : "slower";
    if (f >= 1) std::snprintf(buf, sizeof buf, "%.2fx %s than %s", f, better, peer_name.c_str());
    else std::snprintf(buf, sizeof buf, "%.2fx %s than %s", 1 / f, worse, peer_name.c_str());
    return buf;
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

// ---------------------------------------------------------------------------------------------
// Child processes (kubectl, and this program's own exec client)

struct ProcResult {
    bool spawned = false;
    int status = -1;  // exit code, or -1
    double seconds = 0;
    std::string out{};  // stdout when captured
    long max_rss_kb = 0;
    double cpu_seconds = 0;  // user + system of the child itself
};

double cpu_of(const struct rusage& ru) {
    return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

// Spawns argv (PATH search) with `extra_env` added, stdin from /dev/null, stdout captured or sent
// to /dev/null, stderr inherited, and waits for it. Blocks the calling thread.
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
    while (::wait4(pid, &status, 0, &ru) < 0 && errno == EINTR) {
    }
    res.seconds = seconds_since(t0);
    res.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    res.max_rss_kb = ru.ru_maxrss;
    res.cpu_seconds = cpu_of(ru);
    return res;
}

// ---------------------------------------------------------------------------------------------
// Driving coroutines from the synchronous benchmark flow

// Runs one coroutine to completion (or the deadline) on `io`; background coroutines spawned by
// it (warm-pool refills) stay suspended between calls and resume on the next one.
template <class MakeAwaitable>
bool run_on(asio::io_context& io, MakeAwaitable make, std::chrono::seconds deadline, const std::string& what) {
    bool done = false;
    std::exception_ptr error;
    asio::co_spawn(io, make(), [&](std::exception_ptr e) {
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

// ---------------------------------------------------------------------------------------------
// Scenario 1a: raw KubeClient create + watch until Ready

asio::awaitable<Result<double>> create_until_ready(KubeClient& client, std::string ns, std::string name) {
    const ResourcePath collection = pods_in(ns);
    json::object body = pod_body(name, "python:3.12-slim");
    auto t0 = Clock::now();
    auto created = co_await client.create(collection, std::move(body));
    if (!created) co_return fail(created.error());
    if (pod_ready(*created)) co_return seconds_since(t0);
    std::string rv = str_at(*created, "metadata", "resourceVersion");
    for (int attempt = 0; attempt < 20; ++attempt) {
        WatchOptions wo;
        wo.field_selector = "metadata.name=" + name;
        wo.resource_version = rv;
        wo.timeout_seconds = 120;
        auto stream = co_await client.watch(collection, wo);
        if (!stream) co_return fail(stream.error());
        for (;;) {
            auto ev = co_await stream->next();
            if (!ev) co_return fail(ev.error());
            if (!*ev) break;  // the server ended the watch: resume from the last version
            const WatchEvent& e = **ev;
            if (e.type == WatchEvent::Type::error) co_return fail(errc::invalid_response, "watch error event");
            std::string v = str_at(e.object, "metadata", "resourceVersion");
            if (!v.empty()) rv = v;
            if (e.type == WatchEvent::Type::deleted) co_return fail(errc::not_found, "pod deleted while waiting");
            if (e.type != WatchEvent::Type::bookmark && pod_ready(e.object)) co_return seconds_since(t0);
        }
    }
    co_return fail(errc::timeout, "pod never became Ready");
}

void scenario_create_ready(asio::io_context& io, LocalCluster& cluster, const Sizes& sz) {
    std::cerr << "[1] raw create -> Ready, " << sz.create_n << " pods\n";
    KubeClient client(io.get_executor(), cluster.kube_config());
    std::vector<double> lat;
    std::vector<std::string> names;
    run_on(io, [&]() -> asio::awaitable<void> {
        for (int i = 0; i < sz.create_n; ++i) {
            std::string name = "bench-ready-" + std::to_string(i);
            auto r = co_await create_until_ready(client, "default", name);
            if (!r) {
                failures.push_back("create->Ready " + name + ": " + r.error().describe());
                co_return;
            }
            names.push_back(name);
            lat.push_back(*r);
        }
    }, 600s, "create->Ready");
    rows.push_back(latency_row("1 pod create -> Ready", "KubeClient create + watch", lat));
    run_on(io, [&]() -> asio::awaitable<void> {
        for (const auto& n : names) {
            const ResourcePath p = pods_in("default").with_name(n);
            DeleteOptions d;
            d.grace_period_seconds = 0;
            auto r = co_await client.remove(p, d);
            if (!r) failures.push_back("delete " + n + ": " + r.error().describe());
        }
    }, 120s, "create->Ready cleanup");
}

// ---------------------------------------------------------------------------------------------
// Scenario 1b: RawProvider cold get_or_create vs warm-pool claim

asio::awaitable<void> delete_all_sandboxes(RawProvider& p) {
    for (int round = 0; round < 5; ++round) {
        ListSandboxesOptions lo;
        lo.include_warm = true;
        auto page = co_await p.list(lo);
        if (!page) {
            failures.push_back("provider list: " + page.error().describe());
            co_return;
        }
        if (page->items.empty()) co_return;
        for (const auto& i : page->items) {
            std::string id = i.id;
            auto d = co_await p.delete_sandbox(id);
            if (!d) failures.push_back("delete_sandbox " + id + ": " + d.error().describe());
        }
    }
}

void scenario_cold_warm(asio::io_context& io, LocalCluster& cluster, const Sizes& sz) {
    std::cerr << "[1] provider cold get_or_create vs warm claim, " << sz.create_n << " each\n";
    RawProviderOptions cold_cfg;
    RawProvider cold(KubeClient(io.get_executor(), cluster.kube_config()), cold_cfg);
    std::vector<double> cold_lat, warm_lat;
    run_on(io, [&]() -> asio::awaitable<void> {
        for (int i = 0; i < sz.create_n; ++i) {
            GetOrCreateOptions o;
            o.sandbox_id = "bench-cold-" + std::to_string(i);
            auto t0 = Clock::now();
            auto sb = co_await cold.get_or_create(o);
            double d = seconds_since(t0);
            if (!sb) {
                failures.push_back("cold get_or_create: " + sb.error().describe());
                co_return;
            }
            cold_lat.push_back(d);
        }
    }, 900s, "cold get_or_create");

    RawProviderOptions warm_cfg;
    warm_cfg.warm_pool_size = 2;
    RawProvider warm(KubeClient(io.get_executor(), cluster.kube_config()), warm_cfg);
    auto wait_pool_full = [&]() -> asio::awaitable<bool> {
        for (int i = 0; i < 1200; ++i) {
            auto s = co_await warm.pool_status();
            if (s && s->available >= s->target) co_return true;
            co_await sleep_for(100ms);
        }
        co_return false;
    };
    run_on(io, [&]() -> asio::awaitable<void> {
        auto filled = co_await warm.ensure_warm_pool();
        if (!filled) {
            failures.push_back("ensure_warm_pool: " + filled.error().describe());
            co_return;
        }
        for (int i = 0; i < sz.create_n; ++i) {
            // Claims are timed with a full pool: the refill after each claim is not counted.
            bool full = co_await wait_pool_full();
            if (!full) {
                failures.push_back("warm pool did not refill within 120 s");
                co_return;
            }
            auto t0 = Clock::now();
            auto sb = co_await warm.get_or_create();
            double d = seconds_since(t0);
            if (!sb) {
                failures.push_back("warm claim: " + sb.error().describe());
                co_return;
            }
            warm_lat.push_back(d);
        }
        co_await wait_pool_full();
        co_await sleep_for(500ms);  // let the last refill finish its bookkeeping
    }, 900s, "warm claim");

    Row c = latency_row("1 sandbox ready", "RawProvider cold get_or_create", cold_lat);
    Row w = latency_row("1 sandbox ready", "RawProvider warm-pool claim", warm_lat);
    w.versus = speedup(w, c, "cold create");
    rows.push_back(c);
    rows.push_back(w);
    run_on(io, [&]() -> asio::awaitable<void> { co_await delete_all_sandboxes(warm); }, 300s, "cold/warm cleanup");
}

// ---------------------------------------------------------------------------------------------
// Scenarios 2 and 3: exec round trip and stdout throughput, against kubectl exec

struct Env {
    std::filesystem::path kubeconfig;
    bool kubectl = false;
    std::string self_exe;
    std::vector<std::string> kubectl_env() const { return {"KUBECONFIG=" + kubeconfig.string()}; }
};

std::vector<std::string> kubectl_exec_argv(const std::string& ns, const std::string& pod,
                                           const std::vector<std::string>& cmd) {
    std::vector<std::string> a{"kubectl", "exec", "-n", ns, pod, "-c", "sandbox", "--"};
    a.insert(a.end(), cmd.begin(), cmd.end());
    return a;
}

void scenario_exec(asio::io_context& io, LocalCluster& cluster, const Env& env, const Sizes& sz) {
    std::cerr << "[2,3] exec round trip x" << sz.exec_n << ", throughput " << sz.throughput_bytes << " bytes x"
              << sz.throughput_reps << "\n";
    RawProvider provider(KubeClient(io.get_executor(), cluster.kube_config()), RawProviderOptions());
    std::unique_ptr<PodExecSandbox> sb;
    run_on(io, [&]() -> asio::awaitable<void> {
        GetOrCreateOptions o;
        o.sandbox_id = "bench-exec";
        auto r = co_await provider.get_or_create_pod(o);
        if (!r) failures.push_back("exec sandbox: " + r.error().describe());
        else sb = std::move(*r);
    }, 300s, "exec sandbox");
    if (!sb) return;
    const std::string ns = sb->namespace_name();
    const std::string pod = sb->pod_name();

    // Round trip of `true`. One untimed warm-up each (kubectl fills its discovery cache).
    std::vector<double> ours, theirs;
    run_on(io, [&]() -> asio::awaitable<void> {
        for (int i = 0; i <= sz.exec_n; ++i) {
            auto t0 = Clock::now();
            auto r = co_await sb->execute("true", std::chrono::seconds(120));
            double d = seconds_since(t0);
            if (!r || r->exit_code != 0) {
                std::string why = r ? "exit code " + std::to_string(r->exit_code.value_or(-1)) : r.error().describe();
                failures.push_back("execute true: " + why);
                co_return;
            }
            if (i > 0) ours.push_back(d);
        }
    }, 600s, "execute true");
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
        our_rt.versus = speedup(our_rt, peer, "kubectl");
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
    run_on(io, [&]() -> asio::awaitable<void> {
        for (int i = 0; i < sz.throughput_reps; ++i) {
            // The client runs on this thread alone (the cluster has its own): its CPU time.
            struct rusage c0 {}, c1 {};
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
    }, 1800s, "execute throughput");
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
        our_row.versus = speedup(our_row, peer, "kubectl");
        rows.push_back(our_row);
        rows.push_back(peer);
    } else {
        rows.push_back(our_row);
    }
    Row our_cpu_row = latency_row(tp_name, "client CPU per run: PodExecSandbox::execute", our_cpu);
    if (!their_cpu.empty()) {
        Row peer_cpu = latency_row(tp_name, "client CPU per run: kubectl process", their_cpu);
        our_cpu_row.versus = speedup(our_cpu_row, peer_cpu, "kubectl", true);
        rows.push_back(our_cpu_row);
        rows.push_back(peer_cpu);
    } else {
        rows.push_back(our_cpu_row);
    }

    run_on(io, [&]() -> asio::awaitable<void> { co_await delete_all_sandboxes(provider); }, 120s, "exec cleanup");
}

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
    bool filled = run_on(io, [&]() -> asio::awaitable<void> {
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
                    if (errors++ == 0) failures.push_back(std::string("create ") + name + ": " + r.error().describe());
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
    }, 1800s, "fill namespace");
    if (!filled || fill_seconds == 0) return;
    rows.push_back(single_row("4 list setup", "create " + std::to_string(sz.list_pods) + " pods, 16 in flight",
                              "pods/s", sz.list_pods / fill_seconds));

    std::vector<double> ours, theirs;
    run_on(io, [&]() -> asio::awaitable<void> {
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
    }, 1800s, "list");
    const std::string name = "4 list " + std::to_string(sz.list_pods) + " pods, pages of " + std::to_string(sz.list_page);
    Row our_row = latency_row(name, "KubeClient::list + continue", ours);
    if (env.kubectl) {
        std::vector<std::string> argv{"kubectl", "get", "pods", "-n", ns, "--chunk-size=" + std::to_string(sz.list_page),
                                      "-o", "name"};
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
        our_row.versus = speedup(our_row, peer, "kubectl");
        rows.push_back(our_row);
        rows.push_back(peer);
    } else {
        rows.push_back(our_row);
    }

    run_on(io, [&]() -> asio::awaitable<void> {
        const ResourcePath p = namespaces_path().with_name(ns);
        auto r = co_await client.remove(p);
        if (!r) failures.push_back("delete namespace: " + r.error().describe());
    }, 120s, "list cleanup");
}

// ---------------------------------------------------------------------------------------------
// Scenario 5: many concurrent executes on one io_context thread, in a child process so that its
// peak RSS is the client's alone (the cluster runs in this process).

// "VmHWM"/"VmRSS" of this process in KiB. ru_maxrss is no use in a posix_spawn child: exec folds
// the parent's high-water mark (the shared vfork mm) into it, so it reports the cluster's RSS.
long proc_status_kb(const char* key) {
    std::ifstream in("/proc/self/status");
    std::string line;
    const std::string prefix = std::string(key) + ":";
    while (std::getline(in, line)) {
        if (line.rfind(prefix, 0) == 0) return std::atol(line.c_str() + prefix.size());
    }
    return -1;
}

int exec_client_main(int argc, char** argv) {
    // --exec-client KUBECONFIG NAMESPACE CALLS POD...
    if (argc < 6) return 2;
    KubeConfigLoadOptions lo;
    lo.paths.emplace_back(argv[2]);
    auto cfg = load_kubeconfig(lo);
    if (!cfg) {
        std::cerr << "exec client: " << cfg.error().describe() << "\n";
        return 1;
    }
    const std::string ns = argv[3];
    const int calls = std::atoi(argv[4]);
    asio::io_context io(1);
    std::vector<std::unique_ptr<PodExecSandbox>> sandboxes;
    for (int i = 5; i < argc; ++i) {
        sandboxes.push_back(std::make_unique<PodExecSandbox>(KubeClient(io.get_executor(), *cfg), ns, argv[i],
                                                                PodExecSandboxOptions()));
    }
    const long hwm_before_kb = proc_status_kb("VmHWM");
    std::vector<double> lat(static_cast<std::size_t>(calls), 0.0);
    int done = 0, errors = 0;
    std::string first_error;
    auto t0 = Clock::now();
    double wall = 0;
    auto one = [&](int i) -> asio::awaitable<void> {
        auto& sb = *sandboxes[static_cast<std::size_t>(i) % sandboxes.size()];
        auto t = Clock::now();
        auto r = co_await sb.execute("true", std::chrono::seconds(300));
        lat[static_cast<std::size_t>(i)] = seconds_since(t);
        if (!r || r->exit_code != 0) {
            if (errors++ == 0) first_error = r ? "exit code " + std::to_string(r->exit_code.value_or(-1)) : r.error().describe();
        }
    };
    auto finished = [&](std::exception_ptr e) {
        if (e) ++errors;
        if (++done == calls) {
            wall = seconds_since(t0);
            io.stop();
        }
    };
    for (int i = 0; i < calls; ++i) asio::co_spawn(io, one(i), finished);
    io.run_for(std::chrono::seconds(900));
    if (done != calls) {
        std::cerr << "exec client: only " << done << " of " << calls << " calls finished\n";
        return 1;
    }
    if (errors) std::cerr << "exec client: " << errors << " errors, first: " << first_error << "\n";
    std::cout << "wall " << wall << "\nerrors " << errors << "\nbase_hwm_kb " << hwm_before_kb << "\npeak_hwm_kb "
              << proc_status_kb("VmHWM") << "\nlat";
    for (double l : lat) std::cout << ' ' << l;
    std::cout << "\n";
    return errors ? 1 : 0;
}

void scenario_concurrent(asio::io_context& io, LocalCluster& cluster, const Env& env, const Sizes& sz) {
    std::cerr << "[5] " << sz.concurrent_calls << " concurrent executes over " << sz.concurrent_sandboxes
              << " sandboxes\n";
    RawProvider provider(KubeClient(io.get_executor(), cluster.kube_config()), RawProviderOptions());
    std::vector<std::string> pods;
    std::string ns;
    run_on(io, [&]() -> asio::awaitable<void> {
        int pending = sz.concurrent_sandboxes;
        auto make = [&](int i) -> asio::awaitable<void> {
            GetOrCreateOptions o;
            o.sandbox_id = "bench-conc-" + std::to_string(i);
            auto r = co_await provider.get_or_create_pod(o);
            if (!r) failures.push_back("concurrent sandbox: " + r.error().describe());
            else {
                pods.push_back((*r)->pod_name());
                ns = (*r)->namespace_name();
            }
        };
        auto ex = co_await asio::this_coro::executor;
        for (int i = 0; i < sz.concurrent_sandboxes; ++i) {
            asio::co_spawn(ex, make(i), [&](std::exception_ptr) { --pending; });
        }
        while (pending > 0) co_await sleep_for(50ms);
    }, 900s, "concurrent sandboxes");
    if (pods.size() == static_cast<std::size_t>(sz.concurrent_sandboxes)) {
        std::vector<std::string> argv{env.self_exe, "--exec-client", env.kubeconfig.string(), ns,
                                      std::to_string(sz.concurrent_calls)};
        argv.insert(argv.end(), pods.begin(), pods.end());
        struct rusage self0 {}, kids0 {}, self1 {}, kids1 {};
        ::getrusage(RUSAGE_SELF, &self0);
        ::getrusage(RUSAGE_CHILDREN, &kids0);
        auto r = run_process(argv, {}, true);
        ::getrusage(RUSAGE_SELF, &self1);
        ::getrusage(RUSAGE_CHILDREN, &kids1);
        std::istringstream in(r.out);
        double wall = 0, base_kb = 0, peak_kb = 0;
        int errors = -1;
        std::vector<double> lat;
        std::string key;
        while (in >> key) {
            if (key == "wall") in >> wall;
            else if (key == "errors") in >> errors;
            else if (key == "base_hwm_kb") in >> base_kb;
            else if (key == "peak_hwm_kb") in >> peak_kb;
            else if (key == "lat") {
                double v = 0;
                while (in >> v) lat.push_back(v);
            }
        }
        if (!r.spawned || r.status != 0 || errors != 0 || wall <= 0 ||
            lat.size() != static_cast<std::size_t>(sz.concurrent_calls)) {
            failures.push_back("exec client: exit " + std::to_string(r.status) + ", errors " + std::to_string(errors));
        } else {
            const std::string name = "5 " + std::to_string(sz.concurrent_calls) + " concurrent execute, " +
                                     std::to_string(sz.concurrent_sandboxes) + " sandboxes, 1 thread";
            rows.push_back(latency_row(name, "latency per call", lat));
            rows.push_back(single_row(name, "throughput", "calls/s", sz.concurrent_calls / wall));
            rows.push_back(single_row(name, "client peak RSS (VmHWM)", "MiB", peak_kb / 1024));
            rows.push_back(single_row(name, "client peak RSS before the calls", "MiB", base_kb / 1024));
            rows.push_back(single_row(name, "client CPU (user+sys) / its lifetime", "%", 100 * r.cpu_seconds / r.seconds));
            // This process is blocked on the child meanwhile: its CPU is the cluster's (API
            // server, kubelet) plus the exec processes it reaped.
            double cluster_cpu = (cpu_of(self1) - cpu_of(self0)) + (cpu_of(kids1) - cpu_of(kids0)) - r.cpu_seconds;
            rows.push_back(single_row(name, "cluster CPU (server + exec processes) / same time", "%",
                                      100 * cluster_cpu / r.seconds));
        }
    }
    run_on(io, [&]() -> asio::awaitable<void> { co_await delete_all_sandboxes(provider); }, 600s, "concurrent cleanup");
}

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

int main(int argc, char** argv) {
    if (argc >= 2 && std::string(argv[1]) == "--exec-client") return exec_client_main(argc, argv);

    Sizes sz;
    std::string mode = "full";
    std::set<int> only;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--quick") {
            sz = quick_sizes();
            mode = "quick";
        } else if (a == "--smoke") {
            sz = smoke_sizes();
            mode = "smoke";
        } else if (a.rfind("--only=", 0) == 0) {
            std::stringstream ss(a.substr(7));
            std::string item;
            while (std::getline(ss, item, ',')) only.insert(std::atoi(item.c_str()));
        } else {
            std::cerr << "usage: kubesandbox_bench [--quick | --smoke] [--only=1,2,3,4,5]\n";
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
        if (want(4)) scenario_list(io, *cluster, env, sz);  // last: 10,000 pods slow down the rest
    }

    print_table(std::cout);
    std::cout << "\np99: nearest rank (the maximum below 100 samples); for MB/s rows p99 and best are the rates of\n"
                 "the slowest and fastest runs. Speed-up: the peer's median time over ours, or our MB/s over the\n"
                 "peer's. kubectl rows include starting the kubectl process, as a user pays it.\n";
    std::cout << "total " << fmt(seconds_since(total0)) << " s\n";
    for (const auto& f : failures) std::cerr << "FAILED: " << f << "\n";

    cluster.reset();
    std::filesystem::remove_all(data_dir, ec);
    return failures.empty() ? 0 : 1;
}
