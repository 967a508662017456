// The TLS stream's records: those received together read in one call, batched records stay in
// order with KeyUpdates, bytes before a close_notify come first, and held writes leave with the
// next write, a flush or the shutdown.
#include "tls_pair.hpp"

using namespace tls_test;

namespace {

TEST_F(TlsStreamTest, AReadTakesEveryRecordAlreadyReceivedInOneCall) {
    const std::string message = pattern(64 << 10, 12);  // four full records, sealed in one write
    std::string got(256 << 10, '\0');
    std::size_t first = 0;
    run([&]() -> asio::awaitable<void> {
        auto [client, server] = co_await pair();
        char c;
        co_await asio::async_write(server, asio::buffer(std::string("?")), use_tuple);  // after the tickets
        co_await client.async_read_some(asio::buffer(&c, 1), use_tuple);
        co_await asio::async_write(server, asio::buffer(message), use_tuple);
        co_await sleep_for(50ms);
        auto [e, n] = co_await client.async_read_some(asio::buffer(got), use_tuple);
        EXPECT_FALSE(e) << e.message();
        first = n;
    });
    EXPECT_EQ(first, message.size());
    EXPECT_TRUE(got.compare(0, message.size(), message) == 0);
}

// Held writes complete at once and send nothing; their records leave with the next write
// that is not held (one read takes both), with a flush, or ahead of a shutdown's close_notify.
TEST_F(TlsStreamTest, HeldWritesLeaveWithTheNextWriteAFlushOrTheShutdown) {
    std::vector<std::string> reads;
    bool quiet_while_held = false, quiet_while_held_again = false, eof_last = false;
    run([&]() -> asio::awaitable<void> {
        auto [client, server] = co_await pair();
        char c;
        co_await asio::async_write(server, asio::buffer(std::string("?")), use_tuple);  // after the tickets
        co_await client.async_read_some(asio::buffer(&c, 1), use_tuple);
        auto read_now = [&]() -> asio::awaitable<void> {
            std::string got(1024, '\0');
            auto [e, n] = co_await client.async_read_some(asio::buffer(got), use_tuple);
            EXPECT_FALSE(e) << e.message();
            reads.push_back(got.substr(0, n));
        };
        server.hold_writes(true);
        auto [e1, n1] = co_await asio::async_write(server, asio::buffer(std::string("first,")), use_tuple);
        EXPECT_FALSE(e1);
        EXPECT_EQ(n1, 6U);
        co_await sleep_for(50ms);
        quiet_while_held = client.idle_alive();  // nothing has arrived
        server.hold_writes(false);
        co_await asio::async_write(server, asio::buffer(std::string("second")), use_tuple);
        co_await sleep_for(50ms);
        co_await read_now();  // both records, in one read

        server.hold_writes(true);
        co_await asio::async_write(server, asio::buffer(std::string("flushed")), use_tuple);
        co_await sleep_for(50ms);
        quiet_while_held_again = client.idle_alive();
        server.hold_writes(false);
        auto [fe] = co_await server.async_flush(use_tuple);
        EXPECT_FALSE(fe) << fe.message();
        co_await read_now();

        server.hold_writes(true);
        co_await asio::async_write(server, asio::buffer(std::string("last")), use_tuple);
        server.hold_writes(false);
        auto shutdown = [&]() -> asio::awaitable<void> { co_await server.async_shutdown(use_tuple); };
        auto reader = [&]() -> asio::awaitable<void> {
            co_await read_now();
            std::string rest(16, '\0');
            auto [e, n] = co_await client.async_read_some(asio::buffer(rest), use_tuple);
            eof_last = e == asio::error::eof && n == 0;
            co_await client.async_shutdown(use_tuple);
        };
        co_await (shutdown() && reader());
    });
    EXPECT_TRUE(quiet_while_held);
    EXPECT_TRUE(quiet_while_held_again);
    EXPECT_EQ(reads, (std::vector<std::string>{"first,second", "flushed", "last"}));
    EXPECT_TRUE(eof_last);
}

TEST_F(TlsStreamTest, BytesBeforeACloseNotifyComeFirstAndTheEndAfterThem) {
    const std::string message = pattern(40000, 13);  // three records, then the close_notify
    std::string got(256 << 10, '\0');
    std::size_t first = 0;
    error_code first_ec, second_ec, shutdown_ec;
    run([&]() -> asio::awaitable<void> {
        auto [client, server] = co_await pair();
        auto serve = [&]() -> asio::awaitable<void> {
            co_await asio::async_write(server, asio::buffer(message), use_tuple);
            auto [e] = co_await server.async_shutdown(use_tuple);  // ends with the client's close_notify
            shutdown_ec = e;
        };
        auto read = [&]() -> asio::awaitable<void> {
            co_await sleep_for(50ms);  // everything, the close_notify included, has arrived
            auto [e1, n1] = co_await client.async_read_some(asio::buffer(got), use_tuple);
            first_ec = e1;
            first = n1;
            auto [e2, n2] = co_await client.async_read_some(asio::buffer(got), use_tuple);
            second_ec = e2;
            co_await client.async_shutdown(use_tuple);
        };
        co_await (serve() && read());
    });
    EXPECT_FALSE(first_ec) << first_ec.message();
    EXPECT_EQ(first, message.size());
    EXPECT_TRUE(got.compare(0, message.size(), message) == 0);
    EXPECT_EQ(second_ec, asio::error::eof) << second_ec.message();
    EXPECT_FALSE(shutdown_ec) << shutdown_ec.message();
}

// A peer that reads slowly keeps our writes waiting with sealed records queued, and asks for a
// new key every 256 KiB, the first time while our socket is full. Our answering KeyUpdate is
// sealed into a later batch, between records under the old key and records under the new one:
// the peer must decrypt every byte. The peer is plain blocking OpenSSL in a thread.
TEST_F(TlsStreamTest, KeyUpdatesRequestedWhileWritesWaitAreAnsweredBetweenTheRightRecords) {
    const std::string data = pattern(8 << 20, 14);
    std::string got;
    int peer_error = 0, key_updates = 0;
    error_code wec, rec;
    tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
    const tcp::endpoint at = acceptor.local_endpoint();
    std::thread peer([&] {
        error_code ec;
        tcp::socket s = acceptor.accept(ec);
        if (ec) return;
        const int small = 32 << 10;
        ::setsockopt(s.native_handle(), SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
        const timeval bound{20, 0};  // a blocked peer must not outlive the test's own bound
        ::setsockopt(s.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &bound, sizeof bound);
        ::setsockopt(s.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &bound, sizeof bound);
        SSL* ssl = SSL_new(server_ctx.native_handle());
        SSL_set_fd(ssl, s.native_handle());
        if (SSL_accept(ssl) != 1) peer_error = -1;
        std::vector<char> buf(16 << 10);
        // First a stall with our socket full, one record read, and a request.
        ::usleep(200000);
        if (const int n = SSL_read(ssl, buf.data(), static_cast<int>(buf.size())); n > 0)
            got.append(buf.data(), static_cast<std::size_t>(n));
        if (SSL_key_update(ssl, SSL_KEY_UPDATE_REQUESTED) == 1 && SSL_do_handshake(ssl) == 1) ++key_updates;
        ::usleep(200000);
        while (peer_error == 0 && got.size() < data.size()) {
            const int n = SSL_read(ssl, buf.data(), static_cast<int>(buf.size()));
            if (n <= 0) {
                peer_error = SSL_get_error(ssl, n);
                break;
            }
            const std::size_t before = got.size();
            got.append(buf.data(), static_cast<std::size_t>(n));
            if (before / (256 << 10) != got.size() / (256 << 10)) {
                if (SSL_key_update(ssl, SSL_KEY_UPDATE_REQUESTED) == 1 && SSL_do_handshake(ssl) == 1) ++key_updates;
            }
            if (before / (1 << 20) != got.size() / (1 << 20)) ::usleep(20000);
        }
        SSL_shutdown(ssl);
        SSL_free(ssl);
    });
    run([&]() -> asio::awaitable<void> {
        tcp::socket socket(io);
        co_await socket.async_connect(at, asio::use_awaitable);
        const int small = 64 << 10;
        ::setsockopt(socket.native_handle(), SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
        AnyStream client = AnyStream::tls_client(std::move(socket), *client_ctx, "", "127.0.0.1");
        auto [h] = co_await client.async_handshake(use_tuple);
        EXPECT_FALSE(h) << h.message();
        auto write = [&]() -> asio::awaitable<void> {
            auto [e, n] = co_await asio::async_write(client, asio::buffer(data), use_tuple);
            wec = e;
        };
        auto read = [&]() -> asio::awaitable<void> {  // the KeyUpdate requests, then the close_notify
            char c;
            for (;;) {
                auto [e, n] = co_await client.async_read_some(asio::buffer(&c, 1), use_tuple);
                if (e) {
                    rec = e;
                    break;
                }
            }
        };
        co_await (write() && read());
        client.close();
    });
    peer.join();
    EXPECT_FALSE(wec) << wec.message();
    EXPECT_EQ(rec, asio::error::eof) << rec.message();
    EXPECT_EQ(peer_error, 0);
    EXPECT_GE(key_updates, 20);
    EXPECT_TRUE(got == data) << "the peer got " << got.size() << " bytes, not the " << data.size() << " sent";
}

}  // namespace
