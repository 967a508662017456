// Port-forward, variants B and C: SPDY/3.1 streams (a plain HTTP upgrade, or tunnelled in a
// WebSocket as SPDY/3.1+portforward.k8s.io), one data/error stream pair per forwarded connection.
#include "local/port_forward_session.hpp"
#include "local/spdy.hpp"
#include "proto/channel_protocol.hpp"
#include "proto/status.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/write.hpp>

#include <map>

namespace kubesandbox::local::port_forward_detail {

namespace {

namespace spdy = local::spdy;

class SpdySession : public std::enable_shared_from_this<SpdySession> {
public:
    SpdySession(asio::any_io_executor ex, std::unique_ptr<Transport> transport, PodNetwork network, PodRef pod)
        : ex_(ex),
          transport_(std::move(transport)),
          outbox_(ex, *transport_, true),
          network_(std::move(network)),
          pod_(std::move(pod)) {}

    asio::awaitable<void> run() {
        auto self = shared_from_this();
        spawn(ex_, writer(self));
        bool go = true;
        while (go) {
            auto bytes = co_await transport_->read();
            if (!bytes) break;
            decoder_.feed(*bytes);
            while (go) {
                auto frame = decoder_.next();
                if (!frame) {
                    outbox_.push(encoder_.goaway(last_stream_id_, spdy::GoAwayStatus::protocol_error));
                    go = false;
                    break;
                }
                if (!*frame) break;
                go = handle(std::move(**frame));
            }
        }
        closing_ = true;
        for (auto& [id, p] : requests_) {
            p->upstream->close();
            p->timer.cancel();
        }
        for (auto& [id, p] : streams_) {
            p->upstream->close();
            p->timer.cancel();
        }
        requests_.clear();
        streams_.clear();
        outbox_.finish();
    }

private:
    struct Pair {
        explicit Pair(const asio::any_io_executor& ex) : upstream(std::make_shared<Upstream>(ex)), timer(ex) {}
        std::string request_id;
        std::uint32_t error_id = 0, data_id = 0;
        std::uint16_t port = 0;
        bool started = false;
        bool data_open = false, error_open = false;  // we may still send frames on the stream
        std::shared_ptr<Upstream> upstream;
        asio::steady_timer timer;
    };

    static asio::awaitable<void> writer(std::shared_ptr<SpdySession> self) { co_await self->outbox_.run(); }

    // false ends the session.
    bool handle(spdy::Frame frame) {
        if (auto* syn = std::get_if<spdy::SynStream>(&frame)) return on_syn_stream(*syn);
        if (auto* data = std::get_if<spdy::DataFrame>(&frame)) return on_data(*data);
        if (auto* rst = std::get_if<spdy::RstStream>(&frame)) {
            on_reset(rst->stream_id);
            return true;
        }
        if (auto* ping = std::get_if<spdy::Ping>(&frame)) {
            outbox_.push(encoder_.ping(ping->id));  // echo unchanged
            return true;
        }
        if (std::holds_alternative<spdy::GoAway>(frame)) return false;
        // SETTINGS, WINDOW_UPDATE (we do not limit what we send: spdystream never grants
        // window), HEADERS, SYN_REPLY and unknown control frames need no action.
        return true;
    }

    bool on_syn_stream(const spdy::SynStream& syn) {
        std::uint32_t id = syn.stream_id;
        if (streams_.count(id)) {
            outbox_.push(encoder_.rst_stream(id, spdy::RstStatus::stream_in_use));
            return true;
        }
        last_stream_id_ = std::max(last_stream_id_, id);
        auto type = spdy::find_header(syn.headers, "streamtype");
        auto port_text = spdy::find_header(syn.headers, "port");
        auto ports = port_text ? proto::parse_port_list(*port_text) : fail(errc::bad_request, "no port");
        bool is_error = type && *type == "error";
        bool is_data = type && *type == "data";
        if ((!is_error && !is_data) || !ports || ports->size() != 1) {
            outbox_.push(encoder_.rst_stream(id, spdy::RstStatus::protocol_error));
            return true;
        }
        std::string request_id;
        if (auto rid = spdy::find_header(syn.headers, "requestid")) request_id = std::string(*rid);
        else request_id = std::to_string(is_error ? id : id - 2);  // legacy clients

        auto reply = encoder_.syn_reply(id, {});
        if (!reply) return false;
        outbox_.push(std::move(*reply));

        auto& pair = requests_[request_id];
        if (!pair) {
            pair = std::make_shared<Pair>(ex_);
            pair->request_id = request_id;
            pair->port = (*ports)[0];
            pair->timer.expires_after(pair_timeout);
            spawn(ex_, pair_deadline(shared_from_this(), pair));
        }
        if ((is_error && pair->error_id) || (is_data && pair->data_id)) {
            outbox_.push(encoder_.rst_stream(id, spdy::RstStatus::protocol_error));
            return true;
        }
        if (is_error) {
            pair->error_id = id;
            pair->error_open = true;
        } else {
            pair->data_id = id;
            pair->data_open = true;
            if (syn.fin) pair->upstream->finish_inbound();
        }
        streams_[id] = pair;
        if (pair->error_id && pair->data_id && !pair->started) {
            pair->started = true;
            pair->timer.cancel();
            spawn(ex_, forward(shared_from_this(), pair));
        }
        return true;
    }

    bool on_data(const spdy::DataFrame& data) {
        auto it = streams_.find(data.stream_id);
        if (it == streams_.end()) return true;  // reset or unknown: drop
        auto pair = it->second;
        if (data.stream_id != pair->data_id) return true;  // the client never writes on the error stream
        auto& up = pair->upstream;
        if (!data.data.empty() && !up->closed) {
            if (up->inbound_bytes + data.data.size() > inbound_limit) {
                outbox_.push(encoder_.rst_stream(data.stream_id, spdy::RstStatus::flow_control_error));
                pair->data_open = false;
                up->close();
                return true;
            }
            up->push(data.data);
        }
        if (data.fin) up->finish_inbound();
        return true;
    }

    void on_reset(std::uint32_t id) {
        auto it = streams_.find(id);
        if (it == streams_.end()) return;
        auto pair = it->second;
        streams_.erase(it);
        if (id == pair->data_id) {
            pair->data_open = false;
            pair->upstream->close();  // kubectl resets the data stream when it is done with it
        } else {
            pair->error_open = false;
        }
        if (!streams_.count(pair->data_id) && !streams_.count(pair->error_id)) {
            pair->timer.cancel();
            pair->upstream->close();
            if (auto r = requests_.find(pair->request_id); r != requests_.end() && r->second == pair)
                requests_.erase(r);
        }
    }

    void send_error(Pair& pair, const std::string& text) {
        if (closing_ || !pair.error_open) return;
        outbox_.push(encoder_.data(pair.error_id, text, false));
    }

    // Empty DATA with FIN on both streams: the forward is over (an empty error stream = success).
    void finish_pair(Pair& pair) {
        if (closing_) return;
        if (pair.data_open) outbox_.push(encoder_.data(pair.data_id, {}, true));
        if (pair.error_open) outbox_.push(encoder_.data(pair.error_id, {}, true));
        pair.data_open = pair.error_open = false;
    }

    static asio::awaitable<void> pair_deadline(std::shared_ptr<SpdySession> self, std::shared_ptr<Pair> pair) {
        auto [ec] = co_await pair->timer.async_wait(tuple_awaitable);
        if (ec || pair->started || self->closing_) co_return;
        self->send_error(*pair, "timed out waiting for streams");
        self->finish_pair(*pair);
        for (auto id : {pair->error_id, pair->data_id})
            if (id && self->streams_.count(id)) self->streams_.erase(id);
        self->requests_.erase(pair->request_id);
    }

    static asio::awaitable<void> forward(std::shared_ptr<SpdySession> self, std::shared_ptr<Pair> pair) {
        auto up = pair->upstream;
        auto sock = co_await connect_in_pod(self->ex_, self->network_, pair->port);
        if (up->closed || self->closing_) co_return;
        if (!sock) {
            self->send_error(*pair, self->pod_.forward_error(pair->port, sock.error().message));
            self->finish_pair(*pair);
            up->close();
            co_return;
        }
        up->socket = std::move(*sock);
        std::function<void(std::size_t)> on_written = [weak = std::weak_ptr<SpdySession>(self), pair](std::size_t n) {
            auto s = weak.lock();
            if (!s || s->closing_ || !pair->data_open) return;
            s->outbox_.push(s->encoder_.window_update(pair->data_id, static_cast<std::uint32_t>(n)));
        };
        spawn(self->ex_, pump_to_upstream(up, std::move(on_written)));
        std::string buf(chunk_size, '\0');
        while (true) {
            auto [ec, n] = co_await up->socket.async_read_some(asio::buffer(buf), tuple_awaitable);
            if (ec) break;
            if (self->closing_ || !pair->data_open) break;
            self->outbox_.push(self->encoder_.data(pair->data_id, std::string_view(buf.data(), n), false));
            co_await self->outbox_.wait_room();
            if (self->outbox_.done()) break;
        }
        // The pod closed (or reset) its side: finish both streams. The socket stays open for the
        // client's remaining bytes until the client resets the data stream.
        self->finish_pair(*pair);
    }

    asio::any_io_executor ex_;
    std::unique_ptr<Transport> transport_;
    Outbox outbox_;
    PodNetwork network_;
    PodRef pod_;
    spdy::Decoder decoder_;
    spdy::Encoder encoder_;
    std::map<std::uint32_t, std::shared_ptr<Pair>> streams_;
    std::map<std::string, std::shared_ptr<Pair>> requests_;
    std::uint32_t last_stream_id_ = 0;
    bool closing_ = false;
};

}  // namespace

asio::awaitable<void> run_spdy_session(asio::any_io_executor ex, std::unique_ptr<Transport> transport,
                                       PodNetwork network, PodRef pod) {
    auto session = std::make_shared<SpdySession>(ex, std::move(transport), std::move(network), std::move(pod));
    co_await session->run();
}

}  // namespace kubesandbox::local::port_forward_detail
