#include "net/any_stream.hpp"

#include "net/tls_session_cache.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>

#include <openssl/ssl.h>

#include <poll.h>
#include <algorithm>

namespace kubesandbox::net {
namespace beast = boost::beast;
using tcp = asio::ip::tcp;

namespace {

bool socket_idle_alive(tcp::socket& socket) {
    if (!socket.is_open()) return false;
    pollfd pfd{socket.native_handle(), POLLIN, 0};
    return ::poll(&pfd, 1, 0) == 0;
}

// Socket-level deadline shared by both implementations: when it fires the socket is closed,
// so every pending operation completes with an error (the beast::tcp_stream idea).
class Deadline {
public:
    explicit Deadline(const asio::any_io_executor& ex) : timer_(ex) {}
    void arm(std::chrono::steady_clock::duration d, tcp::socket& socket) {
        timer_.expires_after(d);
        // A wait that already fired but has not run yet must not close a re-armed or destroyed
        // stream: it checks that its generation is still current and the owner still alive.
        timer_.async_wait(
            [&socket, alive = std::weak_ptr<int>(alive_), gen = ++generation_, current = &generation_](error_code ec) {
                if (ec || alive.expired() || gen != *current) return;
                error_code ignored;
                socket.close(ignored);
            });
    }
    void disarm() {
        ++generation_;
        timer_.cancel();
    }

private:
    asio::steady_timer timer_;
    std::shared_ptr<int> alive_ = std::make_shared<int>(0);
    std::uint64_t generation_ = 0;
};

class TcpImpl final : public AnyStream::Impl {
public:
    explicit TcpImpl(tcp::socket s) : socket_(std::move(s)), deadline_(socket_.get_executor()) {}
    ~TcpImpl() override { deadline_.disarm(); }
    asio::any_io_executor executor() override { return socket_.get_executor(); }
    void read_some(asio::mutable_buffer b, IoHandler h) override { socket_.async_read_some(b, std::move(h)); }
    void write_some(const ConstBufferList& b, IoHandler h) override { socket_.async_write_some(b, std::move(h)); }
    void handshake(DoneHandler h) override {
        asio::post(socket_.get_executor(), [h = std::move(h)]() mutable { std::move(h)(error_code{}); });
    }
    void shutdown(DoneHandler h) override {
        error_code ec;
        socket_.shutdown(tcp::socket::shutdown_send, ec);
        asio::post(socket_.get_executor(), [h = std::move(h), ec]() mutable { std::move(h)(ec); });
    }
    void close() noexcept override {
        error_code ec;
        socket_.close(ec);
        deadline_.disarm();
    }
    void expires_after(std::chrono::steady_clock::duration d) override { deadline_.arm(d, socket_); }
    void expires_never() override { deadline_.disarm(); }
    bool idle_alive() override { return socket_idle_alive(socket_); }
    bool is_tls() const noexcept override { return false; }

private:
    tcp::socket socket_;
    Deadline deadline_;
};

class TlsImpl final : public AnyStream::Impl {
public:
    TlsImpl(tcp::socket s, asio::ssl::context& ctx, asio::ssl::stream_base::handshake_type type)
        : stream_(std::move(s), ctx), type_(type), deadline_(stream_.get_executor()) {}
    ~TlsImpl() override { deadline_.disarm(); }

    asio::any_io_executor executor() override { return stream_.get_executor(); }
    void read_some(asio::mutable_buffer b, IoHandler h) override { stream_.async_read_some(b, std::move(h)); }
    void write_some(const ConstBufferList& b, IoHandler h) override { stream_.async_write_some(b, std::move(h)); }
    void handshake(DoneHandler h) override { stream_.async_handshake(type_, std::move(h)); }
    void shutdown(DoneHandler h) override { stream_.async_shutdown(std::move(h)); }
    void close() noexcept override {
        error_code ec;
        stream_.lowest_layer().close(ec);
        deadline_.disarm();
    }
    void expires_after(std::chrono::steady_clock::duration d) override { deadline_.arm(d, stream_.next_layer()); }
    void expires_never() override { deadline_.disarm(); }
    bool idle_alive() override { return socket_idle_alive(stream_.next_layer()); }
    bool is_tls() const noexcept override { return true; }

    bool configure_client(const std::string& sni_host, const std::string& verify_host, const std::string& session_key) {
        if (!sni_host.empty() && !SSL_set_tlsext_host_name(stream_.native_handle(), sni_host.c_str())) return false;
        if (!verify_host.empty()) stream_.set_verify_callback(asio::ssl::host_name_verification(verify_host));
        if (!session_key.empty()) resume_session(stream_.native_handle(), session_key);
        return true;
    }

private:
    asio::ssl::stream<tcp::socket> stream_;
    asio::ssl::stream_base::handshake_type type_;
    Deadline deadline_;
};

}  // namespace

std::size_t ConstBufferList::bytes() const noexcept {
    std::size_t n = 0;
    for (const auto& b : *this) n += b.size();
    return n;
}

ConstBufferList ConstBufferList::prefix(std::size_t n) const noexcept {
    ConstBufferList out;
    for (const auto& b : *this) {
        if (n == 0) break;
        std::size_t take = std::min(n, b.size());
        out.items[out.count++] = asio::const_buffer(b.data(), take);
        n -= take;
    }
    return out;
}

AnyStream AnyStream::tcp(tcp::socket socket) { return AnyStream(std::make_unique<TcpImpl>(std::move(socket))); }

AnyStream AnyStream::tls_client(tcp::socket socket, asio::ssl::context& ctx, const std::string& sni_host,
                                const std::string& verify_host, const std::string& session_key) {
    auto impl = std::make_unique<TlsImpl>(std::move(socket), ctx, asio::ssl::stream_base::client);
    impl->configure_client(sni_host, verify_host, session_key);
    return AnyStream(std::move(impl));
}

AnyStream AnyStream::tls_server(tcp::socket socket, asio::ssl::context& ctx) {
    return AnyStream(std::make_unique<TlsImpl>(std::move(socket), ctx, asio::ssl::stream_base::server));
}

void teardown(beast::role_type, AnyStream& stream, error_code& ec) {
    ec = {};
    stream.close();
}

}  // namespace kubesandbox::net
