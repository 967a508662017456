#include "net/tls_stream.hpp"

#include "net/socket_deadline.hpp"
#include "net/tls_session_cache.hpp"

#include <boost/asio/compose.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/error.hpp>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace kubesandbox::net {

namespace {

using tcp = asio::ip::tcp;

// The BIO looks the descriptor up at every call, so a socket closed meanwhile (a deadline, a
// cancel) reads as EBADF and never as a descriptor number reused by someone else. send() with
// MSG_NOSIGNAL: a peer's reset is an error, not a SIGPIPE for the whole process.
int descriptor(BIO* bio) { return static_cast<tcp::socket*>(BIO_get_data(bio))->native_handle(); }

int bio_write(BIO* bio, const char* data, int len) {
    BIO_clear_retry_flags(bio);
    ssize_t n;
    do n = ::send(descriptor(bio), data, static_cast<std::size_t>(len), MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) BIO_set_retry_write(bio);
    return static_cast<int>(n);
}

int bio_read(BIO* bio, char* data, int len) {
    BIO_clear_retry_flags(bio);
    ssize_t n;
    do n = ::recv(descriptor(bio), data, static_cast<std::size_t>(len), 0);
    while (n < 0 && errno == EINTR);
    if (n == 0) BIO_set_flags(bio, BIO_FLAGS_IN_EOF);  // OpenSSL tells a TCP EOF from an error by it
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) BIO_set_retry_read(bio);
    return static_cast<int>(n);
}

long bio_ctrl(BIO* bio, int cmd, long, void*) {
    switch (cmd) {
        case BIO_CTRL_FLUSH:
            return 1;  // nothing is buffered here
        case BIO_CTRL_EOF:
            return BIO_test_flags(bio, BIO_FLAGS_IN_EOF) != 0;
        default:
            return 0;
    }
}

int bio_create(BIO* bio) {
    BIO_set_init(bio, 1);
    return 1;
}

BIO_METHOD* socket_bio_method() {
    static BIO_METHOD* method = [] {
        BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "kubesandbox socket");
        if (m) {
            BIO_meth_set_write(m, bio_write);
            BIO_meth_set_read(m, bio_read);
            BIO_meth_set_ctrl(m, bio_ctrl);
            BIO_meth_set_create(m, bio_create);
        }
        return m;
    }();
    return method;
}

// What one SSL call left to do: finished (with an error or a byte count), or wait for the
// socket to become readable or writable and call again.
struct Step {
    enum Want { done, want_read, want_write } want{done};
    error_code ec{};
    std::size_t n{0};
};

// Error codes as asio::ssl::stream reports them, so callers see no difference: a peer's
// close_notify is eof, a TCP EOF without it stream_truncated, a socket error its errno,
// a protocol or verification failure the OpenSSL error in Asio's ssl category.
Step classify(SSL* ssl, int ret, int saved_errno) {
    switch (SSL_get_error(ssl, ret)) {
        case SSL_ERROR_NONE:
            return {};
        case SSL_ERROR_WANT_READ:
            return {Step::want_read};
        case SSL_ERROR_WANT_WRITE:
            return {Step::want_write};
        case SSL_ERROR_ZERO_RETURN:
            return {Step::done, asio::error::eof};
        case SSL_ERROR_SYSCALL: {
            const unsigned long e = ERR_get_error();
            if (e != 0) return {Step::done, error_code(static_cast<int>(e), asio::error::get_ssl_category())};
            if (saved_errno != 0) return {Step::done, error_code(saved_errno, boost::system::system_category())};
            return {Step::done, asio::ssl::error::stream_truncated};
        }
        case SSL_ERROR_SSL: {
            const unsigned long e = ERR_get_error();
            if (ERR_GET_LIB(e) == ERR_LIB_SSL && ERR_GET_REASON(e) == SSL_R_UNEXPECTED_EOF_WHILE_READING)
                return {Step::done, asio::ssl::error::stream_truncated};
            return {Step::done, error_code(static_cast<int>(e), asio::error::get_ssl_category())};
        }
        default:
            return {Step::done, asio::ssl::error::unexpected_result};
    }
}

class TlsImpl;

// One operation: call `attempt` until it is done, waiting for the socket in between. Never
// completes inside the initiating call (a result available at once is posted).
template <class Attempt, bool WithSize>
struct TlsOp {
    TlsImpl* impl;
    Attempt attempt;
    Step last{Step::want_read};
    bool started{false};

    template <class Self>
    void operator()(Self& self, error_code wait_ec = {});

    template <class Self>
    void finish(Self& self) {
        if constexpr (WithSize) self.complete(last.ec, last.n);
        else self.complete(last.ec);
    }
};

class TlsImpl final : public AnyStream::Impl {
public:
    TlsImpl(tcp::socket s, SSL_CTX* ctx, bool client)
        : socket_(std::move(s)), ssl_(SSL_new(ctx)), deadline_(socket_.get_executor()) {
        error_code ignored;
        socket_.native_non_blocking(true, ignored);
        BIO_METHOD* method = socket_bio_method();
        BIO* bio = (ssl_ && method) ? BIO_new(method) : nullptr;
        if (!bio) {
            ssl_.reset();
            broken_ = asio::error::no_memory;
            return;
        }
        BIO_set_data(bio, &socket_);
        SSL_set_bio(ssl_.get(), bio, bio);
        SSL_set_mode(ssl_.get(),
                     SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
        SSL_set_read_ahead(ssl_.get(), 1);  // a record per recv, not a header and then its body
        if (client) SSL_set_connect_state(ssl_.get());
        else SSL_set_accept_state(ssl_.get());
    }
    ~TlsImpl() override { deadline_.disarm(); }

    // A name that cannot be set fails the handshake rather than connecting unchecked.
    void configure_client(const TlsClientIdentity& id) {
        if (!ssl_) return;
        bool set = id.sni_host.empty() || SSL_set_tlsext_host_name(ssl_.get(), id.sni_host.c_str()) == 1;
        if (set && !id.verify_host.empty()) {
            error_code not_ip;
            asio::ip::make_address(id.verify_host, not_ip);
            set = not_ip ? SSL_set1_host(ssl_.get(), id.verify_host.c_str()) == 1
                         : X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl_.get()), id.verify_host.c_str()) == 1;
        }
        if (!set) {
            broken_ = error_code(static_cast<int>(ERR_get_error()), asio::error::get_ssl_category());
            if (!broken_) broken_ = asio::ssl::error::unexpected_result;
            return;
        }
        if (!id.session_key.empty()) resume_session(ssl_.get(), id.session_key);
    }

    asio::any_io_executor executor() override { return socket_.get_executor(); }

    void read_some(asio::mutable_buffer b, IoHandler h) override {
        start<true>(std::move(h), [b](TlsImpl& t) -> Step {
            if (b.size() == 0) return {};
            return t.call([&](std::size_t& n) { return SSL_read_ex(t.ssl_.get(), b.data(), b.size(), &n); });
        });
    }

    void write_some(const ConstBufferList& buffers, IoHandler h) override {
        // TLS needs one contiguous span: an HTTP head in several buffers is copied into one (up
        // to a record), so it still leaves in one record and one send.
        struct Span {
            const void* data{nullptr};
            std::size_t size{0};
            std::unique_ptr<char[]> owned{};
        } span;
        if (buffers.count > 0) {
            span.data = buffers.items[0].data();
            span.size = buffers.items[0].size();
        }
        if (buffers.count > 1 && span.size < record_size) {
            const ConstBufferList head = buffers.prefix(record_size);
            span.size = head.bytes();
            span.owned = std::make_unique<char[]>(span.size);
            std::size_t at = 0;
            for (const auto& b : head) {
                std::memcpy(span.owned.get() + at, b.data(), b.size());
                at += b.size();
            }
            span.data = span.owned.get();
        }
        start<true>(std::move(h), [span = std::move(span)](TlsImpl& t) -> Step {
            if (span.size == 0) return {};
            return t.call([&](std::size_t& n) { return SSL_write_ex(t.ssl_.get(), span.data, span.size, &n); });
        });
    }

    void handshake(DoneHandler h) override {
        start<false>(std::move(h), [](TlsImpl& t) -> Step {
            return t.call([&](std::size_t&) { return SSL_do_handshake(t.ssl_.get()); });
        });
    }

    // Sends close_notify and shuts the TCP send side; the peer's close_notify is not awaited (a
    // peer that never sends one would hold the caller until its deadline).
    void shutdown(DoneHandler h) override {
        start<false>(std::move(h), [](TlsImpl& t) -> Step {
            Step step;
            if (SSL_is_init_finished(t.ssl_.get())) {
                step = t.call([&](std::size_t&) { return SSL_shutdown(t.ssl_.get()) >= 0 ? 1 : -1; });
                if (step.want == Step::want_read) step = {};
            }
            if (step.want == Step::done) {
                error_code ignored;
                t.socket_.shutdown(tcp::socket::shutdown_send, ignored);
            }
            return step;
        });
    }

    void close() noexcept override {
        error_code ec;
        socket_.close(ec);
        deadline_.disarm();
    }
    void expires_after(std::chrono::steady_clock::duration d) override { deadline_.arm(d, socket_); }
    void expires_never() override { deadline_.disarm(); }
    bool idle_alive() override { return socket_idle_alive(socket_) && !(ssl_ && SSL_has_pending(ssl_.get())); }
    bool is_tls() const noexcept override { return true; }

private:
    template <class Attempt, bool WithSize>
    friend struct TlsOp;

    static constexpr std::size_t record_size = 16 * 1024;

    struct SslFree {
        void operator()(SSL* s) const noexcept { SSL_free(s); }
    };

    // One SSL call with the thread's error queue cleared first and errno kept for classify.
    template <class Call>
    Step call(Call&& c) {
        ERR_clear_error();
        std::size_t n = 0;
        errno = 0;
        const int ret = c(n);
        const int saved_errno = errno;
        if (ret > 0) return {Step::done, {}, n};
        return classify(ssl_.get(), ret, saved_errno);
    }

    template <bool WithSize, class Handler, class Attempt>
    void start(Handler h, Attempt attempt) {
        using Signature = std::conditional_t<WithSize, void(error_code, std::size_t), void(error_code)>;
        asio::async_compose<Handler, Signature>(TlsOp<Attempt, WithSize>{this, std::move(attempt)}, h, socket_);
    }

    tcp::socket socket_;
    std::unique_ptr<SSL, SslFree> ssl_;
    error_code broken_{};  // set up failed: every operation fails with this
    Deadline deadline_;
};

template <class Attempt, bool WithSize>
template <class Self>
void TlsOp<Attempt, WithSize>::operator()(Self& self, error_code wait_ec) {
    if (started && last.want == Step::done) return finish(self);  // the posted result
    if (started && wait_ec) {
        last = {Step::done, wait_ec};
        return finish(self);
    }
    const bool initiating = !started;
    started = true;
    if (impl->broken_) last = {Step::done, impl->broken_};
    else if (!impl->socket_.is_open()) last = {Step::done, asio::error::bad_descriptor};
    else last = attempt(*impl);
    switch (last.want) {
        case Step::want_read:
            return impl->socket_.async_wait(tcp::socket::wait_read, std::move(self));
        case Step::want_write:
            return impl->socket_.async_wait(tcp::socket::wait_write, std::move(self));
        case Step::done:
            break;
    }
    if (initiating) return asio::post(impl->socket_.get_executor(), std::move(self));
    finish(self);
}

}  // namespace

std::unique_ptr<AnyStream::Impl> make_tls_client(tcp::socket socket, SSL_CTX* ctx, const TlsClientIdentity& identity) {
    auto impl = std::make_unique<TlsImpl>(std::move(socket), ctx, true);
    impl->configure_client(identity);
    return impl;
}

std::unique_ptr<AnyStream::Impl> make_tls_server(tcp::socket socket, SSL_CTX* ctx) {
    return std::make_unique<TlsImpl>(std::move(socket), ctx, false);
}

}  // namespace kubesandbox::net
