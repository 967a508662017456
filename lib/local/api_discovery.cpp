// Discovery: /version, /api, /apis and the openapi documents kubectl reads.
#include <algorithm>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include "local/api_server_impl.hpp"
#include "local/store.hpp"
#include "util/json_access.hpp"

namespace kubesandbox::local {

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
        json::object r{{"name", t.plural},
                       {"singularName", t.singular},
                       {"namespaced", t.namespaced},
                       {"kind", t.kind},
                       {"verbs", verbs_for(t)}};
        if (!t.short_names.empty()) {
            json::array sn;
            for (auto& s : t.short_names) sn.push_back(json::value(s));
            r["shortNames"] = sn;
        }
        if (const auto& cats = rules_for(t).categories; !cats.empty()) {
            json::array a;
            for (auto c : cats) a.push_back(json::value(json::string(c)));
            r["categories"] = std::move(a);
        }
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
    return json::object{
        {"kind", "APIResourceList"}, {"apiVersion", "v1"}, {"groupVersion", group_version}, {"resources", resources}};
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
    return json::object{
        {"name", group},
        {"versions", versions},
        {"preferredVersion", json::object{{"groupVersion", group + "/" + seen.front()}, {"version", seen.front()}}}};
}

std::vector<std::string> api_groups() {
    std::vector<std::string> groups;
    for (const auto& t : resource_types())
        if (!t.group.empty() && std::find(groups.begin(), groups.end(), t.group) == groups.end())
            groups.push_back(t.group);
    return groups;
}

std::optional<Response> discovery(ApiServer::Impl& impl, const Request& req) {
    const auto& s = req.segments;
    if (s.size() == 1 && s[0] == "version") return json_response(200, version_json());
    if (s.size() == 1 && (s[0] == "healthz" || s[0] == "livez" || s[0] == "readyz")) {
        Response r;
        r.content_type = "text/plain; charset=utf-8";
        r.body = "ok";
        return r;
    }
    if (s.size() == 1 && s[0] == "api")
        return json_response(200,
                             json::object{{"kind", "APIVersions"},
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
    return std::nullopt;
}

// OpenAPI v3, only as much as kubectl needs to see that the server validates fields itself
// (PATCH operations with a fieldValidation parameter per kind); no schemas.
namespace {

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

}  // namespace

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

}  // namespace kubesandbox::local
