#include "kube/channel_websocket.hpp"

#include "kube/client_impl.hpp"
#include "proto/status.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/websocket.hpp>

#include <algorithm>
#include <cstdint>

namespace kubesandbox::kube {

namespace asio = boost::asio;
namespace http = boost::beast::http;
namespace websocket = boost::beast::websocket;

struct ChannelKeepAlive::State : std::enable_shared_from_this<State> {
    State(ChannelWebSocket& ws_, asio::any_io_executor strand, std::chrono::steady_clock::duration period_)
        : ws(&ws_), timer(std::move(strand)), period(period_), seen(ws_.next_layer().reads_started()) {}

    ChannelWebSocket* ws;  // null once stopped
    asio::steady_timer timer;
    std::chrono::steady_clock::duration period;
    std::uint64_t seen;
    int quiet_periods{0};
    bool pinging{false};
    bool timed_out{false};

    void arm() {
        timer.expires_after(period);
        timer.async_wait([self = shared_from_this()](boost::system::error_code ec) {
            if (!ec) self->tick();
        });
    }

    void tick() {
        if (!ws) return;
        const std::uint64_t reads = ws->next_layer().reads_started();
        if (reads != seen) {
            seen = reads;
            quiet_periods = 0;
        } else if (++quiet_periods >= 2) {
            timed_out = true;
            ws->next_layer().close();
            return;
        } else if (!pinging) {
            pinging = true;
            ws->async_ping(
                {}, asio::bind_executor(timer.get_executor(), [self = shared_from_this()](boost::system::error_code) {
                    self->pinging = false;
                }));
        }
        arm();
    }
};

ChannelKeepAlive::ChannelKeepAlive(ChannelWebSocket& ws, asio::any_io_executor strand,
                                   std::chrono::steady_clock::duration period)
    : state_(std::make_shared<State>(ws, std::move(strand), period)) {
    state_->arm();
}

ChannelKeepAlive::~ChannelKeepAlive() {
    state_->ws = nullptr;
    state_->timer.cancel();
}

bool ChannelKeepAlive::timed_out() const noexcept { return state_->timed_out; }

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
        timeouts.idle_timeout = websocket::stream_base::none();  // ChannelKeepAlive's job
        timeouts.keep_alive_pings = false;
        ws->set_option(timeouts);
        ws->binary(true);
        ws->auto_fragment(false);  // the API server treats every frame as a message
        ws->read_message_max(64 * 1024 * 1024);
        // A client masks what it sends through this buffer (taken at the first write only): a
        // 64 KiB stdin message then leaves in one TLS write, not sixteen 4 KiB records.
        ws->write_buffer_bytes(64 * 1024);

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
