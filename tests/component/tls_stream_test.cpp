// The TLS stream over a real loopback socket pair: bytes exact both ways with a read and a write
// pending at once, gather writes, how each kind of end reads (close_notify, a bare TCP close, a
// reset while writing), deadlines, and operations after close; and a plain TCP stream's deadline.
// Records, batches and held writes: tls_records_test.cpp.
#include "tls_pair.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/write.hpp>

#include <atomic>
#include <thread>

using namespace tls_test;

namespace {

// What a read cut by its deadline, and the operations after it, gave.
struct PastDeadline {
    error_code read, write, after_close;
    std::size_t got = 1;
    std::chrono::steady_clock::duration took{};
};

// Reads a byte that never comes with a 200 ms deadline, then writes, closes and reads again.
asio::awaitable<PastDeadline> read_past_deadline(AnyStream& client) {
    PastDeadline r;
    char c;
    const auto start = std::chrono::steady_clock::now();
    client.expires_after(200ms);
    auto [e, n] = co_await client.async_read_some(asio::buffer(&c, 1), use_tuple);
    r.took = std::chrono::steady_clock::now() - start;
    r.read = e;
    r.got = n;
    auto [w, wn] = co_await client.async_write_some(asio::buffer(std::string("late")), use_tuple);
    r.write = w;
    client.close();
    auto [l, ln] = co_await client.async_read_some(asio::buffer(&c, 1), use_tuple);
    r.after_close = l;
    co_return r;
}

TEST_F(TlsStreamTest, BytesArriveExactBothWaysWhileReadAndWritePendTogether) {
    const std::string up = pattern(6 << 20, 1), down = pattern(5 << 20, 2);
    std::string got_up(up.size(), '\0'), got_down(down.size(), '\0');
    std::array<error_code, 4> ec;
    run([&]() -> asio::awaitable<void> {
        auto [client, server] = co_await pair();
        auto write = [](AnyStream& s, const std::string& data, error_code& out) -> asio::awaitable<void> {
            auto [e, n] = co_await asio::async_write(s, asio::buffer(data), use_tuple);
            out = e;
        };
        auto read = [](AnyStream& s, std::string& into, error_code& out) -> asio::awaitable<void> {
            auto [e, n] = co_await asio::async_read(s, asio::buffer(into), use_tuple);
            out = e;
        };
        // Each side writes and reads at once: neither write can finish unless the other side
        // reads, so a stream that serialised reads and writes would stall (bounded by the test).
        co_await (write(client, up, ec[0]) && read(client, got_down, ec[1]) && write(server, down, ec[2]) &&
                  read(server, got_up, ec[3]));
    });
    for (const auto& e : ec) EXPECT_FALSE(e) << e.message();
    EXPECT_TRUE(got_up == up) << "client to server bytes differ";
    EXPECT_TRUE(got_down == down) << "server to client bytes differ";
}

TEST_F(TlsStreamTest, AGatherWriteOfManyBuffersArrivesWholeAndInOrder) {
    std::vector<std::string> fields;
    for (int i = 0; i < 300; ++i)
        fields.push_back("X-Field-" + std::to_string(i) + ": " + pattern(i * 7 % 90, i) + "\r\n");
    fields.push_back(pattern(40000, 9));  // a body larger than a record after the small pieces
    std::string expected;
    std::vector<asio::const_buffer> buffers;
    for (const auto& f : fields) {
        expected += f;
        buffers.push_back(asio::buffer(f));
    }
    std::string got(expected.size(), '\0');
    error_code wec, rec;
    run([&]() -> asio::awaitable<void> {
        auto [client, server] = co_await pair();
        auto write = [&]() -> asio::awaitable<void> {
            auto [e, n] = co_await asio::async_write(client, buffers, use_tuple);
            wec = e;
        };
        auto read = [&]() -> asio::awaitable<void> {
            auto [e, n] = co_await asio::async_read(server, asio::buffer(got), use_tuple);
            rec = e;
        };
        co_await (write() && read());
    });
    EXPECT_FALSE(wec) << wec.message();
    EXPECT_FALSE(rec) << rec.message();
    EXPECT_TRUE(got == expected);
}

TEST_F(TlsStreamTest, ACloseNotifyReadsAsEofAndABareTcpCloseAsTruncated) {
    std::string first, second;
    error_code after_notify, after_bare, shutdown_ec, client_shutdown_ec;
    run([&]() -> asio::awaitable<void> {
        {
            auto [client, server] = co_await pair();
            co_await asio::async_write(server, asio::buffer(std::string("bye")), use_tuple);
            // The server's shutdown waits for the client's end, so the two run together.
            auto close_server = [&]() -> asio::awaitable<void> {
                auto [sec] = co_await server.async_shutdown(use_tuple);
                shutdown_ec = sec;
            };
            auto read_to_end = [&]() -> asio::awaitable<void> {
                first.resize(3);
                co_await asio::async_read(client, asio::buffer(first), use_tuple);
                char c;
                auto [e, n] = co_await client.async_read_some(asio::buffer(&c, 1), use_tuple);
                after_notify = e;
                auto [cec] = co_await client.async_shutdown(use_tuple);
                client_shutdown_ec = cec;
            };
            co_await (close_server() && read_to_end());
        }
        {
            auto [client, server] = co_await pair();
            co_await asio::async_write(server, asio::buffer(std::string("cut")), use_tuple);
            server.close();
            second.resize(3);
            co_await asio::async_read(client, asio::buffer(second), use_tuple);
            char c;
            auto [e, n] = co_await client.async_read_some(asio::buffer(&c, 1), use_tuple);
            after_bare = e;
        }
    });
    EXPECT_EQ(first, "bye");
    EXPECT_EQ(after_notify, asio::error::eof) << after_notify.message();
    EXPECT_FALSE(shutdown_ec) << shutdown_ec.message();                // ended by the client's close_notify
    EXPECT_FALSE(client_shutdown_ec) << client_shutdown_ec.message();  // the server's came first
    EXPECT_EQ(second, "cut");
    EXPECT_EQ(after_bare, asio::ssl::error::stream_truncated) << after_bare.message();
}

TEST_F(TlsStreamTest, APeerResetWhileWritingIsAnErrorNotASignal) {
    error_code wec;
    run([&]() -> asio::awaitable<void> {
        tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
        tcp::socket client_socket(io);
        co_await client_socket.async_connect(acceptor.local_endpoint(), asio::use_awaitable);
        tcp::socket server_socket = co_await acceptor.async_accept(asio::use_awaitable);
        const int server_fd = ::dup(server_socket.native_handle());  // to reset it after the handshake
        AnyStream client = AnyStream::tls_client(std::move(client_socket), *client_ctx, "", "127.0.0.1");
        AnyStream server = AnyStream::tls_server(std::move(server_socket), server_ctx);
        co_await (client.async_handshake(use_tuple) && server.async_handshake(use_tuple));
        linger hard{1, 0};
        ::setsockopt(server_fd, SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
        server.close();
        ::close(server_fd);  // the last descriptor: the kernel answers with RST from now on
        const std::string chunk = pattern(1 << 20, 3);
        // SIGPIPE is not ignored in this process: a plain write() to the reset socket would end it.
        for (int i = 0; i < 64 && !wec; ++i) {
            auto [e, n] = co_await asio::async_write(client, asio::buffer(chunk), use_tuple);
            wec = e;
        }
    });
    EXPECT_TRUE(wec == asio::error::connection_reset || wec == asio::error::broken_pipe) << wec.message();
}

TEST_F(TlsStreamTest, APeerResetWhileAReadWaitsEndsItWithTheReset) {
    error_code rec;
    std::string first(3, '\0');
    run([&]() -> asio::awaitable<void> {
        tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
        tcp::socket client_socket(io);
        co_await client_socket.async_connect(acceptor.local_endpoint(), asio::use_awaitable);
        tcp::socket server_socket = co_await acceptor.async_accept(asio::use_awaitable);
        const int server_fd = ::dup(server_socket.native_handle());
        AnyStream client = AnyStream::tls_client(std::move(client_socket), *client_ctx, "", "127.0.0.1");
        AnyStream server = AnyStream::tls_server(std::move(server_socket), server_ctx);
        co_await (client.async_handshake(use_tuple) && server.async_handshake(use_tuple));
        co_await asio::async_write(server, asio::buffer(std::string("abc")), use_tuple);
        co_await asio::async_read(client, asio::buffer(first), use_tuple);  // the socket is drained now
        auto reset_later = [&]() -> asio::awaitable<void> {
            co_await sleep_for(100ms);
            linger hard{1, 0};
            ::setsockopt(server_fd, SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
            server.close();
            ::close(server_fd);
        };
        auto read = [&]() -> asio::awaitable<void> {
            char c;
            auto [e, n] = co_await client.async_read_some(asio::buffer(&c, 1), use_tuple);
            rec = e;
        };
        co_await (reset_later() && read());
    });
    EXPECT_EQ(first, "abc");
    EXPECT_EQ(rec, asio::error::connection_reset) << rec.message();
}

TEST_F(TlsStreamTest, ADeadlineEndsAPendingReadAndEveryLaterOperationFails) {
    error_code rec, wec, later;
    std::chrono::steady_clock::duration took{};
    bool alive_before = false, alive_with_bytes = true;
    run([&]() -> asio::awaitable<void> {
        auto [client, server] = co_await pair();
        // One exchange first: a TLS 1.3 server's session tickets follow the handshake and are
        // read with the first reply, as on any pooled connection.
        char c;
        co_await asio::async_write(server, asio::buffer(std::string("?")), use_tuple);
        co_await client.async_read_some(asio::buffer(&c, 1), use_tuple);
        alive_before = client.idle_alive();
        co_await asio::async_write(server, asio::buffer(std::string("!")), use_tuple);
        co_await sleep_for(100ms);
        alive_with_bytes = client.idle_alive();  // unread bytes on an idle connection: not reusable
        co_await client.async_read_some(asio::buffer(&c, 1), use_tuple);
        const PastDeadline past = co_await read_past_deadline(client);
        took = past.took;
        rec = past.read;
        wec = past.write;
        later = past.after_close;
    });
    EXPECT_TRUE(alive_before);
    EXPECT_FALSE(alive_with_bytes);
    EXPECT_TRUE(rec) << "the read outlived its deadline";
    EXPECT_GE(took, 150ms);
    EXPECT_LT(took, 5s);
    EXPECT_TRUE(wec);
    EXPECT_TRUE(later);
}

TEST_F(TlsStreamTest, TheServerNameOrAddressIsVerified) {
    error_code by_name, by_ip, wrong_name, wrong_ip;
    run([&]() -> asio::awaitable<void> {
        by_name = co_await handshake_verifying("localhost");
        by_ip = co_await handshake_verifying("127.0.0.1");
        wrong_name = co_await handshake_verifying("api.not-in-the-cert.example");
        wrong_ip = co_await handshake_verifying("10.9.8.7");
    });
    EXPECT_FALSE(by_name) << by_name.message();
    EXPECT_FALSE(by_ip) << by_ip.message();
    EXPECT_EQ(&wrong_name.category(), &asio::error::get_ssl_category()) << wrong_name.message();
    EXPECT_NE(wrong_name.message().find("certificate verify failed"), std::string::npos) << wrong_name.message();
    EXPECT_EQ(&wrong_ip.category(), &asio::error::get_ssl_category()) << wrong_ip.message();
}

TEST_F(TlsStreamTest, ClosingRightAfterShutdownLosesNothingThePeerHasNotReadYet) {
    // The server answers 4 MiB and closes while bytes it never read sit in its socket. A close
    // with unread bytes makes the kernel send a reset, which can destroy the end of the answer
    // before the slow client reads it; the shutdown reads them first.
    const std::string answer = pattern(4 << 20, 5);
    std::string got(answer.size(), '\0');
    error_code rec, after;
    run([&]() -> asio::awaitable<void> {
        auto [client, server] = co_await pair();
        const std::string unread = pattern(64 << 10, 6);
        co_await asio::async_write(client, asio::buffer(unread), use_tuple);
        auto serve = [&]() -> asio::awaitable<void> {
            co_await asio::async_write(server, asio::buffer(answer), use_tuple);
            server.expires_after(20s);
            co_await server.async_shutdown(use_tuple);
            server.close();
        };
        auto slow_read = [&]() -> asio::awaitable<void> {
            co_await sleep_for(300ms);
            auto [e, n] = co_await asio::async_read(client, asio::buffer(got), use_tuple);
            rec = e;
            char c;
            auto [e2, n2] = co_await client.async_read_some(asio::buffer(&c, 1), use_tuple);
            after = e2;
            client.close();
        };
        co_await (serve() && slow_read());
    });
    EXPECT_FALSE(rec) << rec.message();
    EXPECT_TRUE(got == answer) << "the answer arrived damaged or cut";
    EXPECT_EQ(after, asio::error::eof) << after.message();
}

TEST_F(TlsStreamTest, ADeadlineEndsAWriteThePeerNeverReads) {
    error_code wec, later;
    std::chrono::steady_clock::duration took{};
    run([&]() -> asio::awaitable<void> {
        auto [client, server] = co_await pair();
        const std::string lots = pattern(64 << 20, 7);  // far more than the socket buffers hold
        const auto start = std::chrono::steady_clock::now();
        client.expires_after(300ms);
        auto [e, n] = co_await asio::async_write(client, asio::buffer(lots), use_tuple);
        took = std::chrono::steady_clock::now() - start;
        wec = e;
        // Whatever OpenSSL held of the cut write must never go out as the start of another.
        auto [l, ln] = co_await client.async_write_some(asio::buffer(std::string("next")), use_tuple);
        later = l;
    });
    EXPECT_TRUE(wec) << "the write outlived its deadline";
    EXPECT_GE(took, 250ms);
    EXPECT_LT(took, 10s);
    EXPECT_TRUE(later);
}

}  // namespace

namespace {

// Plain TCP, with the io_context run by two threads as a server's may be: the deadline's timer
// fires on either thread, ends the pending read with operation_aborted (not the clean EOF its
// shutdown gives, which would end a body that ends with the connection as if complete), and
// every later operation fails.
TEST(TcpStream, ADeadlineAbortsAPendingReadWithTwoThreadsRunning) {
    asio::io_context io(2);
    error_code rec, wec, later;
    std::size_t got = 1;
    std::chrono::steady_clock::duration took{};
    std::atomic<bool> done{false};
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
            tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
            tcp::socket client_socket(io);
            co_await client_socket.async_connect(acceptor.local_endpoint(), asio::use_awaitable);
            tcp::socket server = co_await acceptor.async_accept(asio::use_awaitable);
            AnyStream client = AnyStream::tcp(std::move(client_socket));
            char c;
            // One byte through first: the connection works until the deadline.
            co_await asio::async_write(server, asio::buffer(std::string("!")), use_tuple);
            auto [e0, n0] = co_await client.async_read_some(asio::buffer(&c, 1), use_tuple);
            EXPECT_FALSE(e0);
            EXPECT_EQ(n0, 1u);
            const PastDeadline past = co_await read_past_deadline(client);
            took = past.took;
            rec = past.read;
            got = past.got;
            wec = past.write;
            later = past.after_close;
        },
        [&](std::exception_ptr) {
            done = true;
            io.stop();
        });
    std::thread other([&] { io.run_for(10s); });
    io.run_for(10s);
    other.join();
    ASSERT_TRUE(done) << "the test did not finish within 10 s";
    EXPECT_EQ(rec, asio::error::operation_aborted) << rec.message();
    EXPECT_EQ(got, 0u);
    EXPECT_GE(took, 150ms);
    EXPECT_LT(took, 5s);
    EXPECT_TRUE(wec);
    EXPECT_TRUE(later);
}

}  // namespace