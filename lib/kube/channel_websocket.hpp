// Opening a WebSocket to an API server subresource that speaks the channel protocol (pods/exec,
// pods/portforward): authorization (refreshed once on 401), offered subprotocols, a refused
// upgrade typed from its Status. Internal.
#pragma once

#include <kubesandbox/kube_client.hpp>

#include "net/any_stream.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/beast/websocket/stream.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace kubesandbox::kube {

using ChannelWebSocket = boost::beast::websocket::stream<net::AnyStream>;

struct ChannelSession {
    std::unique_ptr<ChannelWebSocket> ws;
    std::string protocol;  // the subprotocol the server chose, one of those offered
};

// Keeps a channel WebSocket's idle connection alive and notices a dead peer, in place of Beast's
// idle timeout, which re-arms its timer at every read (a timerfd_settime per TLS record whenever
// it is the process's earliest timer). Every `period` it looks whether a read began since: after
// a quiet period it pings, after a second one it closes the socket, which fails the pending read.
// Runs on `strand`, where every operation on the WebSocket runs; destroy it before the WebSocket.
class ChannelKeepAlive {
public:
    static constexpr std::chrono::seconds default_period{30};
    ChannelKeepAlive(ChannelWebSocket& ws, boost::asio::any_io_executor strand,
                     std::chrono::steady_clock::duration period = default_period);
    ~ChannelKeepAlive();
    ChannelKeepAlive(const ChannelKeepAlive&) = delete;
    ChannelKeepAlive& operator=(const ChannelKeepAlive&) = delete;

    // The peer answered nothing, not even a ping, for two periods: the socket was closed.
    bool timed_out() const noexcept;

private:
    struct State;
    std::shared_ptr<State> state_;
};

// `target` is the API path with its query (below the server's base path); `protocols` in order
// of preference. Binary frames, no auto-fragmenting (the server treats each frame as a message).
boost::asio::awaitable<Result<ChannelSession>> open_channel_websocket(KubeClient::Impl& client, std::string target,
                                                                      std::vector<std::string> protocols);

}  // namespace kubesandbox::kube
