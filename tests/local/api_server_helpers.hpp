// What the local API server's tests over loopback share (api_server_test.cpp,
// api_list_watch_test.cpp, api_delete_test.cpp): a cluster of the API server alone, and objects.
#pragma once

#include "http_helper.hpp"

#include <kubesandbox/local_cluster.hpp>

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <unistd.h>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace kubesandbox::test::api {

namespace json = boost::json;

inline std::unique_ptr<LocalCluster> start_cluster(bool tls = false) {
    LocalClusterOptions o;
    o.agent_sandbox = false;  // the API server alone: its tests count objects and requests
    o.router_objects = false;
    o.tls = tls;
    o.continue_token_ttl = std::chrono::seconds(300);
    auto c = LocalCluster::start(o);
    EXPECT_TRUE(c.has_value()) << (c ? "" : c.error().describe());
    return c ? std::move(*c) : nullptr;
}

inline json::object configmap(const std::string& name, json::object labels = {}) {
    return json::object{{"apiVersion", "v1"},
                        {"kind", "ConfigMap"},
                        {"metadata", json::object{{"name", name}, {"labels", labels}}},
                        {"data", json::object{{"k", "v"}}}};
}

inline json::object pod(const std::string& name, json::object labels = {}) {
    return json::object{
        {"apiVersion", "v1"},
        {"kind", "Pod"},
        {"metadata", json::object{{"name", name}, {"labels", labels}}},
        {"spec", json::object{{"containers", json::array{json::object{{"name", "c"}, {"image", "busybox"}}}}}}};
}

inline json::object claim(const std::string& name) {
    return json::object{{"apiVersion", "extensions.agents.x-k8s.io/v1beta1"},
                        {"kind", "SandboxClaim"},
                        {"metadata", json::object{{"name", name}}},
                        {"spec", json::object{{"warmPoolRef", json::object{{"name", "pool"}}}}}};
}

inline std::string str(const json::value& v) { return v.is_string() ? std::string(v.as_string()) : std::string(); }
inline std::string rv_of(const json::object& o) { return str(o.at("metadata").at("resourceVersion")); }

inline const char* const cms = "/api/v1/namespaces/default/configmaps";
inline const char* const claims = "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/default/sandboxclaims";

inline std::vector<std::string> names(const json::object& list) {
    std::vector<std::string> out;
    for (auto& i : list.at("items").as_array()) out.push_back(str(i.at("metadata").at("name")));
    return out;
}

}  // namespace kubesandbox::test::api
