#include "local/api_server.hpp"
#include "util/json_access.hpp"
#include "util/time_format.hpp"

#include "local/known_fields.hpp"
#include "local/kubelet.hpp"
#include "local/protobuf_objects.hpp"
#include "local/store.hpp"
#include "proto/label_selector.hpp"
#include "proto/patch.hpp"
#include "proto/status.hpp"
#include "proto/validation.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <boost/url/parse.hpp>

#include <algorithm>
#include <charconv>
#include <ctime>
#include <list>
#include <set>
#include <sstream>
#include <variant>

namespace kubesandbox::local {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using boost::system::error_code;
using namespace std::chrono_literals;

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
        return r;
    }
    return std::nullopt;
}

// ---------------------------------------------------------------------------------------------

namespace {

constexpr std::size_t body_limit = 3 * 1024 * 1024;
constexpr const char* unsupported_patch_message =
    "the body of the request was in an unknown format - accepted media types include: "
    "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml";

struct Response {
    unsigned status = 200;
    std::string content_type = "application/json";
    std::string body;
    std::vector<std::pair<std::string, std::string>> headers;
};

Response json_response(unsigned status, const json::value& v) {
    Response r;
    r.status = status;
    r.body = json::serialize(v);
    return r;
}

Response status_response(unsigned code, std::string_view reason, std::string_view message,
                         std::optional<proto::StatusDetails> details = std::nullopt) {
    return json_response(code, proto::make_status(code, reason, message, details));
}

// "pods", "sandboxclaims.extensions.agents.x-k8s.io"
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
    return status_response(409, "Conflict",
                           "Operation cannot be fulfilled on " + qualified_plural(t) + " \"" + name + "\": " +
                               std::string(detail),
                           res_details(t, name));
}

Response server_not_found() {
    proto::StatusDetails d;
    return status_response(404, "NotFound", "the server could not find the requested resource", d);
}

proto::NameRule name_rule(const ResourceType& t) {
    switch (t.name_kind) {
        case NameKind::label: return proto::NameRule::dns1123_label;
        case NameKind::dns1035: return proto::NameRule::dns1035_label;
        default: return proto::NameRule::dns1123_subdomain;
    }
}

using util::metadata_of;
using util::object_at;
using util::string_at;

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

json::object version_json() {
    return json::object{{"major", "1"},
                        {"minor", "32"},
                        {"gitVersion", "v1.32.4-kubesandbox"},
                        {"gitCommit", "0000000000000000000000000000000000000000"},
                        {"gitTreeState", "clean"},
                        {"buildDate", "2026-01-01T00:00:00Z"},
                        {"goVersion", "go1.23.6"},
                        {"compiler", "gc"},
                        {"platform", "linux/amd64"}};
}

json::array verbs_for(const ResourceType&) {
    return json::array{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"};
}

json::object resource_list(const std::string& group_version, const std::string& group, const std::string& version) {
    json::array resources;
    for (const auto& t : resource_types()) {
        if (t.group != group || std::find(t.versions.begin(), t.versions.end(), version) == t.versions.end()) continue;
        json::object r{{"name", t.plural},          {"singularName", t.singular}, {"namespaced", t.namespaced},
                       {"kind", t.kind},            {"verbs", verbs_for(t)}};
        if (!t.short_names.empty()) {
            json::array sn;
            for (auto& s : t.short_names) sn.push_back(json::value(s));
            r["shortNames"] = sn;
        }
        if (t.custom || !t.group.empty()) r["categories"] = json::array{"all"};
        else if (t.plural == "pods" || t.plural == "services") r["categories"] = json::array{"all"};
        resources.push_back(r);
        for (const auto& sub : t.subresources) {
            json::object s{{"name", t.plural + "/" + sub}, {"singularName", ""}, {"namespaced", t.namespaced}};
            if (sub == "status") {
                s["kind"] = t.kind;
                s["verbs"] = json::array{"get", "patch", "update"};
            } else if (sub == "log") {
                s["kind"] = "Pod";
                s["verbs"] = json::array{"get"};
            } else {
                s["kind"] = sub == "exec" ? "PodExecOptions" : "PodPortForwardOptions";
                s["verbs"] = json::array{"create", "get"};
            }
            resources.push_back(s);
        }
    }
    return json::object{{"kind", "APIResourceList"}, {"apiVersion", "v1"}, {"groupVersion", group_version},
                        {"resources", resources}};
}

json::object api_group(const std::string& group) {
    json::array versions;
    std::vector<std::string> seen;
    for (const auto& t : resource_types()) {
        if (t.group != group) continue;
        for (const auto& v : t.versions)
            if (std::find(seen.begin(), seen.end(), v) == seen.end()) seen.push_back(v);
    }
    for (const auto& v : seen) versions.push_back(json::object{{"groupVersion", group + "/" + v}, {"version", v}});
    return json::object{{"name", group},
                        {"versions", versions},
                        {"preferredVersion", json::object{{"groupVersion", group + "/" + seen.front()},
                                                          {"version", seen.front()}}}};
}

std::vector<std::string> api_groups() {
    std::vector<std::string> groups;
    for (const auto& t : resource_types())
        if (!t.group.empty() && std::find(groups.begin(), groups.end(), t.group) == groups.end())
            groups.push_back(t.group);
    return groups;
}

// Which fields a field selector may use on this resource.
std::vector<std::string_view> selectable_fields(const ResourceType& t) {
    std::vector<std::string_view> f{"metadata.name", "metadata.namespace"};
    if (t.group.empty() && t.plural == "pods")
        for (auto s : {"spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
                       "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName"})
            f.push_back(s);
    if (t.group.empty() && t.plural == "namespaces") f.push_back("status.phase");
    if (t.group.empty() && t.plural == "secrets") f.push_back("type");
    if (t.group.empty() && t.plural == "events")
        for (auto s : {"involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
                       "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
                       "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type"})
            f.push_back(s);
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

std::string human_age(const json::object& o) {
    std::string ts = string_at(metadata_of(o), "creationTimestamp");
    std::tm tm{};
    if (ts.empty() || !strptime(ts.c_str(), "%Y-%m-%dT%H:%M:%SZ", &tm)) return "<unknown>";
    long long secs = static_cast<long long>(std::time(nullptr) - timegm(&tm));
    if (secs < 0) secs = 0;
    long long m = secs / 60, h = secs / 3600, d = secs / 86400;
    if (secs < 120) return std::to_string(secs) + "s";
    if (m < 10) return std::to_string(m) + "m" + (secs % 60 ? std::to_string(secs % 60) + "s" : "");
    if (h < 3) return std::to_string(m) + "m";
    if (h < 8) return std::to_string(h) + "h" + (m % 60 ? std::to_string(m % 60) + "m" : "");
    if (h < 48) return std::to_string(h) + "h";
    if (d < 8) return std::to_string(d) + "d" + (h % 24 ? std::to_string(h % 24) + "h" : "");
    if (d < 365 * 2) return std::to_string(d) + "d";
    return std::to_string(d / 365) + "y";
}

const json::value* path_at(const json::object& o, std::initializer_list<std::string_view> path) {
    const json::value* cur = nullptr;
    const json::object* obj = &o;
    for (auto k : path) {
        if (!obj) return nullptr;
        cur = obj->if_contains(k);
        if (!cur) return nullptr;
        obj = cur->is_object() ? &cur->as_object() : nullptr;
    }
    return cur;
}

std::string condition_field(const json::object& o, std::string_view type, std::string_view field) {
    auto conds = path_at(o, {"status", "conditions"});
    if (!conds || !conds->is_array()) return "";
    for (auto& c : conds->as_array())
        if (c.is_object() && string_at(c.as_object(), "type") == type) return string_at(c.as_object(), field);
    return "";
}

json::object column(std::string name, std::string type, int priority = 0, std::string format = "") {
    return json::object{{"name", std::move(name)}, {"type", std::move(type)}, {"format", std::move(format)},
                        {"description", ""}, {"priority", priority}};
}

// Server-side printing (kubectl asks for as=Table): the columns a real server shows.
json::object to_table(const ResourceType& t, const std::vector<json::object>& objects, bool include_object,
                      json::object list_meta) {
    json::array cols{column("Name", "string", 0, "name")};
    std::string id = t.id();
    if (id == "pods") {
        for (auto c : {column("Ready", "string"), column("Status", "string"), column("Restarts", "string"),
                       column("Age", "string"), column("IP", "string", 1), column("Node", "string", 1)})
            cols.push_back(c);
    } else if (id == "namespaces") {
        cols.push_back(column("Status", "string"));
        cols.push_back(column("Age", "string"));
    } else if (id == "services") {
        for (auto c : {column("Type", "string"), column("Cluster-IP", "string"), column("External-IP", "string"),
                       column("Port(s)", "string"), column("Age", "string")})
            cols.push_back(c);
    } else if (id == "configmaps" || id == "secrets") {
        if (id == "secrets") cols.push_back(column("Type", "string"));
        cols.push_back(column("Data", "string"));
        cols.push_back(column("Age", "string"));
    } else if (id == "sandboxclaims.extensions.agents.x-k8s.io") {
        for (auto c : {column("Ready", "string"), column("Sandbox", "string"), column("Reason", "string"),
                       column("Age", "string")})
            cols.push_back(c);
    } else if (id == "sandboxes.agents.x-k8s.io") {
        for (auto c : {column("Ready", "string"), column("Reason", "string"), column("Age", "string")}) cols.push_back(c);
    } else if (id == "sandboxwarmpools.extensions.agents.x-k8s.io") {
        for (auto c : {column("Ready", "string"), column("Desired", "string"), column("Age", "string")}) cols.push_back(c);
    } else {
        cols.push_back(column("Age", "string"));
    }
    json::array rows;
    for (const auto& o : objects) {
        json::array cells{string_at(metadata_of(o), "name")};
        if (id == "pods") {
            std::size_t total = 0, ready = 0;
            std::int64_t restarts = 0;
            std::string reason;
            if (auto cs = path_at(o, {"spec", "containers"}); cs && cs->is_array()) total = cs->as_array().size();
            if (auto st = path_at(o, {"status", "containerStatuses"}); st && st->is_array())
                for (auto& c : st->as_array()) {
                    if (!c.is_object()) continue;
                    auto& co = c.as_object();
                    if (auto r = co.if_contains("ready"); r && r->is_bool() && r->as_bool()) ++ready;
                    if (auto r = co.if_contains("restartCount"); r && r->is_int64()) restarts += r->as_int64();
                    if (auto w = path_at(co, {"state", "waiting", "reason"}); w && w->is_string() && reason.empty())
                        reason = w->as_string();
                    if (auto w = path_at(co, {"state", "terminated", "reason"}); w && w->is_string() && reason.empty())
                        reason = w->as_string();
                }
            std::string phase;
            if (auto p = path_at(o, {"status", "phase"}); p && p->is_string()) phase = p->as_string();
            if (auto r = path_at(o, {"status", "reason"}); r && r->is_string()) reason = r->as_string();
            std::string status = reason.empty() ? phase : reason;
            if (metadata_of(o).contains("deletionTimestamp")) status = "Terminating";
            cells.emplace_back(std::to_string(ready) + "/" + std::to_string(total));
            cells.emplace_back(status);
            cells.emplace_back(std::to_string(restarts));
            cells.emplace_back(human_age(o));
            auto ip = path_at(o, {"status", "podIP"});
            cells.emplace_back(ip && ip->is_string() ? ip->as_string() : json::string("<none>"));
            auto node = path_at(o, {"spec", "nodeName"});
            cells.emplace_back(node && node->is_string() ? node->as_string() : json::string("<none>"));
        } else if (id == "namespaces") {
            auto p = path_at(o, {"status", "phase"});
            cells.emplace_back(p && p->is_string() ? p->as_string() : json::string(""));
            cells.emplace_back(human_age(o));
        } else if (id == "services") {
            auto type = path_at(o, {"spec", "type"});
            auto ip = path_at(o, {"spec", "clusterIP"});
            std::string ports;
            if (auto ps = path_at(o, {"spec", "ports"}); ps && ps->is_array())
                for (auto& p : ps->as_array()) {
                    if (!p.is_object()) continue;
                    if (!ports.empty()) ports += ",";
                    auto port = p.as_object().if_contains("port");
                    ports += (port && port->is_int64() ? std::to_string(port->as_int64()) : std::string("?")) + "/" +
                             (string_at(p.as_object(), "protocol").empty() ? std::string("TCP") : string_at(p.as_object(), "protocol"));
                }
            cells.emplace_back(type && type->is_string() ? type->as_string() : json::string("ClusterIP"));
            cells.emplace_back(ip && ip->is_string() ? ip->as_string() : json::string("<none>"));
            cells.emplace_back("<none>");
            cells.emplace_back(ports.empty() ? "<none>" : ports);
            cells.emplace_back(human_age(o));
        } else if (id == "configmaps" || id == "secrets") {
            if (id == "secrets") cells.emplace_back(string_at(o, "type"));
            std::size_t n = 0;
            for (auto k : {"data", "binaryData", "stringData"})
                if (auto d = object_at(o, k)) n += d->size();
            cells.emplace_back(static_cast<std::int64_t>(n));
            cells.emplace_back(human_age(o));
        } else if (id == "sandboxclaims.extensions.agents.x-k8s.io") {
            cells.emplace_back(condition_field(o, "Ready", "status"));
            auto sb = path_at(o, {"status", "sandbox", "name"});
            cells.emplace_back(sb && sb->is_string() ? sb->as_string() : json::string(""));
            cells.emplace_back(condition_field(o, "Ready", "reason"));
            cells.emplace_back(human_age(o));
        } else if (id == "sandboxes.agents.x-k8s.io") {
            cells.emplace_back(condition_field(o, "Ready", "status"));
            cells.emplace_back(condition_field(o, "Ready", "reason"));
            cells.emplace_back(human_age(o));
        } else if (id == "sandboxwarmpools.extensions.agents.x-k8s.io") {
            auto r = path_at(o, {"status", "readyReplicas"});
            auto d = path_at(o, {"spec", "replicas"});
            cells.emplace_back(r && r->is_int64() ? std::to_string(r->as_int64()) : std::string("0"));
            cells.emplace_back(d && d->is_int64() ? std::to_string(d->as_int64()) : std::string("1"));
            cells.emplace_back(human_age(o));
        } else {
            cells.emplace_back(human_age(o));
        }
        json::object row{{"cells", cells}};
        if (include_object) row["object"] = o;
        else
            row["object"] = json::object{{"kind", "PartialObjectMetadata"},
                                         {"apiVersion", "meta.k8s.io/v1"},
                                         {"metadata", metadata_of(o)}};
        rows.push_back(row);
    }
    return json::object{{"kind", "Table"},
                        {"apiVersion", "meta.k8s.io/v1"},
                        {"metadata", std::move(list_meta)},
                        {"columnDefinitions", cols},
                        {"rows", rows}};
}

// Go's strconv.ParseBool (python-kubernetes sends watch=True).
bool parse_bool(std::string_view v) { return v == "1" || v == "t" || v == "T" || v == "true" || v == "True" || v == "TRUE"; }

bool wants_table(const http::request<http::string_body>& msg) {
    std::string_view accept = msg[http::field::accept];
    return accept.find("as=Table") != std::string_view::npos;
}

struct DeleteOptions {
    std::optional<std::int64_t> grace;
    std::string propagation;  // "" = default
    std::string precondition_uid, precondition_rv;
    bool dry_run = false;
};

}  // namespace

// ---------------------------------------------------------------------------------------------

struct Watcher {
    const ResourceType* type = nullptr;
    std::string version;
    std::string ns;  // "" = all
    proto::LabelSelector labels;
    proto::FieldSelector fields;
    std::deque<std::string> queue;
    asio::steady_timer signal;
    bool expired = false;
    bool table = false;          // events carry one-row Tables (kubectl get -w)
    bool columns_sent = false;   // column definitions go only with the first Table
    bool include_object = false;
    explicit Watcher(asio::any_io_executor ex) : signal(ex) {}
};

struct Request {
    http::request<http::string_body> msg;
    std::string method;
    std::vector<std::string> segments;
    std::map<std::string, std::string> query;
    // Warning headers for the response (fieldValidation=Warn), added by the handlers.
    mutable std::vector<std::string> warnings;
};

struct Route {
    const ResourceType* type = nullptr;
    std::string version;
    std::string ns;
    std::string name;
    std::string sub;
    bool namespaced_path = false;
    bool name_in_path = false;  // the URL has a name segment (possibly empty: "configmaps//status")
};

struct ApiServer::Impl {
    asio::any_io_executor executor;
    ApiServerOptions options;
    FaultList& faults;
    Kubelet* kubelet = nullptr;
    Store store;
    SnapshotCache snapshots;
    std::list<std::shared_ptr<Watcher>> watchers;
    std::map<std::string, std::shared_ptr<asio::steady_timer>> pod_grace_timers;  // uid -> timer
    std::set<std::string> terminating_namespaces;
    bool stopping = false;
    // Open connections still served here. Shared: connection coroutines suspended at shutdown are
    // destroyed with the io_context, possibly after this Impl, and must still find the set.
    std::shared_ptr<std::set<net::AnyStream*>> connections = std::make_shared<std::set<net::AnyStream*>>();

    Impl(asio::any_io_executor ex, ApiServerOptions opts, FaultList& f)
        : executor(std::move(ex)), options(std::move(opts)), faults(f) {
        store.on_event = [this](const StoreEvent& ev) { dispatch_event(ev); };
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

    void stamp_new(json::object& o) {
        auto& m = o["metadata"].as_object();
        m["uid"] = new_uid();
        m["creationTimestamp"] = util::now_rfc3339();
    }

    const ResourceType& ns_type() const { return *find_resource_by_id("namespaces"); }

    // Rewrites apiVersion/kind for the version the client asked for.
    json::object present(const ResourceType& t, const std::string& version, const json::object& o) const {
        json::object out = o;
        out["apiVersion"] = t.api_version(version);
        out["kind"] = t.kind;
        return out;
    }

    // ------------------------------------------------------------------ watch fan-out

    bool in_scope(const Watcher& w, const json::object& o) const {
        if (!w.ns.empty() && string_at(metadata_of(o), "namespace") != w.ns) return false;
        auto labels = object_at(metadata_of(o), "labels");
        return w.labels.matches(labels) && w.fields.matches(o);
    }

    std::string event_line(Watcher& w, std::string_view type, const json::object& o) const {
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

    void feed(Watcher& w, const StoreEvent& ev) {
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

    void dispatch_event(const StoreEvent& ev) {
        for (auto& w : watchers) {
            std::size_t before = w->queue.size();
            feed(*w, ev);
            if (w->queue.size() != before) w->signal.cancel();
        }
    }

    // ------------------------------------------------------------------ helpers

    std::optional<Response> check_namespace_for_create(const ResourceType& t, const std::string& ns,
                                                       const std::string& name) {
        auto nso = store.get("namespaces", {"", ns});
        if (!nso) {
            return status_response(404, "NotFound", "namespaces \"" + ns + "\" not found",
                                   res_details(ns_type(), ns));
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

    std::vector<StatusCause> validate_pod_spec(const json::object& o) {
        std::vector<StatusCause> causes;
        auto spec = object_at(o, "spec");
        const json::value* containers = spec ? spec->if_contains("containers") : nullptr;
        if (!containers || !containers->is_array() || containers->as_array().empty()) {
            causes.push_back({"FieldValueRequired", "Required value", "spec.containers"});
            return causes;
        }
        std::set<std::string> names;
        std::size_t i = 0;
        for (const auto& c : containers->as_array()) {
            std::string prefix = "spec.containers[" + std::to_string(i++) + "]";
            if (!c.is_object()) {
                causes.push_back({"FieldValueInvalid", "Invalid value: must be an object", prefix});
                continue;
            }
            std::string name = string_at(c.as_object(), "name");
            if (name.empty()) causes.push_back({"FieldValueRequired", "Required value", prefix + ".name"});
            else {
                for (auto& m : proto::validate_dns1123_label(name))
                    causes.push_back({"FieldValueInvalid", "Invalid value: " + proto::go_quote(name) + ": " + m,
                                      prefix + ".name"});
                if (!names.insert(name).second)
                    causes.push_back({"FieldValueDuplicate", "Duplicate value: " + proto::go_quote(name), prefix + ".name"});
            }
            if (string_at(c.as_object(), "image").empty())
                causes.push_back({"FieldValueRequired", "Required value", prefix + ".image"});
        }
        return causes;
    }

    void default_pod(json::object& o) {
        auto& spec = o["spec"].as_object();
        if (!spec.contains("restartPolicy")) spec["restartPolicy"] = "Always";
        if (!spec.contains("terminationGracePeriodSeconds")) spec["terminationGracePeriodSeconds"] = 30;
        if (!spec.contains("dnsPolicy")) spec["dnsPolicy"] = "ClusterFirst";
        if (!spec.contains("schedulerName")) spec["schedulerName"] = "default-scheduler";
        if (!spec.contains("serviceAccountName")) spec["serviceAccountName"] = "default";
        if (!spec.contains("securityContext")) spec["securityContext"] = json::object{};
        if (!spec.contains("enableServiceLinks")) spec["enableServiceLinks"] = true;
        if (!spec.contains("priority")) spec["priority"] = 0;
        spec["nodeName"] = spec.contains("nodeName") ? spec["nodeName"] : json::value("local");
        if (auto cs = spec.if_contains("containers"); cs && cs->is_array())
            for (auto& c : cs->as_array()) {
                auto& co = c.as_object();
                if (!co.contains("imagePullPolicy")) {
                    std::string image = string_at(co, "image");
                    bool latest = image.find(':') == std::string::npos || image.ends_with(":latest");
                    co["imagePullPolicy"] = latest ? "Always" : "IfNotPresent";
                }
                if (!co.contains("terminationMessagePath")) co["terminationMessagePath"] = "/dev/termination-log";
                if (!co.contains("terminationMessagePolicy")) co["terminationMessagePolicy"] = "File";
                if (!co.contains("resources")) co["resources"] = json::object{};
            }
        std::string now = util::now_rfc3339();
        json::object status{{"phase", "Pending"},
                            {"qosClass", "BestEffort"},
                            {"conditions", json::array{json::object{{"type", "PodScheduled"},
                                                                    {"status", "True"},
                                                                    {"lastProbeTime", nullptr},
                                                                    {"lastTransitionTime", now}}}}};
        o["status"] = status;
    }

    void default_object(const ResourceType& t, json::object& o) {
        if (!t.group.empty()) return;
        if (t.plural == "pods") default_pod(o);
        else if (t.plural == "namespaces") {
            o["spec"] = json::object{{"finalizers", json::array{"kubernetes"}}};
            o["status"] = json::object{{"phase", "Active"}};
            auto& m = o["metadata"].as_object();
            if (!m.contains("labels") || !m["labels"].is_object()) m["labels"] = json::object{};
            m["labels"].as_object()["kubernetes.io/metadata.name"] = m["name"];
        } else if (t.plural == "services") {
            if (!o.contains("spec") || !o["spec"].is_object()) o["spec"] = json::object{};
            auto& spec = o["spec"].as_object();
            if (!spec.contains("type")) spec["type"] = "ClusterIP";
            if (!spec.contains("clusterIP")) {
                std::uint64_t n = store.resource_version();
                spec["clusterIP"] = "10.96." + std::to_string((n / 250) % 250) + "." + std::to_string(n % 250 + 1);
            }
            if (!spec.contains("sessionAffinity")) spec["sessionAffinity"] = "None";
            if (!o.contains("status")) o["status"] = json::object{{"loadBalancer", json::object{}}};
        } else if (t.plural == "serviceaccounts" || t.plural == "configmaps") {
        } else if (t.plural == "secrets") {
            if (!o.contains("type")) o["type"] = "Opaque";
        }
    }

    // Parses a JSON object body; a Response on failure.
    std::variant<json::object, Response> parse_body(const Request& req, bool allow_yaml = false) {
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
        if (ec) return bad_request("the server rejected our request due to an error in our request: json parse error: " + ec.message());
        if (!v.is_object()) return bad_request("the server rejected our request due to an error in our request: the body is not a JSON object");
        auto& o = v.as_object();
        if (!o.contains("metadata") || !o["metadata"].is_object()) o["metadata"] = json::object{};
        return std::move(o);
    }

    bool dry_run(const Request& req) const {
        auto it = req.query.find("dryRun");
        return it != req.query.end() && it->second == "All";
    }

    // ------------------------------------------------------------------ fieldValidation

    // The request's fieldValidation directive ("Strict", "Warn" or "Ignore"; absent = Warn), or
    // the 422 a real server gives for an unsupported value. `options_kind`: CreateOptions etc.
    std::variant<std::string, Response> field_validation(const Request& req, std::string_view options_kind) const {
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

    // Drops the fields the kind does not know. Strict: 400 naming every one; Warn: one Warning
    // header each; Ignore: silent. `decode_prefix`: the text a real decoder puts before the
    // strict error for a request body ("ConfigMap in version \"v1\" cannot be handled as a
    // ConfigMap: "); empty for patches.
    std::optional<Response> drop_unknown_fields(const Request& req, const ResourceType& t, const std::string& directive,
                                                json::object& o, const std::string& decode_prefix) const {
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

    static std::string decode_prefix(const ResourceType& t, const std::string& version) {
        return t.kind + " in version " + proto::go_quote(version) + " cannot be handled as a " + t.kind + ": ";
    }

    // ------------------------------------------------------------------ create

    // The body's namespace must match the URL's (or be empty, then filled in); cluster-scoped
    // objects carry none.
    static std::optional<Response> bind_namespace(const ResourceType& t, const Route& r, json::object& meta) {
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

    Response create(const Request& req, const Route& r) {
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
            return bad_request("the API version in the data (" + string_at(o, "apiVersion") + ") does not match the expected API version (" +
                               t.api_version(r.version) + ") or kind " + kind + " does not match " + t.kind);
        auto causes = proto::validate_object_meta(meta, name_rule(t), true);
        std::string name = string_at(meta, "name");
        if (t.plural == "pods" && t.group.empty()) {
            auto pc = validate_pod_spec(o);
            causes.insert(causes.end(), pc.begin(), pc.end());
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
        if (store.get(t.id(), {r.ns, name})) {
            return status_response(409, "AlreadyExists", qualified_plural(t) + " \"" + name + "\" already exists",
                                   res_details(t, name));
        }
        for (auto k : {"uid", "resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "managedFields"})
            meta.erase(k);
        stamp_new(o);
        o["apiVersion"] = t.api_version(t.versions.front());
        o["kind"] = t.kind;
        if (t.custom) meta["generation"] = 1;
        default_object(t, o);
        if (dry_run(req)) return json_response(201, present(t, r.version, o));
        auto stored = store.put(t.id(), std::move(o));
        if (t.group.empty() && t.plural == "pods" && kubelet) kubelet->pod_changed(*stored);
        return json_response(201, present(t, r.version, *stored));
    }

    // ------------------------------------------------------------------ update

    // Applies `incoming` as the new state of `current` (PUT or the result of a PATCH).
    Response update_object(const Request& req, const Route& r, const json::object& current, json::object incoming,
                           bool require_rv) {
        const ResourceType& t = *r.type;
        auto& meta = incoming["metadata"].as_object();
        const auto& cur_meta = metadata_of(current);
        std::string body_name = string_at(meta, "name");
        if (body_name.empty()) meta["name"] = r.name;
        else if (body_name != r.name)
            return bad_request("the name of the object (" + body_name + ") does not match the name on the URL (" + r.name + ")");
        if (auto mismatch = bind_namespace(t, r, meta)) return *mismatch;
        std::string rv = string_at(meta, "resourceVersion");
        if (rv.empty() && require_rv && t.custom) {
            return invalid(t, r.name,
                           {{"FieldValueInvalid", "Invalid value: 0x0: must be specified for an update",
                             "metadata.resourceVersion"}});
        }
        if (!rv.empty() && rv != string_at(cur_meta, "resourceVersion"))
            return conflict(t, r.name, "the object has been modified; please apply your changes to the latest version and try again");
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
        auto& m2 = incoming["metadata"].as_object();
        if (t.group.empty() && t.plural == "pods" && r.sub != "status") {
            auto pc = validate_pod_spec(incoming);
            if (!pc.empty()) return invalid(t, r.name, pc);
            if (auto resp = check_pod_update(t, r.name, current, incoming)) return *resp;
        }
        if (t.group.empty() && t.plural == "namespaces") {
            if (auto s = current.if_contains("spec")) incoming["spec"] = *s;
            if (r.sub != "status") {
                if (auto s = current.if_contains("status")) incoming["status"] = *s;
            }
        }
        incoming["apiVersion"] = t.api_version(t.versions.front());
        incoming["kind"] = t.kind;
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
        if (deleting && !has_finalizers(*stored) && !(t.group.empty() && (t.plural == "pods" || t.plural == "namespaces"))) {
            // The last finalizer went away: the object is gone.
            auto last = remove_now(t, {r.ns, r.name});
            return json_response(200, present(t, r.version, last ? *last : *stored));
        }
        if (t.group.empty() && t.plural == "pods" && kubelet && r.sub != "status") kubelet->pod_changed(*stored);
        return json_response(200, present(t, r.version, *stored));
    }

    std::optional<Response> check_pod_update(const ResourceType& t, const std::string& name, const json::object& cur,
                                             const json::object& next) {
        auto cs = object_at(cur, "spec");
        auto ns = object_at(next, "spec");
        if (!cs || !ns) return std::nullopt;
        // Mutable: containers[*].image, initContainers[*].image, activeDeadlineSeconds, tolerations (additions).
        json::object a = *cs, b = *ns;
        for (auto key : {"containers", "initContainers"}) {
            auto ca = a.if_contains(key);
            auto cb = b.if_contains(key);
            if (ca && cb && ca->is_array() && cb->is_array() && ca->as_array().size() == cb->as_array().size()) {
                for (std::size_t i = 0; i < ca->as_array().size(); ++i) {
                    auto& x = ca->as_array()[i];
                    auto& y = cb->as_array()[i];
                    if (x.is_object() && y.is_object()) {
                        x.as_object().erase("image");
                        y.as_object().erase("image");
                    }
                }
            }
        }
        a.erase("activeDeadlineSeconds");
        b.erase("activeDeadlineSeconds");
        auto ta = a.if_contains("tolerations");
        auto tb = b.if_contains("tolerations");
        bool tolerations_ok = true;
        if (tb && tb->is_array()) {
            if (ta && ta->is_array()) {
                for (auto& x : ta->as_array())
                    if (std::find(tb->as_array().begin(), tb->as_array().end(), x) == tb->as_array().end())
                        tolerations_ok = false;
            }
        } else if (ta && ta->is_array() && !ta->as_array().empty()) {
            tolerations_ok = false;
        }
        a.erase("tolerations");
        b.erase("tolerations");
        if (a == b && tolerations_ok) return std::nullopt;
        return invalid(t, name,
                       {{"FieldValueForbidden",
                         "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
                         "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
                         "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it "
                         "to be set to 1 if it was previously negative)",
                         "spec"}});
    }

    Response replace(const Request& req, const Route& r) {
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

    Response patch(const Request& req, const Route& r) {
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
                return invalid(t, r.name, {{"FieldValueRequired", "Required value: is required for apply patch", "fieldManager"}});
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

    // ------------------------------------------------------------------ delete

    // Removes the object from the store now and runs the garbage collector for its dependents.
    ObjectPtr remove_now(const ResourceType& t, const ObjectKey& key) {
        auto last = store.remove(t.id(), key);
        if (!last) return last;
        if (t.group.empty() && t.plural == "pods") {
            auto uid = string_at(metadata_of(*last), "uid");
            if (auto it = pod_grace_timers.find(uid); it != pod_grace_timers.end()) {
                it->second->cancel();
                pod_grace_timers.erase(it);
            }
            if (kubelet) kubelet->pod_deleted(*last);
        }
        collect_dependents(metadata_of(*last), "Background");
        finish_foreground_owners();
        return last;
    }

    struct Dependent {
        const ResourceType* type;
        ObjectKey key;
    };

    std::vector<Dependent> dependents_of(const std::string& uid, const std::string& owner_ns) {
        std::vector<Dependent> out;
        for (const auto& t : resource_types()) {
            for (const auto& [key, obj] : store.objects(t.id())) {
                if (!owner_ns.empty() && key.ns != owner_ns) continue;
                auto refs = metadata_of(*obj).if_contains("ownerReferences");
                if (!refs || !refs->is_array()) continue;
                for (auto& ref : refs->as_array())
                    if (ref.is_object() && string_at(ref.as_object(), "uid") == uid) {
                        out.push_back({&t, key});
                        break;
                    }
            }
        }
        return out;
    }

    void collect_dependents(const json::object& owner_meta, const std::string& policy) {
        std::string uid = string_at(owner_meta, "uid");
        std::string ns = string_at(owner_meta, "namespace");
        for (auto& d : dependents_of(uid, ns)) {
            auto obj = store.get(d.type->id(), d.key);
            if (!obj) continue;
            if (policy == "Orphan") {
                json::object copy = *obj;
                auto& refs = copy["metadata"].as_object()["ownerReferences"].as_array();
                for (auto it = refs.begin(); it != refs.end();)
                    it = (it->is_object() && string_at(it->as_object(), "uid") == uid) ? refs.erase(it) : std::next(it);
                if (refs.empty()) copy["metadata"].as_object().erase("ownerReferences");
                store.put(d.type->id(), std::move(copy));
            } else {
                DeleteOptions opts;
                opts.propagation = policy == "Foreground" ? "Foreground" : "Background";
                delete_object(*d.type, d.key, opts);
            }
        }
    }

    // Owners waiting in foreground deletion whose dependents are all gone are removed.
    void finish_foreground_owners() {
        bool again = true;
        while (again) {
            again = false;
            for (const auto& t : resource_types()) {
                for (const auto& [key, obj] : store.objects(t.id())) {
                    if (!has_finalizer(*obj, "foregroundDeletion")) continue;
                    const auto& m = metadata_of(*obj);
                    if (!dependents_of(string_at(m, "uid"), string_at(m, "namespace")).empty()) continue;
                    json::object copy = *obj;
                    remove_finalizer(copy, "foregroundDeletion");
                    ObjectKey k = key;
                    if (has_finalizers(copy)) store.put(t.id(), std::move(copy));
                    else if (t.group.empty() && t.plural == "pods") {
                        store.put(t.id(), std::move(copy));
                        continue;
                    } else remove_now(t, k);
                    again = true;
                    break;
                }
                if (again) break;
            }
        }
    }

    // The shared delete path (API, namespace cascade, GC). Returns the object's state afterwards
    // (null when removed) and the removed object's last state.
    struct DeleteResult {
        ObjectPtr remaining;
        ObjectPtr removed;
    };

    DeleteResult delete_object(const ResourceType& t, const ObjectKey& key, const DeleteOptions& opts) {
        auto cur = store.get(t.id(), key);
        if (!cur) return {};
        const auto& m = metadata_of(*cur);
        std::string policy = opts.propagation.empty() ? "Background" : opts.propagation;
        if (t.group.empty() && t.plural == "namespaces") return {begin_namespace_deletion(key.name), nullptr};
        if (policy == "Orphan") collect_dependents(m, "Orphan");
        bool is_pod = t.group.empty() && t.plural == "pods";
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

    ObjectPtr begin_namespace_deletion(const std::string& name) {
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

    void purge_namespace(const std::string& name) {
        if (stopping) return;
        bool waiting = false;
        for (const auto& t : resource_types()) {
            if (!t.namespaced) continue;
            std::vector<ObjectKey> keys;
            for (const auto& [key, obj] : store.objects(t.id()))
                if (key.ns == name) keys.push_back(key);
            for (auto& key : keys) {
                DeleteOptions opts;
                opts.propagation = "Background";
                auto res = delete_object(t, key, opts);
                if (res.remaining) {
                    // Finalizers of other controllers: we own none of them, so drop them.
                    json::object copy = *res.remaining;
                    if (!(t.group.empty() && t.plural == "pods")) {
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

    std::variant<DeleteOptions, Response> delete_options(const Request& req) {
        DeleteOptions opts;
        if (auto g = int_param(req.query, "gracePeriodSeconds")) opts.grace = *g;
        if (auto it = req.query.find("propagationPolicy"); it != req.query.end()) opts.propagation = it->second;
        if (auto it = req.query.find("orphanDependents"); it != req.query.end())
            opts.propagation = it->second == "true" ? "Orphan" : "Background";
        opts.dry_run = dry_run(req);
        if (!req.msg.body().empty()) {
            error_code ec;
            json::value v = json::parse(req.msg.body(), ec);
            if (ec || !v.is_object()) return bad_request("the server rejected our request due to an error in our request: invalid DeleteOptions body");
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

    Response delete_item(const Request& req, const Route& r) {
        const ResourceType& t = *r.type;
        auto parsed = delete_options(req);
        if (auto* resp = std::get_if<Response>(&parsed)) return *resp;
        auto opts = std::get<DeleteOptions>(parsed);
        auto cur = store.get(t.id(), {r.ns, r.name});
        if (!cur) return not_found(t, r.name);
        const auto& m = metadata_of(*cur);
        if (!opts.precondition_uid.empty() && opts.precondition_uid != string_at(m, "uid"))
            return conflict(t, r.name, "Precondition failed: UID in precondition: " + opts.precondition_uid +
                                           ", UID in object meta: " + string_at(m, "uid"));
        if (!opts.precondition_rv.empty() && opts.precondition_rv != string_at(m, "resourceVersion"))
            return conflict(t, r.name, "Precondition failed: ResourceVersion in precondition: " + opts.precondition_rv +
                                           ", ResourceVersion in object meta: " + string_at(m, "resourceVersion"));
        if (t.group.empty() && t.plural == "namespaces" &&
            (r.name == "default" || r.name == "kube-system" || r.name == "kube-public"))
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

    // ------------------------------------------------------------------ list

    struct Selectors {
        proto::LabelSelector labels;
        proto::FieldSelector fields;
    };

    std::variant<Selectors, Response> selectors(const Request& req, const ResourceType& t) {
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

    bool matches(const Selectors& s, const std::string& ns, const json::object& o) const {
        if (!ns.empty() && string_at(metadata_of(o), "namespace") != ns) return false;
        return s.labels.matches(object_at(metadata_of(o), "labels")) && s.fields.matches(o);
    }

    Response list(const Request& req, const Route& r) {
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
            if (!tok) return bad_request("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)");
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
        auto it = has_after ? source->upper_bound(after) : source->begin();
        std::optional<ObjectKey> last;
        bool more = false;
        std::int64_t remaining = 0;
        bool selective = !sel.labels.empty() || !sel.fields.empty();
        for (; it != source->end(); ++it) {
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
        return json_response(200, json::object{{"kind", t.kind + "List"},
                                               {"apiVersion", t.api_version(r.version)},
                                               {"metadata", meta},
                                               {"items", items}});
    }

    Response delete_collection(const Request& req, const Route& r) {
        const ResourceType& t = *r.type;
        auto sel_or = selectors(req, t);
        if (auto* resp = std::get_if<Response>(&sel_or)) return *resp;
        const Selectors& sel = std::get<Selectors>(sel_or);
        auto parsed = delete_options(req);
        if (auto* resp = std::get_if<Response>(&parsed)) return *resp;
        auto opts = std::get<DeleteOptions>(parsed);
        std::vector<ObjectKey> keys;
        json::array items;
        for (const auto& [key, obj] : store.objects(t.id()))
            if (matches(sel, r.ns, *obj)) {
                keys.push_back(key);
                items.push_back(present(t, r.version, *obj));
            }
        if (!opts.dry_run)
            for (auto& k : keys) delete_object(t, k, opts);
        return json_response(200, json::object{{"kind", t.kind + "List"},
                                               {"apiVersion", t.api_version(r.version)},
                                               {"metadata", json::object{{"resourceVersion", std::to_string(store.resource_version())}}},
                                               {"items", items}});
    }

    // ------------------------------------------------------------------ pod status from the kubelet

    void write_pod_status(const std::string& ns, const std::string& name, const std::string& uid, json::object status) {
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
};

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

void ApiServer::expire_watches() {
    for (auto& w : impl_->watchers) {
        w->expired = true;
        w->signal.cancel();
    }
}

void ApiServer::shutdown() {
    impl_->stopping = true;
    expire_watches();
    for (auto& [uid, timer] : impl_->pod_grace_timers) timer->cancel();
    impl_->pod_grace_timers.clear();
    for (auto* s : *impl_->connections) s->close();
}

std::size_t ApiServer::open_connections() const { return impl_->connections->size(); }

// ---------------------------------------------------------------------------------------------
// HTTP

namespace {

struct Conn {
    net::AnyStream stream;
    beast::flat_buffer buffer;
};

// FaultRule::Action::drop_mid_stream: a stream that closes its inner stream once `budget` bytes
// were written. Works below every protocol (HTTP, chunked watch, WebSocket, SPDY), so the
// kubelet's streams honour it without knowing. State is shared with pending handlers, which may
// complete after the wrapper is gone.
class CutAfterBytes final : public net::AnyStream::Impl {
public:
    CutAfterBytes(net::AnyStream inner, std::size_t budget) : s_(std::make_shared<State>()) {
        s_->inner = std::move(inner);
        s_->left = budget;
    }
    ~CutAfterBytes() override { s_->inner.close(); }

    asio::any_io_executor executor() override { return s_->inner.get_executor(); }
    void read_some(asio::mutable_buffer b, net::IoHandler h) override {
        s_->inner.async_read_some(b, std::move(h));
    }
    void write_some(asio::const_buffer b, net::IoHandler h) override {
        if (s_->left == 0) {
            s_->inner.close();
            asio::post(s_->inner.get_executor(), [h = std::move(h)]() mutable {
                std::move(h)(error_code(asio::error::connection_reset), std::size_t{0});
            });
            return;
        }
        std::size_t n = std::min(b.size(), s_->left);
        s_->inner.async_write_some(asio::buffer(b.data(), n),
                                   [s = s_, h = std::move(h)](error_code ec, std::size_t written) mutable {
                                       s->left -= std::min(written, s->left);
                                       if (s->left == 0) s->inner.close();  // what was written still arrives
                                       std::move(h)(ec, written);
                                   });
    }
    void handshake(net::DoneHandler h) override { s_->inner.async_handshake(std::move(h)); }
    void shutdown(net::DoneHandler h) override { s_->inner.async_shutdown(std::move(h)); }
    void close() noexcept override { s_->inner.close(); }
    void expires_after(std::chrono::steady_clock::duration d) override { s_->inner.expires_after(d); }
    void expires_never() override { s_->inner.expires_never(); }
    asio::ip::tcp::socket& socket() override { return s_->inner.socket(); }
    bool is_tls() const noexcept override { return s_->inner.is_tls(); }

private:
    struct State {
        net::AnyStream inner;
        std::size_t left = 0;
    };
    std::shared_ptr<State> s_;
};

std::string serialize_head(unsigned status, const std::vector<std::pair<std::string, std::string>>& headers) {
    std::string head = "HTTP/1.1 " + std::to_string(status) + " " +
                       std::string(http::obsolete_reason(static_cast<http::status>(status))) + "\r\n";
    for (auto& [k, v] : headers) head += k + ": " + v + "\r\n";
    head += "\r\n";
    return head;
}

asio::awaitable<bool> write_raw(net::AnyStream& s, std::string data) {
    auto [ec, n] = co_await asio::async_write(s, asio::buffer(data), asio::as_tuple(asio::use_awaitable));
    (void)n;
    co_return !ec;
}

std::vector<std::pair<std::string, std::string>> base_headers(const Response& r, bool keep_alive) {
    std::vector<std::pair<std::string, std::string>> h{{"Content-Type", r.content_type},
                                                       {"Cache-Control", "no-cache, private"},
                                                       {"Content-Length", std::to_string(r.body.size())}};
    if (!keep_alive) h.emplace_back("Connection", "close");
    for (auto& x : r.headers) h.push_back(x);
    return h;
}

bool parse_target(std::string_view target, Request& req) {
    auto u = boost::urls::parse_origin_form(target);
    if (!u) return false;
    for (auto seg : u->segments()) req.segments.push_back(std::string(seg));
    while (!req.segments.empty() && req.segments.back().empty()) req.segments.pop_back();
    for (auto p : u->params()) req.query[std::string(p.key)] = p.has_value ? std::string(p.value) : std::string();
    return true;
}

// Maps /api/v1/... and /apis/G/V/... onto a resource route. nullopt = not a resource path.
std::optional<Route> route_of(const std::vector<std::string>& segs, bool& known_group_version) {
    known_group_version = false;
    std::string group, version;
    std::size_t i = 0;
    if (segs.size() >= 2 && segs[0] == "api") {
        version = segs[1];
        i = 2;
    } else if (segs.size() >= 3 && segs[0] == "apis") {
        group = segs[1];
        version = segs[2];
        i = 3;
    } else {
        return std::nullopt;
    }
    std::vector<std::string> rest(segs.begin() + static_cast<std::ptrdiff_t>(i), segs.end());
    Route r;
    r.version = version;
    if (rest.size() >= 3 && rest[0] == "namespaces" && rest[2] != "status" && rest[2] != "finalize") {
        r.ns = rest[1];
        r.namespaced_path = true;
        rest.erase(rest.begin(), rest.begin() + 2);
    }
    if (rest.empty() || rest.size() > 3) return std::nullopt;
    r.type = find_resource(group, version, rest[0]);
    for (const auto& t : resource_types())
        if (t.group == group && std::find(t.versions.begin(), t.versions.end(), version) != t.versions.end())
            known_group_version = true;
    if (!r.type) return std::nullopt;
    if (r.namespaced_path && !r.type->namespaced) return std::nullopt;
    if (rest.size() >= 2) r.name = rest[1];
    if (rest.size() == 3) r.sub = rest[2];
    if (!r.sub.empty() &&
        std::find(r.type->subresources.begin(), r.type->subresources.end(), r.sub) == r.type->subresources.end())
        return std::nullopt;
    r.name_in_path = rest.size() >= 2;
    return r;
}

// Why `v` cannot be one path segment of a storage key ("" = it can), worded as a real server's
// IsValidPathSegmentName. Path traversal ("..", "%2F" decoded to '/') ends here, never in a lookup.
std::string path_segment_problems(const std::string& v) {
    if (v == "." || v == "..") return "may not be '" + v + "'";
    std::string out;
    for (const char* bad : {"/", "%"})
        if (v.find(bad) != std::string::npos) out += (out.empty() ? "" : ";") + std::string("may not contain '") + bad + "'";
    return out;
}

// 400 for a namespace or name in the URL that cannot address an object: empty, ".", "..", with
// '/' or '%' (also percent-encoded), or (namespace) with control characters such as NUL.
std::optional<Response> path_names_error(const Route& r) {
    if (r.namespaced_path) {
        if (r.ns.empty()) return bad_request("Namespace parameter required.");
        std::string why = path_segment_problems(r.ns);
        if (why.empty() && std::any_of(r.ns.begin(), r.ns.end(), [](char c) {
                auto u = static_cast<unsigned char>(c);
                return u < 0x20 || u == 0x7f;
            }))
            why = "may not contain control characters";
        if (!why.empty()) return bad_request("Namespace parameter invalid: " + proto::go_quote(r.ns) + ": " + why);
    }
    if (r.name_in_path) {
        if (r.name.empty()) return bad_request("Name parameter required.");
        std::string why = path_segment_problems(r.name);
        if (!why.empty()) return bad_request("Name parameter invalid: " + proto::go_quote(r.name) + ": " + why);
    }
    return std::nullopt;
}

}  // namespace

namespace {

Response discovery(ApiServer::Impl& impl, const Request& req, bool& handled) {
    handled = true;
    const auto& s = req.segments;
    if (s.size() == 1 && s[0] == "version") return json_response(200, version_json());
    if (s.size() == 1 && (s[0] == "healthz" || s[0] == "livez" || s[0] == "readyz")) {
        Response r;
        r.content_type = "text/plain; charset=utf-8";
        r.body = "ok";
        return r;
    }
    if (s.size() == 1 && s[0] == "api")
        return json_response(200, json::object{{"kind", "APIVersions"},
                                               {"versions", json::array{"v1"}},
                                               {"serverAddressByClientCIDRs",
                                                json::array{json::object{{"clientCIDR", "0.0.0.0/0"},
                                                                         {"serverAddress", impl.options.server_address}}}}});
    if (s.size() == 2 && s[0] == "api" && s[1] == "v1") return json_response(200, resource_list("v1", "", "v1"));
    if (s.size() == 1 && s[0] == "apis") {
        json::array groups;
        for (auto& g : api_groups()) groups.push_back(api_group(g));
        return json_response(200, json::object{{"kind", "APIGroupList"}, {"apiVersion", "v1"}, {"groups", groups}});
    }
    if (s.size() == 2 && s[0] == "apis") {
        for (auto& g : api_groups())
            if (g == s[1]) {
                auto o = api_group(g);
                o["kind"] = "APIGroup";
                o["apiVersion"] = "v1";
                return json_response(200, o);
            }
        return server_not_found();
    }
    if (s.size() == 3 && s[0] == "apis") {
        for (const auto& t : resource_types())
            if (t.group == s[1] && std::find(t.versions.begin(), t.versions.end(), s[2]) != t.versions.end())
                return json_response(200, resource_list(s[1] + "/" + s[2], s[1], s[2]));
        return server_not_found();
    }
    handled = false;
    return {};
}

// OpenAPI v3, only as much as kubectl needs to see that the server validates fields itself
// (PATCH operations with a fieldValidation parameter per kind); no schemas.
json::object openapi_document(const std::string& group, const std::string& version) {
    json::object paths;
    for (const auto& t : resource_types()) {
        if (t.group != group || std::find(t.versions.begin(), t.versions.end(), version) == t.versions.end()) continue;
        std::string prefix = group.empty() ? "/api/" + version : "/apis/" + group + "/" + version;
        std::string item = prefix + (t.namespaced ? "/namespaces/{namespace}/" : "/") + t.plural + "/{name}";
        json::array params;
        for (auto p : {"dryRun", "fieldManager", "fieldValidation", "force"})
            params.push_back(json::object{{"name", p}, {"in", "query"}, {"schema", json::object{{"type", "string"}}}});
        json::object gvk{{"group", group}, {"version", version}, {"kind", t.kind}};
        json::object op{{"operationId", "patch" + t.kind},
                        {"parameters", params},
                        {"responses", json::object{{"200", json::object{{"description", "OK"}}}}},
                        {"x-kubernetes-action", "patch"},
                        {"x-kubernetes-group-version-kind", gvk}};
        json::object post{{"operationId", "create" + t.kind},
                          {"parameters", params},
                          {"responses", json::object{{"201", json::object{{"description", "Created"}}}}},
                          {"x-kubernetes-action", "post"},
                          {"x-kubernetes-group-version-kind", gvk}};
        paths[item] = json::object{{"patch", op}, {"put", op}};
        std::string coll = prefix + (t.namespaced ? "/namespaces/{namespace}/" : "/") + t.plural;
        paths[coll] = json::object{{"post", post}};
    }
    return json::object{{"openapi", "3.0.0"},
                        {"info", json::object{{"title", "Kubernetes"}, {"version", "v1.32.4"}}},
                        {"paths", paths},
                        {"components", json::object{{"schemas", json::object{}}}}};
}

Response openapi(const std::vector<std::string>& s) {
    if (s.size() < 2 || s[1] != "v3") return server_not_found();
    if (s.size() == 2) {
        json::object paths;
        paths["api/v1"] = json::object{{"serverRelativeURL", "/openapi/v3/api/v1?hash=1"}};
        std::vector<std::string> seen;
        for (const auto& t : resource_types()) {
            if (t.group.empty()) continue;
            for (auto& v : t.versions) {
                std::string key = "apis/" + t.group + "/" + v;
                if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
                seen.push_back(key);
                paths[key] = json::object{{"serverRelativeURL", "/openapi/v3/" + key + "?hash=1"}};
            }
        }
        return json_response(200, json::object{{"paths", paths}});
    }
    if (s.size() == 4 && s[2] == "api") return json_response(200, openapi_document("", s[3]));
    if (s.size() == 5 && s[2] == "apis") {
        for (const auto& t : resource_types())
            if (t.group == s[3] && std::find(t.versions.begin(), t.versions.end(), s[4]) != t.versions.end())
                return json_response(200, openapi_document(s[3], s[4]));
    }
    return server_not_found();
}

}  // namespace

// Watch stream: chunked JSON lines until timeout, expiry or a write error.
// Membership of a watcher in the server's fan-out list for the lifetime of its stream.
struct WatcherRegistration {
    ApiServer::Impl& impl;
    std::shared_ptr<Watcher> w;
    WatcherRegistration(ApiServer::Impl& i, std::shared_ptr<Watcher> watcher) : impl(i), w(std::move(watcher)) {
        impl.watchers.push_back(w);
    }
    WatcherRegistration(const WatcherRegistration&) = delete;
    WatcherRegistration& operator=(const WatcherRegistration&) = delete;
    ~WatcherRegistration() { impl.watchers.remove(w); }
};

static asio::awaitable<bool> serve_watch(ApiServer::Impl& impl, Conn& conn, const Request& req, const Route& r) {
    const ResourceType& t = *r.type;
    auto sel_or = impl.selectors(req, t);
    auto write_response = [&](const Response& resp) -> asio::awaitable<bool> {
        std::string data = serialize_head(resp.status, base_headers(resp, true)) + resp.body;
        co_return co_await write_raw(conn.stream, std::move(data));
    };
    if (auto* resp = std::get_if<Response>(&sel_or)) {
        bool ok = co_await write_response(*resp);
        co_return ok;
    }
    auto w = std::make_shared<Watcher>(impl.executor);
    w->type = &t;
    w->version = r.version;
    w->ns = r.ns;
    w->labels = std::get<ApiServer::Impl::Selectors>(sel_or).labels;
    w->fields = std::get<ApiServer::Impl::Selectors>(sel_or).fields;
    w->table = wants_table(req.msg);
    if (auto io = req.query.find("includeObject"); io != req.query.end()) w->include_object = io->second == "Object";
    std::string rv;
    if (auto it = req.query.find("resourceVersion"); it != req.query.end()) rv = it->second;
    bool bookmarks = false;
    if (auto it = req.query.find("allowWatchBookmarks"); it != req.query.end())
        bookmarks = parse_bool(it->second);
    std::optional<std::int64_t> timeout = int_param(req.query, "timeoutSeconds");
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout ? *timeout : 1800);

    std::optional<std::string> error_line;
    if (rv.empty() || rv == "0") {
        for (const auto& [key, obj] : impl.store.objects(t.id()))
            if (impl.in_scope(*w, *obj)) w->queue.push_back(impl.event_line(*w, "ADDED", *obj));
    } else {
        std::uint64_t n = 0;
        auto [ptr, perr] = std::from_chars(rv.data(), rv.data() + rv.size(), n);
        if (perr != std::errc() || ptr != rv.data() + rv.size()) {
            Response bad = bad_request("invalid resource version: " + rv);
            bool ok = co_await write_response(bad);
            co_return ok;
        }
        auto events = impl.store.events_since(n);
        if (!events) {
            auto st = proto::make_status(410, "Expired",
                                         "too old resource version: " + rv + " (" +
                                             std::to_string(impl.store.resource_version()) + ")");
            error_line = json::serialize(json::object{{"type", "ERROR"}, {"object", st}}) + "\n";
        } else {
            for (auto* ev : *events) impl.feed(*w, *ev);
        }
    }
    // Register before the first suspension: an event recorded while the head is being written
    // must land in this watcher's queue, not fall between the replay and the registration.
    std::optional<WatcherRegistration> registration;
    if (!error_line) registration.emplace(impl, w);
    std::string head = serialize_head(200, {{"Content-Type", "application/json"},
                                            {"Cache-Control", "no-cache, private"},
                                            {"Transfer-Encoding", "chunked"}});
    if (!co_await write_raw(conn.stream, std::move(head))) co_return false;
    auto chunk = [](const std::string& data) {
        std::ostringstream os;
        os << std::hex << data.size() << "\r\n" << data << "\r\n";
        return os.str();
    };
    if (error_line) {
        bool ok = co_await write_raw(conn.stream, chunk(*error_line) + "0\r\n\r\n");
        co_return ok;
    }
    auto bookmark = [&] {
        json::object o{{"kind", t.kind},
                       {"apiVersion", t.api_version(r.version)},
                       {"metadata", json::object{{"resourceVersion", std::to_string(impl.store.resource_version())},
                                                 {"creationTimestamp", nullptr}}}};
        return json::serialize(json::object{{"type", "BOOKMARK"}, {"object", o}}) + "\n";
    };
    auto next_bookmark = std::chrono::steady_clock::now() + 5s;
    for (;;) {
        while (!w->queue.empty()) {
            std::string data;
            while (!w->queue.empty() && data.size() < 65536) {
                data += chunk(w->queue.front());
                w->queue.pop_front();
            }
            if (!co_await write_raw(conn.stream, std::move(data))) co_return false;
        }
        if (w->expired || impl.stopping) {
            auto st = proto::make_status(410, "Expired", "watch expired: the server closed this watch");
            std::string line = json::serialize(json::object{{"type", "ERROR"}, {"object", st}}) + "\n";
            co_await write_raw(conn.stream, chunk(line) + "0\r\n\r\n");
            co_return false;
        }
        auto now = std::chrono::steady_clock::now();
        if (now >= deadline) {
            std::string tail;
            if (bookmarks) tail = chunk(bookmark());
            bool ok = co_await write_raw(conn.stream, tail + "0\r\n\r\n");
            co_return ok;
        }
        if (bookmarks && now >= next_bookmark) {
            next_bookmark = now + 5s;
            if (!co_await write_raw(conn.stream, chunk(bookmark()))) co_return false;
            continue;
        }
        w->signal.expires_at(bookmarks ? std::min(deadline, next_bookmark) : deadline);
        auto [ec] = co_await w->signal.async_wait(asio::as_tuple(asio::use_awaitable));
        (void)ec;
    }
}

// Routes one request; returns false when the connection must close (or was handed over).
static asio::awaitable<bool> handle(ApiServer::Impl& impl, Conn& conn, Request& req) {
    bool keep_alive = req.msg.keep_alive();
    auto send = [&](Response resp) -> asio::awaitable<bool> {
        std::string data = serialize_head(resp.status, base_headers(resp, keep_alive)) + resp.body;
        bool ok = co_await write_raw(conn.stream, std::move(data));
        co_return ok && keep_alive;
    };
    std::string target(req.msg.target());
    // Fault injection first: it models an overloaded or flaky server.
    auto fault = impl.faults.take(req.method, target);
    if (fault && fault->action == FaultRule::Action::latency) {
        asio::steady_timer timer(impl.executor, fault->latency);
        co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
        fault.reset();
    }
    if (fault && fault->action == FaultRule::Action::drop_before_response) {
        conn.stream.close();
        co_return false;
    }
    if (fault && fault->action == FaultRule::Action::drop_mid_stream) {
        // The connection's address stays the same: the server's open-connection set still finds it.
        conn.stream = net::AnyStream(std::make_unique<CutAfterBytes>(std::move(conn.stream), fault->drop_after_bytes));
        fault.reset();
    }
    if (fault && fault->action == FaultRule::Action::status) {
        Response resp;
        resp.status = fault->status;
        if (fault->status == 429) {
            resp.content_type = "text/plain; charset=utf-8";
            resp.body = "Too many requests, please try again later.\n";
        } else {
            proto::StatusDetails d;
            if (fault->retry_after_seconds) d.retry_after_seconds = *fault->retry_after_seconds;
            std::string reason = status_reason(fault->status);
            std::string msg = fault->status == 500 ? "Internal error occurred: injected fault" : "injected fault";
            resp.body = json::serialize(proto::make_status(fault->status, reason, msg, d));
        }
        if (fault->retry_after_seconds) resp.headers.emplace_back("Retry-After", std::to_string(*fault->retry_after_seconds));
        bool ok = co_await send(std::move(resp));
        co_return ok;
    }

    if (!parse_target(target, req)) {
        bool ok = co_await send(bad_request("malformed request target"));
        co_return ok;
    }
    bool public_path = req.segments.size() == 1 && (req.segments[0] == "healthz" || req.segments[0] == "livez" ||
                                                    req.segments[0] == "readyz" || req.segments[0] == "version");
    if (!public_path) {
        std::string_view auth = req.msg[http::field::authorization];
        bool anonymous = auth.empty() && impl.options.allow_anonymous;
        if (!anonymous && auth != "Bearer " + impl.options.token) {
            bool ok = co_await send(status_response(401, "Unauthorized", "Unauthorized"));
            co_return ok;
        }
    }

    Response resp;
    bool handled = false;
    if (req.method == "GET") resp = discovery(impl, req, handled);
    if (!handled && req.method == "GET" && req.segments.size() >= 2 && req.segments[0] == "openapi") {
        handled = true;
        resp = openapi(req.segments);
    }
    if (!handled) {
        bool known_gv = false;
        auto route = route_of(req.segments, known_gv);
        std::optional<Response> bad_path;
        if (route) bad_path = path_names_error(*route);
        if (!route) {
            resp = server_not_found();
        } else if (bad_path) {
            resp = std::move(*bad_path);
        } else {
            const ResourceType& t = *route->type;
            const std::string& m = req.method;
            bool watch = false;
            if (auto it = req.query.find("watch"); it != req.query.end()) watch = parse_bool(it->second);
            if (route->sub == "exec" || route->sub == "portforward" || route->sub == "log") {
                auto pod = impl.store.get(t.id(), {route->ns, route->name});
                if (!pod) {
                    bool ok = co_await send(not_found(t, route->name));
                    co_return ok;
                }
                if (!impl.kubelet) {
                    bool ok = co_await send(status_response(503, "ServiceUnavailable", "the kubelet is not running"));
                    co_return ok;
                }
                StreamRequest sr{std::move(conn.stream), std::move(conn.buffer), std::move(req.msg), *pod};
                if (route->sub == "exec") co_await impl.kubelet->serve_exec(std::move(sr));
                else if (route->sub == "portforward") co_await impl.kubelet->serve_portforward(std::move(sr));
                else co_await impl.kubelet->serve_log(std::move(sr));
                co_return false;
            }
            if (route->name.empty()) {
                if (t.namespaced && !route->namespaced_path && m != "GET")
                    resp = status_response(405, "MethodNotAllowed",
                                           m == "POST" ? "create is not supported on resources of kind \"" + t.plural + "\""
                                                       : m + " is not supported on resources of kind \"" + t.plural + "\"");
                else if (m == "GET" && watch) {
                    bool ok = co_await serve_watch(impl, conn, req, *route);
                    co_return ok && keep_alive;
                } else if (m == "GET") resp = impl.list(req, *route);
                else if (m == "POST") resp = impl.create(req, *route);
                else if (m == "DELETE") resp = impl.delete_collection(req, *route);
                else resp = status_response(405, "MethodNotAllowed", m + " is not supported on resources of kind \"" + t.plural + "\"");
            } else if (m == "GET") {
                auto obj = impl.store.get(t.id(), {route->ns, route->name});
                if (!obj) resp = not_found(t, route->name);
                else if (wants_table(req.msg) && route->sub.empty()) {
                    auto io = req.query.find("includeObject");
                    resp = json_response(200, to_table(t, {impl.present(t, route->version, *obj)},
                                                       io != req.query.end() && io->second == "Object",
                                                       json::object{{"resourceVersion", string_at(metadata_of(*obj), "resourceVersion")}}));
                } else resp = json_response(200, impl.present(t, route->version, *obj));
            } else if (m == "PUT") resp = impl.replace(req, *route);
            else if (m == "PATCH") resp = impl.patch(req, *route);
            else if (m == "DELETE" && route->sub.empty()) resp = impl.delete_item(req, *route);
            else resp = status_response(405, "MethodNotAllowed", m + " is not supported on resources of kind \"" + t.plural + "\"");
        }
    }
    for (const auto& w : req.warnings) resp.headers.emplace_back("Warning", "299 - " + proto::go_quote(w));
    if (fault && fault->action == FaultRule::Action::drop_mid_body) {
        std::string full = resp.body;
        std::string data = serialize_head(resp.status, base_headers(resp, keep_alive)) + full.substr(0, full.size() / 2);
        co_await write_raw(conn.stream, std::move(data));
        conn.stream.close();
        co_return false;
    }
    bool ok = co_await send(std::move(resp));
    co_return ok;
}

asio::awaitable<void> ApiServer::serve(net::AnyStream stream) {
    Conn conn{std::move(stream), beast::flat_buffer()};
    impl_->connections->insert(&conn.stream);
    struct Untrack {
        std::shared_ptr<std::set<net::AnyStream*>> set;
        net::AnyStream* s;
        ~Untrack() { set->erase(s); }
    } untrack{impl_->connections, &conn.stream};
    for (;;) {
        if (impl_->stopping) break;
        http::request_parser<http::string_body> parser;
        parser.body_limit(body_limit);
        parser.header_limit(64 * 1024);
        conn.stream.expires_after(120s);
        auto [ec, n] = co_await http::async_read(conn.stream, conn.buffer, parser, asio::as_tuple(asio::use_awaitable));
        (void)n;
        if (ec == http::error::body_limit) {
            Response r = status_response(413, "RequestEntityTooLarge", "Request entity too large: limit is 3145728");
            co_await write_raw(conn.stream, serialize_head(413, base_headers(r, false)) + r.body);
            // Lingering close: discard the rest of the upload for a moment, so the client's
            // pending write does not turn into a reset that hides the 413 from it.
            conn.stream.expires_after(2s);
            std::vector<char> sink(64 * 1024);
            for (std::size_t drained = 0; drained < 64 * 1024 * 1024;) {
                auto [dec, dn] = co_await conn.stream.async_read_some(asio::buffer(sink), asio::as_tuple(asio::use_awaitable));
                if (dec) break;
                drained += dn;
            }
            break;
        }
        if (ec) break;
        conn.stream.expires_never();
        Request req;
        req.msg = parser.release();
        req.method = std::string(req.msg.method_string());
        bool keep = co_await handle(*impl_, conn, req);
        if (!keep) break;
    }
    if (conn.stream) {
        conn.stream.expires_after(2s);
        co_await conn.stream.async_shutdown(asio::as_tuple(asio::use_awaitable));
        conn.stream.close();
    }
}

}  // namespace kubesandbox::local
