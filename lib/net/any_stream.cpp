#include "net/any_stream.hpp"

#include "net/socket_deadline.hpp"
#include "net/tls_stream.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>

#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <mutex>

namespace kubesandbox::net {
namespace beast = boost::beast;
using tcp = asio::ip::tcp;

namespace {

class TcpImpl final : public AnyStream::Impl {
public:
    explicit TcpImpl(tcp::socket s) : socket_(std::move(s)), deadline_(socket_.get_executor(), [this] { expire(); }) {}
    ~TcpImpl() override { deadline_.disarm(); }
    asio::any_io_executor executor() override { return socket_.get_executor(); }
    void read_some(asio::mutable_buffer b, IoHandler h) override {
        socket_.async_read_some(b, ExpiryAware<IoHandler>{std::move(h), expired_});
    }
    void write_some(const ConstBufferList& b, IoHandler h) override {
        socket_.async_write_some(b, ExpiryAware<IoHandler>{std::move(h), expired_});
    }
    void handshake(DoneHandler h) override {
        asio::post(socket_.get_executor(), [h = std::move(h)]() mutable { std::move(h)(error_code{}); });
    }
    void shutdown(DoneHandler h) override {
        error_code ec;
        socket_.shutdown(tcp::socket::shutdown_send, ec);
        asio::post(socket_.get_executor(), [h = std::move(h), ec]() mutable { std::move(h)(ec); });
    }
    void close() noexcept override {
        {
            std::lock_guard<std::mutex> lock(descriptor_mutex_);
            error_code ec;
            socket_.close(ec);
        }
        deadline_.disarm();
    }
    void expires_after(std::chrono::steady_clock::duration d) override { deadline_.arm(d); }
    void expires_never() override { deadline_.disarm(); }
    bool idle_alive() override { return socket_idle_alive(socket_); }
    bool is_tls() const noexcept override { return false; }
    PlainSocket plain_socket() noexcept override { return {&socket_, expired_}; }

private:
    // The deadline's timer may fire on another thread than the one using the socket (its
    // executor is the client's, not a strand): it only shuts the socket down, which ends every
    // pending and later operation but leaves the descriptor and the socket object to their
    // owner, who closes them.
    void expire() {
        std::lock_guard<std::mutex> lock(descriptor_mutex_);
        expired_->store(true, std::memory_order_release);
        if (socket_.is_open()) ::shutdown(socket_.native_handle(), SHUT_RDWR);
    }

    tcp::socket socket_;
    std::mutex descriptor_mutex_;  // the deadline's shutdown against the owner's close
    // Shared with the handlers of operations in flight, which may complete after this is gone.
    std::shared_ptr<std::atomic<bool>> expired_ = std::make_shared<std::atomic<bool>>(false);
    Deadline deadline_;
};

}  // namespace

void AnyStream::Impl::flush(DoneHandler h) {
    asio::post(executor(), [h = std::move(h)]() mutable { std::move(h)(error_code{}); });
}

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
    return AnyStream(make_tls_client(std::move(socket), ctx.native_handle(), {sni_host, verify_host, session_key}));
}

AnyStream AnyStream::tls_server(tcp::socket socket, asio::ssl::context& ctx) {
    return AnyStream(make_tls_server(std::move(socket), ctx.native_handle()));
}

void teardown(beast::role_type, AnyStream& stream, error_code& ec) {
    ec = {};
    stream.close();
}

}  // namespace kubesandbox::net
