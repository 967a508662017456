#include "local/port_forward.hpp"

#include "local/spdy.hpp"
#include "proto/channel_protocol.hpp"
#include "proto/status.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/websocket/rfc6455.hpp>
#include <boost/beast/websocket/stream.hpp>
#include <boost/json/serialize.hpp>
#include <boost/url/parse.hpp>

#include <fcntl.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <sstream>
#include <thread>

// beast_close_socket(AnyStream&) now lives in net/any_stream.hpp.

namespace kubesandbox::local {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace spdy = local::spdy;
using tcp = asio::ip::tcp;
using boost::system::error_code;

constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);

tl::unexpected<Error> fail_ec(error_code ec, std::string message) { return fail(make_error(ec, std::move(message))); }

constexpr std::string_view tunnel_subprotocol = "SPDY/3.1+portforward.k8s.io";
constexpr std::string_view spdy_stream_protocol = "portforward.k8s.io";
constexpr std::string_view channel_subprotocols[] = {"v4.channel.k8s.io", "channel.k8s.io"};
constexpr std::size_t chunk_size = 32 * 1024;            // client-go's copy size
constexpr std::size_t outbox_high_water = 1 << 20;       // producers pause above this
constexpr std::size_t inbound_limit = 8 << 20;           // per stream, beyond the SPDY window
constexpr auto pair_timeout = std::chrono::seconds(30);  // kubelet: waiting for the stream pair

bool iequals(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i])))
            return false;
    return true;
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

// Every comma-separated token of every instance of header `field`.
std::vector<std::string> header_tokens(const http::request<http::string_body>& req, std::string_view field) {
    std::vector<std::string> out;
    auto range = req.equal_range(field);
    for (auto it = range.first; it != range.second; ++it) {
        std::string_view v = it->value();
        while (true) {
            auto comma = v.find(',');
            auto tok = trim(v.substr(0, comma));
            if (!tok.empty()) out.emplace_back(tok);
            if (comma == std::string_view::npos) break;
            v.remove_prefix(comma + 1);
        }
    }
    return out;
}

bool has_token(const std::vector<std::string>& tokens, std::string_view want) {
    for (const auto& t : tokens)
        if (iequals(t, want)) return true;
    return false;
}

// A condition variable for one single-threaded executor: notify() wakes every waiter.
class Signal {
public:
    explicit Signal(const asio::any_io_executor& ex) : timer_(ex) {
        timer_.expires_at(asio::steady_timer::time_point::max());
    }
    asio::awaitable<void> wait() {
        auto [ec] = co_await timer_.async_wait(tuple_awaitable);
        (void)ec;
    }
    void notify() { timer_.cancel(); }

private:
    asio::steady_timer timer_;
};

asio::awaitable<void> write_status(net::AnyStream& stream, unsigned version, unsigned code, std::string_view reason,
                                   const std::string& message,
                                   const std::vector<std::pair<std::string, std::string>>& extra = {}) {
    http::response<http::string_body> res{static_cast<http::status>(code), version};
    res.set(http::field::content_type, "application/json");
    for (const auto& [k, v] : extra) res.insert(k, v);
    res.body() = boost::json::serialize(proto::make_status(code, reason, message));
    res.keep_alive(false);
    res.prepare_payload();
    auto [ec, n] = co_await http::async_write(stream, res, tuple_awaitable);
    (void)n;
    if (!ec) co_await stream.async_shutdown(tuple_awaitable);
    stream.close();
}

// ---------------------------------------------------------------------------------------------
// Connecting inside the pod's network namespace

// A socket created in the network namespace of `pod_pid` (0: ours). setns runs in a short-lived
// thread so the executor's thread never changes namespace; a socket stays in the namespace it
// was created in, so connecting it afterwards from here reaches the pod's loopback.
Result<int> socket_in_netns(int pod_pid, int family) {
    if (pod_pid == 0) {
        int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) return fail(make_error(error_code(errno, boost::system::system_category()), "socket"));
        return fd;
    }
    int fd = -1, err = 0;
    const char* what = "";
    try {
        std::thread worker([&] {
            std::string path = "/proc/" + std::to_string(pod_pid) + "/ns/net";
            int ns = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
            if (ns < 0) {
                err = errno;
                what = "open network namespace";
                return;
            }
            if (::setns(ns, CLONE_NEWNET) != 0) {
                err = errno;
                what = "setns";
                ::close(ns);
                return;
            }
            ::close(ns);
            fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
            if (fd < 0) {
                err = errno;
                what = "socket";
            }
        });
        worker.join();
    } catch (const std::system_error& e) {
        return fail(make_error(e.code(), "cannot start the namespace thread"));
    }
    if (fd < 0) return fail(make_error(error_code(err, boost::system::system_category()), what));
    return fd;
}

// Go-style lowercase error text ("connection refused").
std::string go_error_text(const error_code& ec) {
    std::string m = ec.message();
    if (!m.empty()) m[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(m[0])));
    return m;
}

asio::awaitable<Result<tcp::socket>> connect_one(asio::any_io_executor ex, int pod_pid, bool v6, std::uint16_t port) {
    std::string dial = v6 ? "dial tcp6 [::1]:" + std::to_string(port) : "dial tcp4 127.0.0.1:" + std::to_string(port);
    auto fd = socket_in_netns(pod_pid, v6 ? AF_INET6 : AF_INET);
    if (!fd)
        co_return fail_ec(fd.error().code, dial + ": " + fd.error().message + ": " + go_error_text(fd.error().code));
    tcp::socket sock(ex);
    error_code ec;
    sock.assign(v6 ? tcp::v6() : tcp::v4(), *fd, ec);
    if (ec) {
        ::close(*fd);
        co_return fail_ec(ec, dial + ": " + go_error_text(ec));
    }
    tcp::endpoint ep(
        v6 ? asio::ip::address(asio::ip::address_v6::loopback()) : asio::ip::address(asio::ip::address_v4::loopback()),
        port);
    auto [cec] = co_await sock.async_connect(ep, tuple_awaitable);
    if (cec) co_return fail_ec(cec, dial + ": connect: " + go_error_text(cec));
    co_return std::move(sock);
}

// Connects to localhost:<port> in the pod like the kubelet: IPv4 first, then IPv6.
asio::awaitable<Result<tcp::socket>> connect_in_pod(asio::any_io_executor ex, int pod_pid, std::uint16_t port) {
    auto v4 = co_await connect_one(ex, pod_pid, false, port);
    if (v4) co_return std::move(*v4);
    auto v6 = co_await connect_one(ex, pod_pid, true, port);
    if (v6) co_return std::move(*v6);
    co_return fail_ec(v4.error().code, "failed to connect to localhost:" + std::to_string(port) +
                                           " inside the pod network namespace, IPv4: " + v4.error().message + " IPv6 " +
                                           v6.error().message);
}

struct PodRef {
    std::string name, uid;
    std::string forward_error(std::uint16_t port, const std::string& why) const {
        return "error forwarding port " + std::to_string(port) + " to pod " + name + ", uid " + uid + ": " + why;
    }
};

PodRef pod_ref(const boost::json::object& pod) {
    PodRef r;
    if (auto* md = pod.if_contains("metadata"); md && md->is_object()) {
        if (auto* n = md->as_object().if_contains("name"); n && n->is_string()) r.name = n->as_string().c_str();
        if (auto* u = md->as_object().if_contains("uid"); u && u->is_string()) r.uid = u->as_string().c_str();
    }
    return r;
}

// ---------------------------------------------------------------------------------------------
// Transports: where session bytes come from and go to

class Transport {
public:
    virtual ~Transport() = default;
    // The next chunk (raw SPDY, tunnel) or message (channel protocol); an error once the peer is gone.
    virtual asio::awaitable<Result<std::string>> read() = 0;
    virtual asio::awaitable<bool> write(const std::string& data) = 0;
    virtual asio::awaitable<void> close() = 0;  // graceful end after the last write
    virtual void abort() = 0;
};

class RawTransport final : public Transport {
public:
    RawTransport(net::AnyStream stream, std::string prefetched)
        : stream_(std::move(stream)), prefetched_(std::move(prefetched)) {}
    asio::awaitable<Result<std::string>> read() override {
        if (!prefetched_.empty()) co_return std::exchange(prefetched_, {});
        std::string buf(64 * 1024, '\0');
        auto [ec, n] = co_await stream_.async_read_some(asio::buffer(buf), tuple_awaitable);
        if (ec) co_return fail_ec(ec, "SPDY connection closed");
        buf.resize(n);
        co_return buf;
    }
    asio::awaitable<bool> write(const std::string& data) override {
        auto [ec, n] = co_await asio::async_write(stream_, asio::buffer(data), tuple_awaitable);
        (void)n;
        co_return !ec;
    }
    asio::awaitable<void> close() override {
        auto [ec] = co_await stream_.async_shutdown(tuple_awaitable);
        (void)ec;
        stream_.close();
    }
    void abort() override { stream_.close(); }

private:
    net::AnyStream stream_;
    std::string prefetched_;
};

class WsTransport final : public Transport {
public:
    explicit WsTransport(net::AnyStream stream) : ws_(std::move(stream)) {}
    websocket::stream<net::AnyStream>& ws() { return ws_; }

    asio::awaitable<Result<std::string>> read() override {
        beast::flat_buffer buf;
        auto [ec, n] = co_await ws_.async_read(buf, tuple_awaitable);
        (void)n;
        if (ec) co_return fail_ec(ec, "WebSocket closed");
        // Both the tunnel and the binary channel protocol are binary-only.
        if (!ws_.got_binary()) co_return fail(errc::invalid_response, "unexpected text message");
        co_return beast::buffers_to_string(buf.data());
    }
    asio::awaitable<bool> write(const std::string& data) override {
        auto [ec, n] = co_await ws_.async_write(asio::buffer(data), tuple_awaitable);
        (void)n;
        co_return !ec;
    }
    asio::awaitable<void> close() override {
        auto [ec] = co_await ws_.async_close(websocket::close_code::normal, tuple_awaitable);
        (void)ec;
        ws_.next_layer().close();
    }
    void abort() override { ws_.next_layer().close(); }

private:
    websocket::stream<net::AnyStream> ws_;
};

// The single writer of a transport: frames/messages queue here in order; producers pause while
// more than outbox_high_water bytes are queued (backpressure from the client connection).
class Outbox {
public:
    Outbox(const asio::any_io_executor& ex, Transport& transport, bool coalesce)
        : transport_(transport), coalesce_(coalesce), wake_(ex), room_(ex) {}

    void push(std::string bytes) {
        if (finishing_ || done_) return;
        bytes_ += bytes.size();
        queue_.push_back(std::move(bytes));
        wake_.notify();
    }
    bool done() const noexcept { return done_; }
    asio::awaitable<void> wait_room() {
        while (bytes_ > outbox_high_water && !done_) co_await room_.wait();
    }
    // Closes the transport gracefully once everything queued so far is written.
    void finish() {
        finishing_ = true;
        wake_.notify();
    }

    asio::awaitable<void> run() {
        while (true) {
            while (queue_.empty() && !finishing_) co_await wake_.wait();
            if (queue_.empty()) {
                co_await transport_.close();
                break;
            }
            std::string chunk = std::move(queue_.front());
            queue_.pop_front();
            // SPDY bytes may be merged into one write; channel messages may not.
            while (coalesce_ && !queue_.empty() && chunk.size() < 256 * 1024) {
                chunk += queue_.front();
                queue_.pop_front();
            }
            bool ok = co_await transport_.write(chunk);
            bytes_ -= std::min(bytes_, chunk.size());
            room_.notify();
            if (!ok) {
                transport_.abort();
                break;
            }
        }
        done_ = true;
        queue_.clear();
        bytes_ = 0;
        room_.notify();
    }

private:
    Transport& transport_;
    bool coalesce_;
    std::deque<std::string> queue_;
    std::size_t bytes_ = 0;
    bool finishing_ = false;
    bool done_ = false;
    Signal wake_, room_;
};

// One forwarded TCP connection into the pod; bytes from the client queue in `inbound` until
// written (the queue exists before the connection does).
struct Upstream {
    explicit Upstream(const asio::any_io_executor& ex) : socket(ex), ready(ex) {}
    tcp::socket socket;
    std::deque<std::string> inbound;
    std::size_t inbound_bytes = 0;
    bool inbound_fin = false;  // the client half-closed: shut down our sending side when drained
    bool closed = false;
    Signal ready;

    void push(std::string bytes) {
        inbound_bytes += bytes.size();
        inbound.push_back(std::move(bytes));
        ready.notify();
    }
    void finish_inbound() {
        inbound_fin = true;
        ready.notify();
    }
    void close() {
        closed = true;
        error_code ec;
        socket.close(ec);
        ready.notify();
    }
};

// Writes client bytes to the pod; `on_written(n)` after each write (SPDY window updates).
asio::awaitable<void> pump_to_upstream(std::shared_ptr<Upstream> up, std::function<void(std::size_t)> on_written) {
    while (true) {
        while (up->inbound.empty() && !up->inbound_fin && !up->closed) co_await up->ready.wait();
        if (up->closed) co_return;
        if (up->inbound.empty()) {
            error_code ec;
            up->socket.shutdown(tcp::socket::shutdown_send, ec);
            co_return;
        }
        std::string bytes = std::move(up->inbound.front());
        up->inbound.pop_front();
        auto [ec, n] = co_await asio::async_write(up->socket, asio::buffer(bytes), tuple_awaitable);
        up->inbound_bytes -= bytes.size();
        if (ec) co_return;
        if (on_written) on_written(n);
    }
}

void spawn(const asio::any_io_executor& ex, asio::awaitable<void> coro) {
    asio::co_spawn(ex, std::move(coro), asio::detached);
}

// ---------------------------------------------------------------------------------------------
// Variant A: WebSocket channel protocol (v4.channel.k8s.io)

class ChannelSession : public std::enable_shared_from_this<ChannelSession> {
public:
    ChannelSession(asio::any_io_executor ex, std::unique_ptr<WsTransport> transport, std::vector<std::uint16_t> ports,
                   int pod_pid, PodRef pod)
        : ex_(ex),
          transport_(std::move(transport)),
          outbox_(ex, *transport_, false),
          ports_(std::move(ports)),
          pod_pid_(pod_pid),
          pod_(std::move(pod)),
          active_(ports_.size()) {
        for (std::size_t i = 0; i < ports_.size(); ++i) upstreams_.push_back(std::make_shared<Upstream>(ex));
    }

    asio::awaitable<void> run() {
        auto self = shared_from_this();
        spawn(ex_, writer(self));
        for (std::size_t i = 0; i < ports_.size(); ++i) {
            outbox_.push(proto::encode_port_prefix(proto::port_forward_data_channel(i), ports_[i]));
            outbox_.push(proto::encode_port_prefix(proto::port_forward_error_channel(i), ports_[i]));
        }
        for (std::size_t i = 0; i < ports_.size(); ++i) spawn(ex_, forward(self, i));
        while (true) {
            auto msg = co_await transport_->read();
            if (!msg) break;
            auto frame = proto::decode_channel_frame(*msg);
            if (!frame) continue;  // empty message: nothing to deliver
            std::size_t index = frame->channel / 2;
            // Only data channels carry client bytes; anything else is ignored like the kubelet.
            if (frame->channel % 2 != 0 || index >= ports_.size() || frame->payload.empty()) continue;
            auto& up = upstreams_[index];
            if (up->closed) continue;
            if (up->inbound_bytes + frame->payload.size() > inbound_limit) {
                up->close();
                continue;
            }
            up->push(std::string(frame->payload));
        }
        for (auto& up : upstreams_) up->close();
        outbox_.finish();
    }

private:
    static asio::awaitable<void> writer(std::shared_ptr<ChannelSession> self) { co_await self->outbox_.run(); }

    static asio::awaitable<void> forward(std::shared_ptr<ChannelSession> self, std::size_t i) {
        auto up = self->upstreams_[i];
        auto sock = co_await connect_in_pod(self->ex_, self->pod_pid_, self->ports_[i]);
        if (!sock) {
            self->outbox_.push(proto::encode_channel_frame(
                proto::port_forward_error_channel(i), self->pod_.forward_error(self->ports_[i], sock.error().message)));
            self->port_done();
            co_return;
        }
        if (up->closed) {  // the client went away while we connected
            self->port_done();
            co_return;
        }
        up->socket = std::move(*sock);
        spawn(self->ex_, pump_to_upstream(up, nullptr));
        std::string buf(chunk_size, '\0');
        while (true) {
            auto [ec, n] = co_await up->socket.async_read_some(asio::buffer(buf), tuple_awaitable);
            if (ec) break;
            self->outbox_.push(
                proto::encode_channel_frame(proto::port_forward_data_channel(i), std::string_view(buf.data(), n)));
            co_await self->outbox_.wait_room();
            if (self->outbox_.done()) break;
        }
        up->close();
        self->port_done();
    }

    // When every forwarded connection has ended the WebSocket is closed (no per-channel close).
    void port_done() {
        if (--active_ == 0) outbox_.finish();
    }

    asio::any_io_executor ex_;
    std::unique_ptr<WsTransport> transport_;
    Outbox outbox_;
    std::vector<std::uint16_t> ports_;
    int pod_pid_;
    PodRef pod_;
    std::size_t active_;
    std::vector<std::shared_ptr<Upstream>> upstreams_;
};

// ---------------------------------------------------------------------------------------------
// Variants B and C: SPDY/3.1 (plain upgrade or tunnelled in WebSocket)

class SpdySession : public std::enable_shared_from_this<SpdySession> {
public:
    SpdySession(asio::any_io_executor ex, std::unique_ptr<Transport> transport, int pod_pid, PodRef pod)
        : ex_(ex),
          transport_(std::move(transport)),
          outbox_(ex, *transport_, true),
          pod_pid_(pod_pid),
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
        auto sock = co_await connect_in_pod(self->ex_, self->pod_pid_, pair->port);
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
    int pod_pid_;
    PodRef pod_;
    spdy::Decoder decoder_;
    spdy::Encoder encoder_;
    std::map<std::uint32_t, std::shared_ptr<Pair>> streams_;
    std::map<std::string, std::shared_ptr<Pair>> requests_;
    std::uint32_t last_stream_id_ = 0;
    bool closing_ = false;
};

// ---------------------------------------------------------------------------------------------

// Accepts the WebSocket handshake answering with `subprotocol`; false when it failed.
asio::awaitable<bool> accept_websocket(WsTransport& t, StreamRequest& request, std::string subprotocol) {
    auto& ws = t.ws();
    ws.set_option(websocket::stream_base::decorator(
        [subprotocol](websocket::response_type& res) { res.set(http::field::sec_websocket_protocol, subprotocol); }));
    ws.auto_fragment(false);  // x/net-style peers treat every frame as a message
    ws.read_message_max(32 * 1024 * 1024);
    ws.binary(true);
    if (request.buffer.size() == 0) {
        auto [ec] = co_await ws.async_accept(request.request, tuple_awaitable);
        co_return !ec;
    }
    // Bytes after the request head must reach the WebSocket too: replay head and bytes.
    std::ostringstream head;
    head << request.request.base();
    std::string replay = head.str() + beast::buffers_to_string(request.buffer.data());
    auto [ec] = co_await ws.async_accept(asio::buffer(replay), tuple_awaitable);
    co_return !ec;
}

// Not inlined into the coroutine: g++ 12 cannot range-for over an array in a coroutine frame.
std::string choose_channel_subprotocol(const std::vector<std::string>& offered) {
    for (auto p : channel_subprotocols)
        if (has_token(offered, p)) return std::string(p);
    return {};
}

Result<std::vector<std::uint16_t>> ports_from_query(const http::request<http::string_body>& req) {
    auto url = boost::urls::parse_origin_form(req.target());
    if (!url) return fail(errc::bad_request, "invalid request target");
    std::string joined;
    for (auto param : url->params()) {
        if (param.key != "ports" && param.key != "port") continue;
        if (!joined.empty()) joined += ',';
        joined += param.value;
    }
    return proto::parse_port_list(joined);
}

}  // namespace

asio::awaitable<void> serve_port_forward(StreamRequest request, int pod_pid) {
    auto ex = request.stream.get_executor();
    unsigned version = request.request.version();
    PodRef pod = pod_ref(request.pod);

    if (websocket::is_upgrade(request.request)) {
        auto offered = header_tokens(request.request, "Sec-WebSocket-Protocol");
        if (has_token(offered, tunnel_subprotocol)) {
            auto t = std::make_unique<WsTransport>(std::move(request.stream));
            if (!co_await accept_websocket(*t, request, std::string(tunnel_subprotocol))) co_return;
            auto session = std::make_shared<SpdySession>(ex, std::move(t), pod_pid, pod);
            co_await session->run();
            co_return;
        }
        std::string chosen = choose_channel_subprotocol(offered);
        if (chosen.empty()) {
            std::string msg = "unable to upgrade: none of the requested subprotocols is supported (expected " +
                              std::string(tunnel_subprotocol) + " or v4.channel.k8s.io)";
            co_await write_status(request.stream, version, 400, "BadRequest", msg);
            co_return;
        }
        auto ports = ports_from_query(request.request);
        if (!ports) {
            co_await write_status(request.stream, version, 400, "BadRequest", ports.error().message);
            co_return;
        }
        auto t = std::make_unique<WsTransport>(std::move(request.stream));
        if (!co_await accept_websocket(*t, request, chosen)) co_return;
        auto session = std::make_shared<ChannelSession>(ex, std::move(t), std::move(*ports), pod_pid, pod);
        co_await session->run();
        co_return;
    }

    auto upgrade = header_tokens(request.request, "Upgrade");
    if (!has_token(upgrade, "SPDY/3.1")) {
        co_await write_status(request.stream, version, 400, "BadRequest",
                              "unable to upgrade: missing upgrade headers in request");
        co_return;
    }
    if (!has_token(header_tokens(request.request, "X-Stream-Protocol-Version"), spdy_stream_protocol)) {
        std::vector<std::pair<std::string, std::string>> accepted;
        accepted.emplace_back("X-Accepted-Stream-Protocol-Versions", spdy_stream_protocol);
        std::string msg = "unable to upgrade: unable to negotiate protocol: client supports " +
                          std::string(request.request["X-Stream-Protocol-Version"]) + ", server accepts " +
                          std::string(spdy_stream_protocol);
        co_await write_status(request.stream, version, 403, "Forbidden", msg, accepted);
        co_return;
    }
    http::response<http::empty_body> res{http::status::switching_protocols, version};
    res.set(http::field::connection, "Upgrade");
    res.set(http::field::upgrade, "SPDY/3.1");
    res.set("X-Stream-Protocol-Version", spdy_stream_protocol);
    auto [ec, n] = co_await http::async_write(request.stream, res, tuple_awaitable);
    (void)n;
    if (ec) {
        request.stream.close();
        co_return;
    }
    std::string prefetched = beast::buffers_to_string(request.buffer.data());
    auto t = std::make_unique<RawTransport>(std::move(request.stream), std::move(prefetched));
    auto session = std::make_shared<SpdySession>(ex, std::move(t), pod_pid, pod);
    co_await session->run();
}

}  // namespace kubesandbox::local
