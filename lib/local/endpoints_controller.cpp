#include "local/endpoints_controller.hpp"

#include "local/endpoints_core.hpp"
#include "local/mirror.hpp"
#include "util/json_access.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <array>
#include <map>
#include <vector>

namespace kubesandbox::local {

namespace asio = boost::asio;
namespace json = boost::json;
using util::metadata_of;
using util::string_at;

namespace {

constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);

enum Kind { services, pods, slices, kind_count };

ResourcePath collection(Kind k) {
    switch (k) {
        case services:
            return {"", "v1", "services", "", ""};
        case pods:
            return {"", "v1", "pods", "", ""};
        default:
            return {"discovery.k8s.io", "v1", "endpointslices", "", ""};
    }
}

}  // namespace

struct EndpointsController::Impl : std::enable_shared_from_this<Impl> {
    Impl(asio::any_io_executor ex, KubeClient c, Logger l)
        : executor(std::move(ex)), client(std::move(c)), logger(std::move(l)), wake(executor) {}

    asio::any_io_executor executor;
    KubeClient client;
    Logger logger;
    asio::steady_timer wake;
    std::array<ObjectCache, kind_count> cache;
    std::vector<std::shared_ptr<ListWatch>> watches;
    bool dirty = true;
    bool stopped = false;

    void log(const std::string& line) { logger.warning("local cluster endpoints controller: " + line); }

    asio::awaitable<void> watch_loop(Kind kind) {
        WatchOptions options;
        if (kind == slices)
            options.label_selector = std::string(endpoints::managed_by_label) + "=" + endpoints::managed_by;
        auto watch = std::make_shared<ListWatch>(client, collection(kind), options);
        watches.push_back(watch);
        auto self = shared_from_this();
        co_await mirror(self, watch, cache[kind], stopped, [this] {
            dirty = true;
            wake.cancel();
        });
    }

    asio::awaitable<void> run_reconciler() {
        co_await reconcile_loop(shared_from_this(), wake, dirty, stopped, std::chrono::seconds(5),
                                [this] { return reconcile(); });
    }

    // Desired slices are computed from copies first: the cache changes while requests are out.
    asio::awaitable<void> reconcile() {
        const auto now = ObjectCache::Clock::now();
        for (auto& c : cache) c.forget_unconfirmed(now, unconfirmed_max_age);
        // Each service looks only at its namespace's pods: the cache sorts by "namespace/name",
        // so they sit together (with 10,000 pods elsewhere, a walk over all of them on every
        // pod event was most of the local cluster's CPU).
        std::map<std::string, std::vector<const json::object*>> pods_by_namespace;
        auto pods_in = [&](const std::string& ns) -> const std::vector<const json::object*>& {
            auto [it, fresh] = pods_by_namespace.try_emplace(ns);
            if (fresh) {
                auto last = cache[pods].lower_bound(ns + "0");  // '0' follows '/'
                for (auto p = cache[pods].lower_bound(ns + "/"); p != last; ++p) it->second.push_back(&p->second);
            }
            return it->second;
        };
        std::map<std::string, json::object> desired;  // slice key -> slice
        for (const auto& [key, service] : cache[services]) {
            if (auto slice =
                    endpoints::endpoint_slice_for(service, pods_in(string_at(metadata_of(service), "namespace"))))
                desired[object_key(*slice)] = std::move(*slice);
        }
        std::vector<std::string> stale;
        for (const auto& [key, slice] : cache[slices]) {
            if (!desired.count(key)) stale.push_back(key);
        }
        for (auto& [key, slice] : desired) {
            auto it = cache[slices].find(key);
            if (it != cache[slices].end() && endpoints::same_endpoints(it->second, slice)) continue;
            const bool exists = it != cache[slices].end();
            auto slash = key.find('/');
            ResourcePath p = collection(slices);
            p.namespace_name = key.substr(0, slash);
            if (!exists) {
                auto made = co_await client.create(p, slice);
                if (made) {
                    cache[slices].remember(std::move(*made));
                    continue;
                }
                if (!made.error().is(errc::already_exists)) {
                    log("create " + key + ": " + made.error().describe());
                    continue;
                }
            }
            p.name = key.substr(slash + 1);
            json::object change{{"endpoints", slice["endpoints"]}, {"ports", slice["ports"]}};
            auto patched = co_await client.patch(p, json::value(std::move(change)), PatchType::merge);
            if (patched) {
                cache[slices].remember(std::move(*patched));
            } else if (!patched.error().is(errc::not_found)) {
                log("update " + key + ": " + patched.error().describe());
            }
        }
        for (const auto& key : stale) {
            auto slash = key.find('/');
            ResourcePath p = collection(slices);
            p.namespace_name = key.substr(0, slash);
            p.name = key.substr(slash + 1);
            auto removed = co_await client.remove(p);
            if (!removed && !removed.error().is(errc::not_found))
                log("delete " + key + ": " + removed.error().describe());
        }
    }
};

EndpointsController::EndpointsController(asio::any_io_executor executor, KubeClient client, Logger logger)
    : impl_(std::make_shared<Impl>(std::move(executor), std::move(client), std::move(logger))) {}

EndpointsController::~EndpointsController() = default;

void EndpointsController::start() {
    for (Kind k : {services, pods, slices}) asio::co_spawn(impl_->executor, impl_->watch_loop(k), asio::detached);
    asio::co_spawn(impl_->executor, impl_->run_reconciler(), asio::detached);
}

void EndpointsController::stop() {
    impl_->stopped = true;
    impl_->wake.cancel();
    for (auto& w : impl_->watches) w->close();
}

}  // namespace kubesandbox::local
