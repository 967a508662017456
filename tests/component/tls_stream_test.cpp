// The TLS stream over a real loopback socket pair: bytes exact both ways with a read and a write
// pending at once, gather writes, how each kind of end reads (close_notify, a bare TCP close, a
// reset while writing), deadlines, and operations after close; records received together read
// in one call, and batched records stay in order with KeyUpdates; held writes leave with the
// next write, a flush or the shutdown; and a plain TCP stream's deadline.
#include "local/tls_certs.hpp"
#include "net/any_stream.hpp"
#include "net/tls_context.hpp"

#include "../support/run_test.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <gtest/gtest.h>

#include <openssl/ssl.h>

#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace ks = kubesandbox;
namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;
using ks::net::AnyStream;
using namespace std::chrono_literals;
using namespace asio::experimental::awaitable_operators;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

namespace {

std::string pattern(std::size_t n, unsigned seed) {
    std::string s(n, '\0');
    for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + seed * 7 + (i >> 12)) & 0xff);
    return s;
}

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

class TlsStreamTest : public ::testing::Test {
protected:
    void SetUp() override {
        auto certs = ks::local::generate_serving_certs();
        ASSERT_TRUE(certs.has_value());
        server_ctx.use_certificate_chain(asio::buffer(certs->cert_pem));
        server_ctx.use_private_key(asio::buffer(certs->key_pem), asio::ssl::context::pem);
        ks::net::TlsClientSettings settings;
        settings.ca_pem = certs->ca_pem;
        auto ctx = ks::net::make_tls_client_context(settings);
        ASSERT_TRUE(ctx.has_value());
        client_ctx = *ctx;
    }

    // A handshaken client/server pair over loopback; the client verifies `verify_host`.
    asio::awaitable<std::pair<AnyStream, AnyStream>> pair(std::string verify_host = "127.0.0.1") {
        tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
        tcp::socket client_socket(io);
        co_await client_socket.async_connect(acceptor.local_endpoint(), asio::use_awaitable);
        tcp::socket server_socket = co_await acceptor.async_accept(asio::use_awaitable);
        AnyStream client = AnyStream::tls_client(std::move(client_socket), *client_ctx, "", verify_host);
        AnyStream server = AnyStream::tls_server(std::move(server_socket), server_ctx);
        auto handshakes = co_await (client.async_handshake(use_tuple) && server.async_handshake(use_tuple));
        const error_code client_ec = std::get<0>(handshakes), server_ec = std::get<0>(std::get<1>(handshakes));
        EXPECT_FALSE(client_ec) << client_ec.message();
        EXPECT_FALSE(server_ec) << server_ec.message();
        co_return std::pair<AnyStream, AnyStream>{std::move(client), std::move(server)};
    }

    // The client's handshake result against a server whose certificate names 127.0.0.1, ::1
    // and localhost, verifying `verify_host`.
    asio::awaitable<error_code> handshake_verifying(std::string verify_host) {
        tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
        tcp::socket client_socket(io);
        co_await client_socket.async_connect(acceptor.local_endpoint(), asio::use_awaitable);
        tcp::socket server_socket = co_await acceptor.async_accept(asio::use_awaitable);
        AnyStream client = AnyStream::tls_client(std::move(client_socket), *client_ctx, "", verify_host);
        AnyStream server = AnyStream::tls_server(std::move(server_socket), server_ctx);
        auto handshakes = co_await (client.async_handshake(use_tuple) && server.async_handshake(use_tuple));
        co_return std::get<0>(handshakes);
    }

    void run(std::function<asio::awaitable<void>()> body) { ks::test::run_coroutine_test(io, body, 30s); }

    asio::io_context io;
    asio::ssl::context server_ctx{asio::ssl::context::tls_server};
    std::shared_ptr<asio::ssl::context> client_ctx;
};

asio::awaitable<void> sleep_for(std::chrono::milliseconds d) {
    asio::steady_timer t(co_await asio::this_coro::executor, d);
    co_await t.async_wait(use_tuple);
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
