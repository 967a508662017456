#include "kube/port_forward_stream.hpp"

#include "kube/channel_websocket.hpp"
#include "kube/client_impl.hpp"
#include "proto/channel_protocol.hpp"
#include "proto/request.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/websocket.hpp>

#include <algorithm>
#include <cstring>

namespace kubesandbox::kube {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
using net::error_code;

namespace {

constexpr std::size_t max_write_frame = 64 * 1024;

// Shared with pending operations, which may complete after the stream object is gone.
struct TunnelState {
    std::unique_ptr<ChannelWebSocket> ws;
    beast::flat_buffer message;  // the unread rest of the current data message
    bool data_prefix_seen = false;
    bool error_prefix_seen = false;
    std::string error_text;  // what the kubelet reported on the error channel
};

// Reads into `into` from the current data message, reading further messages as needed.
asio::awaitable<std::tuple<error_code, std::size_t>> read_data(std::shared_ptr<TunnelState> s,
                                                               asio::mutable_buffer into) {
    constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
    for (;;) {
        if (s->message.size() != 0) {
            std::size_t n = asio::buffer_copy(into, s->message.data());
            s->message.consume(n);
            co_return std::tuple{error_code{}, n};
        }
        if (into.size() == 0) co_return std::tuple{error_code{}, std::size_t{0}};
        beast::flat_buffer frame;
        auto [ec, n] = co_await s->ws->async_read(frame, use_tuple);
        if (ec == websocket::error::closed) co_return std::tuple{error_code(asio::error::eof), std::size_t{0}};
        if (ec) co_return std::tuple{ec, std::size_t{0}};
        auto bytes = static_cast<const char*>(frame.data().data());
        std::string_view message(bytes, frame.size());
        if (message.empty()) continue;
        const std::uint8_t channel = static_cast<std::uint8_t>(message[0]);
        message.remove_prefix(1);
        bool& prefix_seen = channel == proto::port_forward_data_channel(0) ? s->data_prefix_seen : s->error_prefix_seen;
        if (!prefix_seen) {  // the first message of each channel starts with the port
            if (message.size() < 2) continue;
            message.remove_prefix(2);
            prefix_seen = true;
        }
        if (channel == proto::port_forward_error_channel(0)) {
            s->error_text.append(message.substr(0, 4096 - std::min<std::size_t>(4096, s->error_text.size())));
            if (!s->error_text.empty()) {
                s->ws->next_layer().close();
                co_return std::tuple{error_code(asio::error::connection_reset), std::size_t{0}};
            }
            continue;
        }
        if (channel != proto::port_forward_data_channel(0) || message.empty()) continue;
        auto room = s->message.prepare(message.size());
        std::memcpy(room.data(), message.data(), message.size());
        s->message.commit(message.size());
    }
}

class PortForwardImpl final : public net::AnyStream::Impl {
public:
    explicit PortForwardImpl(std::unique_ptr<ChannelWebSocket> ws) : s_(std::make_shared<TunnelState>()) {
        s_->ws = std::move(ws);
    }
    ~PortForwardImpl() override { s_->ws->next_layer().close(); }

    asio::any_io_executor executor() override { return s_->ws->get_executor(); }

    void read_some(asio::mutable_buffer b, net::IoHandler h) override {
        asio::co_spawn(s_->ws->get_executor(), read_data(s_, b),
                       [h = std::move(h)](std::exception_ptr e, std::tuple<error_code, std::size_t> r) mutable {
                           if (e) r = {error_code(asio::error::operation_aborted), 0};
                           std::move(h)(std::get<0>(r), std::get<1>(r));
                       });
    }

    void write_some(const net::ConstBufferList& list, net::IoHandler h) override {
        // One binary message on the data channel: the channel byte, then the bytes.
        auto frame = std::make_shared<std::string>(1, static_cast<char>(proto::port_forward_data_channel(0)));
        for (const auto& b : list) {
            std::size_t take = std::min(b.size(), max_write_frame - (frame->size() - 1));
            frame->append(static_cast<const char*>(b.data()), take);
            if (frame->size() - 1 == max_write_frame) break;
        }
        const std::size_t payload = frame->size() - 1;
        auto s = s_;
        s->ws->async_write(asio::buffer(*frame),
                           [s, frame, payload, h = std::move(h)](error_code ec, std::size_t) mutable {
                               std::move(h)(ec, ec ? 0 : payload);
                           });
    }

    void handshake(net::DoneHandler h) override {
        asio::post(s_->ws->get_executor(), [h = std::move(h)]() mutable { std::move(h)(error_code{}); });
    }
    // The channel protocol has no half-close: closing the WebSocket ends the forwarded connection.
    void shutdown(net::DoneHandler h) override {
        auto s = s_;
        s->ws->async_close(websocket::close_code::normal,
                           [s, h = std::move(h)](error_code ec) mutable { std::move(h)(ec); });
    }
    void close() noexcept override { s_->ws->next_layer().close(); }
    void expires_after(std::chrono::steady_clock::duration d) override { s_->ws->next_layer().expires_after(d); }
    void expires_never() override { s_->ws->next_layer().expires_never(); }
    // Idle with nothing buffered and nothing arriving: still usable.
    bool idle_alive() override { return s_->message.size() == 0 && s_->ws->next_layer().idle_alive(); }
    bool is_tls() const noexcept override { return false; }

private:
    std::shared_ptr<TunnelState> s_;
};

// Built outside the coroutine: g++ 12 rejects braced lists of literals in coroutine calls.
std::string port_forward_path(const PortForwardTarget& target) {
    ResourcePath p;
    p.plural = "pods";
    p.namespace_name = target.namespace_name;
    p.name = target.pod;
    p.subresource = "portforward";
    return p.str() + proto::query_string({{"ports", std::to_string(target.port)}});
}

std::vector<std::string> port_forward_protocols() { return {"v4.channel.k8s.io"}; }

}  // namespace

asio::awaitable<Result<net::AnyStream>> open_port_forward(std::shared_ptr<KubeClient::Impl> client,
                                                          PortForwardTarget target) {
    auto opened = co_await open_channel_websocket(*client, port_forward_path(target), port_forward_protocols());
    if (!opened) co_return fail(opened.error());
    // Pings would make an idle tunnel look unusable (idle_alive); the pool bounds idleness instead.
    websocket::stream_base::timeout timeouts{};
    timeouts.handshake_timeout = client->options.request_timeout;
    timeouts.idle_timeout = websocket::stream_base::none();
    timeouts.keep_alive_pings = false;
    opened->ws->set_option(timeouts);
    co_return net::AnyStream(std::make_unique<PortForwardImpl>(std::move(opened->ws)));
}

}  // namespace kubesandbox::kube
