// Sans-IO rules of the local cluster's EndpointSlice controller: the slice Kubernetes keeps for a
// Service with a selector (discovery.k8s.io/v1), from the Pods it selects. JSON in, JSON out.
#pragma once

#include <boost/json/object.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kubesandbox::local::endpoints {

namespace json = boost::json;

inline constexpr const char* service_name_label = "kubernetes.io/service-name";
inline constexpr const char* managed_by_label = "endpointslice.kubernetes.io/managed-by";
inline constexpr const char* managed_by = "endpointslice-controller.k8s.io";

// The one slice the local controller keeps per Service: "<service>-local".
std::string slice_name(std::string_view service);

// The slice for `service` over the pods of its namespace: those whose labels match its selector
// and that have an IP, ready and serving from the Pod's Ready condition, terminating once the Pod
// is being deleted; ports with targetPort resolved (a number, or the name of a container port of
// the selected pods). nullopt for a Service without a selector (its endpoints are managed by
// someone else).
std::optional<json::object> endpoint_slice_for(const json::object& service,
                                               const std::vector<const json::object*>& pods);

// Whether two slices list the same endpoints and ports (what the controller would rewrite).
bool same_endpoints(const json::object& a, const json::object& b);

}  // namespace kubesandbox::local::endpoints
