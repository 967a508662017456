// The objects through which clients find the local cluster's sandbox router, as they would on a
// cluster running agent-sandbox: in agent-sandbox-system, a host-network Pod standing for the
// router (the router itself runs in the cluster's process, on the host's loopback, so the pod's
// port is the router's) and the Service sandbox-router-svc:8080 in front of it, which tunnels
// and `kubectl port-forward svc/...` reach; and a gateway.networking.k8s.io/v1 Gateway whose
// status publishes the router's address and whose HTTP listener has its port, as a gateway
// controller would once the Gateway is programmed. Internal.
#pragma once

#include <kubesandbox/kube_client.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/json/object.hpp>

#include <cstdint>
#include <string>

namespace kubesandbox::local {

inline constexpr const char* router_gateway_name = "sandbox-router-gateway";
inline constexpr const char* router_gateway_namespace = "default";
inline constexpr const char* router_namespace = "agent-sandbox-system";
inline constexpr const char* router_service_name = "sandbox-router-svc";
inline constexpr std::uint16_t router_service_port = 8080;

// The Gateway with its HTTP listener on `port`, and the status a programmed Gateway at `host`
// reports.
boost::json::object router_gateway(std::uint16_t port);
boost::json::object router_gateway_status(const std::string& host);

// The router's Pod (host network, `port` its container port and readiness probe) and Service.
boost::json::object router_pod(std::uint16_t port);
boost::json::object router_service(std::uint16_t port);

// Creates the namespace, Pod, Service and Gateway (keeping those that exist) and writes the
// Gateway's status.
boost::asio::awaitable<Result<void>> publish_router(KubeClient client, std::string host, std::uint16_t port);

}  // namespace kubesandbox::local
