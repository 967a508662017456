// RouterSandbox's file transfers against the local cluster: the runtime's /upload and /download
// below its base directory, commands elsewhere, whole and streamed.
#include <kubesandbox/router_sandbox.hpp>

#include "connection/router_connection.hpp"
#include "router_fixture.hpp"

#include "../support/byte_pieces.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {
namespace asio = boost::asio;
using namespace kubesandbox;
using test::router::RouterSandboxTest;

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

}  // namespace
