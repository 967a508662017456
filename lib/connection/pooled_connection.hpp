// A RouterConnection speaking HTTP/1.1 over a keep-alive pool of streams, whatever opens them:
// TCP/TLS to a URL (direct), a port-forward through the API server (tunnel). Internal.
#pragma once

#include "connection/router_connection.hpp"
#include "net/any_stream.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace kubesandbox {

// Opens one stream to the router, by the deadline. Its errors are reported as they are when
// they are timeouts or errc::service_unavailable (nothing to connect to yet), else as
// errc::connection_failed.
using StreamOpener =
    std::function<boost::asio::awaitable<Result<net::AnyStream>>(std::chrono::steady_clock::time_point deadline)>;

struct PooledConnectionSettings {
    std::string description{};                    // in messages: a URL or "tunnel to ns/pod:port", never a token
    std::string token{};                          // "Authorization: Bearer"; empty = none
    std::string prefix{};                         // path prefix of every target
    std::string host{};                           // the Host header
    std::function<std::string()> current_host{};  // instead of `host`, when the endpoint moves
    std::size_t max_connections{64};
    std::chrono::milliseconds max_idle{std::chrono::seconds(4)};
    // The endpoint's generation, when the opener's target can move (a Gateway's address):
    // connections opened under an older one are closed instead of reused. Unset = never moves.
    std::function<std::uint64_t()> generation{};
    // After an open fails (other than by the request's own deadline), no open is tried for
    // open_backoff_min, doubling while they keep failing up to open_backoff_max; requests that
    // need a new connection meanwhile fail at once with the last error instead of piling onto a
    // dead path. A max of 0 = off.
    std::chrono::milliseconds open_backoff_min{100};
    std::chrono::milliseconds open_backoff_max{0};
};

std::shared_ptr<RouterConnection> make_pooled_router_connection(boost::asio::any_io_executor executor,
                                                                PooledConnectionSettings settings, StreamOpener open);

}  // namespace kubesandbox
