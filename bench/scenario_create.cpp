// Scenario 1: pod create -> Ready (raw client), and provider cold create vs warm-pool claim.
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
    run_on(
        io,
        [&]() -> asio::awaitable<void> {
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
        },
        600s, "create->Ready");
    rows.push_back(latency_row("1 pod create -> Ready", "KubeClient create + watch", lat));
    run_on(
        io,
        [&]() -> asio::awaitable<void> {
            for (const auto& n : names) {
                const ResourcePath p = pods_in("default").with_name(n);
                DeleteOptions d;
                d.grace_period_seconds = 0;
                auto r = co_await client.remove(p, d);
                if (!r) failures.push_back("delete " + n + ": " + r.error().describe());
            }
        },
        120s, "create->Ready cleanup");
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
    run_on(
        io,
        [&]() -> asio::awaitable<void> {
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
        },
        900s, "cold get_or_create");

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
    run_on(
        io,
        [&]() -> asio::awaitable<void> {
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
        },
        900s, "warm claim");

    Row c = latency_row("1 sandbox ready", "RawProvider cold get_or_create", cold_lat);
    Row w = latency_row("1 sandbox ready", "RawProvider warm-pool claim", warm_lat);
    compare_to_peer(w, c, "cold create");
    rows.push_back(c);
    rows.push_back(w);
    run_on(
        io, [&]() -> asio::awaitable<void> { co_await delete_all_sandboxes(warm); }, 300s, "cold/warm cleanup");
}

}  // namespace kubesandbox::bench
