// SandboxTest, files and streams: uploads and downloads, output into a sink (run's and execute's),
// input through v5's close (sandbox_fixture.hpp).
#include "sandbox_fixture.hpp"

#include "../support/byte_pieces.hpp"

#include <algorithm>

namespace {
using namespace kubesandbox;
using namespace kubesandbox::test::sandbox;
using kubesandbox::test::sleep_for;

// A download stops reading at the file limit: /dev/zero costs the limit, not all memory.
TEST_F(SandboxTest, TransfersStopAtTheFileLimit) {
    with_sandbox([&](PodExecSandbox& sandbox) -> asio::awaitable<void> {
        PodExecSandboxOptions opts;
        opts.max_file_bytes = 1024 * 1024;
        PodExecSandbox s(client(), sandbox.namespace_name(), sandbox.pod_name(), opts);
        std::string exact(opts.max_file_bytes, 'x');
        std::vector<std::pair<std::string, std::string>> files{{"/workspace/exact", exact},
                                                               {"/workspace/over", exact + "y"}};
        auto up = co_await s.upload_files(files);
        EXPECT_TRUE(up && up->size() == 2);
        if (up && up->size() == 2) {
            EXPECT_FALSE((*up)[0].error) << *(*up)[0].error;
            EXPECT_EQ((*up)[1].error, file_error::file_too_large);
        }
        auto start = std::chrono::steady_clock::now();
        std::vector<std::string> paths{"/dev/zero", "/workspace/exact", "/workspace/over"};
        auto down = co_await s.download_files(paths);
        EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);
        EXPECT_TRUE(down && down->size() == 3);
        if (down && down->size() == 3) {
            EXPECT_EQ((*down)[0].error, file_error::file_too_large);
            EXPECT_FALSE((*down)[0].content);
            EXPECT_TRUE((*down)[1].content && *(*down)[1].content == exact);
            EXPECT_EQ((*down)[2].error, file_error::file_not_found);  // never written
        }
    });
}

TEST_F(SandboxTest, FilesRoundTripByteExactWithHostileNames) {
    with_sandbox([&](PodExecSandbox& s) -> asio::awaitable<void> {
        std::string all_bytes;
        for (int i = 0; i < 256 * 64; ++i) all_bytes.push_back(static_cast<char>(i % 256));
        const std::vector<std::string> names = {
            "/workspace/deep/er/plain.bin", "/workspace/dir with space/$HOME `id` \"q\" 'x'.bin",
            "/workspace/-leading-dash",     "/workspace/new\nline",
            "/tmp/../workspace/dots..bin",
        };
        std::vector<std::pair<std::string, std::string>> files;
        for (const auto& n : names) files.emplace_back(n, all_bytes + n);
        files.emplace_back("relative/path", "x");
        files.emplace_back("/etc/hosts", "x");  // read-only root: permission denied
        files.emplace_back("/workspace", "x");  // a directory
        auto up = co_await s.upload_files(files);
        EXPECT_TRUE(up.has_value());
        if (!up) co_return;
        EXPECT_EQ(up->size(), files.size());
        for (std::size_t i = 0; i < names.size(); ++i) {
            EXPECT_EQ((*up)[i].path, names[i]);
            EXPECT_FALSE((*up)[i].error.has_value()) << names[i] << ": " << (*up)[i].error.value_or("");
        }
        EXPECT_EQ((*up)[names.size()].error, std::optional<std::string>("invalid_path"));
        EXPECT_EQ((*up)[names.size() + 1].error, std::optional<std::string>("permission_denied"));
        EXPECT_EQ((*up)[names.size() + 2].error, std::optional<std::string>("is_directory"));

        co_await s.execute("touch /workspace/secret && chmod 000 /workspace/secret");
        std::vector<std::string> wanted = names;
        wanted.push_back("/workspace/missing");
        wanted.push_back("/workspace");
        wanted.push_back("rel");
        wanted.push_back("/workspace/secret");
        auto down = co_await s.download_files(wanted);
        EXPECT_TRUE(down.has_value());
        if (!down) co_return;
        EXPECT_EQ(down->size(), wanted.size());
        for (std::size_t i = 0; i < names.size(); ++i) {
            EXPECT_TRUE((*down)[i].content.has_value()) << names[i];
            if ((*down)[i].content) {
                EXPECT_TRUE(*(*down)[i].content == all_bytes + names[i]) << names[i];
            }
        }
        EXPECT_EQ((*down)[names.size()].error, std::optional<std::string>("file_not_found"));
        EXPECT_EQ((*down)[names.size() + 1].error, std::optional<std::string>("is_directory"));
        EXPECT_EQ((*down)[names.size() + 2].error, std::optional<std::string>("invalid_path"));
        EXPECT_EQ((*down)[names.size() + 3].error, std::optional<std::string>("permission_denied"));
        // Nothing was executed by the names themselves.
        auto check = co_await s.execute("ls /workspace | wc -l");
        EXPECT_TRUE(check && check->exit_code == 0);
    });
}

// The command exits without reading its stdin: the cluster's writes of the rest meet a closed
// pipe. That is an error for this upload only (EPIPE), never a SIGPIPE that ends the process.
TEST_F(SandboxTest, LargeUploadToAPathThatFailsEarlyLosesNothingElse) {
    with_sandbox([&](PodExecSandbox& s) -> asio::awaitable<void> {
        const std::string big(8 * 1024 * 1024, 'z');  // far beyond a pipe's buffer
        for (int round = 0; round < 3; ++round) {
            std::vector<std::pair<std::string, std::string>> files{{"/workspace", big}, {"/etc/hosts", big}};
            auto up = co_await s.upload_files(files);
            EXPECT_TRUE(up.has_value()) << (up ? "" : up.error().describe());
            if (!up) co_return;
            EXPECT_EQ((*up)[0].error, std::optional<std::string>("is_directory"));
            EXPECT_EQ((*up)[1].error, std::optional<std::string>("permission_denied"));
        }
        auto after = co_await s.execute("echo alive");
        EXPECT_TRUE(after && after->output == "alive\n");
    });
}

// run() with an output sink: 64 MiB of stdout arrive in order and byte-exact without being
// collected (far past max_output_bytes), stderr apart; while the sink waits, the command is held
// back rather than buffered; a sink that says stop ends the command in the pod.
TEST_F(SandboxTest, OutputStreamsIntoASinkWithBackPressureAndStop) {
    with_sandbox([&](PodExecSandbox& s) -> asio::awaitable<void> {
        PodExecSandbox raw(client(), s.namespace_name(), s.pod_name(), PodExecSandboxOptions{});
        const std::string pattern = "0123456789abcde\n";
        const std::size_t total = 64u << 20;
        std::size_t received = 0, mismatches = 0, pieces = 0;
        std::string err;
        std::optional<std::string> finished_while_held;
        OutputSink sink = [&](int stream, std::string_view data) -> asio::awaitable<bool> {
            if (stream == 2) {
                err.append(data);
                co_return true;
            }
            for (char c : data)
                if (c != pattern[received++ % pattern.size()]) ++mismatches;
            if (++pieces == 1) {
                // Held for a second: the command cannot have written all 64 MiB meanwhile.
                co_await test::sleep_for(1000ms);
                auto check = co_await raw.execute("test -e /workspace/streamed && echo finished || echo held");
                finished_while_held = check ? check->output : "check failed";
            }
            co_return true;
        };
        std::vector<std::string> argv{"sh", "-c",
                                      "rm -f /workspace/streamed; yes 0123456789abcde | head -c " +
                                          std::to_string(total) + "; touch /workspace/streamed; echo done >&2"};
        std::string no_input;
        auto r = co_await raw.run(argv, no_input, std::chrono::seconds(120), sink);
        EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().message);
        if (r) {
            EXPECT_EQ(r->exit_code, 0);
            EXPECT_TRUE(r->stdout_data.empty() && r->stderr_data.empty() && !r->truncated && !r->stopped);
        }
        EXPECT_EQ(received, total);
        EXPECT_EQ(mismatches, 0u);
        EXPECT_EQ(err, "done\n");
        EXPECT_EQ(finished_while_held, std::optional<std::string>("held\n"));

        // Stop after the first piece: the endless command is killed in the pod.
        OutputSink stop = [](int, std::string_view) -> asio::awaitable<bool> { co_return false; };
        std::vector<std::string> endless{"sh", "-c", "yes 4242 | cat"};
        auto stopped = co_await raw.run(endless, no_input, std::chrono::seconds(60), stop);
        EXPECT_TRUE(stopped && stopped->stopped && !stopped->exit_code);
        auto left = co_await raw.execute("ps | grep -c '[y]es 4242'");
        EXPECT_TRUE(left && left->output == "0\n") << (left ? left->output : left.error().message);

        // A sink that throws: the command is killed first, then the exception reaches the caller.
        OutputSink throws = [](int, std::string_view) -> asio::awaitable<bool> {
            throw std::runtime_error("sink failed");
            co_return true;
        };
        std::vector<std::string> endless2{"sh", "-c", "yes 4243 | cat"};
        std::string thrown;
        try {
            co_await raw.run(endless2, no_input, std::chrono::seconds(60), throws);
        } catch (const std::runtime_error& e) {
            thrown = e.what();
        }
        EXPECT_EQ(thrown, "sink failed");
        auto left2 = co_await raw.execute("ps | grep -c '[y]es 4243'");
        EXPECT_TRUE(left2 && left2->output == "0\n") << (left2 ? left2->output : left2.error().message);
    });
}

// execute() into a sink, through the Sandbox interface: the shell command's output streams past
// max_output_bytes, stdout and stderr apart, with the exit code; a timeout kills it and keeps the
// message; a sink that says stop ends the command in the pod with errc::cancelled.
TEST_F(SandboxTest, ExecuteHandsItsOutputToASinkAsItArrives) {
    with_sandbox([&](PodExecSandbox& s) -> asio::awaitable<void> {
        Sandbox& sandbox = s;
        std::size_t out = 0, xs = 0;
        std::string err;
        OutputSink sink = [&](int stream, std::string_view data) -> asio::awaitable<bool> {
            if (stream == 2) err.append(data);
            else out += data.size(), xs += static_cast<std::size_t>(std::count(data.begin(), data.end(), 'x'));
            co_return true;
        };
        const std::size_t total = 3 * s.options().max_output_bytes + 11;
        auto r = co_await sandbox.execute(
            "head -c " + std::to_string(total) + " /dev/zero | tr '\\0' x; echo \"$PWD\" >&2; exit 7",
            std::chrono::seconds(60), sink);
        EXPECT_TRUE(r && r->exit_code == 7 && r->output.empty() && !r->truncated)
            << (r ? r->output : r.error().describe());
        EXPECT_EQ(out, total);
        EXPECT_EQ(xs, total);
        EXPECT_EQ(err, "/workspace\n");  // the shell's working directory, as execute's

        err.clear();
        auto late = co_await sandbox.execute("sleep 371; echo never", std::chrono::seconds(1), sink);
        EXPECT_TRUE(late && late->exit_code == 124 && late->output == "Command timed out after 1 seconds")
            << (late ? late->output : late.error().describe());
        EXPECT_EQ(co_await processes_left(s, "sleep 371"), "");

        OutputSink stop = [](int, std::string_view) -> asio::awaitable<bool> { co_return false; };
        auto stopped = co_await sandbox.execute("yes 4244 | cat", std::chrono::seconds(60), stop);
        EXPECT_TRUE(!stopped && stopped.error().is(errc::cancelled))
            << (stopped ? stopped->output : stopped.error().describe());
        EXPECT_EQ(co_await processes_left(s, "yes 4244"), "");
    });
}

TEST_F(SandboxTest, StdinStreamsThroughV5Close) {
    with_sandbox([&](PodExecSandbox& s) -> asio::awaitable<void> {
        std::string input(3 * 1024 * 1024 + 7, 'z');
        input[12345] = '\0';
        PodExecSandboxOptions opts;
        opts.max_output_bytes = 8 * 1024 * 1024;
        PodExecSandbox raw(client(), s.namespace_name(), s.pod_name(), opts);
        std::vector<std::string> argv{"cat"};
        auto r = co_await raw.run(argv, input, std::chrono::seconds(60));
        EXPECT_TRUE(r.has_value());
        if (r) {
            EXPECT_EQ(r->exit_code, 0);
            EXPECT_TRUE(r->stdout_data == input);
            EXPECT_TRUE(r->stderr_data.empty());
        }
    });
}

// Files stream in and out through execs of their own, whatever their size and max_file_bytes,
// with the per-file errors upload_files and download_files give; a source that misreports its
// size or fails, and a sink that stops, end the transfer with an error.
TEST_F(SandboxTest, FilesStreamInAndOutInPieces) {
    with_sandbox([&](PodExecSandbox& s) -> asio::awaitable<void> {
        PodExecSandboxOptions small_limit = s.options();
        small_limit.max_file_bytes = 1024;
        PodExecSandbox box(client(), s.namespace_name(), s.pod_name(), small_limit);
        auto big = std::make_shared<std::string>(9 * 1024 * 1024 + 3, '\0');
        for (std::size_t i = 0; i < big->size(); ++i) (*big)[i] = static_cast<char>(i * 31 + i / 4099);
        const std::string path = "/workspace/streams/big $x 'q'.bin";
        auto up = co_await box.upload_from(path, big->size(), test::uneven_pieces(big));
        EXPECT_TRUE(up && !up->error && up->path == path) << (up ? up->error.value_or("") : up.error().describe());
        test::CollectedBytes got;
        auto down = co_await box.download_to(path, got.sink());
        EXPECT_TRUE(down && !down->error && !down->content)
            << (down ? down->error.value_or("") : down.error().describe());
        EXPECT_EQ(got.data.size(), big->size());
        EXPECT_TRUE(got.data == *big);
        EXPECT_GT(got.pieces, 1);

        auto empty = std::make_shared<const std::string>();
        EXPECT_TRUE(co_await box.upload_from("/workspace/streams/empty", 0, test::uneven_pieces(empty)));
        got.data.clear();
        auto none = co_await box.download_to("/workspace/streams/empty", got.sink());
        EXPECT_TRUE(none && !none->error && got.data.empty());

        auto missing = co_await box.download_to("/workspace/streams/missing", got.sink());
        EXPECT_TRUE(missing && missing->error == file_error::file_not_found);
        auto folder = co_await box.download_to("/workspace/streams", got.sink());
        EXPECT_TRUE(folder && folder->error == file_error::is_directory);
        auto relative = co_await box.download_to("streams/x", got.sink());
        EXPECT_TRUE(relative && relative->error == file_error::invalid_path);
        auto read_only =
            co_await box.upload_from("/etc/hosts", 3, test::uneven_pieces(std::make_shared<std::string>("abc")));
        EXPECT_TRUE(read_only && read_only->error == file_error::permission_denied);

        auto short_one = co_await box.upload_from("/workspace/streams/short", 100,
                                                  test::uneven_pieces(std::make_shared<std::string>("abc")));
        EXPECT_TRUE(!short_one && short_one.error().is(errc::invalid_argument));
        ByteSource broken = []() -> asio::awaitable<Result<std::string_view>> {
            co_return fail(errc::io_error, "local disk gone");
        };
        auto failed = co_await box.upload_from("/workspace/streams/broken", 10, broken);
        EXPECT_TRUE(!failed && failed.error().is(errc::io_error));
        ByteSink stop = [](std::string_view) -> asio::awaitable<bool> { co_return false; };
        auto stopped = co_await box.download_to(path, stop);
        EXPECT_TRUE(!stopped && stopped.error().is(errc::cancelled));
        auto still = co_await box.execute("echo fine");
        EXPECT_TRUE(still && still->output == "fine\n");
    });
}

}  // namespace
