// Opening a connection to an HTTP server: resolve, TCP connect, an HTTP CONNECT through a proxy
// when one is configured, then TLS with SNI and host verification. Used for the API server now,
// and for sandbox routers and gateways.
#pragma once

#include <kubesandbox/error.hpp>

#include "net/any_stream.hpp"
#include "net/connect_gate.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ssl/context.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

namespace kubesandbox::net {

struct ConnectTarget {
    std::string host{};  // without brackets for IPv6
    std::string port{};
    bool tls{true};
    std::shared_ptr<boost::asio::ssl::context> tls_context{};  // required with tls
    std::string tls_server_name{};                             // SNI and the name verified; empty = host
    bool verify_server_name{true};
    std::string proxy_url{};  // an http:// proxy spoken to with CONNECT; empty = direct
    std::chrono::milliseconds connect_timeout{10'000};
    // With tls: at most gate->limit() connections of the targets sharing it open at once (the
    // others wait, bounded by the caller's deadline, before connect_timeout starts). Null = none.
    std::shared_ptr<ConnectGate> gate{};
};

// Makes `target` a TLS target trusting `ca_pem` (empty = the system's store); errc::invalid_config
// for a CA that does not load.
Result<void> use_tls(ConnectTarget& target, const std::string& ca_pem, bool insecure_skip_verify);

// The Host header (and CONNECT authority without the default port): "[::1]:8443", "h".
std::string host_header(std::string_view host, std::string_view port, bool tls);

// The proxy from HTTPS_PROXY / HTTP_PROXY (either case), unless NO_PROXY matches the server.
std::string proxy_from_environment(bool tls, std::string_view host, std::string_view port);

// A connected (and, with tls, handshaken) stream. Connecting gets connect_timeout, never past
// `deadline`. Errors: errc::timeout, errc::tls_error (verification, protocol: never worth a
// retry), errc::connection_failed (proxy refused), errc::invalid_config (bad proxy URL), or
// the resolver's/socket's own code.
boost::asio::awaitable<Result<AnyStream>> connect(boost::asio::any_io_executor executor, ConnectTarget target,
                                                  std::chrono::steady_clock::time_point deadline);

}  // namespace kubesandbox::net
