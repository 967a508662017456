// Small helpers shared by the client's component tests.
#pragma once

#include <kubesandbox/kube_client.hpp>

#include <chrono>
#include <string>
#include <string_view>

namespace kubesandbox::test {

// Shared by the client tests: the pods collection of "default", a Status body, and client
// options with fast backoff and no rate limit.
inline ResourcePath default_pods() {
    ResourcePath p;
    p.plural = "pods";
    p.namespace_name = "default";
    return p;
}

inline std::string status_json(unsigned code, std::string_view reason, std::string_view message) {
    return R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":")" + std::string(message) +
           R"(","reason":")" + std::string(reason) + R"(","code":)" + std::to_string(code) + "}";
}

inline KubeClientOptions fast_options() {
    using namespace std::chrono_literals;
    KubeClientOptions o;
    o.retry_initial_backoff = 5ms;
    o.retry_max_backoff = 20ms;
    o.request_timeout = 2s;
    o.qps = 0;
    return o;
}

}  // namespace kubesandbox::test
