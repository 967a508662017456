// Delete with preconditions, grace periods, garbage collection of dependents and namespace termination.
#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <variant>
#include "local/api_server_impl.hpp"
#include "local/kubelet.hpp"
#include "local/store.hpp"
#include "proto/status.hpp"
#include "util/json_access.hpp"
#include "util/time_format.hpp"

namespace kubesandbox::local {

ObjectPtr ApiServer::Impl::remove_now(const ResourceType& t, const ObjectKey& key) {
    auto last = store.remove(t.id(), key);
    if (!last) return last;
    if (auto removed = rules_for(t).removed) removed(*this, *last);
    collect_dependents(metadata_of(*last), "Background");
    finish_foreground_owners();
    return last;
}

std::vector<ApiServer::Impl::Dependent> ApiServer::Impl::dependents_of(const std::string& uid,
                                                                       const std::string& owner_ns) {
    std::vector<Dependent> out;
    for (const auto& ref : store.dependents(uid)) {
        if (!owner_ns.empty() && ref.key.ns != owner_ns) continue;
        if (const ResourceType* t = find_resource_by_id(ref.resource)) out.push_back({t, ref.key});
    }
    // Discovery order, then by key: the order a walk over the whole store gave.
    std::sort(out.begin(), out.end(), [](const Dependent& a, const Dependent& b) {
        return a.type != b.type ? a.type < b.type : a.key < b.key;
    });
    return out;
}

namespace {

// Removes the ownerReferences naming any of `uids`; the field goes when none is left.
void drop_owner_references(json::object& object, const std::set<std::string>& uids) {
    auto& meta = object["metadata"].as_object();
    auto& refs = meta["ownerReferences"].as_array();
    for (auto it = refs.begin(); it != refs.end();)
        it = it->is_object() && uids.count(string_at(it->as_object(), "uid")) ? refs.erase(it) : std::next(it);
    if (refs.empty()) meta.erase("ownerReferences");
}

}  // namespace

void ApiServer::Impl::collect_dependents(const json::object& owner_meta, const std::string& policy) {
    std::string uid = string_at(owner_meta, "uid");
    std::string ns = string_at(owner_meta, "namespace");
    for (auto& d : dependents_of(uid, ns)) {
        auto obj = store.get(d.type->id(), d.key);
        if (!obj) continue;
        if (policy == "Orphan") {
            json::object copy = *obj;
            drop_owner_references(copy, {uid});
            store.put(d.type->id(), std::move(copy));
        } else {
            DeleteOptions opts;
            opts.propagation = policy == "Foreground" ? "Foreground" : "Background";
            delete_object(*d.type, d.key, opts);
        }
    }
}

void ApiServer::Impl::finish_foreground_owners() {
    bool again = true;
    while (again) {
        again = false;
        for (const auto& ref : store.foreground_deleting()) {
            const ResourceType* t = find_resource_by_id(ref.resource);
            auto obj = store.get(ref.resource, ref.key);
            if (!t || !obj) continue;
            const auto& m = metadata_of(*obj);
            if (!dependents_of(string_at(m, "uid"), string_at(m, "namespace")).empty()) continue;
            json::object copy = *obj;
            remove_finalizer(copy, "foregroundDeletion");
            if (has_finalizers(copy)) store.put(t->id(), std::move(copy));
            else if (rules_for(*t).deletion == Deletion::graceful) {
                store.put(t->id(), std::move(copy));
                continue;
            } else remove_now(*t, ref.key);
            again = true;
            break;
        }
    }
}

ApiServer::Impl::DeleteResult ApiServer::Impl::delete_object(const ResourceType& t, const ObjectKey& key,
                                                             const DeleteOptions& opts) {
    auto cur = store.get(t.id(), key);
    if (!cur) return {};
    const auto& m = metadata_of(*cur);
    std::string policy = opts.propagation.empty() ? "Background" : opts.propagation;
    const KindRules& rules = rules_for(t);
    if (rules.deletion == Deletion::namespace_lifecycle) return {begin_namespace_deletion(key.name), nullptr};
    if (policy == "Orphan") collect_dependents(m, "Orphan");
    bool is_pod = rules.deletion == Deletion::graceful;
    if (policy == "Foreground" && !dependents_of(string_at(m, "uid"), string_at(m, "namespace")).empty()) {
        json::object copy = *cur;
        auto& cm = copy["metadata"].as_object();
        if (!cm.contains("deletionTimestamp")) cm["deletionTimestamp"] = util::now_rfc3339();
        if (!has_finalizer(copy, "foregroundDeletion")) {
            if (!cm.contains("finalizers") || !cm["finalizers"].is_array()) cm["finalizers"] = json::array{};
            cm["finalizers"].as_array().push_back("foregroundDeletion");
        }
        if (t.custom) cm["generation"] = (cm["generation"].is_int64() ? cm["generation"].as_int64() : 1) + 1;
        auto stored = store.put(t.id(), std::move(copy));
        collect_dependents(metadata_of(*stored), "Foreground");
        finish_foreground_owners();
        return {store.get(t.id(), key), nullptr};
    }
    if (is_pod) {
        std::int64_t grace = 30;
        auto spec = object_at(*cur, "spec");
        if (spec) {
            if (auto g = spec->if_contains("terminationGracePeriodSeconds"); g && g->is_int64()) grace = g->as_int64();
        }
        if (opts.grace) grace = *opts.grace;
        if (grace < 0) grace = 0;
        std::string phase;
        if (auto st = object_at(*cur, "status")) phase = string_at(*st, "phase");
        bool terminal = phase == "Succeeded" || phase == "Failed";
        if (grace == 0 || terminal) {
            auto last = remove_now(t, key);
            return {nullptr, last};
        }
        if (m.contains("deletionTimestamp")) return {cur, nullptr};  // already terminating
        json::object copy = *cur;
        auto& cm = copy["metadata"].as_object();
        cm["deletionTimestamp"] = util::format_rfc3339(std::chrono::system_clock::now() + std::chrono::seconds(grace));
        cm["deletionGracePeriodSeconds"] = grace;
        auto stored = store.put(t.id(), std::move(copy));
        std::string uid = string_at(metadata_of(*stored), "uid");
        auto timer = std::make_shared<asio::steady_timer>(executor, std::chrono::seconds(grace));
        pod_grace_timers[uid] = timer;
        timer->async_wait([this, timer, type = &t, key, uid](error_code ec) {
            if (ec) return;
            auto p = store.get(type->id(), key);
            if (p && string_at(metadata_of(*p), "uid") == uid) remove_now(*type, key);
        });
        if (kubelet) kubelet->pod_changed(*stored);
        return {stored, nullptr};
    }
    if (has_finalizers(*cur)) {
        if (m.contains("deletionTimestamp")) return {cur, nullptr};
        json::object copy = *cur;
        copy["metadata"].as_object()["deletionTimestamp"] = util::now_rfc3339();
        return {store.put(t.id(), std::move(copy)), nullptr};
    }
    auto last = remove_now(t, key);
    return {nullptr, last};
}

ObjectPtr ApiServer::Impl::begin_namespace_deletion(const std::string& name) {
    auto cur = store.get("namespaces", {"", name});
    if (!cur) return cur;
    if (metadata_of(*cur).contains("deletionTimestamp")) return cur;
    json::object copy = *cur;
    copy["metadata"].as_object()["deletionTimestamp"] = util::now_rfc3339();
    copy["status"] = json::object{{"phase", "Terminating"}};
    auto stored = store.put("namespaces", std::move(copy));
    // Content goes away asynchronously, as in a real cluster.
    asio::post(executor, [this, name] { purge_namespace(name); });
    return stored;
}

void ApiServer::Impl::purge_namespace(const std::string& name) {
    if (stopping) return;
    bool waiting = false;
    for (const auto& t : resource_types()) {
        if (!t.namespaced) continue;
        std::vector<ObjectKey> keys;
        auto [first, end] = list_range(store.objects(t.id()), name, nullptr);
        for (auto it = first; it != end; ++it) keys.push_back(it->first);
        for (auto& key : keys) {
            DeleteOptions opts;
            opts.propagation = "Background";
            auto res = delete_object(t, key, opts);
            if (res.remaining) {
                // Finalizers of other controllers: we own none of them, so drop them.
                json::object copy = *res.remaining;
                if (rules_for(t).deletion != Deletion::graceful) {
                    copy["metadata"].as_object().erase("finalizers");
                    store.put(t.id(), std::move(copy));
                    remove_now(t, key);
                } else {
                    waiting = true;
                }
            }
        }
    }
    if (waiting) {
        auto timer = std::make_shared<asio::steady_timer>(executor, 200ms);
        timer->async_wait([this, timer, name](error_code ec) {
            if (!ec) purge_namespace(name);
        });
        return;
    }
    store.remove("namespaces", {"", name});
}

namespace {

const ResourceType* owner_type(const json::object& ref) {
    std::string api_version = string_at(ref, "apiVersion");
    auto slash = api_version.find('/');
    std::string group = slash == std::string::npos ? "" : api_version.substr(0, slash);
    std::string kind = string_at(ref, "kind");
    for (const auto& t : resource_types())
        if (t.group == group && t.kind == kind) return &t;
    return nullptr;
}

}  // namespace

void ApiServer::Impl::notice_owners(const StoreEvent& ev) {
    if (ev.type == "DELETED" || !ev.object) return;
    auto uids = owner_uids(*ev.object);
    if (uids.empty() || (ev.previous && owner_uids(*ev.previous) == uids)) return;
    const auto& m = metadata_of(*ev.object);
    owner_checks.insert(ObjectRef{ev.resource, ObjectKey{string_at(m, "namespace"), string_at(m, "name")}});
    if (owner_check_armed || stopping) return;
    owner_check_armed = true;
    owner_check_timer.expires_at(asio::steady_timer::time_point::min());
    owner_check_timer.async_wait([this](error_code ec) {
        if (ec) return;  // cancelled: this Impl may be gone
        owner_check_armed = false;
        if (!stopping) check_owners();
    });
}

void ApiServer::Impl::check_owners() {
    auto pending = std::exchange(owner_checks, {});
    for (const auto& ref : pending) {
        const ResourceType* t = find_resource_by_id(ref.resource);
        auto obj = t ? store.get(ref.resource, ref.key) : nullptr;
        if (!obj) continue;
        auto refs = metadata_of(*obj).if_contains("ownerReferences");
        if (!refs || !refs->is_array() || refs->as_array().empty()) continue;
        std::set<std::string> gone;
        std::size_t present = 0;
        for (const auto& r : refs->as_array()) {
            if (!r.is_object()) continue;
            const json::object& owner_ref = r.as_object();
            const ResourceType* ot = owner_type(owner_ref);
            if (!ot) {
                ++present;  // not resolvable here: a real collector waits rather than deletes
                continue;
            }
            auto owner = store.get(ot->id(), {ot->namespaced ? ref.key.ns : "", string_at(owner_ref, "name")});
            if (owner && string_at(metadata_of(*owner), "uid") == string_at(owner_ref, "uid")) ++present;
            else gone.insert(string_at(owner_ref, "uid"));
        }
        if (gone.empty()) continue;
        if (present == 0) {
            DeleteOptions opts;
            opts.propagation = "Background";
            delete_object(*t, ref.key, opts);
            continue;
        }
        json::object copy = *obj;
        drop_owner_references(copy, gone);
        store.put(t->id(), std::move(copy));
    }
}

std::variant<DeleteOptions, Response> ApiServer::Impl::delete_options(const Request& req) {
    DeleteOptions opts;
    if (auto g = int_param(req.query, "gracePeriodSeconds")) opts.grace = *g;
    if (auto it = req.query.find("propagationPolicy"); it != req.query.end()) opts.propagation = it->second;
    if (auto it = req.query.find("orphanDependents"); it != req.query.end())
        opts.propagation = parse_bool(it->second) ? "Orphan" : "Background";
    opts.dry_run = dry_run(req);
    if (!req.msg.body().empty()) {
        error_code ec;
        json::value v = json::parse(req.msg.body(), ec);
        if (ec || !v.is_object())
            return bad_request(
                "the server rejected our request due to an error in our request: invalid DeleteOptions body");
        auto& o = v.as_object();
        if (auto g = o.if_contains("gracePeriodSeconds"); g && g->is_int64()) opts.grace = g->as_int64();
        if (auto p = o.if_contains("propagationPolicy"); p && p->is_string()) opts.propagation = p->as_string();
        if (auto p = o.if_contains("orphanDependents"); p && p->is_bool())
            opts.propagation = p->as_bool() ? "Orphan" : "Background";
        if (auto pre = object_at(o, "preconditions")) {
            opts.precondition_uid = string_at(*pre, "uid");
            opts.precondition_rv = string_at(*pre, "resourceVersion");
        }
        if (auto d = o.if_contains("dryRun"); d && d->is_array() && !d->as_array().empty()) opts.dry_run = true;
    }
    if (!opts.propagation.empty() && opts.propagation != "Orphan" && opts.propagation != "Background" &&
        opts.propagation != "Foreground")
        return bad_request("propagationPolicy: Unsupported value: \"" + opts.propagation + "\"");
    return opts;
}

Response ApiServer::Impl::delete_item(const Request& req, const Route& r) {
    const ResourceType& t = *r.type;
    auto parsed = delete_options(req);
    if (auto* resp = std::get_if<Response>(&parsed)) return *resp;
    auto opts = std::get<DeleteOptions>(parsed);
    auto cur = store.get(t.id(), {r.ns, r.name});
    if (!cur) return not_found(t, r.name);
    const auto& m = metadata_of(*cur);
    if (!opts.precondition_uid.empty() && opts.precondition_uid != string_at(m, "uid"))
        return conflict(t, r.name,
                        "Precondition failed: UID in precondition: " + opts.precondition_uid +
                            ", UID in object meta: " + string_at(m, "uid"));
    if (!opts.precondition_rv.empty() && opts.precondition_rv != string_at(m, "resourceVersion"))
        return conflict(t, r.name,
                        "Precondition failed: ResourceVersion in precondition: " + opts.precondition_rv +
                            ", ResourceVersion in object meta: " + string_at(m, "resourceVersion"));
    const auto& undeletable = rules_for(t).undeletable_names;
    if (std::find(undeletable.begin(), undeletable.end(), r.name) != undeletable.end())
        return status_response(403, "Forbidden",
                               "namespaces \"" + r.name + "\" is forbidden: this namespace may not be deleted",
                               res_details(t, r.name));
    if (opts.dry_run) return json_response(200, present(t, r.version, *cur));
    auto res = delete_object(t, {r.ns, r.name}, opts);
    if (res.remaining) return json_response(200, present(t, r.version, *res.remaining));
    if (t.custom) {
        proto::StatusDetails d = res_details(t, r.name);
        auto st = proto::make_success_status(d);
        st["details"].as_object()["uid"] = string_at(m, "uid");
        return json_response(200, st);
    }
    return json_response(200, present(t, r.version, res.removed ? *res.removed : *cur));
}

}  // namespace kubesandbox::local
