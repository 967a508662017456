// Sans-IO: where a Gateway (gateway.networking.k8s.io/v1) is reached, from its status: the
// address the gateway controller published and the port of the listener that serves HTTP.
#pragma once

#include <kubesandbox/error.hpp>

#include <boost/json/object.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kubesandbox {

struct GatewayAddress {
    std::string host;  // an IP literal (no brackets) or a hostname
    std::uint16_t port = 80;
    bool operator==(const GatewayAddress&) const = default;
};

// An address from a status a client may connect to (a Gateway's published address, a pod IP, a
// Service's FQDN): an IPv4/IPv6 literal or a plain DNS hostname. Refused:
// anything with '/', '?', '#', '@', ':' (outside an IPv6 literal), spaces or control bytes
// (the value ends up in a URL), empty labels, labels starting or ending with '-', and
// hostnames whose labels are all digits or hex (a mangled IP, not a name).
bool usable_host(std::string_view value);

// The first usable status.addresses[].value (its type is ignored, as the agent-sandbox clients
// do) and the port: `port` when given, else the first listener speaking `protocol` ("HTTP" or
// "HTTPS"), else 80 (443 for HTTPS). errc::service_unavailable when no usable address is
// published yet (the message says what was seen).
Result<GatewayAddress> gateway_address(const boost::json::object& gateway, std::optional<std::uint16_t> port,
                                       std::string_view protocol);

// "host:port" with IPv6 bracketed, for URLs and messages.
std::string authority(const GatewayAddress& address);

}  // namespace kubesandbox
