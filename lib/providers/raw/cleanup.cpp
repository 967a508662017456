// Reaping: this provider's expired, dead and abandoned sandboxes, then leftovers whose pod is
// gone (a crash between creating the policy and the pod, a pod deleted behind our back before
// its policy had an owner). Which pod to reap is decided by should_reap (pod_state.hpp); the
// deletions overlap, CleanupOptions::concurrency at a time.
#include "proto/label_selector.hpp"
#include "providers/raw/naming.hpp"
#include "providers/raw/pod_state.hpp"
#include "providers/raw/state.hpp"
#include "util/bounded_for_each.hpp"
#include "util/json_access.hpp"

#include <algorithm>
#include <map>
#include <set>

namespace kubesandbox::raw {

namespace asio = boost::asio;
namespace json = boost::json;
using std::chrono::system_clock;
using util::label_of;
using util::metadata_of;
using util::string_at;

namespace {

// Deletes `path` (uid-preconditioned) and records the outcome under `what`.
asio::awaitable<void> remove_orphan(StatePtr st, ResourcePath path, std::string uid, std::string what,
                                    CleanupResult& result) {
    DeleteOptions o;
    o.precondition_uid = std::move(uid);
    auto d = co_await st->client.remove(std::move(path), std::move(o));
    if (d) {
        if (d->found) result.orphans_deleted.push_back(std::move(what));
    } else if (!d.error().is(errc::not_found)) {
        result.errors.push_back(CleanupError{std::move(what), d.error()});
    }
}

// Bindings (shared-namespace mode) whose pod is gone, and warm pods claimed for an id that no
// binding names (their claimer stopped before binding them, or lost the race and could not
// release them). Young ones may belong to an acquisition in flight and are spared.
asio::awaitable<Result<void>> sweep_bindings(StatePtr st, const std::vector<json::object>& pods,
                                             const std::vector<const json::object*>& reaped, std::chrono::seconds grace,
                                             std::size_t concurrency, CleanupResult& result) {
    const auto& cfg = st->options;
    auto bindings = co_await list_all(st, bindings_path(cfg.namespace_name), selector_for(cfg));
    if (!bindings) co_return fail(bindings.error());
    const auto now = system_clock::now();
    std::set<std::string> pod_names;
    for (const auto& pod : pods) pod_names.insert(string_at(metadata_of(pod), "name"));
    std::map<std::string, std::string> bound;  // binding name -> the pod it names
    std::vector<const json::object*> stale;
    for (const auto& b : *bindings) {
        const std::string pod = bound_pod(b);
        bound[string_at(metadata_of(b), "name")] = pod;
        if (pod_names.count(pod)) continue;
        auto age = age_of(b, now);
        if (!age || *age < grace || being_deleted(b)) continue;
        stale.push_back(&b);
    }
    co_await util::bounded_for_each(stale.size(), concurrency, [&](std::size_t i) -> asio::awaitable<void> {
        const auto& m = metadata_of(*stale[i]);
        std::string name = string_at(m, "name");
        std::string ns = string_at(m, "namespace");
        // Made since the pods were listed: the binding is in use (one naming no pod never is).
        if (std::string pod = bound_pod(*stale[i]); !pod.empty()) {
            auto alive = co_await st->client.get(pods_path(ns).with_name(pod));
            if (alive || !alive.error().is(errc::not_found)) co_return;
        }
        co_await remove_orphan(st, bindings_path(ns).with_name(name), string_at(m, "uid"),
                               "configmap " + ns + "/" + name, result);
    });
    std::set<const json::object*> gone(reaped.begin(), reaped.end());
    std::vector<const json::object*> unbound;
    for (const auto& pod : pods) {
        const std::string name = string_at(metadata_of(pod), "name");
        const std::string id = util::annotation_of(pod, keys::id_original);
        // Claimed under a binding: a random name serving a caller id (bound_identity).
        if (gone.count(&pod) || !is_random_pod_name(name) || id.empty() ||
            label_of(pod, keys::pool_status) != "active" || label_of(pod, keys::sandbox_id) != name)
            continue;
        if (auto it = bound.find(pod_name_for(id)); it != bound.end() && it->second == name) continue;
        auto age = age_of(pod, now);
        if (!age || *age < grace || being_deleted(pod)) continue;
        unbound.push_back(&pod);
    }
    co_await util::bounded_for_each(unbound.size(), concurrency, [&](std::size_t i) -> asio::awaitable<void> {
        const auto& m = metadata_of(*unbound[i]);
        std::string what = "pod " + string_at(m, "namespace") + "/" + string_at(m, "name");
        // Preconditioned on what was listed.
        auto d = co_await delete_listed(st, *unbound[i], false);
        if (d && *d) result.orphans_deleted.push_back(std::move(what));
        else if (!d && !d.error().is(errc::not_found) && !d.error().is(errc::conflict))
            result.errors.push_back(CleanupError{std::move(what), d.error()});
    });
    co_return Result<void>{};
}

}  // namespace

asio::awaitable<Result<CleanupResult>> cleanup(StatePtr st, CleanupOptions options) {
    const auto& cfg = st->options;
    const std::string ours = selector_for(cfg);
    // Collect every page first (deleting while paging would not change the snapshot anyway).
    auto listed = co_await list_all(st, list_path(cfg), ours);
    if (!listed) co_return fail(listed.error());
    CleanupResult result;
    auto now = system_clock::now();
    std::vector<const json::object*> expired;
    for (const auto& pod : *listed) {
        if (being_deleted(pod) || !should_reap(pod, cfg, options.max_idle, now)) ++result.kept;
        else expired.push_back(&pod);
    }
    // The deletions overlap; each asks the caller right before its own delete, so a sandbox
    // that became busy while earlier ones were going is still spared.
    co_await util::bounded_for_each(expired.size(), options.concurrency, [&](std::size_t i) -> asio::awaitable<void> {
        const json::object& pod = *expired[i];
        auto info = info_of(pod);
        // Dead pods never come back, whoever holds them; the caller vetoes only expiries.
        if (options.may_delete && !evaluate_pod(pod).dead && !options.may_delete(info)) {
            ++result.kept;
            co_return;
        }
        // Preconditioned on what was listed: activity recorded since (by any process) wins, and
        // a sandbox another replica reaped first is not counted here.
        auto d = co_await delete_listed(st, pod, true);
        if (d && *d) result.deleted.push_back(info.id);
        else if (d || d.error().is(errc::not_found) || d.error().is(errc::conflict)) ++result.kept;
        else result.errors.push_back(CleanupError{info.id, d.error()});
    });

    // Young leftovers may belong to a creation in flight and are spared.
    const auto grace = cfg.startup_timeout + std::chrono::seconds(60);
    auto policies = co_await list_all(st, network_policies_path(list_path(cfg).namespace_name), ours);
    if (!policies) co_return fail(policies.error());
    static constexpr std::string_view suffix = "-deny-all";
    std::vector<const json::object*> lone_policies;
    for (const auto& np : *policies) {
        std::string name = string_at(metadata_of(np), "name");
        if (name.size() <= suffix.size() || std::string_view(name).substr(name.size() - suffix.size()) != suffix)
            continue;
        auto age = age_of(np, now);
        if (!age || *age < grace || being_deleted(np)) continue;
        lone_policies.push_back(&np);
    }
    co_await util::bounded_for_each(
        lone_policies.size(), options.concurrency, [&](std::size_t i) -> asio::awaitable<void> {
            const auto& m = metadata_of(*lone_policies[i]);
            std::string name = string_at(m, "name");
            std::string ns = string_at(m, "namespace");
            std::string pod = name.substr(0, name.size() - suffix.size());
            auto alive = co_await st->client.get(pods_path(ns).with_name(pod));
            if (alive || !alive.error().is(errc::not_found)) co_return;
            co_await remove_orphan(st, network_policies_path(ns).with_name(name), string_at(m, "uid"),
                                   "networkpolicy " + ns + "/" + name, result);
        });
    if (!cfg.namespace_per_sandbox) {
        auto swept = co_await sweep_bindings(st, *listed, expired, grace, options.concurrency, result);
        if (!swept) co_return fail(swept.error());
    }
    if (cfg.namespace_per_sandbox) {
        std::map<std::string, std::string> sel{{keys::managed_by, keys::managed_by_value},
                                               {keys::namespace_mode, "per-sandbox"}};
        auto spaces = co_await list_all(st, namespaces_path(), proto::format_label_selector(sel));
        if (!spaces) co_return fail(spaces.error());
        std::vector<const json::object*> old_spaces;
        for (const auto& nso : *spaces) {
            std::string name = string_at(metadata_of(nso), "name");
            auto age = age_of(nso, now);
            if (name.rfind("ksb-", 0) != 0 || label_of(nso, keys::sandbox_id).empty()) continue;
            if (!age || *age < grace || being_deleted(nso)) continue;
            old_spaces.push_back(&nso);
        }
        co_await util::bounded_for_each(old_spaces.size(), options.concurrency,
                                        [&](std::size_t i) -> asio::awaitable<void> {
                                            const auto& m = metadata_of(*old_spaces[i]);
                                            std::string name = string_at(m, "name");
                                            ListOptions lo;
                                            lo.limit = 1;
                                            auto in_it = co_await st->client.list(pods_path(name), std::move(lo));
                                            if (!in_it || !in_it->items.empty()) co_return;
                                            co_await remove_orphan(st, namespaces_path().with_name(name),
                                                                   string_at(m, "uid"), "namespace " + name, result);
                                        });
    }
    // Finished in any order: sorted, so a pass reads the same whatever the timing.
    std::sort(result.deleted.begin(), result.deleted.end());
    std::sort(result.orphans_deleted.begin(), result.orphans_deleted.end());
    co_return result;
}

}  // namespace kubesandbox::raw
