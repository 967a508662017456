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
#include <mutex>

namespace kubesandbox::net {

namespace {

using tcp = asio::ip::tcp;

// What the BIO works on: the socket (its descriptor looked up at every call) and the errno of
// its last failed call, kept here because OpenSSL may change errno before we look.
struct BioState {
    tcp::socket* socket;
    int last_errno{0};
};

BioState& state_of(BIO* bio) { return *static_cast<BioState*>(BIO_get_data(bio)); }

// The descriptor is only ever closed on the stream's own strand, between SSL calls, so it is
// never one reused by someone else here; a closed socket reads as EBADF. send() with
// MSG_NOSIGNAL: a peer's reset is an error, not a SIGPIPE for the whole process.
int bio_write(BIO* bio, const char* data, int len) {
    BioState& st = state_of(bio);
    BIO_clear_retry_flags(bio);
    ssize_t n;
    do n = ::send(st.socket->native_handle(), data, static_cast<std::size_t>(len), MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    st.last_errno = n < 0 ? errno : 0;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) BIO_set_retry_write(bio);
    return static_cast<int>(n);
}

int bio_read(BIO* bio, char* data, int len) {
    BioState& st = state_of(bio);
    BIO_clear_retry_flags(bio);
    ssize_t n;
    do n = ::recv(st.socket->native_handle(), data, static_cast<std::size_t>(len), 0);
    while (n < 0 && errno == EINTR);
    st.last_errno = n < 0 ? errno : 0;
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
// completes inside the initiating call (a result available at once is posted). Holds the
// stream weakly: an operation that outlives its stream completes with operation_aborted.
// `breaks_on_abort`: a write or handshake cut short between SSL calls leaves OpenSSL holding
// half a record or half a handshake, so nothing more may go through that connection.
template <class Attempt, bool WithSize, bool breaks_on_abort>
struct TlsOp {
    TlsImpl* impl;
    std::weak_ptr<int> alive;
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
        : socket_(std::move(s)), ssl_(SSL_new(ctx)), deadline_(socket_.get_executor(), [this] { expire(); }) {
        error_code nb;
        socket_.native_non_blocking(true, nb);
        BIO_METHOD* method = socket_bio_method();
        BIO* bio = (ssl_ && method && !nb) ? BIO_new(method) : nullptr;
        if (!bio) {
            ssl_.reset();
            broken_ = nb ? nb : asio::error::no_memory;
            return;
        }
        BIO_set_data(bio, &bio_state_);
        SSL_set_bio(ssl_.get(), bio, bio);
        SSL_set_mode(ssl_.get(),
                     SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
        // A renegotiation arriving while a record of ours is half sent would fail our next write.
        SSL_set_options(ssl_.get(), SSL_OP_NO_RENEGOTIATION);
        SSL_set_read_ahead(ssl_.get(), 1);  // a record per recv, not a header and then its body
        if (client) SSL_set_connect_state(ssl_.get());
        else SSL_set_accept_state(ssl_.get());
    }
    ~TlsImpl() override { deadline_.disarm(); }

    // A name that cannot be set fails the handshake rather than connecting unchecked.
    void configure_client(const TlsClientIdentity& id) {
        if (!ssl_) return;
        ERR_clear_error();
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
            ERR_clear_error();
            return;
        }
        if (!id.session_key.empty()) resume_session(ssl_.get(), id.session_key);
    }

    asio::any_io_executor executor() override { return socket_.get_executor(); }

    void read_some(asio::mutable_buffer b, IoHandler h) override {
        start<true, false>(std::move(h), [b](TlsImpl& t) -> Step {
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
        start<true, true>(std::move(h), [span = std::move(span)](TlsImpl& t) -> Step {
            if (span.size == 0) return {};
            return t.call([&](std::size_t& n) { return SSL_write_ex(t.ssl_.get(), span.data, span.size, &n); });
        });
    }

    void handshake(DoneHandler h) override {
        start<false, true>(std::move(h), [](TlsImpl& t) -> Step {
            return t.call([&](std::size_t&) { return SSL_do_handshake(t.ssl_.get()); });
        });
    }

    // close_notify, then FIN, then what the peer still sends is read and dropped until its
    // close_notify or EOF (at most `linger_bytes`). Closing with unread bytes would make the
    // kernel answer with a reset, and a reset can destroy what we sent last before the peer
    // has read it (the end of a response, an exit status).
    void shutdown(DoneHandler h) override {
        struct Linger {
            bool sent{false};
            std::size_t drained{0};
        };
        start<false, true>(std::move(h), [linger = Linger{}](TlsImpl& t) mutable -> Step {
            if (!SSL_is_init_finished(t.ssl_.get())) {
                t.shutdown_send();
                return {};
            }
            if (!linger.sent) {
                int state = 0;
                Step step = t.call([&](std::size_t&) {
                    state = SSL_shutdown(t.ssl_.get());
                    return state >= 0 ? 1 : -1;
                });
                if (step.want == Step::want_read) step = {};  // sent; the peer's comes below
                if (step.want != Step::done) return step;
                t.shutdown_send();
                if (step.ec || state == 1) return step;  // failed, or the peer's already came
                linger.sent = true;
            }
            for (;;) {
                char scratch[4096];
                Step step =
                    t.call([&](std::size_t& n) { return SSL_read_ex(t.ssl_.get(), scratch, sizeof scratch, &n); });
                if (step.want != Step::done) return step;
                if (step.ec == asio::error::eof || step.ec == asio::ssl::error::stream_truncated) return {};
                if (step.ec) return step;
                linger.drained += step.n;
                if (linger.drained > linger_bytes) return {};
            }
        });
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
    bool idle_alive() override { return socket_idle_alive(socket_) && !(ssl_ && SSL_has_pending(ssl_.get())); }
    bool is_tls() const noexcept override { return true; }

private:
    // The deadline's timer may fire on another thread than the stream's strand (the socket's
    // executor is the client's, not the strand): it only shuts the socket down, which fails
    // every pending and later call but keeps the descriptor, so an SSL call in progress never
    // lands on a number reused meanwhile. The owner closes it.
    void expire() {
        std::lock_guard<std::mutex> lock(descriptor_mutex_);
        expired_ = true;
        if (socket_.is_open()) ::shutdown(socket_.native_handle(), SHUT_RDWR);
    }

    template <class Attempt, bool WithSize, bool breaks_on_abort>
    friend struct TlsOp;

    static constexpr std::size_t record_size = 16 * 1024;
    static constexpr std::size_t linger_bytes = 1024 * 1024;

    struct SslFree {
        void operator()(SSL* s) const noexcept { SSL_free(s); }
    };

    void shutdown_send() {
        error_code ignored;
        socket_.shutdown(tcp::socket::shutdown_send, ignored);
    }

    // One SSL call with the thread's error queue cleared before and after, and the BIO's errno.
    template <class Call>
    Step call(Call&& c) {
        ERR_clear_error();
        bio_state_.last_errno = 0;
        std::size_t n = 0;
        const int ret = c(n);
        if (ret > 0) return {Step::done, {}, n};
        Step step = classify(ssl_.get(), ret, bio_state_.last_errno);
        ERR_clear_error();
        return step;
    }

    template <bool WithSize, bool breaks_on_abort, class Handler, class Attempt>
    void start(Handler h, Attempt attempt) {
        using Signature = std::conditional_t<WithSize, void(error_code, std::size_t), void(error_code)>;
        asio::async_compose<Handler, Signature>(
            TlsOp<Attempt, WithSize, breaks_on_abort>{this, alive_, std::move(attempt)}, h, socket_);
    }

    tcp::socket socket_;
    BioState bio_state_{&socket_};
    std::unique_ptr<SSL, SslFree> ssl_;
    error_code broken_{};          // set up failed, or a write was cut short: every operation fails with this
    std::mutex descriptor_mutex_;  // the deadline's shutdown against the owner's close
    bool expired_{false};          // written under descriptor_mutex_; read on the strand after a wake-up
    std::shared_ptr<int> alive_ = std::make_shared<int>(0);
    Deadline deadline_;
};

template <class Attempt, bool WithSize, bool breaks_on_abort>
template <class Self>
void TlsOp<Attempt, WithSize, breaks_on_abort>::operator()(Self& self, error_code wait_ec) {
    if (started && last.want == Step::done) return finish(self);  // the posted result
    if (started && alive.expired()) {
        last = {Step::done, asio::error::operation_aborted};
        return finish(self);
    }
    if (started && wait_ec) {
        if (breaks_on_abort && !impl->broken_) impl->broken_ = wait_ec;
        last = {Step::done, wait_ec};
        return finish(self);
    }
    const bool initiating = !started;
    started = true;
    if (impl->broken_) last = {Step::done, impl->broken_};
    else if (!impl->socket_.is_open()) last = {Step::done, asio::error::bad_descriptor};
    else last = attempt(*impl);
    if (last.want == Step::done && last.ec) {
        std::lock_guard<std::mutex> lock(impl->descriptor_mutex_);
        if (impl->expired_) last.ec = asio::error::operation_aborted;  // as a closed socket gave them
    }
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
