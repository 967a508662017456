// read(): paging rules over what the read script sends back.
#include "files/read_page.hpp"
#include "files/text.hpp"

#include <gtest/gtest.h>

namespace {
using namespace kubesandbox;
using namespace kubesandbox::files;

ReadSource whole(std::string body) {
    ReadSource s;
    s.size = body.size();
    s.whole = true;
    s.body = std::move(body);
    return s;
}

TEST(ReadPage, PagesWithUniversalNewlinesAndReportsTheWindow) {
    auto r = read_page(whole("a\r\nb\rc\nd"), FileKind::text, 1, 2);
    ASSERT_FALSE(r.error);
    EXPECT_EQ(r.file_data->content, "b\nc");
    EXPECT_EQ(r.file_data->encoding, "utf-8");
    EXPECT_EQ(r.total_lines, 4);
    EXPECT_EQ(r.start_line, 2);
    EXPECT_EQ(r.end_line, 3);
    EXPECT_EQ(r.next_offset, 3);

    r = read_page(whole("a\nb\n"), FileKind::text, 0, 2000);
    EXPECT_EQ(r.file_data->content, "a\nb");
    EXPECT_EQ(r.total_lines, 2);
    EXPECT_EQ(r.end_line, 2);
    EXPECT_FALSE(r.next_offset);
}

TEST(ReadPage, EmptyLimitZeroOffsetPastTheEnd) {
    auto r = read_page(whole(""), FileKind::text, 0, 10);
    EXPECT_EQ(r.file_data->content, "System reminder: File exists but has empty contents");
    EXPECT_FALSE(r.start_line);
    r = read_page(whole("x\n"), FileKind::text, 0, 0);
    EXPECT_TRUE(r.no_lines_requested);
    EXPECT_EQ(r.file_data->content, "");
    r = read_page(whole("x\ny\n"), FileKind::text, 2, 5);
    EXPECT_EQ(r.error, "Line offset 2 exceeds file length (2 lines)");
    r = read_page(whole("x\ny\n"), FileKind::text, -3, -1);  // floored at 0
    EXPECT_TRUE(r.no_lines_requested);
}

TEST(ReadPage, BinaryByProbeOrByExtension) {
    auto r = read_page(whole(std::string("\x89PNG\r\n\x1a\n", 8)), FileKind::text, 0, 10);
    EXPECT_EQ(r.file_data->encoding, "base64");
    EXPECT_EQ(r.file_data->content, "iVBORw0KGgo=");
    r = read_page(whole("plain"), FileKind::image, 0, 10);
    EXPECT_EQ(r.file_data->encoding, "base64");
    EXPECT_EQ(r.file_data->content, "cGxhaW4=");
    EXPECT_FALSE(r.total_lines);
    EXPECT_EQ(file_kind("/x/A.PNG"), FileKind::image);
    EXPECT_EQ(file_kind("/x/clip.mkv"), FileKind::video);
    EXPECT_EQ(file_kind("/x/notes.txt"), FileKind::text);
    // A large non-UTF-8 file is refused instead of sent whole.
    ReadSource big;
    big.size = 600000;
    big.head = std::string("\xff\xfe", 2);
    r = read_page(big, FileKind::text, 0, 10);
    EXPECT_EQ(r.error, "Binary file exceeds maximum preview size of 512000 bytes");
}

TEST(ReadPage, AProbeEndingMidCharacterIsStillText) {
    std::string body(8191, 'a');
    body += "\xC3\xA9 tail";  // the é straddles byte 8192
    auto r = read_page(whole(body), FileKind::text, 0, 10);
    EXPECT_EQ(r.file_data->encoding, "utf-8");
    // Invalid bytes after the probe are replaced, not fatal.
    r = read_page(whole(std::string(9000, 'a') + "\n\xff\n"), FileKind::text, 1, 1);
    EXPECT_EQ(r.file_data->content, "\xEF\xBF\xBD");
}

TEST(ReadPage, TheBudgetCutsOnACharacterBoundaryAndAppendsTheNote) {
    std::string line(300000, 'a');
    std::string wide;
    for (int i = 0; i < 220000; ++i) wide += "\xC3\xA9";  // 440,000 bytes
    auto r = read_page(whole(line + "\n" + wide + "\n" + "z\n"), FileKind::text, 0, 10);
    const std::string note = file_limits::read_truncation_message;
    const std::size_t room = 512000 - note.size() - 300000;  // left for "\n" + é...
    ASSERT_EQ(r.file_data->content.size(), 300000 + 1 + (room - 1) / 2 * 2 + note.size());
    EXPECT_TRUE(valid_utf8(r.file_data->content));
    EXPECT_EQ(r.file_data->content.substr(r.file_data->content.size() - note.size()), note);
    EXPECT_EQ(r.end_line, 1);  // the cut line is not counted
    EXPECT_EQ(r.next_offset, 1);
    EXPECT_EQ(r.total_lines, 3);
    // A single line longer than the budget counts as one returned line.
    r = read_page(whole(std::string(520000, 'b') + "\nc"), FileKind::text, 0, 10);
    EXPECT_EQ(r.end_line, 1);
    EXPECT_EQ(r.next_offset, 1);
}

TEST(ReadPage, LargeFilesUseTheStreamAndTheCount) {
    ReadSource s;
    s.size = 5 * 1024 * 1024;
    s.head = "line 0\n";
    s.body = "line 10\nline 11\nline 12\n";  // normalised, from line offset 10
    s.body_complete = false;
    auto r = read_page(s, FileKind::text, 10, 2);
    EXPECT_EQ(r.file_data->content, "line 10\nline 11");
    EXPECT_FALSE(r.total_lines);  // over 1 MiB and not at the end: unknown
    EXPECT_EQ(r.next_offset, 12);
    s.body_complete = true;
    r = read_page(s, FileKind::text, 10, 5);
    EXPECT_EQ(r.total_lines, 13);
    EXPECT_FALSE(r.next_offset);
    // Past the end: the sandbox counted the lines.
    s.body.clear();
    s.line_count = 7;
    r = read_page(s, FileKind::text, 10, 5);
    EXPECT_EQ(r.error, "Line offset 10 exceeds file length (7 lines)");
}

TEST(ReadOutput, ParsesEveryShapeAndRejectsGarbage) {
    auto p = parse_read_output("E file_not_found\n", false);
    EXPECT_EQ(p.error, "file_not_found");
    p = parse_read_output("W 3\nab\n", false);
    ASSERT_FALSE(p.error);
    EXPECT_TRUE(p.source.whole);
    EXPECT_EQ(p.source.body, "ab\n");
    p = parse_read_output("W 9\nab\n", false);  // size and body disagree
    ASSERT_TRUE(p.error);
    EXPECT_EQ(p.error->rfind("unexpected server response: W 9", 0), 0u);
    // The first read: W alone, then up to 512,001 bytes; one more than a whole read says "large".
    p = parse_read_output("W\nab\n", false);
    ASSERT_FALSE(p.error);
    EXPECT_TRUE(p.source.whole);
    EXPECT_FALSE(p.large);
    EXPECT_EQ(p.source.body, "ab\n");
    EXPECT_EQ(p.source.size, 3u);
    p = parse_read_output("W\n", false);
    EXPECT_TRUE(!p.error && p.source.whole && p.source.size == 0);
    p = parse_read_output("W\n" + std::string(512000, 'x'), false);
    EXPECT_TRUE(!p.error && p.source.whole && !p.large && p.source.size == 512000);
    p = parse_read_output("W\n" + std::string(512001, 'x'), false);
    EXPECT_TRUE(!p.error && p.large && !p.source.whole);
    p = parse_read_output("W\nab", true);  // cut by the output limit
    EXPECT_TRUE(p.error);
    p = parse_read_output("B 600000\n", false);
    EXPECT_TRUE(p.too_large_binary);
    std::string head(8192, 'h');
    p = parse_read_output("L 700000\n" + head + "N 12 1\nrest", false);
    ASSERT_FALSE(p.error);
    EXPECT_EQ(p.source.line_count, 12);
    EXPECT_EQ(p.source.body, "rest");
    EXPECT_TRUE(p.source.body_complete);
    p = parse_read_output("L 700000\n" + head + "N 12 0\nrest", true);
    EXPECT_EQ(p.source.line_count, 13);  // last line without a newline
    EXPECT_FALSE(p.source.body_complete);
    p = parse_read_output("", false);
    EXPECT_EQ(p.error, "unexpected server response: (empty)");
    p = parse_read_output("Traceback (most recent call last):\n", false);
    EXPECT_TRUE(p.error);
}

TEST(ReadCommand, QuotesThePathAsOneArgument) {
    auto cmd = read_command("/w/it's $HOME\n`x`", FileKind::text, 4, 10);
    EXPECT_EQ(cmd.rfind("set -- '/w/it'\\''s $HOME\n`x`' text 5 11\n", 0), 0u);
    cmd = read_command("/w/a", FileKind::image, 0, 3, true);
    EXPECT_EQ(cmd.rfind("set -- '/w/a' binary 1 4 large\n", 0), 0u);
}

}  // namespace

namespace {
using namespace kubesandbox::files;

TEST(ReadPage, AFileEndingMidCharacterIsBinaryAndHugeOffsetsAreSafe) {
    ReadSource s;
    s.whole = true;
    s.body = "hello\xE2\x82";  // cut by the end of the file, not by the probe
    s.size = s.body.size();
    auto r = read_page(s, FileKind::text, 0, 10);
    EXPECT_EQ(r.file_data->encoding, "base64");
    s.body = "a\nb\n";
    s.size = 4;
    r = read_page(s, FileKind::text, 9223372036854775807LL, 9223372036854775807LL);
    EXPECT_EQ(r.error, "Line offset 1000000000000000 exceeds file length (2 lines)");
}

}  // namespace
