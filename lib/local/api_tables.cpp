// Server-side printing: the Table kubectl asks for (as=Table), with the columns a real server shows.
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <ctime>
#include "local/api_server_impl.hpp"
#include "local/store.hpp"
#include "util/json_access.hpp"

namespace kubesandbox::local {

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

json::object column(std::string name, std::string type, int priority, std::string format) {
    return json::object{{"name", std::move(name)},
                        {"type", std::move(type)},
                        {"format", std::move(format)},
                        {"description", ""},
                        {"priority", priority}};
}

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
        for (auto c : {column("Ready", "string"), column("Reason", "string"), column("Age", "string")})
            cols.push_back(c);
    } else if (id == "sandboxwarmpools.extensions.agents.x-k8s.io") {
        for (auto c : {column("Ready", "string"), column("Desired", "string"), column("Age", "string")})
            cols.push_back(c);
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
                             (string_at(p.as_object(), "protocol").empty() ? std::string("TCP")
                                                                           : string_at(p.as_object(), "protocol"));
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
            row["object"] = json::object{
                {"kind", "PartialObjectMetadata"}, {"apiVersion", "meta.k8s.io/v1"}, {"metadata", metadata_of(o)}};
        rows.push_back(row);
    }
    return json::object{{"kind", "Table"},
                        {"apiVersion", "meta.k8s.io/v1"},
                        {"metadata", std::move(list_meta)},
                        {"columnDefinitions", cols},
                        {"rows", rows}};
}

}  // namespace kubesandbox::local
