// A type-erased byte stream: plain TCP, TLS over TCP, or anything else that moves bytes (a
// port-forward tunnel, a test double) behind one non-template type, so HTTP, WebSocket and SPDY
// code is written (and compiled) once. Satisfies Asio's AsyncReadStream and
// AsyncWriteStream; Beast's websocket::stream<AnyStream> works through the teardown hooks below.
#pragma once

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associator.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/beast/core/role.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace kubesandbox::net {

namespace asio = boost::asio;
using boost::system::error_code;
using IoHandler = asio::any_completion_handler<void(error_code, std::size_t)>;
using DoneHandler = asio::any_completion_handler<void(error_code)>;

// The first buffers of one write, passed on whole so a gather write sends an HTTP head (a
// buffer per header field) and its body in one syscall and one TCP segment; TLS copies them
// into one record. Buffers past the capacity wait for the next write_some.
struct ConstBufferList {
    static constexpr std::size_t capacity = 32;
    std::array<asio::const_buffer, capacity> items{};
    std::size_t count{0};
    const asio::const_buffer* begin() const noexcept { return items.data(); }
    const asio::const_buffer* end() const noexcept { return items.data() + count; }
    std::size_t bytes() const noexcept;
    // The first `n` bytes.
    ConstBufferList prefix(std::size_t n) const noexcept;
};

// A plain TCP operation's handler: once the stream's deadline has passed, an error or an end of
// stream completes it as operation_aborted, as on a closed socket. The deadline only shuts the
// socket down (its timer may fire on another thread than the socket's user), so a pending read
// would otherwise end as a clean EOF, which completes a body that ends with the connection.
// Bytes that had arrived before it still come through. The flag is shared: a completion may run
// after its stream is gone. Keeps the handler's executor, allocator and cancellation slot.
template <class Handler>
struct ExpiryAware {
    Handler handler;
    std::shared_ptr<const std::atomic<bool>> expired;
    void operator()(error_code ec, std::size_t n) {
        if ((ec || n == 0) && expired->load(std::memory_order_acquire)) ec = asio::error::operation_aborted;
        std::move(handler)(ec, n);
    }
};

// A plain TCP stream's socket and its deadline's flag.
struct PlainSocket {
    asio::ip::tcp::socket* socket{};
    std::shared_ptr<const std::atomic<bool>> expired{};
};

class AnyStream {
public:
    struct Impl {
        virtual ~Impl() = default;
        virtual asio::any_io_executor executor() = 0;
        virtual void read_some(asio::mutable_buffer b, IoHandler h) = 0;
        virtual void write_some(const ConstBufferList& buffers, IoHandler h) = 0;
        virtual void handshake(DoneHandler h) = 0;  // TLS handshake; completes at once for TCP
        virtual void shutdown(DoneHandler h) = 0;   // TLS close_notify + TCP shutdown(send)
        virtual void close() noexcept = 0;          // hard close, cancels pending operations
        virtual void expires_after(std::chrono::steady_clock::duration d) = 0;
        virtual void expires_never() = 0;
        // For an idle keep-alive connection: still open with nothing pending to read (readable
        // while idle means EOF, a reset or stray bytes: not reusable).
        virtual bool idle_alive() = 0;
        virtual bool is_tls() const noexcept = 0;
        // A plain TCP stream's socket: reads and writes go to it directly, with the caller's
        // own handler (no type-erased handler, executor and work to allocate per operation).
        virtual PlainSocket plain_socket() noexcept { return {}; }
        // While held, a TLS write completes once its records are sealed, and they leave with
        // the next write that is not held (or a flush), in one send. Nothing to hold elsewhere.
        virtual void hold_writes(bool) noexcept {}
        // Sends what held writes left; completes at once where nothing is held.
        virtual void flush(DoneHandler h);
        // Reads begun on this stream, for a keep-alive: a reader begins the next read once the
        // last one brought bytes. Counted on the stream's strand.
        std::uint64_t reads_started{0};
    };

    using executor_type = asio::any_io_executor;

    AnyStream() = default;
    explicit AnyStream(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

    // Plain TCP over a connected socket.
    static AnyStream tcp(asio::ip::tcp::socket socket);
    // TLS over a connected socket; call async_handshake before use. For clients, `sni_host`
    // sets SNI and, unless `verify_host` is empty, the certificate host check; a non-empty
    // `session_key` resumes a session kept under it (net/tls_session_cache.hpp).
    static AnyStream tls_client(asio::ip::tcp::socket socket, asio::ssl::context& ctx, const std::string& sni_host,
                                const std::string& verify_host, const std::string& session_key = {});
    static AnyStream tls_server(asio::ip::tcp::socket socket, asio::ssl::context& ctx);

    explicit operator bool() const noexcept { return impl_ != nullptr; }
    executor_type get_executor() { return impl_->executor(); }
    bool idle_alive() { return impl_ && impl_->idle_alive(); }
    bool is_tls() const noexcept { return impl_->is_tls(); }
    // For a writer that knows another write follows at once: see Impl::hold_writes.
    void hold_writes(bool hold) noexcept { impl_->hold_writes(hold); }
    std::uint64_t reads_started() const noexcept { return impl_ ? impl_->reads_started : 0; }

    // Socket-level backstop deadline for every pending and future operation (beast::tcp_stream).
    void expires_after(std::chrono::steady_clock::duration d) { impl_->expires_after(d); }
    void expires_never() { impl_->expires_never(); }
    void close() noexcept {
        if (impl_) impl_->close();
    }

    template <class MutableBufferSequence, class Token>
    auto async_read_some(const MutableBufferSequence& buffers, Token&& token) {
        return asio::async_initiate<Token, void(error_code, std::size_t)>(
            [](auto handler, Impl* impl, asio::mutable_buffer b) {
                ++impl->reads_started;
                if (auto plain = impl->plain_socket(); plain.socket)
                    plain.socket->async_read_some(
                        b, ExpiryAware<decltype(handler)>{std::move(handler), std::move(plain.expired)});
                else impl->read_some(b, std::move(handler));
            },
            token, impl_.get(), first_buffer<asio::mutable_buffer>(buffers));
    }

    template <class ConstBufferSequence, class Token>
    auto async_write_some(const ConstBufferSequence& buffers, Token&& token) {
        return asio::async_initiate<Token, void(error_code, std::size_t)>(
            [](auto handler, Impl* impl, const ConstBufferList& list) {
                if (auto plain = impl->plain_socket(); plain.socket)
                    plain.socket->async_write_some(
                        list, ExpiryAware<decltype(handler)>{std::move(handler), std::move(plain.expired)});
                else impl->write_some(list, std::move(handler));
            },
            token, impl_.get(), buffer_list(buffers));
    }

    template <class Token>
    auto async_handshake(Token&& token) {
        return asio::async_initiate<Token, void(error_code)>(
            [](auto handler, Impl* impl) { impl->handshake(std::move(handler)); }, token, impl_.get());
    }

    template <class Token>
    auto async_flush(Token&& token) {
        return asio::async_initiate<Token, void(error_code)>(
            [](auto handler, Impl* impl) { impl->flush(std::move(handler)); }, token, impl_.get());
    }

    template <class Token>
    auto async_shutdown(Token&& token) {
        return asio::async_initiate<Token, void(error_code)>(
            [](auto handler, Impl* impl) { impl->shutdown(std::move(handler)); }, token, impl_.get());
    }

private:
    // A read_some may transfer fewer bytes than offered, so reading into the first non-empty
    // buffer of the sequence is correct (Beast reads into one flat buffer anyway).
    template <class Buffer, class Sequence>
    static Buffer first_buffer(const Sequence& seq) {
        for (auto it = asio::buffer_sequence_begin(seq); it != asio::buffer_sequence_end(seq); ++it) {
            Buffer b(*it);
            if (b.size() != 0) return b;
        }
        return Buffer();
    }

    template <class Sequence>
    static ConstBufferList buffer_list(const Sequence& seq) {
        ConstBufferList list;
        for (auto it = asio::buffer_sequence_begin(seq);
             it != asio::buffer_sequence_end(seq) && list.count < ConstBufferList::capacity; ++it) {
            asio::const_buffer b(*it);
            if (b.size() != 0) list.items[list.count++] = b;
        }
        return list;
    }

    std::unique_ptr<Impl> impl_;
};

// Beast hooks, found by argument-dependent lookup: websocket timeouts close the socket, and
// the close handshake tears the stream down.
inline void beast_close_socket(AnyStream& stream) { stream.close(); }

// Beast websocket teardown hooks.
void teardown(boost::beast::role_type role, AnyStream& stream, error_code& ec);

template <class TeardownHandler>
void async_teardown(boost::beast::role_type, AnyStream& stream, TeardownHandler&& handler) {
    stream.async_shutdown(std::forward<TeardownHandler>(handler));
}

}  // namespace kubesandbox::net

namespace boost::asio {
// ExpiryAware<H> is associated with what H is.
template <template <typename, typename> class Associator, typename Handler, typename DefaultCandidate>
struct associator<Associator, kubesandbox::net::ExpiryAware<Handler>, DefaultCandidate> {
    using type = typename Associator<Handler, DefaultCandidate>::type;
    static type get(const kubesandbox::net::ExpiryAware<Handler>& h) noexcept {
        return Associator<Handler, DefaultCandidate>::get(h.handler);
    }
    static auto get(const kubesandbox::net::ExpiryAware<Handler>& h, const DefaultCandidate& c) noexcept
        -> decltype(Associator<Handler, DefaultCandidate>::get(h.handler, c)) {
        return Associator<Handler, DefaultCandidate>::get(h.handler, c);
    }
};
}  // namespace boost::asio
