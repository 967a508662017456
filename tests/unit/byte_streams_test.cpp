// Sandbox::upload_from, download_to and execute into a sink as every sandbox gets them (through
// upload_files, download_files and execute), the source held to its size, and PolicySandbox in
// front of them; over a sandbox that keeps its files in memory.
#include "sandbox/byte_streams.hpp"
#include "../support/byte_pieces.hpp"
#include "../support/run_test.hpp"

#include <kubesandbox/file_policy.hpp>

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace {

using namespace kubesandbox;
namespace asio = boost::asio;
using namespace std::chrono_literals;

// Files in a map; execute answers the commands in `answers_`, and no other.
class MemorySandbox final : public Sandbox {
public:
    const std::string& id() const override { return id_; }
    using Sandbox::execute;
    asio::awaitable<Result<ExecuteResponse>> execute(std::string command,
                                                     std::optional<std::chrono::seconds>) override {
        auto it = answers_.find(command);
        if (it == answers_.end()) co_return fail(errc::unsupported, "no command " + command + " here");
        co_return it->second;
    }
    std::map<std::string, ExecuteResponse> answers_;
    asio::awaitable<Result<std::vector<FileUploadResponse>>> upload_files(
        std::vector<std::pair<std::string, std::string>> files) override {
        std::vector<FileUploadResponse> out;
        for (auto& [path, content] : files) {
            out.push_back({path, std::nullopt});
            files_[path] = std::move(content);
        }
        co_return out;
    }
    asio::awaitable<Result<std::vector<FileDownloadResponse>>> download_files(std::vector<std::string> paths) override {
        std::vector<FileDownloadResponse> out;
        for (auto& p : paths) {
            auto it = files_.find(p);
            if (it == files_.end()) out.push_back({p, std::nullopt, file_error::file_not_found});
            else out.push_back({p, it->second, std::nullopt});
        }
        co_return out;
    }
    std::map<std::string, std::string> files_;

private:
    std::string id_{"memory/1"};
};

// Gives `text` in pieces of 1, 2, 3, ... bytes.
ByteSource pieces_of(std::string text) {
    auto state = std::make_shared<std::pair<std::string, std::size_t>>(std::move(text), 0);
    auto size = std::make_shared<std::size_t>(1);
    return [state, size]() -> asio::awaitable<Result<std::string_view>> {
        auto& [all, at] = *state;
        std::string_view piece = std::string_view(all).substr(at, (*size)++);
        at += piece.size();
        co_return piece;
    };
}

template <class Body>
void run(Body body) {
    asio::io_context io;
    kubesandbox::test::run_coroutine_test(io, body, 10s);
}

TEST(ByteStreams, ASourceIsHeldToItsSize) {
    run([]() -> asio::awaitable<void> {
        auto exact = co_await sandbox::collect(pieces_of("hello, world"), 12);
        EXPECT_TRUE(exact && *exact == "hello, world");
        auto empty = co_await sandbox::collect(pieces_of(""), 0);
        EXPECT_TRUE(empty && empty->empty());
        auto short_one = co_await sandbox::collect(pieces_of("hello"), 6);
        EXPECT_TRUE(!short_one && short_one.error().is(errc::invalid_argument));
        auto long_one = co_await sandbox::collect(pieces_of("hello, world"), 11);
        EXPECT_TRUE(!long_one && long_one.error().is(errc::invalid_argument));
        ByteSource broken = []() -> asio::awaitable<Result<std::string_view>> {
            co_return fail(errc::io_error, "disk gone");
        };
        auto failed = co_await sandbox::collect(broken, 3);
        EXPECT_TRUE(!failed && failed.error().is(errc::io_error));
    });
}

// Every piece taken out of a source, as strings.
asio::awaitable<std::vector<std::string>> drain(ByteSource source) {
    std::vector<std::string> pieces;
    for (;;) {
        auto piece = co_await source();
        EXPECT_TRUE(piece);
        if (!piece || piece->empty()) co_return pieces;
        pieces.emplace_back(*piece);
    }
}

TEST(ByteStreams, RegroupedAndFramedSources) {
    run([]() -> asio::awaitable<void> {
        // 1+2+3+4+5 bytes in pieces of 4: 4, 4, 4, 3.
        auto fours = co_await drain(sandbox::regrouped(pieces_of("abcdefghijklmno"), 4));
        EXPECT_EQ(fours, (std::vector<std::string>{"abcd", "efgh", "ijkl", "mno"}));
        // An empty source: one empty piece (so a writer still makes the empty file), then the end.
        auto none = sandbox::regrouped(pieces_of(""), 4);
        auto first = co_await none();
        EXPECT_TRUE(first && first->empty());
        auto exact = co_await drain(sandbox::regrouped(pieces_of("abcdef"), 3));
        EXPECT_EQ(exact, (std::vector<std::string>{"abc", "def"}));

        auto framed = co_await drain(sandbox::framed("<", pieces_of("abc"), ">"));
        EXPECT_EQ(framed, (std::vector<std::string>{"<", "a", "bc", ">"}));
        auto bare = co_await drain(sandbox::framed("", pieces_of(""), ""));
        EXPECT_TRUE(bare.empty());

        // A failing source fails both, and the frame's end is never given.
        ByteSource broken = [calls = 0]() mutable -> asio::awaitable<Result<std::string_view>> {
            if (calls++ == 0) co_return std::string_view("x");
            co_return fail(errc::io_error, "disk gone");
        };
        auto in_frame = sandbox::framed("<", broken, ">");
        EXPECT_TRUE(co_await in_frame());
        EXPECT_TRUE(co_await in_frame());
        auto failed = co_await in_frame();
        EXPECT_TRUE(!failed && failed.error().is(errc::io_error));
        auto grouped = co_await sandbox::regrouped(broken, 4)();
        EXPECT_TRUE(!grouped && grouped.error().is(errc::io_error));
        // Asked again after an error, both give it again: not an end that looks like success,
        // even from a source that would answer "no more" now.
        ByteSource fails_once = [calls = 0]() mutable -> asio::awaitable<Result<std::string_view>> {
            if (calls++ == 0) co_return fail(errc::io_error, "disk gone");
            co_return std::string_view{};
        };
        for (ByteSource wrapped : {sandbox::framed("", fails_once, ">"), sandbox::regrouped(fails_once, 4)}) {
            EXPECT_FALSE(co_await wrapped());
            auto again = co_await wrapped();
            EXPECT_TRUE(!again && again.error().is(errc::io_error));
        }
    });
}

TEST(ByteStreams, EverySandboxStreamsThroughItsFileCalls) {
    run([]() -> asio::awaitable<void> {
        MemorySandbox box;
        std::string big(3 * 1024 * 1024 + 5, '\0');
        for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
        auto up = co_await box.upload_from("/big", big.size(), pieces_of(big));
        EXPECT_TRUE(up && !up->error && up->path == "/big");
        EXPECT_TRUE(box.files_["/big"] == big);

        test::CollectedBytes got;
        auto down = co_await box.download_to("/big", got.sink());
        EXPECT_TRUE(down && !down->error && !down->content);
        EXPECT_TRUE(got.data == big);
        EXPECT_EQ(got.pieces, 4);  // in pieces of a MiB

        EXPECT_TRUE(co_await box.upload_from("/empty", 0, pieces_of("")));
        got = {};
        auto empty = co_await box.download_to("/empty", got.sink());
        EXPECT_TRUE(empty && !empty->error && got.data.empty() && got.pieces == 0);  // no empty piece

        auto missing = co_await box.download_to("/missing", got.sink());
        EXPECT_TRUE(missing && missing->error == file_error::file_not_found);

        ByteSink stop = [](std::string_view) -> asio::awaitable<bool> { co_return false; };
        auto stopped = co_await box.download_to("/big", stop);
        EXPECT_TRUE(!stopped && stopped.error().is(errc::cancelled));

        // A short source writes nothing.
        auto short_one = co_await box.upload_from("/short", 10, pieces_of("12345"));
        EXPECT_FALSE(short_one);
        EXPECT_EQ(box.files_.count("/short"), 0u);
    });
}

TEST(ByteStreams, EverySandboxHandsExecutesOutputToASink) {
    run([]() -> asio::awaitable<void> {
        auto box = std::make_shared<MemorySandbox>();
        const std::string big(2 * 1024 * 1024 + 3, 'x');
        box->answers_["print"] = ExecuteResponse{big, 3, true};
        box->answers_["slow"] = ExecuteResponse{"Command timed out after 5 seconds", 124, false};
        std::string out;
        std::vector<std::pair<int, std::size_t>> pieces;
        OutputSink collect = [&](int stream, std::string_view data) -> asio::awaitable<bool> {
            pieces.emplace_back(stream, data.size());
            out.append(data);
            co_return true;
        };
        auto r = co_await box->execute("print", std::nullopt, collect);
        EXPECT_TRUE(r && r->output.empty() && r->exit_code == 3 && r->truncated);
        EXPECT_TRUE(out == big);
        EXPECT_EQ(pieces, (std::vector<std::pair<int, std::size_t>>{{1, 1048576}, {1, 1048576}, {1, 3}}));
        // A timeout's message stays the response's output.
        pieces.clear();
        r = co_await box->execute("slow", std::nullopt, collect);
        EXPECT_TRUE(r && r->exit_code == 124 && r->output == "Command timed out after 5 seconds" && pieces.empty());
        OutputSink stop = [](int, std::string_view) -> asio::awaitable<bool> { co_return false; };
        r = co_await box->execute("print", std::nullopt, stop);
        EXPECT_TRUE(!r && r.error().is(errc::cancelled));
        r = co_await box->execute("unknown", std::nullopt, collect);
        EXPECT_TRUE(!r && r.error().is(errc::unsupported));

        // In front of it, a policy: a refusal goes to the sink as stderr, and is audited; the rest
        // passes through.
        FilePolicy policy;
        policy.deny_commands = {"rm -rf"};
        std::vector<std::string> audited;
        policy.audit = [&](const AuditEvent& e) -> Result<void> {
            audited.push_back(e.operation + " " + e.target);
            return {};
        };
        PolicySandbox guarded(box, policy);
        pieces.clear();
        out.clear();
        r = co_await guarded.execute("rm -rf /", std::nullopt, collect);
        EXPECT_TRUE(r && r->exit_code == 126 && r->output.empty());
        EXPECT_TRUE(pieces.size() == 1 && pieces[0].first == 2 && out.find("refused by policy") != std::string::npos);
        out.clear();
        r = co_await guarded.execute("print", std::nullopt, collect);
        EXPECT_TRUE(r && r->exit_code == 3 && out == big);
        EXPECT_EQ(audited, (std::vector<std::string>{"execute rm -rf /", "execute print"}));
    });
}

TEST(ByteStreams, APolicyStandsInFrontOfStreamsToo) {
    run([]() -> asio::awaitable<void> {
        auto box = std::make_shared<MemorySandbox>();
        FilePolicy policy;
        policy.allow_prefixes = {"/workspace"};
        policy.resolve_symlinks = false;
        std::vector<std::string> audited;
        policy.audit = [&](const AuditEvent& e) -> Result<void> {
            audited.push_back(e.operation + " " + e.target);
            return {};
        };
        PolicySandbox guarded(box, policy);
        auto denied = co_await guarded.upload_from("/etc/x", 3, pieces_of("abc"));
        EXPECT_TRUE(denied && denied->error == file_error::permission_denied && denied->path == "/etc/x");
        EXPECT_TRUE(box->files_.empty());
        // Written where the check looked.
        auto allowed = co_await guarded.upload_from("/workspace/a/../b", 3, pieces_of("abc"));
        EXPECT_TRUE(allowed && !allowed->error && allowed->path == "/workspace/a/../b");
        EXPECT_EQ(box->files_["/workspace/b"], "abc");
        std::string got;
        auto down = co_await guarded.download_to("/workspace/b", [&](std::string_view d) -> asio::awaitable<bool> {
            got.append(d);
            co_return true;
        });
        EXPECT_TRUE(down && !down->error && got == "abc");
        EXPECT_EQ(audited,
                  (std::vector<std::string>{"upload /etc/x", "upload /workspace/a/../b", "download /workspace/b"}));
    });
}

}  // namespace
