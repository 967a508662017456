#include "local/port_forward.hpp"
#include "local/port_forward_session.hpp"

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

namespace kubesandbox::local::port_forward_detail {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace spdy = local::spdy;

tl::unexpected<Error> fail_ec(error_code ec, std::string message) { return fail(make_error(ec, std::move(message))); }

constexpr std::string_view tunnel_subprotocol = "SPDY/3.1+portforward.k8s.io";
constexpr std::string_view spdy_stream_protocol = "portforward.k8s.io";
constexpr std::string_view channel_subprotocols[] = {"v4.channel.k8s.io", "channel.k8s.io"};

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

// A socket created in the network namespace `ns_fd` refers to (-1: ours). setns runs in a
// short-lived thread so the executor's thread never changes namespace; a socket stays in the
// namespace it was created in, so connecting it afterwards from here reaches the pod's loopback.
Result<int> socket_in_netns(int ns_fd, int family) {
    if (ns_fd < 0) {
        int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) return fail(make_error(error_code(errno, boost::system::system_category()), "socket"));
        return fd;
    }
    int fd = -1, err = 0;
    const char* what = "";
    try {
        std::thread worker([&] {
            if (::setns(ns_fd, CLONE_NEWNET) != 0) {
                err = errno;
                what = "setns";
                return;
            }
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

asio::awaitable<Result<tcp::socket>> connect_one(asio::any_io_executor ex, int ns_fd, bool v6, std::uint16_t port) {
    std::string dial = v6 ? "dial tcp6 [::1]:" + std::to_string(port) : "dial tcp4 127.0.0.1:" + std::to_string(port);
    auto fd = socket_in_netns(ns_fd, v6 ? AF_INET6 : AF_INET);
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

}  // namespace

// Connects to localhost:<port> in the pod like the kubelet: IPv4 first, then IPv6.
asio::awaitable<Result<tcp::socket>> connect_in_pod(asio::any_io_executor ex, PodNetwork network, std::uint16_t port) {
    const int ns_fd = network.fd();
    auto v4 = co_await connect_one(ex, ns_fd, false, port);
    if (v4) co_return std::move(*v4);
    auto v6 = co_await connect_one(ex, ns_fd, true, port);
    if (v6) co_return std::move(*v6);
    co_return fail_ec(v4.error().code, "failed to connect to localhost:" + std::to_string(port) +
                                           " inside the pod network namespace, IPv4: " + v4.error().message + " IPv6 " +
                                           v6.error().message);
}

asio::awaitable<Result<tcp::socket>> connect_in_pod(asio::any_io_executor ex, int pod_pid, std::uint16_t port) {
    auto network = PodNetwork::of_process(pod_pid);
    if (!network)
        co_return fail_ec(network.error().code, "failed to connect to localhost:" + std::to_string(port) +
                                                    " inside the pod network namespace: " + network.error().message);
    co_return co_await connect_in_pod(std::move(ex), std::move(*network), port);
}

PodRef pod_ref(const boost::json::object& pod) {
    PodRef r;
    if (auto* md = pod.if_contains("metadata"); md && md->is_object()) {
        if (auto* n = md->as_object().if_contains("name"); n && n->is_string()) r.name = n->as_string().c_str();
        if (auto* u = md->as_object().if_contains("uid"); u && u->is_string()) r.uid = u->as_string().c_str();
    }
    return r;
}

namespace {

// ---------------------------------------------------------------------------------------------
// Transports: where session bytes come from and go to

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

}  // namespace

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

namespace {

// ---------------------------------------------------------------------------------------------
// Variant A: WebSocket channel protocol (v4.channel.k8s.io)

class ChannelSession : public std::enable_shared_from_this<ChannelSession> {
public:
    ChannelSession(asio::any_io_executor ex, std::unique_ptr<WsTransport> transport, std::vector<std::uint16_t> ports,
                   PodNetwork network, PodRef pod)
        : ex_(ex),
          transport_(std::move(transport)),
          outbox_(ex, *transport_, false),
          ports_(std::move(ports)),
          network_(std::move(network)),
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
        auto sock = co_await connect_in_pod(self->ex_, self->network_, self->ports_[i]);
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
    PodNetwork network_;
    PodRef pod_;
    std::size_t active_;
    std::vector<std::shared_ptr<Upstream>> upstreams_;
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

}  // namespace kubesandbox::local::port_forward_detail

namespace kubesandbox::local {

using namespace port_forward_detail;

Result<PodNetwork> PodNetwork::of_process(int pid) {
    PodNetwork network;
    if (pid == 0) return network;
    std::string path = "/proc/" + std::to_string(pid) + "/ns/net";
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fail(make_error(error_code(errno, boost::system::system_category()), "open network namespace " + path));
    network.fd_ = std::shared_ptr<const int>(new int(fd), [](const int* p) {
        ::close(*p);
        delete p;
    });
    return network;
}

asio::awaitable<void> serve_port_forward(StreamRequest request, int pod_pid) {
    auto ex = request.stream.get_executor();
    unsigned version = request.request.version();
    PodRef pod = pod_ref(request.pod);
    // Opened once: every connection of this session goes to this pod, however long it lasts.
    auto network = PodNetwork::of_process(pod_pid);
    if (!network) {
        co_await write_status(request.stream, version, 500, "InternalError",
                              "unable to forward to pod " + pod.name + ": " + network.error().message);
        co_return;
    }

    if (websocket::is_upgrade(request.request)) {
        auto offered = header_tokens(request.request, "Sec-WebSocket-Protocol");
        if (has_token(offered, tunnel_subprotocol)) {
            auto t = std::make_unique<WsTransport>(std::move(request.stream));
            if (!co_await accept_websocket(*t, request, std::string(tunnel_subprotocol))) co_return;
            co_await run_spdy_session(ex, std::move(t), std::move(*network), pod);
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
        auto session = std::make_shared<ChannelSession>(ex, std::move(t), std::move(*ports), std::move(*network), pod);
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
    co_await run_spdy_session(ex, std::move(t), std::move(*network), pod);
}

}  // namespace kubesandbox::local
