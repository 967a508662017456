#include "kube/channel_websocket.hpp"

#include "kube/client_impl.hpp"
#include "proto/status.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/websocket.hpp>

#include <algorithm>

namespace kubesandbox::kube {

namespace asio = boost::asio;
namespace http = boost::beast::http;
namespace websocket = boost::beast::websocket;

asio::awaitable<Result<ChannelSession>> open_channel_websocket(KubeClient::Impl& client, std::string target,
                                                               std::vector<std::string> protocols) {
    constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
    std::string offered;
    for (const auto& p : protocols) offered += (offered.empty() ? "" : ", ") + p;
    bool refreshed = false;
    for (int attempt = 0;; ++attempt) {
        auto auth = co_await client.authorization(refreshed);
        if (!auth) co_return fail(auth.error());
        auto stream = co_await client.connect();
        if (!stream) {
            // Nothing ran yet: one retry of a failed connect is always safe.
            if (attempt == 0 && !stream.error().is(errc::invalid_config)) continue;
            co_return fail(stream.error());
        }
        auto ws = std::make_unique<ChannelWebSocket>(std::move(*stream));
        const std::string authorization = *auth;
        const std::string user_agent = client.options.user_agent;
        ws->set_option(
            websocket::stream_base::decorator([authorization, user_agent, offered](websocket::request_type& req) {
                if (!authorization.empty()) req.set(http::field::authorization, authorization);
                req.set(http::field::sec_websocket_protocol, offered);
                req.set(http::field::user_agent, user_agent);
            }));
        websocket::stream_base::timeout timeouts{};
        timeouts.handshake_timeout = client.options.request_timeout;
        timeouts.idle_timeout = std::chrono::seconds(60);  // pings every 30 s keep it alive
        timeouts.keep_alive_pings = true;
        ws->set_option(timeouts);
        ws->binary(true);
        ws->auto_fragment(false);  // the API server treats every frame as a message
        ws->read_message_max(64 * 1024 * 1024);
        // A client masks what it sends through this buffer (taken at the first write only): a
        // 32 KiB stdin message then leaves in one TLS write, not eight 4 KiB records.
        ws->write_buffer_bytes(36 * 1024);

        websocket::response_type res;
        const std::string target_path = client.full_target(target);
        auto [ec] = co_await ws->async_handshake(res, client.host_header(), target_path, use_tuple);
        if (ec == websocket::error::upgrade_declined || (!ec && res.result_int() != 101)) {
            ws->next_layer().close();
            if (res.result_int() == 401 && !refreshed && client.can_refresh_credentials()) {
                refreshed = true;
                continue;
            }
            co_return fail(proto::error_from_response(res.result_int(), std::string(res[http::field::content_type]),
                                                      res.body(), std::string(res[http::field::retry_after])));
        }
        if (ec) {
            ws->next_layer().close();
            co_return fail(make_error(ec, "WebSocket handshake failed: " + ec.message()));
        }
        const std::string chosen(res[http::field::sec_websocket_protocol]);
        if (std::find(protocols.begin(), protocols.end(), chosen) == protocols.end()) {
            ws->next_layer().close();
            co_return fail(
                errc::invalid_response,
                "the server accepted the WebSocket upgrade without a subprotocol we offered (got \"" + chosen + "\")");
        }
        co_return ChannelSession{std::move(ws), chosen};
    }
}

}  // namespace kubesandbox::kube
