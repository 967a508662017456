// Scenario 11: one reaper pass over N sandboxes, half of them idle past their TTL, next to the
// same pass written with python-kubernetes the way the Python peers reap (list every page, then
// delete the expired ones one after the other). The sandboxes are copies of a real sandbox's pod
// with an image the cluster does not know, so they hold no processes and N can be 10,000.
#include "support.hpp"

#include "util/time_format.hpp"

#include <kubesandbox/kube_client.hpp>
#include <kubesandbox/local_cluster.hpp>
#include <kubesandbox/raw_provider.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace kubesandbox::bench {

namespace asio = boost::asio;
namespace json = boost::json;
using namespace std::chrono_literals;

namespace {

// argv: kubeconfig namespace selector. Prints "<deleted> <seconds>", the seconds measured inside
// (interpreter start and imports left out).
constexpr const char* python_reaper = R"PY(import datetime, sys, time
from kubernetes import client, config
config.load_kube_config(sys.argv[1])
ns, selector = sys.argv[2], sys.argv[3]
v1 = client.CoreV1Api()
t0 = time.monotonic()
now = datetime.datetime.now(datetime.timezone.utc)
pods, token = [], None
while True:
    page = v1.list_namespaced_pod(ns, label_selector=selector, limit=100, _continue=token)
    pods.extend(page.items)
    token = page.metadata._continue
    if not token:
        break
deleted = 0
for p in pods:
    a = p.metadata.annotations or {}
    idle, last = a.get("kubesandbox.io/ttl-idle-seconds"), a.get("kubesandbox.io/last-activity")
    if p.metadata.deletion_timestamp or not idle or not last:
        continue
    seen = datetime.datetime.fromisoformat(last.replace("Z", "+00:00"))
    if (now - seen).total_seconds() <= int(idle):
        continue
    pre = client.V1Preconditions(uid=p.metadata.uid, resource_version=p.metadata.resource_version)
    try:
        v1.delete_namespaced_pod(p.metadata.name, ns, body=client.V1DeleteOptions(grace_period_seconds=0, preconditions=pre))
        deleted += 1
    except client.ApiException as e:
        if e.status not in (404, 409):
            raise
print(deleted, time.monotonic() - t0)
)PY";

// The template pod as a new object: named `name`, its own sandbox id, an image nobody has, and
// last activity two hours ago (expired) or now.
json::object copy_of(const json::object& pod, const std::string& name, bool expired) {
    json::object o = pod;
    o.erase("status");
    json::object& meta = o["metadata"].as_object();
    for (auto k : {"uid", "resourceVersion", "creationTimestamp", "managedFields", "ownerReferences", "generation"})
        meta.erase(k);
    meta["name"] = name;
    meta["labels"].as_object()[keys::sandbox_id] = name;
    json::object& ann = meta["annotations"].as_object();
    ann.erase(keys::ttl_seconds);
    ann[keys::ttl_idle_seconds] = "3600";
    ann[keys::last_activity] = util::format_rfc3339(std::chrono::system_clock::now() - (expired ? 2h : 0h));
    json::object& spec = o["spec"].as_object();
    spec.erase("nodeName");
    for (auto field : {"initContainers", "containers"})
        if (auto* list = spec.if_contains(field); list && list->is_array())
            for (auto& c : list->as_array()) c.as_object()["image"] = "registry.invalid/kubesandbox/reap-none:1";
    return o;
}

}  // namespace

void scenario_reaper(asio::io_context& io, LocalCluster& cluster, const Env& env, const Sizes& sz) {
    const int n = sz.reaper_sandboxes;
    std::cerr << "[11] reaper pass over " << n << " sandboxes, half expired\n";
    const std::string ns = "bench-reap";
    RawProviderOptions po;
    po.namespace_name = ns;
    po.image = "busybox";
    po.startup_timeout = 120s;
    po.logger = Logger::silent();
    KubeClientOptions bulk_opts;
    bulk_opts.qps = 0;  // filling is setup, not the measurement
    KubeClient bulk(io.get_executor(), cluster.kube_config(), bulk_opts);
    RawProvider provider(KubeClient(io.get_executor(), cluster.kube_config()), po);

    // The template: a real sandbox's pod, read back and then deleted.
    json::object pod_template;
    bool ready = run_on(
        io,
        [&]() -> asio::awaitable<void> {
            json::object nsb = namespace_body(ns);
            auto made = co_await bulk.create(namespaces_path(), std::move(nsb));
            if (!made) {
                failures.push_back("scenario 11: namespace: " + made.error().describe());
                co_return;
            }
            GetOrCreateOptions o;
            o.sandbox_id = "reap-template";
            auto sb = co_await provider.get_or_create(o);
            if (!sb) {
                failures.push_back("scenario 11: template sandbox: " + sb.error().describe());
                co_return;
            }
            auto pod = co_await bulk.get(pods_in(ns).with_name(RawProvider::pod_name_for("reap-template")));
            if (pod) pod_template = *pod;
            else failures.push_back("scenario 11: template pod: " + pod.error().describe());
            co_await delete_all_sandboxes(provider);
        },
        300s, "scenario 11 template");
    if (!ready || pod_template.empty()) return;

    // Creates copies named <prefix>NNNNN for from, from + step, ... below n (even ones expired).
    auto fill = [&](const char* prefix, int from, int step) {
        return run_on(
            io,
            [&]() -> asio::awaitable<void> {
                int next = from, running = 0, errors = 0;
                auto worker = [&]() -> asio::awaitable<void> {
                    while (next < n && errors == 0) {
                        int i = next;
                        next += step;
                        char name[32];
                        std::snprintf(name, sizeof name, "%s%05d", prefix, i);
                        auto r = co_await bulk.create(pods_in(ns), copy_of(pod_template, name, i % 2 == 0));
                        if (!r && errors++ == 0)
                            failures.push_back(std::string("scenario 11: create ") + name + ": " +
                                               r.error().describe());
                    }
                    --running;
                };
                auto ex = co_await asio::this_coro::executor;
                for (int w = 0; w < 16; ++w) {
                    ++running;
                    asio::co_spawn(ex, worker(), asio::detached);
                }
                while (running > 0) co_await sleep_for(20ms);
                co_await sleep_for(3000ms);  // the kubelet's image-pull status writes settle
            },
            1800s, "scenario 11 fill");
    };
    auto t_fill = Clock::now();
    if (!fill("reap-", 0, 1)) return;
    rows.push_back(single_row("11 reaper setup", "create " + std::to_string(n) + " sandbox pods, 16 in flight",
                              "pods/s", n / (seconds_since(t_fill) - 3.0)));

    // Our pass twice: with the client's default rate limit (50 requests/s) and with none, as the
    // peer has none. The expired half is created again before each later pass.
    const int expired = (n + 1) / 2;
    KubeClientOptions unlimited;
    unlimited.qps = 0;
    RawProvider unthrottled(KubeClient(io.get_executor(), cluster.kube_config(), unlimited), po);
    struct Pass {
        RawProvider* provider;
        const char* variant;
        const char* refill_prefix;
        std::vector<double> seconds{};
    };
    std::vector<Pass> passes{{&unthrottled, "RawProvider::cleanup, no client rate limit (as the peer)", nullptr},
                             {&provider, "RawProvider::cleanup, default client (50 requests/s)", "reap-b-"}};
    for (auto& pass : passes) {
        if (pass.refill_prefix && !fill(pass.refill_prefix, 0, 2)) break;
        run_on(
            io,
            [&]() -> asio::awaitable<void> {
                auto t0 = Clock::now();
                auto r = co_await pass.provider->cleanup();
                double d = seconds_since(t0);
                if (!r) failures.push_back("scenario 11: cleanup: " + r.error().describe());
                else if (static_cast<int>(r->deleted.size()) != expired || !r->errors.empty())
                    failures.push_back("scenario 11: cleanup deleted " + std::to_string(r->deleted.size()) + " of " +
                                       std::to_string(expired) + ", " + std::to_string(r->errors.size()) + " errors");
                else pass.seconds.push_back(d);
            },
            1800s, "scenario 11 cleanup");
        if (pass.seconds.empty()) break;
    }

    std::vector<double> theirs;
    if (!passes.back().seconds.empty() && fill("reap-c-", 0, 2)) {
        auto script = std::filesystem::temp_directory_path() / ("ksb-reaper-" + std::to_string(getpid()) + ".py");
        std::ofstream(script) << python_reaper;
        std::string selector = std::string(keys::managed_by) + "=kubesandbox";
        auto r = run_process({"/usr/bin/python3", script.string(), env.kubeconfig.string(), ns, selector}, {}, true);
        std::filesystem::remove(script);
        std::istringstream out(r.out);
        int deleted = -1;
        double seconds = 0;
        out >> deleted >> seconds;
        if (!r.spawned || r.status != 0 || deleted != expired)
            failures.push_back("scenario 11: python reaper: exit " + std::to_string(r.status) + ", output " + r.out);
        else theirs.push_back(seconds);
    }
    const std::string name =
        "11 reaper pass, " + std::to_string(n) + " sandboxes, " + std::to_string(expired) + " expired";
    if (!theirs.empty()) {
        Row peer = latency_row(name, "python-kubernetes list + delete (peer)", theirs);
        rows.push_back(peer);
        for (auto& pass : passes) {
            Row mine = latency_row(name, pass.variant, pass.seconds);
            compare_to_peer(mine, peer, "python-kubernetes");
            rows.push_back(mine);
        }
    }

    run_on(
        io,
        [&]() -> asio::awaitable<void> {
            auto r = co_await bulk.remove(namespaces_path().with_name(ns));
            if (!r) failures.push_back("scenario 11: delete namespace: " + r.error().describe());
        },
        600s, "scenario 11 cleanup namespace");
}

}  // namespace kubesandbox::bench
