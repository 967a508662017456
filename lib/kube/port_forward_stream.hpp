// A byte stream to a port of a pod through the API server (pods/portforward over WebSocket,
// v4.channel.k8s.io): one WebSocket per TCP connection to the pod, used as a net::AnyStream, so
// an HTTP client writes straight into it with no local listening port. Internal.
#pragma once

#include <kubesandbox/kube_client.hpp>

#include "net/any_stream.hpp"

#include <boost/asio/awaitable.hpp>

#include <cstdint>
#include <memory>
#include <string>

namespace kubesandbox::kube {

struct PortForwardTarget {
    std::string namespace_name{};
    std::string pod{};
    std::uint16_t port{};
};

// The stream once the upgrade is accepted. Reads end with an error when the kubelet reports one
// on the error channel (nothing listens on the port, the pod is gone), with eof when the
// WebSocket closes. Errors opening it: as for exec (typed from the refused upgrade's Status).
boost::asio::awaitable<Result<net::AnyStream>> open_port_forward(std::shared_ptr<KubeClient::Impl> client,
                                                                 PortForwardTarget target);

}  // namespace kubesandbox::kube
