// Sans-IO rules of the local cluster's sandbox router: the header contract of agent-sandbox's
// sandbox-router (shared/spec/agent-sandbox.md §3.1) — which requests are refused and why, where
// a request goes, and which headers travel on.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kubesandbox::local {

struct RouterRequestHeaders {
    std::optional<std::string_view> sandbox_id, namespace_name, port, pod_ip, timeout, authorization;
};

struct RouterTarget {
    std::string sandbox_id;
    std::string namespace_name = "default";
    std::uint16_t port = 8888;
    std::chrono::milliseconds timeout{};  // for the whole upstream exchange
};

struct RouterRefusal {
    unsigned status = 400;
    std::string detail;
};

// Checks the X-Sandbox-* headers (and the bearer token when `token` is non-empty) in the
// reference router's order. `proxy_timeout` is the default and the cap of X-Sandbox-Timeout.
struct RouterDecision {
    std::optional<RouterTarget> target;
    std::optional<RouterRefusal> refusal;
};
RouterDecision route_sandbox_request(const RouterRequestHeaders& headers, std::string_view token,
                                     std::chrono::milliseconds proxy_timeout);

// The bearer token check alone (for paths other than /healthz): nullopt = allowed.
std::optional<RouterRefusal> check_router_token(std::optional<std::string_view> authorization, std::string_view token);

// Headers that never travel to the backend: Host, Authorization, X-Sandbox-*, hop-by-hop ones,
// and any named in `connection` (the request's Connection header).
bool drop_request_header(std::string_view name, std::string_view connection);

// Hop-by-hop headers of a response, not passed back to the client.
bool drop_response_header(std::string_view name);

// {"detail": ...} error bodies.
std::string router_detail_body(std::string_view detail);

}  // namespace kubesandbox::local
