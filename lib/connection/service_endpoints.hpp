// Sans-IO: which pod and port stand behind a Service's port, from the Service and its
// EndpointSlices (discovery.k8s.io/v1), for a tunnel that port-forwards to a pod.
#pragma once

#include <kubesandbox/error.hpp>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace kubesandbox {

struct ServiceEndpoint {
    std::string pod;
    std::uint16_t port = 0;  // the port in the pod (the slice's resolved targetPort)
};

// The ready endpoints (ready unset counts as ready, as the API says) that are Pods, for the
// Service port numbered `service_port`, in the slices' order. errc::invalid_config when the
// Service has no such port; errc::service_unavailable when nothing is ready behind it.
Result<std::vector<ServiceEndpoint>> ready_endpoints(const boost::json::object& service,
                                                     const boost::json::array& slices, std::uint16_t service_port);

}  // namespace kubesandbox
