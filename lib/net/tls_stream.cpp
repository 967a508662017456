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

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>

namespace kubesandbox::net {

namespace {

using tcp = asio::ip::tcp;

// What the BIO works on: the socket (its descriptor looked up at every call), the errno of its
// last failed call (kept here because OpenSSL may change errno before we look), and the records
// of a write batch not yet sent.
struct BioState {
    tcp::socket* socket;
    int last_errno{0};
    bool collect{false};  // a write batch is being encrypted: its records go to `out`
    std::string out;      // encrypted records waiting to be sent, from out_sent on
    std::size_t out_sent{0};
    bool out_pending() const noexcept { return out_sent < out.size(); }
};

BioState& state_of(BIO* bio) { return *static_cast<BioState*>(BIO_get_data(bio)); }

// The descriptor is only ever closed on the stream's own strand, between SSL calls, so it is
// never one reused by someone else here; a closed socket reads as EBADF. send() with
// MSG_NOSIGNAL: a peer's reset is an error, not a SIGPIPE for the whole process.
ssize_t send_nosignal(int fd, const char* data, std::size_t len) {
    ssize_t n;
    do n = ::send(fd, data, len, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n;
}

int bio_write(BIO* bio, const char* data, int len) {
    BioState& st = state_of(bio);
    BIO_clear_retry_flags(bio);
    // A record SSL_read writes while a batch's records are still queued (an alert such as
    // no_renegotiation) queues behind them: records must leave in the order they were sealed.
    if (st.collect || st.out_pending()) {
        st.out.append(data, static_cast<std::size_t>(len));
        return len;
    }
    const ssize_t n = send_nosignal(st.socket->native_handle(), data, static_cast<std::size_t>(len));
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
        // Read-ahead: one recv takes a record whole (not a header and then its body), and up to
        // four when they are there. The buffer is released while empty (SSL_MODE_RELEASE_BUFFERS).
        SSL_set_read_ahead(ssl_.get(), 1);
        SSL_set_default_read_buffer_len(ssl_.get(), read_buffer_size);
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

    // SSL_read gives at most one record; records already received (read-ahead takes up to four per
    // recv) are decrypted into the same call, so a 64 KiB message costs one completion, not four.
    // An incomplete record stops the loop; an end or error after the first record is kept for the
    // next call, so the bytes before it come first.
    void read_some(asio::mutable_buffer b, IoHandler h) override {
        start<true, false>(std::move(h), [b](TlsImpl& t) -> Step {
            if (b.size() == 0) return {};
            if (t.read_error_) return {Step::done, std::exchange(t.read_error_, {})};
            auto* data = static_cast<unsigned char*>(b.data());
            Step first = t.call([&](std::size_t& n) { return SSL_read_ex(t.ssl_.get(), data, b.size(), &n); });
            while (first.want == Step::done && !first.ec && first.n < b.size() && SSL_has_pending(t.ssl_.get())) {
                Step more = t.call(
                    [&](std::size_t& n) { return SSL_read_ex(t.ssl_.get(), data + first.n, b.size() - first.n, &n); });
                if (more.want != Step::done) break;
                if (more.ec) {
                    t.read_error_ = more.ec;
                    break;
                }
                first.n += more.n;
            }
            return first;
        });
    }

    // Up to four records are sealed at once and leave in one send (a 64 KiB message was four
    // sends and four completions). An HTTP head in several buffers still goes in one record. The
    // write completes once all of its records are sent.
    void write_some(const ConstBufferList& buffers, IoHandler h) override {
        struct Batch {
            bool sealed{false};
            std::size_t taken{0};  // plaintext bytes SSL took
        };
        start<true, true>(std::move(h), [buffers, batch = Batch{}](TlsImpl& t) mutable -> Step {
            if (!batch.sealed) {
                Step stop = t.seal(buffers, batch.taken);
                if (batch.taken == 0 && (stop.ec || stop.want != Step::done)) {
                    if (stop.ec) return stop;
                    if (Step sent = t.send_out(); sent.ec || sent.want != Step::done) return sent;
                    return stop;  // SSL wants the socket first; seal again then
                }
                batch.sealed = true;
            }
            if (t.hold_ && t.bio_state_.out.size() <= held_bytes) return {Step::done, {}, batch.taken};
            Step sent = t.send_out();
            if (sent.want == Step::done && !sent.ec) sent.n = batch.taken;
            return sent;
        });
    }

    void hold_writes(bool hold) noexcept override { hold_ = hold; }

    void flush(DoneHandler h) override {
        start<false, true>(std::move(h), [](TlsImpl& t) -> Step { return t.send_out(); });
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
            // Records held back leave first, ahead of the close_notify and the FIN.
            if (Step held = t.send_out(); held.ec || held.want != Step::done) return held;
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
    // An end a read already took in (read_error_) counts like bytes still buffered.
    bool idle_alive() override {
        return socket_idle_alive(socket_) && !read_error_ && !(ssl_ && SSL_has_pending(ssl_.get()));
    }
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
    static constexpr std::size_t batch_records = 4;
    static constexpr std::size_t kept_out_capacity = 4 * 1024;
    static constexpr std::size_t read_buffer_size = 4 * (record_size + 256);  // a record's overhead is < 256
    static constexpr std::size_t linger_bytes = 1024 * 1024;
    static constexpr std::size_t held_bytes = 256 * 1024;  // held writes past this are sent

    struct SslFree {
        void operator()(SSL* s) const noexcept { SSL_free(s); }
    };

    void shutdown_send() {
        error_code ignored;
        socket_.shutdown(tcp::socket::shutdown_send, ignored);
    }

    // Seals up to `batch_records` records of plaintext from `buffers` into bio_state_.out and
    // counts what SSL took in `taken`; returns how the last SSL_write ended. A record's plaintext
    // is passed in place when one buffer holds it, else gathered from the next buffers.
    Step seal(const ConstBufferList& buffers, std::size_t& taken) {
        const std::size_t total = buffers.bytes();
        BioState& st = bio_state_;
        st.out.reserve(st.out.size() + std::min(total, batch_records * record_size) + batch_records * 64);
        st.collect = true;
        Step last{};
        std::size_t index = 0, offset = 0;  // the next plaintext byte: buffers.items[index] + offset
        char gathered[record_size];
        for (std::size_t r = 0; r < batch_records && taken < total; ++r) {
            while (buffers.items[index].size() == offset) ++index, offset = 0;
            const auto* at = static_cast<const char*>(buffers.items[index].data()) + offset;
            std::size_t len = std::min(record_size, buffers.items[index].size() - offset);
            if (len < record_size && index + 1 < buffers.count) {
                len = 0;
                for (std::size_t i = index, skip = offset; i < buffers.count && len < record_size; ++i, skip = 0) {
                    const std::size_t part = std::min(record_size - len, buffers.items[i].size() - skip);
                    std::memcpy(gathered + len, static_cast<const char*>(buffers.items[i].data()) + skip, part);
                    len += part;
                }
                at = gathered;
            }
            last = call([&](std::size_t& n) { return SSL_write_ex(ssl_.get(), at, len, &n); });
            if (last.want != Step::done || last.ec) break;
            taken += last.n;
            for (std::size_t left = last.n; left > 0;) {
                const std::size_t step = std::min(left, buffers.items[index].size() - offset);
                offset += step;
                left -= step;
                if (offset == buffers.items[index].size() && left > 0) ++index, offset = 0;
            }
        }
        st.collect = false;
        return last;
    }

    // Sends the queued records; want_write while the socket takes no more.
    Step send_out() {
        BioState& st = bio_state_;
        while (st.out_pending()) {
            const ssize_t n =
                send_nosignal(socket_.native_handle(), st.out.data() + st.out_sent, st.out.size() - st.out_sent);
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return {Step::want_write};
            if (n < 0) {
                // Part of a record may have gone: nothing more can follow on this connection, and
                // records queued behind must not pass for sent.
                broken_ = error_code(errno, boost::system::system_category());
                st.out_sent = 0;
                std::string().swap(st.out);
                return {Step::done, broken_};
            }
            st.out_sent += static_cast<std::size_t>(n);
        }
        st.out_sent = 0;
        if (st.out.capacity() > kept_out_capacity) std::string().swap(st.out);  // idle streams stay small
        else st.out.clear();
        return {};
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
    BioState bio_state_{&socket_, 0, false, {}, 0};
    std::unique_ptr<SSL, SslFree> ssl_;
    error_code broken_{};          // set up failed, or a write was cut short: every operation fails with this
    error_code read_error_{};      // met after the bytes a read returned; the next read reports it
    bool hold_{false};             // see hold_writes
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
