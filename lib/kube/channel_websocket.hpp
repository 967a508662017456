// Opening a WebSocket to an API server subresource that speaks the channel protocol (pods/exec,
// pods/portforward): authorization (refreshed once on 401), offered subprotocols, a refused
// upgrade typed from its Status. Internal.
#pragma once

#include <kubesandbox/kube_client.hpp>

#include "net/any_stream.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/beast/websocket/stream.hpp>

#include <memory>
#include <string>
#include <vector>

namespace kubesandbox::kube {

using ChannelWebSocket = boost::beast::websocket::stream<net::AnyStream>;

struct ChannelSession {
    std::unique_ptr<ChannelWebSocket> ws;
    std::string protocol;  // the subprotocol the server chose, one of those offered
};

// `target` is the API path with its query (below the server's base path); `protocols` in order
// of preference. Binary frames, no auto-fragmenting (the server treats each frame as a message).
boost::asio::awaitable<Result<ChannelSession>> open_channel_websocket(KubeClient::Impl& client, std::string target,
                                                                      std::vector<std::string> protocols);

}  // namespace kubesandbox::kube
