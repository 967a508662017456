// The shell session's wire format: requests, the driver's greeting, trailers found in output cut
// at every byte.
#include "sandbox/shell_session_core.hpp"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

namespace {

using kubesandbox::sandbox::command_exec_marker;
using kubesandbox::sandbox::command_trailer;
using kubesandbox::sandbox::encode_shell_request;
using kubesandbox::sandbox::parse_driver_hello;
using kubesandbox::sandbox::TrailerScanner;

const std::string marker = "0123456789abcdef0123456789abcdef";

TEST(ShellSessionCore, RequestPrefixesEveryLineAndEndsWithTheMarkerAndItsNumber) {
    EXPECT_EQ(encode_shell_request("echo a\n\necho 'b\\'\n", "m", 1), "+echo a\n+\n+echo 'b\\'\nm.1\n");
    // A last line without its newline is marked as such, so none is added.
    EXPECT_EQ(encode_shell_request("x", "m", 7), "-x\nm.7\n");
    EXPECT_EQ(encode_shell_request("a\nb\\", "m", 12), "+a\n-b\\\nm.12\n");
    EXPECT_EQ(encode_shell_request("", "m", 3), "m.3\n");
    // A line that looks like the terminator is still a script line.
    EXPECT_EQ(encode_shell_request(".2\n.2", "m", 2), "+.2\n-.2\nm.2\n");
    EXPECT_EQ(encode_shell_request("m.2\n", "m", 2), "+m.2\nm.2\n");
}

TEST(ShellSessionCore, ACommandEndingWithAStoredScriptNamesItByNumber) {
    const std::vector<std::string_view> stored{"ls\n", "tail\n", "x\ntail\n", "y"};
    // The prefix as usual, then the script's number (from 1).
    EXPECT_EQ(encode_shell_request("set -- 'a b'\nls\n", "m", 4, stored), "+set -- 'a b'\n*1\nm.4\n");
    // A prefix without a newline at its end keeps it so: the script follows it at once.
    EXPECT_EQ(encode_shell_request("echo ls\n", "m", 2, stored), "-echo \n*1\nm.2\n");
    EXPECT_EQ(encode_shell_request("ls\n", "m", 1, stored), "*1\nm.1\n");
    // The longest script that ends the command.
    EXPECT_EQ(encode_shell_request("set -- 1\nx\ntail\n", "m", 3, stored), "+set -- 1\n*3\nm.3\n");
    EXPECT_EQ(encode_shell_request("a\ny", "m", 5, stored), "+a\n*4\nm.5\n");
    // No script ends it, or none is kept: the whole command travels.
    EXPECT_EQ(encode_shell_request("ls -l\n", "m", 6, stored), "+ls -l\nm.6\n");
    EXPECT_EQ(encode_shell_request("s\n", "m", 7, stored), "+s\nm.7\n");
    EXPECT_EQ(encode_shell_request("ls\n", "m", 8), "+ls\nm.8\n");
    // A command that reads the bytes sent after its request says so last.
    EXPECT_EQ(encode_shell_request("set -- 1\nls\n", "m", 9, stored, true), "+set -- 1\n*1\n<\nm.9\n");
    EXPECT_EQ(encode_shell_request("cat", "m", 2, {}, true), "-cat\n<\nm.2\n");
    // Empty scripts are never named.
    const std::vector<std::string_view> empty{""};
    EXPECT_EQ(encode_shell_request("ls", "m", 9, empty), "-ls\nm.9\n");
}

TEST(ShellSessionCore, TrailersAndMarkersCountTheSessionsCommands) {
    EXPECT_EQ(command_trailer(marker, 1), marker + ".1");
    EXPECT_EQ(command_trailer("ab", 12345678901ULL), "ab.12345678901");
    EXPECT_EQ(command_exec_marker("9f3a", 1), "9f3a1");
    EXPECT_EQ(command_exec_marker("9f3a", 40), "9f3a40");
}

TEST(ShellSessionCore, GreetingGivesThePidAndGroup) {
    auto hello = parse_driver_hello("KSB1 42 42 ");
    ASSERT_TRUE(hello);
    EXPECT_EQ(hello->pid, 42);
    EXPECT_TRUE(hello->leads_group());
    EXPECT_FALSE(hello->own_groups);
    auto member = parse_driver_hello("KSB1 42 7 1");
    ASSERT_TRUE(member);
    EXPECT_FALSE(member->leads_group());
    EXPECT_TRUE(member->own_groups);
    for (const char* bad : {"", "KSB1", "KSB1 42", "KSB1 42 42", "KSB1 x 1 ", "KSB1 0 0 ", "KSB1 -3 -3 ", "KSB2 1 1 ",
                            "KSB1 1 1 2", "KSB1 1 1 1 "})
        EXPECT_FALSE(parse_driver_hello(bad)) << bad;
}

struct Scanned {
    std::string out;
    bool truncated{};
    bool ok{true};
    bool done{};
    bool stray{};
    int status{-1};
};

Scanned scan_in_pieces(const std::string& stream, TrailerScanner::Kind kind, std::vector<std::size_t> cuts,
                       std::size_t cap = SIZE_MAX) {
    TrailerScanner scanner(marker, kind);
    Scanned r;
    std::size_t from = 0;
    cuts.push_back(stream.size());
    for (std::size_t cut : cuts) {
        r.ok = r.ok && scanner.feed(std::string_view(stream).substr(from, cut - from), r.out, cap, r.truncated);
        from = cut;
    }
    r.done = scanner.done();
    r.stray = scanner.stray();
    r.status = scanner.status();
    return r;
}

TEST(ShellSessionCore, TrailerIsFoundWhereverThePiecesAreCut) {
    // Output that contains pieces of the marker but not the marker itself.
    const std::string output = std::string("out ") + marker.substr(0, 20) + " \n" + marker.substr(0, 31) + "x";
    const std::string stream = output + marker + " 17\n";
    for (std::size_t a = 0; a <= stream.size(); ++a) {
        for (std::size_t b = a; b <= stream.size(); b += 7) {
            auto r = scan_in_pieces(stream, TrailerScanner::Kind::stdout_with_status, {a, b});
            ASSERT_TRUE(r.ok) << a << "," << b;
            ASSERT_TRUE(r.done) << a << "," << b;
            ASSERT_EQ(r.out, output) << a << "," << b;
            ASSERT_EQ(r.status, 17);
            ASSERT_FALSE(r.stray);
        }
    }
    const std::string err = std::string("warn\n") + marker + "\n";
    for (std::size_t a = 0; a <= err.size(); ++a) {
        auto r = scan_in_pieces(err, TrailerScanner::Kind::stderr_bare, {a});
        ASSERT_TRUE(r.ok && r.done) << a;
        ASSERT_EQ(r.out, "warn\n");
    }
}

TEST(ShellSessionCore, UnfinishedStreamsHoldBackOnlyWhatMayBeTheTrailer) {
    auto r = scan_in_pieces("abc" + marker.substr(0, 5), TrailerScanner::Kind::stdout_with_status, {});
    EXPECT_TRUE(r.ok);
    EXPECT_FALSE(r.done);
    EXPECT_EQ(r.out, "abc");
    auto waiting = scan_in_pieces("abc" + marker + " 12", TrailerScanner::Kind::stdout_with_status, {});
    EXPECT_TRUE(waiting.ok);
    EXPECT_FALSE(waiting.done);
    EXPECT_EQ(waiting.out, "abc");
}

TEST(ShellSessionCore, CapTruncatesAndStillFindsTheTrailer) {
    const std::string stream = std::string(100, 'x') + marker + " 0\n";
    auto r = scan_in_pieces(stream, TrailerScanner::Kind::stdout_with_status, {10, 50}, 30);
    EXPECT_TRUE(r.ok && r.done);
    EXPECT_EQ(r.out, std::string(30, 'x'));
    EXPECT_TRUE(r.truncated);
    EXPECT_EQ(r.status, 0);
}

TEST(ShellSessionCore, MalformedTrailersAndStrayBytesAreReported) {
    EXPECT_FALSE(scan_in_pieces(marker + " x\n", TrailerScanner::Kind::stdout_with_status, {}).ok);
    EXPECT_FALSE(scan_in_pieces(marker + "\n", TrailerScanner::Kind::stdout_with_status, {}).ok);
    EXPECT_FALSE(scan_in_pieces(marker + " " + std::string(40, '1'), TrailerScanner::Kind::stdout_with_status, {}).ok);
    EXPECT_FALSE(scan_in_pieces(marker + "x", TrailerScanner::Kind::stderr_bare, {}).ok);
    auto stray = scan_in_pieces(marker + " 0\nlate", TrailerScanner::Kind::stdout_with_status, {});
    EXPECT_TRUE(stray.ok && stray.done && stray.stray);
    auto later = scan_in_pieces(marker + "\n", TrailerScanner::Kind::stderr_bare, {marker.size() + 1});
    EXPECT_TRUE(later.done && !later.stray);
    TrailerScanner done(marker, TrailerScanner::Kind::stderr_bare);
    std::string out;
    bool truncated = false;
    EXPECT_TRUE(done.feed(marker + "\n", out, SIZE_MAX, truncated));
    EXPECT_TRUE(done.feed("more", out, SIZE_MAX, truncated));
    EXPECT_TRUE(done.stray());
    EXPECT_TRUE(out.empty());
}

}  // namespace
