// Status responses and small helpers shared by the handlers.
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include "local/api_server_impl.hpp"
#include "local/store.hpp"
#include "proto/status.hpp"
#include "proto/validation.hpp"
#include "util/json_access.hpp"

namespace kubesandbox::local {

// ---------------------------------------------------------------------------------------------
// Faults

void FaultList::add(FaultRule rule) {
    std::lock_guard lock(mutex_);
    rules_.push_back(std::move(rule));
}

void FaultList::clear() {
    std::lock_guard lock(mutex_);
    rules_.clear();
}

std::optional<FaultRule> FaultList::take(std::string_view method, std::string_view target) {
    std::lock_guard lock(mutex_);
    for (auto it = rules_.begin(); it != rules_.end(); ++it) {
        if (!it->method.empty() && it->method != method) continue;
        if (!it->path_contains.empty() && target.find(it->path_contains) == std::string_view::npos) continue;
        FaultRule r = *it;
        if (it->count > 0 && --it->count == 0) rules_.erase(it);
        ++applied_;
        return r;
    }
    return std::nullopt;
}

// ---------------------------------------------------------------------------------------------

Response json_response(unsigned status, const json::value& v) {
    Response r;
    r.status = status;
    r.body = json::serialize(v);
    return r;
}

Response status_response(unsigned code, std::string_view reason, std::string_view message,
                         std::optional<proto::StatusDetails> details) {
    return json_response(code, proto::make_status(code, reason, message, details));
}

std::string qualified_plural(const ResourceType& t) { return t.group.empty() ? t.plural : t.plural + "." + t.group; }

std::string qualified_kind(const ResourceType& t) { return t.group.empty() ? t.kind : t.kind + "." + t.group; }

proto::StatusDetails res_details(const ResourceType& t, std::string name) {
    proto::StatusDetails d;
    d.name = std::move(name);
    d.group = t.group;
    d.kind = t.plural;
    return d;
}

Response not_found(const ResourceType& t, const std::string& name) {
    return status_response(404, "NotFound", qualified_plural(t) + " \"" + name + "\" not found", res_details(t, name));
}

Response bad_request(std::string_view message) { return status_response(400, "BadRequest", message); }

Response invalid(const ResourceType& t, const std::string& name, std::vector<StatusCause> causes) {
    proto::StatusDetails d;
    d.name = name;
    d.group = t.group;
    d.kind = t.kind;
    std::string msg = proto::invalid_message(qualified_kind(t), name, causes);
    d.causes = std::move(causes);
    return status_response(422, "Invalid", msg, d);
}

Response conflict(const ResourceType& t, const std::string& name, std::string_view detail) {
    return status_response(
        409, "Conflict",
        "Operation cannot be fulfilled on " + qualified_plural(t) + " \"" + name + "\": " + std::string(detail),
        res_details(t, name));
}

Response server_not_found() {
    proto::StatusDetails d;
    return status_response(404, "NotFound", "the server could not find the requested resource", d);
}

proto::NameRule name_rule(const ResourceType& t) {
    switch (t.name_kind) {
        case NameKind::label:
            return proto::NameRule::dns1123_label;
        case NameKind::dns1035:
            return proto::NameRule::dns1035_label;
        default:
            return proto::NameRule::dns1123_subdomain;
    }
}

std::string status_reason(unsigned code) {
    auto r = proto::reason_for_http_status(code);
    return r.empty() ? std::string("Unknown") : std::string(r);
}

std::optional<std::int64_t> int_param(const std::map<std::string, std::string>& q, const std::string& key) {
    auto it = q.find(key);
    if (it == q.end() || it->second.empty()) return std::nullopt;
    try {
        std::size_t pos = 0;
        long long v = std::stoll(it->second, &pos);
        if (pos != it->second.size()) return std::nullopt;
        return v;
    } catch (...) {
        return std::nullopt;
    }
}

std::vector<std::string_view> selectable_fields(const ResourceType& t) {
    std::vector<std::string_view> f{"metadata.name", "metadata.namespace"};
    const auto& extra = rules_for(t).selectable_fields;
    f.insert(f.end(), extra.begin(), extra.end());
    return f;
}

bool has_finalizer(const json::object& o, std::string_view f) {
    auto m = object_at(o, "metadata");
    if (!m) return false;
    auto fin = m->if_contains("finalizers");
    if (!fin || !fin->is_array()) return false;
    for (auto& v : fin->as_array())
        if (v.is_string() && v.as_string() == f) return true;
    return false;
}

bool has_finalizers(const json::object& o) {
    auto m = object_at(o, "metadata");
    if (!m) return false;
    auto fin = m->if_contains("finalizers");
    return fin && fin->is_array() && !fin->as_array().empty();
}

void remove_finalizer(json::object& o, std::string_view f) {
    auto m = object_at(o, "metadata");
    if (!m) return;
    auto fin = m->if_contains("finalizers");
    if (!fin || !fin->is_array()) return;
    auto& arr = fin->as_array();
    for (auto it = arr.begin(); it != arr.end();)
        it = (it->is_string() && it->as_string() == f) ? arr.erase(it) : std::next(it);
    if (arr.empty()) m->erase("finalizers");
}

bool parse_bool(std::string_view v) {
    return v == "1" || v == "t" || v == "T" || v == "true" || v == "True" || v == "TRUE";
}

bool wants_table(const http::request<http::string_body>& msg) {
    std::string_view accept = msg[http::field::accept];
    return accept.find("as=Table") != std::string_view::npos;
}

}  // namespace kubesandbox::local
