// Port-forward for the local cluster's kubelet: serves pods/portforward in all three wire
// variants (WebSocket v4.channel.k8s.io, SPDY/3.1 tunnelled in WebSocket, SPDY/3.1 over a plain
// HTTP upgrade) and connects to 127.0.0.1:<port> inside the pod's network namespace.
#pragma once

#include "local/kubelet.hpp"

#include <kubesandbox/error.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <cstdint>
#include <memory>

namespace kubesandbox::local {

// A pod's network namespace, held open: what connects through it reaches that pod, never a
// process that was given the pod's pid after the pod ended. Default-constructed: ours (tests).
class PodNetwork {
public:
    PodNetwork() = default;
    // The namespace of process `pid` (/proc/<pid>/ns/net); 0 means ours.
    static Result<PodNetwork> of_process(int pid);
    int fd() const { return fd_ ? *fd_ : -1; }

private:
    std::shared_ptr<const int> fd_;  // closed with the last copy
};

// Owns the request's connection until the session ends. `pod_pid` is a process inside the pod's
// network namespace, which is opened once, when the session starts; 0 means the host's (tests).
boost::asio::awaitable<void> serve_port_forward(StreamRequest request, int pod_pid);

namespace port_forward_detail {
// A connection to localhost:<port> inside the pod's network namespace (IPv4, then IPv6).
boost::asio::awaitable<Result<boost::asio::ip::tcp::socket>> connect_in_pod(boost::asio::any_io_executor executor,
                                                                            PodNetwork network, std::uint16_t port);
// The same for one connection, through the namespace of process `pod_pid` as it is now.
boost::asio::awaitable<Result<boost::asio::ip::tcp::socket>> connect_in_pod(boost::asio::any_io_executor executor,
                                                                            int pod_pid, std::uint16_t port);
}  // namespace port_forward_detail
using port_forward_detail::connect_in_pod;

}  // namespace kubesandbox::local
