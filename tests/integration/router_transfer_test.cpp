// RouterSandbox's file transfers against the local cluster: the runtime's /upload and /download
// below its base directory, commands elsewhere, whole and streamed; its /list and /exists.
#include <kubesandbox/router_sandbox.hpp>

#include "connection/router_connection.hpp"
#include "router_fixture.hpp"

#include "../support/byte_pieces.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/write.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace {
namespace asio = boost::asio;
using namespace kubesandbox;
using asio::ip::tcp;
using test::router::RouterSandboxTest;
using namespace std::chrono_literals;

// Raw HTTP/1.1 to the cluster's router, for what our clients never send (a body that stops).
asio::awaitable<tcp::socket> connect_to_router(const std::string& url) {
    tcp::socket socket(co_await asio::this_coro::executor);
    auto port = static_cast<std::uint16_t>(std::stoi(url.substr(url.rfind(':') + 1)));
    auto [ec] =
        co_await socket.async_connect({asio::ip::make_address("127.0.0.1"), port}, asio::as_tuple(asio::use_awaitable));
    EXPECT_FALSE(ec) << ec.message();
    co_return socket;
}

// One response (Content-Length bodies only): its head and body, or empty on a broken connection.
asio::awaitable<std::pair<std::string, std::string>> read_response(tcp::socket& socket, std::string& buffer) {
    auto t = asio::as_tuple(asio::use_awaitable);
    auto [ec, end] = co_await asio::async_read_until(socket, asio::dynamic_buffer(buffer), "\r\n\r\n", t);
    if (ec) {
        ADD_FAILURE() << "reading a response head: " << ec.message();
        co_return std::pair<std::string, std::string>{};
    }
    std::string head = buffer.substr(0, end);
    buffer.erase(0, end);
    std::size_t length = 0;
    if (auto at = head.find("Content-Length: "); at != std::string::npos) length = std::stoul(head.substr(at + 16));
    if (buffer.size() < length) {
        auto [rec, n] = co_await asio::async_read(socket, asio::dynamic_buffer(buffer),
                                                  asio::transfer_exactly(length - buffer.size()), t);
        if (rec) {
            ADD_FAILURE() << "reading a response body: " << rec.message();
            co_return std::pair<std::string, std::string>{};
        }
    }
    std::string body = buffer.substr(0, length);
    buffer.erase(0, length);
    co_return std::pair{head, body};
}

TEST_F(RouterSandboxTest, TransfersInsideAndOutsideTheRuntimeBase) {
    options_.max_file_bytes = 3 * 1024 * 1024;
    const RouterSandboxOptions& options = options_;
    run([&]() -> asio::awaitable<void> {
        auto sb = co_await sandbox("rt-files");
        if (!sb) co_return;
        std::string binary;
        for (int i = 0; i < 256; ++i) binary += static_cast<char>(i);
        std::string big(2 * 1024 * 1024 + 17, 'x');
        for (std::size_t i = 0; i < big.size(); i += 997) big[i] = static_cast<char>(i % 251);
        const std::vector<std::string> paths = {
            "/app/a/b.bin",           // /upload and /download
            "/app/big.dat",           // the same, 2 MiB
            "/tmp/out/c.bin",         // outside the base: commands
            "/tmp/big.dat",           // commands, in pieces
            "/app/q\"uo\nte%25.txt",  // a name the endpoints cannot carry: commands
            "/app/ünï.txt",
        };
        const std::vector<std::string> contents = {binary, big, binary, big, "odd", "utf8"};
        std::vector<std::pair<std::string, std::string>> files;
        for (std::size_t i = 0; i < paths.size(); ++i) files.emplace_back(paths[i], contents[i]);
        files.emplace_back("relative.txt", "x");
        files.emplace_back("/etc/passwd", "x");
        files.emplace_back("/app", "x");
        files.emplace_back("/app/too-big", std::string(options.max_file_bytes + 1, 'y'));
        auto up = co_await sb->upload_files(files);
        EXPECT_TRUE(up && up->size() == files.size()) << (up ? "" : up.error().describe());
        if (!up || up->size() != files.size()) co_return;
        for (std::size_t i = 0; i < paths.size(); ++i)
            EXPECT_FALSE((*up)[i].error) << paths[i] << ": " << *(*up)[i].error;
        EXPECT_EQ((*up)[6].error, "invalid_path");
        EXPECT_EQ((*up)[7].error, "permission_denied");
        EXPECT_EQ((*up)[8].error, "is_directory");
        EXPECT_EQ((*up)[9].error, "file_too_large");

        auto prepared = co_await sb->execute(
            "mkdir -p /app/d && printf s > /app/secret && chmod 000 /app/secret && "
            "head -c 3200000 /dev/zero > /app/huge && ln -s /tmp/big.dat /app/link");
        EXPECT_TRUE(prepared && prepared->exit_code == 0);
        std::vector<std::string> wanted = paths;
        for (const char* p : {"/app/missing", "/app/d", "/app/secret", "/app/huge", "/tmp/none", "/app/link", "x"})
            wanted.push_back(p);
        auto down = co_await sb->download_files(wanted);
        EXPECT_TRUE(down && down->size() == wanted.size()) << (down ? "" : down.error().describe());
        if (!down || down->size() != wanted.size()) co_return;
        for (std::size_t i = 0; i < paths.size(); ++i) {
            EXPECT_EQ((*down)[i].path, paths[i]);
            EXPECT_TRUE((*down)[i].content == contents[i]) << paths[i] << ": " << (*down)[i].error.value_or("");
        }
        const std::size_t n = paths.size();
        EXPECT_EQ((*down)[n].error, "file_not_found");
        EXPECT_EQ((*down)[n + 1].error, "is_directory");
        EXPECT_EQ((*down)[n + 2].error, "permission_denied");
        EXPECT_EQ((*down)[n + 3].error, "file_too_large");
        EXPECT_EQ((*down)[n + 4].error, "file_not_found");
        EXPECT_TRUE((*down)[n + 5].content == big) << "a symlink out of the base is followed, as raw mode does";
        EXPECT_EQ((*down)[n + 6].error, "invalid_path");

        // One file into a sink: below the base as the body arrives, elsewhere through commands.
        test::CollectedBytes got;
        auto streamed = co_await sb->download_to("/app/big.dat", got.sink());
        EXPECT_TRUE(streamed && !streamed->error && !streamed->content);
        EXPECT_TRUE(got.data == big);
        EXPECT_GT(got.pieces, 1);
        got.data.clear();
        auto outside = co_await sb->download_to("/tmp/big.dat", got.sink());
        EXPECT_TRUE(outside && !outside->error && got.data == big);
        auto missing = co_await sb->download_to("/app/missing", got.sink());
        EXPECT_TRUE(missing && missing->error == file_error::file_not_found);
        ByteSink stop = [](std::string_view) -> asio::awaitable<bool> { co_return false; };
        auto stopped = co_await sb->download_to("/app/big.dat", stop);
        EXPECT_TRUE(!stopped && stopped.error().is(errc::cancelled));
        auto again = co_await sb->execute("echo still");
        EXPECT_TRUE(again && again->output == "still\n");
        std::size_t at = 0;
        ByteSource source = [&]() -> asio::awaitable<Result<std::string_view>> {
            std::string_view piece = std::string_view(binary).substr(at, 100);
            at += piece.size();
            co_return piece;
        };
        auto sent = co_await sb->upload_from("/app/from-source.bin", binary.size(), source);
        EXPECT_TRUE(sent && !sent->error);
        got.data.clear();
        EXPECT_TRUE(co_await sb->download_to("/app/from-source.bin", got.sink()));
        EXPECT_TRUE(got.data == binary);
        co_await remove("rt-files");
    });
}

// Forwards to a connection and notes each request's method and target.
class CountingConnection final : public RouterConnection, public RouterConnection::Impl {
public:
    explicit CountingConnection(std::shared_ptr<RouterConnection> to) : to_(std::move(to)) {}
    std::string describe() const override { return to_->describe(); }
    RouterConnection::Impl& impl() override { return *this; }
    asio::awaitable<Result<unsigned>> send(RouterRequest request, std::chrono::steady_clock::time_point deadline,
                                           ResponseSink& sink) override {
        sent.push_back(request.method + " " + request.target);
        co_return co_await to_->impl().send(std::move(request), deadline, sink);
    }
    std::vector<std::string> sent;

private:
    std::shared_ptr<RouterConnection> to_;
};

// The runtime's own listing and existence answers, for the base and below it; links followed,
// and refused where they lead out of the base.
TEST_F(RouterSandboxTest, TheRuntimeListsAndTellsWhatExists) {
    run([&]() -> asio::awaitable<void> {
        auto sb = co_await sandbox("rt-views");
        if (!sb) co_return;
        auto made = co_await sb->execute(
            "mkdir -p /app/v/sub && printf 12345 > /app/v/a.txt && printf x > '/app/v/\xc3\xbc n' && "
            "ln -s /etc /app/v/out && ln -s a.txt /app/v/link");
        EXPECT_TRUE(made && made->exit_code == 0) << (made ? made->output : made.error().describe());
        auto listed = co_await sb->list_directory("/app/v");
        EXPECT_TRUE(listed.has_value()) << (listed ? "" : listed.error().describe());
        if (listed) {
            std::vector<RuntimeEntry> entries = *listed;
            std::sort(entries.begin(), entries.end(), [](auto& a, auto& b) { return a.name < b.name; });
            std::string seen;
            for (const auto& e : entries)
                seen += e.name + ":" + std::to_string(e.size) + (e.is_directory ? ":d" : ":f") + " ";
            // Links are followed: "out" is /etc's directory, "link" the file it names.
            EXPECT_EQ(seen.substr(0, seen.find(" out:")), "a.txt:5:f link:5:f");
            EXPECT_EQ(entries.size(), 5u) << seen;
            if (entries.size() == 5) {
                EXPECT_TRUE(entries[2].name == "out" && entries[2].is_directory) << seen;
                EXPECT_TRUE(entries[3].name == "sub" && entries[3].is_directory) << seen;
                EXPECT_TRUE(entries[4].name == "\xc3\xbc n" && entries[4].size == 1) << seen;
                EXPECT_GT(entries[0].mod_time, 1.7e9);
            }
        }
        auto base = co_await sb->list_directory("/app");
        EXPECT_TRUE(base && std::any_of(base->begin(), base->end(), [](auto& e) { return e.name == "v"; }));
        auto file = co_await sb->list_directory("/app/v/a.txt");
        EXPECT_TRUE(!file && file.error().code == errc::not_found) << (file ? "listed" : file.error().describe());
        auto escape = co_await sb->list_directory("/app/v/out");
        EXPECT_TRUE(!escape && escape.error().code == errc::forbidden)
            << (escape ? "listed" : escape.error().describe());
        for (std::string outside : {"/tmp", "/app/v/../v", "relative", "/app/a%2Fb"}) {
            auto refused = co_await sb->list_directory(outside);
            EXPECT_TRUE(!refused && refused.error().code == errc::invalid_argument) << outside;
        }

        EXPECT_EQ(co_await sb->exists("/app/v/a.txt"), true);
        EXPECT_EQ(co_await sb->exists("/app/v/\xc3\xbc n"), true);
        EXPECT_EQ(co_await sb->exists("/app/v/sub/"), true);
        EXPECT_EQ(co_await sb->exists("/app/v/none"), false);
        EXPECT_EQ(co_await sb->exists("/app"), true);
        auto out = co_await sb->exists("/app/v/out/passwd");
        EXPECT_TRUE(!out && out.error().code == errc::forbidden) << (out ? "answered" : out.error().describe());
        auto tmp = co_await sb->exists("/tmp");
        EXPECT_TRUE(!tmp && tmp.error().code == errc::invalid_argument);
    });
}

// Files over a MiB go out as they are read, and come back as they arrive: below the base over
// HTTP, elsewhere and through a link out of the base by commands, with raw mode's per-file
// errors and no size limit.
TEST_F(RouterSandboxTest, LargeFilesStreamWhereverTheyAre) {
    options_.max_file_bytes = 1024;
    run([&]() -> asio::awaitable<void> {
        auto sb = co_await sandbox("rt-stream");
        if (!sb) co_return;
        auto big = std::make_shared<std::string>(3 * 1024 * 1024 + 7, '\0');
        for (std::size_t i = 0; i < big->size(); ++i) (*big)[i] = static_cast<char>(i * 31 + i / 4099);
        auto counting = std::make_shared<CountingConnection>(test::local_router(*cluster_, io_.get_executor()));
        RouterSandbox writer(counting, sb->options());
        auto prepared = co_await sb->execute("mkdir -p /app/dir /tmp/real && ln -s /tmp/real/t.bin /app/link.bin");
        EXPECT_TRUE(prepared && prepared->exit_code == 0);
        // Each request as its method and first path segment.
        auto requests = [&] {
            std::vector<std::string> kinds;
            for (const auto& r : counting->sent) kinds.push_back(r.substr(0, r.find('/', r.find('/') + 1)));
            counting->sent.clear();
            return kinds;
        };
        auto times = [](std::size_t n, const std::string& request, std::vector<std::string> after = {}) {
            after.insert(after.end(), n, request);
            return after;
        };
        const std::string execute = "POST /execute", upload = "POST /upload", download = "GET /download";
        struct Case {
            std::string path;
            std::vector<std::string> up, down;
        };
        const std::vector<Case> cases = {
            // Over HTTP: an empty upload asks, then the body goes out as it is read.
            {"/app/s/big $x.bin", {upload, upload}, {download}},
            // Commands: 49 pieces of 64 KiB up, 4 of a MiB down.
            {"/tmp/out side/'q' $x.bin", times(49, execute), times(4, execute)},
            // Refused by the runtime, so commands, which follow the link as raw mode does.
            {"/app/link.bin", times(49, execute, {upload}), times(4, execute, {download})},
        };
        for (const auto& [path, up_requests, down_requests] : cases) {
            requests();
            auto up = co_await writer.upload_from(path, big->size(), test::uneven_pieces(big));
            EXPECT_TRUE(up && !up->error) << path << ": " << (up ? up->error.value_or("") : up.error().describe());
            EXPECT_EQ(requests(), up_requests) << path;
            test::CollectedBytes got;
            auto down = co_await writer.download_to(path, got.sink());
            EXPECT_TRUE(down && !down->error && got.data == *big) << path << ": " << got.data.size();
            EXPECT_EQ(requests(), down_requests) << path;
        }
        auto through = co_await sb->execute("[ -L /app/link.bin ] && wc -c < /tmp/real/t.bin");
        EXPECT_TRUE(through && through->output == std::to_string(big->size()) + "\n");
        // By commands: a whole number of pieces, an empty file, raw mode's errors, a sink that stops.
        auto made = co_await sb->execute("head -c 2097152 /tmp/real/t.bin > /tmp/two && : > /tmp/empty");
        EXPECT_TRUE(made && made->exit_code == 0);
        test::CollectedBytes two, empty;
        auto whole = co_await writer.download_to("/tmp/two", two.sink());
        EXPECT_TRUE(whole && !whole->error && two.data == big->substr(0, 2097152));
        EXPECT_EQ(requests(), times(2, execute));  // the size says when it is all there
        auto none = co_await writer.download_to("/tmp/empty", empty.sink());
        EXPECT_TRUE(none && !none->error && empty.data.empty());
        auto folder_down = co_await writer.download_to("/tmp/real", empty.sink());
        EXPECT_TRUE(folder_down && folder_down->error == file_error::is_directory);
        auto missing_down = co_await writer.download_to("/tmp/missing", empty.sink());
        EXPECT_TRUE(missing_down && missing_down->error == file_error::file_not_found);
        // No size to stop at: refused, not read until a deadline.
        auto device = co_await writer.download_to("/dev/zero", empty.sink());
        EXPECT_TRUE(device && device->error && device->error->find("not a regular file") != std::string::npos)
            << (device ? device->error.value_or("no error") : device.error().describe());
        ByteSink stop = [](std::string_view) -> asio::awaitable<bool> { co_return false; };
        auto stopped = co_await writer.download_to("/tmp/two", stop);
        EXPECT_TRUE(!stopped && stopped.error().is(errc::cancelled));
        EXPECT_EQ(requests().size(), 5u);  // the stop ended it after one piece
        auto folder = co_await sb->upload_from("/app/dir", big->size(), test::uneven_pieces(big));
        EXPECT_TRUE(folder && folder->error == file_error::is_directory);
        auto read_only = co_await sb->upload_from("/etc/big", big->size(), test::uneven_pieces(big));
        EXPECT_TRUE(read_only && read_only->error == file_error::permission_denied);

        // A failing source, and one shorter than announced: their errors, and the sandbox goes on.
        ByteSource failing = [big, calls = 0]() mutable -> asio::awaitable<Result<std::string_view>> {
            if (calls++ < 2) co_return std::string_view(*big).substr(0, 1024 * 1024);
            co_return fail(errc::io_error, "local disk gone");
        };
        auto failed = co_await sb->upload_from("/app/failing.bin", big->size(), failing);
        EXPECT_TRUE(!failed && failed.error().is(errc::io_error));
        auto short_one = co_await sb->upload_from("/app/short.bin", big->size() + 1, test::uneven_pieces(big));
        EXPECT_TRUE(!short_one && short_one.error().is(errc::invalid_argument));
        auto still = co_await sb->execute("echo fine");
        EXPECT_TRUE(still && still->output == "fine\n");
        co_await remove("rt-stream");
    });
}

// The local router relays a body as it arrives and the runtime spools it, so a body that breaks
// off leaves the target as it was (python-runtime writes only once its form parser has read
// the whole body); and a request the router refuses keeps its connection when its body is read.
TEST_F(RouterSandboxTest, ABodyThatBreaksOffWritesNothing) {
    run([&]() -> asio::awaitable<void> {
        auto sb = co_await sandbox("rt-cut");
        if (!sb) co_return;
        std::vector<std::pair<std::string, std::string>> before{{"/app/kept.bin", "before\n"}};
        auto put = co_await sb->upload_files(before);
        EXPECT_TRUE(put && put->size() == 1 && !(*put)[0].error);
        const std::string common = "Host: router\r\nAuthorization: Bearer " + cluster_->token() + "\r\n";
        auto t = asio::as_tuple(asio::use_awaitable);
        // The runtime's spool shows among its descriptors as an unlinked file below /app.
        const std::string count_spools =
            "for f in /proc/[0-9]*/fd/*; do readlink \"$f\"; done 2>/dev/null | grep -c '^/app/#.*(deleted)'";
        auto spools = [&]() -> asio::awaitable<std::string> {
            auto r = co_await sb->execute(count_spools);
            co_return r ? r->output : r.error().describe();
        };
        {
            auto socket = co_await connect_to_router(cluster_->router_url());
            const std::string part =
                "--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"kept.bin\"\r\n\r\n";
            const std::size_t announced = part.size() + (8u << 20) + std::string("\r\n--B--\r\n").size();
            std::string request = "POST /upload HTTP/1.1\r\n" + common +
                                  "X-Sandbox-ID: rt-cut\r\nContent-Type: multipart/form-data; boundary=B\r\n"
                                  "Content-Length: " +
                                  std::to_string(announced) + "\r\n\r\n" + part + std::string(3u << 20, 'z');
            auto [ec, n] = co_await asio::async_write(socket, asio::buffer(request), t);
            EXPECT_FALSE(ec) << ec.message();
            // Three MiB of eight reached the runtime: spooled, the target untouched.
            std::string open_spools;
            for (int i = 0; i < 200; ++i) {
                open_spools = co_await spools();
                if (open_spools == "1\n") break;
                co_await test::sleep_for(25ms);
            }
            EXPECT_EQ(open_spools, "1\n");
            auto midway = co_await sb->execute("cat /app/kept.bin");
            EXPECT_TRUE(midway && midway->output == "before\n");
        }  // and the client goes away
        std::string open_spools;
        for (int i = 0; i < 200; ++i) {
            open_spools = co_await spools();
            if (open_spools == "0\n") break;
            co_await test::sleep_for(25ms);
        }
        EXPECT_EQ(open_spools, "0\n");  // the runtime saw the body end short and dropped it
        auto kept = co_await sb->execute("cat /app/kept.bin; ls -A /app");
        EXPECT_TRUE(kept && kept->output == "before\nkept.bin\n")
            << (kept ? kept->output.substr(0, 200) : kept.error().describe());

        // A chunked body whose last chunk comes on its own, then a second request on the same
        // connection: both relayed whole.
        {
            auto socket = co_await connect_to_router(cluster_->router_url());
            const std::string body =
                "--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"chunked.txt\"\r\n\r\n"
                "in two chunks\r\n--B--\r\n";
            char size_line[16];
            std::snprintf(size_line, sizeof size_line, "%zx\r\n", body.size());
            std::string head = "POST /upload HTTP/1.1\r\n" + common +
                               "X-Sandbox-ID: rt-cut\r\nContent-Type: multipart/form-data; boundary=B\r\n"
                               "Transfer-Encoding: chunked\r\n\r\n" +
                               size_line + body + "\r\n";
            auto [ec, n] = co_await asio::async_write(socket, asio::buffer(head), t);
            EXPECT_FALSE(ec);
            co_await test::sleep_for(100ms);
            std::string rest =
                "0\r\n\r\nGET /exists/chunked.txt HTTP/1.1\r\n" + common + "X-Sandbox-ID: rt-cut\r\n\r\n";
            std::tie(ec, n) = co_await asio::async_write(socket, asio::buffer(rest), t);
            EXPECT_FALSE(ec);
            std::string buffer;
            auto [up_head, up_body] = co_await read_response(socket, buffer);
            EXPECT_TRUE(up_head.starts_with("HTTP/1.1 200")) << up_head << up_body;
            EXPECT_EQ(up_body, R"({"message":"File 'chunked.txt' uploaded successfully."})");
            auto [exists_head, exists_body] = co_await read_response(socket, buffer);
            EXPECT_TRUE(exists_head.starts_with("HTTP/1.1 200")) << exists_head;
            EXPECT_NE(exists_body.find("true"), std::string::npos) << exists_body;
            auto content = co_await sb->execute("cat /app/chunked.txt");
            EXPECT_TRUE(content && content->output == "in two chunks");
        }

        // Refused with its body read: the same connection goes on.
        auto socket = co_await connect_to_router(cluster_->router_url());
        std::string refused = "POST /execute HTTP/1.1\r\n" + common +
                              "X-Sandbox-ID: Not_A_Name\r\nContent-Type: application/json\r\n"
                              "Content-Length: 18\r\n\r\n{\"command\":\"true\"}"
                              "GET /healthz HTTP/1.1\r\nHost: router\r\n\r\n";
        auto [ec, n] = co_await asio::async_write(socket, asio::buffer(refused), t);
        EXPECT_FALSE(ec);
        std::string buffer;
        auto [head, body] = co_await read_response(socket, buffer);
        EXPECT_TRUE(head.starts_with("HTTP/1.1 400")) << head;
        EXPECT_EQ(body, R"({"detail":"Invalid sandbox ID format."})");
        auto [health_head, health_body] = co_await read_response(socket, buffer);
        EXPECT_TRUE(health_head.starts_with("HTTP/1.1 200")) << health_head;
        EXPECT_EQ(health_body, R"({"status":"ok"})");

        // Refused with more body than the router reads to keep a connection: the answer still
        // arrives whole (the router reads on before it closes), then the connection ends.
        // Written whole before the answer is read: the router reads on after it has answered.
        auto big = co_await connect_to_router(cluster_->router_url());
        const std::string unroutable = "POST /execute HTTP/1.1\r\n" + common +
                                       "X-Sandbox-ID: no-such-sandbox\r\nContent-Length: " + std::to_string(3u << 20) +
                                       "\r\n\r\n" + std::string(3u << 20, ' ');
        std::tie(ec, n) = co_await asio::async_write(big, asio::buffer(unroutable), t);
        EXPECT_FALSE(ec) << ec.message();
        std::string big_buffer;
        auto [refused_head, refused_body] = co_await read_response(big, big_buffer);
        EXPECT_TRUE(refused_head.starts_with("HTTP/1.1 502")) << refused_head;
        EXPECT_NE(refused_head.find("Connection: close"), std::string::npos) << refused_head;
        EXPECT_EQ(refused_body, R"({"detail":"Could not connect to the backend sandbox: no-such-sandbox"})");
        char end[64];
        auto [end_ec, end_n] = co_await big.async_read_some(asio::buffer(end), t);
        EXPECT_EQ(end_ec, asio::error::eof);
        co_await remove("rt-cut");
    });
}

}  // namespace
