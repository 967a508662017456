// The local cluster's Gateway in front of its sandbox router: a gateway.networking.k8s.io/v1
// Gateway whose status publishes the router's loopback address and whose HTTP listener has the
// router's port, as a gateway controller would once the Gateway is programmed. Internal.
#pragma once

#include <kubesandbox/kube_client.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/json/object.hpp>

#include <cstdint>
#include <string>

namespace kubesandbox::local {

inline constexpr const char* router_gateway_name = "sandbox-router-gateway";
inline constexpr const char* router_gateway_namespace = "default";

// The Gateway with its HTTP listener on `port`, and the status a programmed Gateway at `host`
// reports.
boost::json::object router_gateway(std::uint16_t port);
boost::json::object router_gateway_status(const std::string& host);

// Creates the Gateway (keeping one that exists) and writes its status.
boost::asio::awaitable<Result<void>> publish_router_gateway(KubeClient client, std::string host, std::uint16_t port);

}  // namespace kubesandbox::local
