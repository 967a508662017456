// Create, update and patch with validation and defaulting, and the watch fan-out.
#include <algorithm>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <variant>
#include "local/api_server_impl.hpp"
#include "local/known_fields.hpp"
#include "local/protobuf_objects.hpp"
#include "local/store.hpp"
#include "proto/patch.hpp"
#include "proto/status.hpp"
#include "proto/validation.hpp"
#include "util/json_access.hpp"
#include "util/time_format.hpp"

namespace kubesandbox::local {

ApiServer::Impl::Impl(asio::any_io_executor ex, ApiServerOptions opts, FaultList& f)
    : executor(std::move(ex)), options(std::move(opts)), faults(f), owner_check_timer(executor) {
    store.on_event = [this](const StoreEvent& ev) {
        dispatch_event(ev);
        notice_owners(ev);
    };
    for (const char* ns : {"default", "kube-system", "kube-public", "kube-node-lease"}) {
        json::object o{{"apiVersion", "v1"},
                       {"kind", "Namespace"},
                       {"metadata", json::object{{"name", ns}}},
                       {"spec", json::object{{"finalizers", json::array{"kubernetes"}}}},
                       {"status", json::object{{"phase", "Active"}}}};
        stamp_new(o);
        o["metadata"].as_object()["labels"] = json::object{{"kubernetes.io/metadata.name", ns}};
        store.put("namespaces", std::move(o));
    }
}

void ApiServer::Impl::stamp_new(json::object& o) {
    auto& m = o["metadata"].as_object();
    m["uid"] = new_uid();
    m["creationTimestamp"] = util::now_rfc3339();
}

json::object ApiServer::Impl::present(const ResourceType& t, const std::string& version, const json::object& o) const {
    json::object out = o;
    out["apiVersion"] = t.api_version(version);
    out["kind"] = t.kind;
    return out;
}

bool ApiServer::Impl::in_scope(const Watcher& w, const json::object& o) const {
    if (!w.ns.empty() && string_at(metadata_of(o), "namespace") != w.ns) return false;
    auto labels = object_at(metadata_of(o), "labels");
    return w.labels.matches(labels) && w.fields.matches(o);
}

std::string ApiServer::Impl::event_line(Watcher& w, std::string_view type, const json::object& o) const {
    json::object ev{{"type", type}, {"object", present(*w.type, w.version, o)}};
    if (w.table) {
        auto table = to_table(*w.type, {ev["object"].as_object()}, w.include_object,
                              json::object{{"resourceVersion", string_at(metadata_of(o), "resourceVersion")}});
        if (w.columns_sent) table["columnDefinitions"] = json::array{};
        w.columns_sent = true;
        ev["object"] = std::move(table);
    }
    return json::serialize(ev) + "\n";
}

void ApiServer::Impl::feed(Watcher& w, const StoreEvent& ev) {
    if (ev.resource != w.type->id()) return;
    bool old_match = ev.previous && in_scope(w, *ev.previous);
    if (ev.type == "DELETED") {
        if (old_match) w.queue.push_back(event_line(w, "DELETED", *ev.object));
        return;
    }
    bool new_match = in_scope(w, *ev.object);
    if (old_match && new_match) w.queue.push_back(event_line(w, "MODIFIED", *ev.object));
    else if (new_match) w.queue.push_back(event_line(w, "ADDED", *ev.object));
    else if (old_match) {
        // Stopped matching: the previous content with the new resourceVersion.
        json::object prev = *ev.previous;
        prev["metadata"].as_object()["resourceVersion"] = std::to_string(ev.rv);
        w.queue.push_back(event_line(w, "DELETED", prev));
    }
}

void ApiServer::Impl::dispatch_event(const StoreEvent& ev) {
    for (auto& w : watchers) {
        std::size_t before = w->queue.size();
        feed(*w, ev);
        if (w->queue.size() != before) w->signal.cancel();
    }
}

std::optional<Response> ApiServer::Impl::check_namespace_for_create(const ResourceType& t, const std::string& ns,
                                                                    const std::string& name) {
    auto nso = store.get("namespaces", {"", ns});
    if (!nso) {
        return status_response(404, "NotFound", "namespaces \"" + ns + "\" not found", res_details(ns_type(), ns));
    }
    if (metadata_of(*nso).contains("deletionTimestamp")) {
        proto::StatusDetails d = res_details(t, name);
        d.causes.push_back({"NamespaceTerminating", "namespace " + ns + " is being terminated", "metadata.namespace"});
        return status_response(403, "Forbidden",
                               qualified_plural(t) + " \"" + name +
                                   "\" is forbidden: unable to create new content in namespace " + ns +
                                   " because it is being terminated",
                               d);
    }
    return std::nullopt;
}

std::variant<json::object, Response> ApiServer::Impl::parse_body(const Request& req, bool allow_yaml) {
    std::string ct(req.msg[http::field::content_type]);
    auto semi = ct.find(';');
    std::string base = ct.substr(0, semi);
    while (!base.empty() && base.back() == ' ') base.pop_back();
    if (base == "application/vnd.kubernetes.protobuf") {
        auto decoded = decode_protobuf_object(req.msg.body());
        if (!decoded) {
            if (decoded.error().is(errc::unsupported_media_type))
                return status_response(415, "UnsupportedMediaType", decoded.error().message);
            return bad_request(decoded.error().message);
        }
        return std::move(*decoded);
    }
    bool ok = base.empty() || base == "application/json" || base == "*/*" ||
              (allow_yaml && (base == "application/yaml" || base == "application/apply-patch+yaml"));
    if (!ok)
        return status_response(415, "UnsupportedMediaType",
                               "the body of the request was in an unknown format - accepted media types include: "
                               "application/json, application/yaml, application/vnd.kubernetes.protobuf, "
                               "application/cbor");
    error_code ec;
    json::value v = json::parse(req.msg.body(), ec);
    if (ec)
        return bad_request("the server rejected our request due to an error in our request: json parse error: " +
                           ec.message());
    if (!v.is_object())
        return bad_request(
            "the server rejected our request due to an error in our request: the body is not a JSON object");
    auto& o = v.as_object();
    if (!o.contains("metadata") || !o["metadata"].is_object()) o["metadata"] = json::object{};
    return std::move(o);
}

bool ApiServer::Impl::dry_run(const Request& req) const {
    auto it = req.query.find("dryRun");
    return it != req.query.end() && it->second == "All";
}

std::variant<std::string, Response> ApiServer::Impl::field_validation(const Request& req,
                                                                      std::string_view options_kind) const {
    auto it = req.query.find("fieldValidation");
    if (it == req.query.end() || it->second.empty()) return std::string("Warn");
    if (it->second == "Strict" || it->second == "Warn" || it->second == "Ignore") return it->second;
    std::vector<StatusCause> causes{{"FieldValueNotSupported",
                                     "Unsupported value: " + proto::go_quote(it->second) +
                                         ": supported values: \"\", \"Ignore\", \"Strict\", \"Warn\"",
                                     "fieldValidation"}};
    proto::StatusDetails d;
    d.group = "meta.k8s.io";
    d.kind = std::string(options_kind);
    std::string msg = proto::invalid_message(std::string(options_kind) + ".meta.k8s.io", "", causes);
    d.causes = std::move(causes);
    return status_response(422, "Invalid", msg, d);
}

std::optional<Response> ApiServer::Impl::drop_unknown_fields(const Request& req, const ResourceType& t,
                                                             const std::string& directive, json::object& o,
                                                             const std::string& decode_prefix) const {
    auto unknown = prune_unknown_fields(t, o);
    if (unknown.empty() || directive == "Ignore") return std::nullopt;
    if (directive == "Strict") {
        std::string msg = decode_prefix + "strict decoding error: ";
        for (std::size_t i = 0; i < unknown.size(); ++i)
            msg += (i ? ", unknown field " : "unknown field ") + proto::go_quote(unknown[i]);
        return bad_request(msg);
    }
    for (auto& f : unknown) req.warnings.push_back("unknown field " + proto::go_quote(f));
    return std::nullopt;
}

std::string ApiServer::Impl::decode_prefix(const ResourceType& t, const std::string& version) {
    return t.kind + " in version " + proto::go_quote(version) + " cannot be handled as a " + t.kind + ": ";
}

std::optional<Response> ApiServer::Impl::bind_namespace(const ResourceType& t, const Route& r, json::object& meta) {
    if (!t.namespaced) {
        meta.erase("namespace");
        return std::nullopt;
    }
    std::string body_ns = string_at(meta, "namespace");
    if (!body_ns.empty() && body_ns != r.ns)
        return bad_request("the namespace of the provided object does not match the namespace sent on the request");
    meta["namespace"] = r.ns;
    return std::nullopt;
}

Response ApiServer::Impl::create(const Request& req, const Route& r) {
    const ResourceType& t = *r.type;
    auto directive = field_validation(req, "CreateOptions");
    if (auto* resp = std::get_if<Response>(&directive)) return *resp;
    auto parsed = parse_body(req);
    if (auto* resp = std::get_if<Response>(&parsed)) return *resp;
    json::object o = std::move(std::get<json::object>(parsed));
    if (auto resp = drop_unknown_fields(req, t, std::get<std::string>(directive), o, decode_prefix(t, r.version)))
        return *resp;
    if (!o.contains("metadata") || !o["metadata"].is_object()) o["metadata"] = json::object{};
    auto& meta = o["metadata"].as_object();
    if (auto mismatch = bind_namespace(t, r, meta)) return *mismatch;
    std::string kind = string_at(o, "kind");
    if (!kind.empty() && kind != t.kind)
        return bad_request("the API version in the data (" + string_at(o, "apiVersion") +
                           ") does not match the expected API version (" + t.api_version(r.version) + ") or kind " +
                           kind + " does not match " + t.kind);
    auto causes = proto::validate_object_meta(meta, name_rule(t), true);
    std::string name = string_at(meta, "name");
    const KindRules& rules = rules_for(t);
    if (rules.validate) {
        auto kc = rules.validate(o);
        causes.insert(causes.end(), kc.begin(), kc.end());
    }
    if (!causes.empty()) return invalid(t, name.empty() ? string_at(meta, "generateName") : name, causes);
    if (name.empty()) {
        std::string prefix = string_at(meta, "generateName");
        for (int i = 0; i < 8; ++i) {
            name = proto::generate_name(prefix);
            if (!store.get(t.id(), {r.ns, name})) break;
        }
        meta["name"] = name;
    }
    if (t.namespaced) {
        if (auto resp = check_namespace_for_create(t, r.ns, name)) return *resp;
    }
    if (rules.admit) {
        if (auto refused = rules.admit(*this, r, o)) return *refused;
    }
    if (store.get(t.id(), {r.ns, name})) {
        return status_response(409, "AlreadyExists", qualified_plural(t) + " \"" + name + "\" already exists",
                               res_details(t, name));
    }
    for (auto k : {"uid", "resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "managedFields"})
        meta.erase(k);
    stamp_new(o);
    o["apiVersion"] = t.api_version(t.versions.front());
    o["kind"] = t.kind;
    // Not through `meta`: adding apiVersion or kind may have moved every member of `o`.
    if (t.custom) o["metadata"].as_object()["generation"] = 1;
    if (rules.defaults) rules.defaults(*this, o);
    if (dry_run(req)) return json_response(201, present(t, r.version, o));
    auto stored = store.put(t.id(), std::move(o));
    if (rules.stored) rules.stored(*this, *stored);
    return json_response(201, present(t, r.version, *stored));
}

Response ApiServer::Impl::update_object(const Request& req, const Route& r, const json::object& current,
                                        json::object incoming, bool require_rv) {
    const ResourceType& t = *r.type;
    auto& meta = incoming["metadata"].as_object();
    const auto& cur_meta = metadata_of(current);
    std::string body_name = string_at(meta, "name");
    if (body_name.empty()) meta["name"] = r.name;
    else if (body_name != r.name)
        return bad_request("the name of the object (" + body_name + ") does not match the name on the URL (" + r.name +
                           ")");
    if (auto mismatch = bind_namespace(t, r, meta)) return *mismatch;
    // A uid in the body names the object it was read from: Kubernetes treats it as a precondition
    // on an update (409 when the name now holds another object) and as immutable in a patch.
    std::string body_uid = string_at(meta, "uid");
    if (!body_uid.empty() && body_uid != string_at(cur_meta, "uid")) {
        if (require_rv)
            return conflict(t, r.name,
                            "Precondition failed: UID in precondition: " + body_uid +
                                ", UID in object meta: " + string_at(cur_meta, "uid"));
        return invalid(
            t, r.name,
            {{"FieldValueInvalid", "Invalid value: \"" + body_uid + "\": field is immutable", "metadata.uid"}});
    }
    std::string rv = string_at(meta, "resourceVersion");
    if (rv.empty() && require_rv && t.custom) {
        return invalid(
            t, r.name,
            {{"FieldValueInvalid", "Invalid value: 0x0: must be specified for an update", "metadata.resourceVersion"}});
    }
    if (!rv.empty() && rv != string_at(cur_meta, "resourceVersion"))
        return conflict(t, r.name,
                        "the object has been modified; please apply your changes to the latest version and try again");
    auto causes = proto::validate_object_meta(meta, name_rule(t), false);
    if (!causes.empty()) return invalid(t, r.name, causes);
    // Server-owned metadata.
    for (auto k : {"uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation"}) {
        if (auto v = cur_meta.if_contains(k)) meta[k] = *v;
        else meta.erase(k);
    }
    bool has_status = std::find(t.subresources.begin(), t.subresources.end(), "status") != t.subresources.end();
    if (r.sub == "status") {
        // Only status changes through the status subresource.
        json::object merged = current;
        if (auto s = incoming.if_contains("status")) merged["status"] = *s;
        else merged.erase("status");
        incoming = std::move(merged);
    } else if (has_status) {
        if (auto s = current.if_contains("status")) incoming["status"] = *s;
        else incoming.erase("status");
    }
    const KindRules& rules = rules_for(t);
    if (rules.on_update) {
        if (auto resp = rules.on_update(r, current, incoming)) return *resp;
    }
    incoming["apiVersion"] = t.api_version(t.versions.front());
    incoming["kind"] = t.kind;
    // Taken after the last key was added: adding one may move every member of the object.
    auto& m2 = incoming["metadata"].as_object();
    if (t.custom) {
        const json::value* old_spec = current.if_contains("spec");
        const json::value* new_spec = incoming.if_contains("spec");
        bool same = (!old_spec && !new_spec) || (old_spec && new_spec && *old_spec == *new_spec);
        std::int64_t gen = 1;
        if (auto g = cur_meta.if_contains("generation"); g && g->is_int64()) gen = g->as_int64();
        m2["generation"] = same ? gen : gen + 1;
    }
    // No change: no new resourceVersion, no event.
    m2["resourceVersion"] = string_at(cur_meta, "resourceVersion");
    if (incoming == current) return json_response(200, present(t, r.version, current));
    if (dry_run(req)) return json_response(200, present(t, r.version, incoming));
    bool deleting = m2.contains("deletionTimestamp");
    auto stored = store.put(t.id(), std::move(incoming));
    if (deleting && !has_finalizers(*stored) && rules.deletion == Deletion::immediate) {
        // The last finalizer went away: the object is gone.
        auto last = remove_now(t, {r.ns, r.name});
        return json_response(200, present(t, r.version, last ? *last : *stored));
    }
    if (rules.stored && r.sub != "status") rules.stored(*this, *stored);
    return json_response(200, present(t, r.version, *stored));
}

Response ApiServer::Impl::replace(const Request& req, const Route& r) {
    const ResourceType& t = *r.type;
    auto cur = store.get(t.id(), {r.ns, r.name});
    auto directive = field_validation(req, "UpdateOptions");
    if (auto* resp = std::get_if<Response>(&directive)) return *resp;
    auto parsed = parse_body(req);
    if (auto* resp = std::get_if<Response>(&parsed)) return *resp;
    json::object o = std::move(std::get<json::object>(parsed));
    if (auto resp = drop_unknown_fields(req, t, std::get<std::string>(directive), o, decode_prefix(t, r.version)))
        return *resp;
    if (!o.contains("metadata") || !o["metadata"].is_object()) o["metadata"] = json::object{};
    if (!cur) return not_found(t, r.name);
    return update_object(req, r, *cur, std::move(o), true);
}

Response ApiServer::Impl::patch(const Request& req, const Route& r) {
    const ResourceType& t = *r.type;
    std::string ct(req.msg[http::field::content_type]);
    ct = ct.substr(0, ct.find(';'));
    error_code ec;
    json::value p = json::parse(req.msg.body(), ec);
    bool apply = ct == "application/apply-patch+yaml";
    if (ct != "application/json-patch+json" && ct != "application/merge-patch+json" &&
        ct != "application/strategic-merge-patch+json" && !apply)
        return status_response(415, "UnsupportedMediaType", unsupported_patch_message);
    if (ct == "application/strategic-merge-patch+json" && t.custom)
        return status_response(415, "UnsupportedMediaType", unsupported_patch_message);
    auto directive = field_validation(req, "PatchOptions");
    if (auto* resp = std::get_if<Response>(&directive)) return *resp;
    if (ec) return bad_request("error decoding patch: " + ec.message());
    auto cur = store.get(t.id(), {r.ns, r.name});
    if (apply) {
        // Server-side apply, simplified: create when absent, else merge the intent.
        auto it = req.query.find("fieldManager");
        if (it == req.query.end() || it->second.empty())
            return invalid(t, r.name,
                           {{"FieldValueRequired", "Required value: is required for apply patch", "fieldManager"}});
        if (!p.is_object()) return bad_request("error decoding YAML: apply patches must be JSON objects here");
        if (!cur) {
            Request create_req;
            create_req.msg = req.msg;
            create_req.msg.set(http::field::content_type, "application/json");
            create_req.query = req.query;
            auto& po = p.as_object();
            if (!po.contains("metadata") || !po["metadata"].is_object()) po["metadata"] = json::object{};
            if (string_at(po["metadata"].as_object(), "name").empty()) po["metadata"].as_object()["name"] = r.name;
            create_req.msg.body() = json::serialize(p);
            Response created = create(create_req, r);
            req.warnings.insert(req.warnings.end(), create_req.warnings.begin(), create_req.warnings.end());
            return created;
        }
    }
    if (!cur) return not_found(t, r.name);
    json::value target = *cur;
    json::value result;
    if (ct == "application/json-patch+json") {
        if (!p.is_array()) return bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch");
        auto res = proto::apply_json_patch(target, p);
        if (!res) {
            if (res.error().is(errc::bad_request)) return bad_request(res.error().message);
            if (res.error().is(errc::request_entity_too_large))
                return status_response(413, "RequestEntityTooLarge", res.error().message, proto::StatusDetails{});
            proto::StatusDetails d;
            d.causes = res.error().causes;
            return status_response(422, "Invalid", res.error().message, d);
        }
        result = std::move(*res);
    } else if (ct == "application/strategic-merge-patch+json") {
        if (!p.is_object()) return bad_request("the body of the request was not a JSON object");
        auto res = proto::apply_strategic_merge_patch(target, p);
        if (!res) return bad_request(res.error().message);
        result = std::move(*res);
    } else {
        if (!p.is_object()) return bad_request("the body of the request was not a JSON object");
        result = proto::apply_merge_patch(target, p);
    }
    if (!result.is_object()) return bad_request("the patched object is not a JSON object");
    auto& ro = result.as_object();
    if (auto resp = drop_unknown_fields(req, t, std::get<std::string>(directive), ro, "")) return *resp;
    if (!ro.contains("metadata") || !ro["metadata"].is_object()) ro["metadata"] = json::object{};
    return update_object(req, r, *cur, std::move(ro), false);
}

}  // namespace kubesandbox::local
