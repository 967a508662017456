// List with selectors and pagination, delete collection, pod status from the kubelet, and the
// ApiServer methods.
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <variant>
#include "local/api_server_impl.hpp"
#include "local/store.hpp"
#include "proto/label_selector.hpp"
#include "proto/status.hpp"
#include "util/json_access.hpp"

namespace kubesandbox::local {

std::variant<ApiServer::Impl::Selectors, Response> ApiServer::Impl::selectors(const Request& req,
                                                                              const ResourceType& t) {
    Selectors s;
    if (auto it = req.query.find("labelSelector"); it != req.query.end()) {
        auto ls = proto::LabelSelector::parse(it->second);
        if (!ls) return bad_request(ls.error().message);
        s.labels = std::move(*ls);
    }
    if (auto it = req.query.find("fieldSelector"); it != req.query.end()) {
        auto fs = proto::FieldSelector::parse(it->second);
        if (!fs) return bad_request(fs.error().message);
        auto ok = fs->check_supported(selectable_fields(t));
        if (!ok) return bad_request(ok.error().message);
        s.fields = std::move(*fs);
    }
    return s;
}

bool ApiServer::Impl::matches(const Selectors& s, const std::string& ns, const json::object& o) const {
    if (!ns.empty() && string_at(metadata_of(o), "namespace") != ns) return false;
    return s.labels.matches(object_at(metadata_of(o), "labels")) && s.fields.matches(o);
}

Response ApiServer::Impl::list(const Request& req, const Route& r) {
    const ResourceType& t = *r.type;
    auto sel_or = selectors(req, t);
    if (auto* resp = std::get_if<Response>(&sel_or)) return *resp;
    const Selectors& sel = std::get<Selectors>(sel_or);
    std::int64_t limit = 0;
    if (auto l = int_param(req.query, "limit"); l && *l > 0) limit = *l;
    std::string cont;
    if (auto it = req.query.find("continue"); it != req.query.end()) cont = it->second;

    const ObjectMap* source = &store.objects(t.id());
    std::uint64_t rv = store.resource_version();
    std::uint64_t snapshot_id = 0;
    ObjectKey after;
    bool has_after = false;
    if (!cont.empty()) {
        auto tok = decode_continue(cont);
        if (!tok)
            return bad_request(
                "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)");
        after = tok->after;
        has_after = true;
        if (tok->id != 0) {
            auto snap = snapshots.find(tok->id, options.continue_token_ttl);
            if (!snap || snap->resource != t.id()) {
                ContinueToken fresh{store.resource_version(), 0, after};
                auto st = proto::make_status(
                    410, "Expired",
                    "The provided continue parameter is too old to display a consistent list result. You can "
                    "start a new list without the continue parameter, or use the continue token in this response "
                    "to retrieve the remainder of the results. Continuing with the provided token results in an "
                    "inconsistent list - objects that were created, modified, or deleted between the time the "
                    "first chunk was returned and now may show up in the list.");
                st["metadata"].as_object()["continue"] = encode_continue(fresh);
                return json_response(410, st);
            }
            source = &snap->objects;
            rv = snap->rv;
            snapshot_id = tok->id;
        }
    }
    json::array items;
    auto [it, end] = list_range(*source, r.ns, has_after ? &after : nullptr);
    std::optional<ObjectKey> last;
    bool more = false;
    std::int64_t remaining = 0;
    bool selective = !sel.labels.empty() || !sel.fields.empty();
    for (; it != end; ++it) {
        if (!matches(sel, r.ns, *it->second)) continue;
        if (limit > 0 && static_cast<std::int64_t>(items.size()) >= limit) {
            more = true;
            if (selective) break;
            ++remaining;
            continue;
        }
        items.push_back(present(t, r.version, *it->second));
        last = it->first;
    }
    json::object meta{{"resourceVersion", std::to_string(rv)}};
    if (more && last) {
        if (snapshot_id == 0 && cont.empty()) snapshot_id = snapshots.add(rv, t.id(), *source);
        meta["continue"] = encode_continue({rv, snapshot_id, *last});
        if (!selective) meta["remainingItemCount"] = remaining;
    }
    if (wants_table(req.msg)) {
        std::vector<json::object> objs;
        for (auto& i : items) objs.push_back(i.as_object());
        auto io = req.query.find("includeObject");
        return json_response(200, to_table(t, objs, io != req.query.end() && io->second == "Object", meta));
    }
    return json_response(
        200,
        json::object{
            {"kind", t.kind + "List"}, {"apiVersion", t.api_version(r.version)}, {"metadata", meta}, {"items", items}});
}

Response ApiServer::Impl::delete_collection(const Request& req, const Route& r) {
    const ResourceType& t = *r.type;
    auto sel_or = selectors(req, t);
    if (auto* resp = std::get_if<Response>(&sel_or)) return *resp;
    const Selectors& sel = std::get<Selectors>(sel_or);
    auto parsed = delete_options(req);
    if (auto* resp = std::get_if<Response>(&parsed)) return *resp;
    auto opts = std::get<DeleteOptions>(parsed);
    std::vector<ObjectKey> keys;
    json::array items;
    auto [first, end] = list_range(store.objects(t.id()), r.ns, nullptr);
    for (auto it = first; it != end; ++it)
        if (matches(sel, r.ns, *it->second)) {
            keys.push_back(it->first);
            items.push_back(present(t, r.version, *it->second));
        }
    if (!opts.dry_run)
        for (auto& k : keys) delete_object(t, k, opts);
    return json_response(
        200, json::object{{"kind", t.kind + "List"},
                          {"apiVersion", t.api_version(r.version)},
                          {"metadata", json::object{{"resourceVersion", std::to_string(store.resource_version())}}},
                          {"items", items}});
}

void ApiServer::Impl::write_pod_status(const std::string& ns, const std::string& name, const std::string& uid,
                                       json::object status) {
    if (stopping) return;
    const ResourceType& t = *find_resource_by_id("pods");
    auto cur = store.get("pods", {ns, name});
    if (!cur || string_at(metadata_of(*cur), "uid") != uid) return;
    json::object copy = *cur;
    copy["status"] = std::move(status);
    if (copy != *cur) cur = store.put("pods", std::move(copy));
    if (!metadata_of(*cur).contains("deletionTimestamp")) return;
    // Terminating pod: gone from the API once no container runs any more.
    auto st = object_at(*cur, "status");
    std::string phase = st ? string_at(*st, "phase") : "";
    bool all_done = phase == "Succeeded" || phase == "Failed";
    if (!all_done && st) {
        auto cs = st->if_contains("containerStatuses");
        if (cs && cs->is_array() && !cs->as_array().empty()) {
            all_done = true;
            for (auto& c : cs->as_array()) {
                auto state = c.is_object() ? object_at(c.as_object(), "state") : nullptr;
                if (!state || !state->contains("terminated")) all_done = false;
            }
        }
    }
    if (all_done) remove_now(t, {ns, name});
}

ApiServer::ApiServer(asio::any_io_executor executor, ApiServerOptions options, FaultList& faults)
    : impl_(std::make_unique<Impl>(std::move(executor), std::move(options), faults)) {}

ApiServer::~ApiServer() = default;

void ApiServer::set_kubelet(Kubelet* kubelet) { impl_->kubelet = kubelet; }
void ApiServer::set_server_address(std::string address) { impl_->options.server_address = std::move(address); }

void ApiServer::write_pod_status(const std::string& ns, const std::string& name, const std::string& uid,
                                 json::object status) {
    impl_->write_pod_status(ns, name, uid, std::move(status));
}

void ApiServer::expire_continue_tokens() { impl_->snapshots.expire_all(); }

std::size_t ApiServer::open_watches(std::string_view plural) const {
    std::size_t n = 0;
    for (const auto& w : impl_->watchers)
        if (!w->expired && w->type && w->type->plural == plural) ++n;
    return n;
}

void ApiServer::expire_watches() {
    for (auto& w : impl_->watchers) {
        w->expired = true;
        w->signal.cancel();
    }
}

void ApiServer::shutdown() {
    impl_->stopping = true;
    impl_->owner_check_timer.cancel();
    expire_watches();
    for (auto& [uid, timer] : impl_->pod_grace_timers) timer->cancel();
    impl_->pod_grace_timers.clear();
    for (auto* s : *impl_->connections) s->close();
}

std::size_t ApiServer::open_connections() const { return impl_->connections->size(); }

}  // namespace kubesandbox::local
