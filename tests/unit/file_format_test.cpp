// The DeepAgents renderings of results.
#include <kubesandbox/file_format.hpp>

#include <gtest/gtest.h>

namespace {
using namespace kubesandbox;

TEST(LineNumbers, RightAlignedWithContinuationMarkers) {
    EXPECT_EQ(format_line_numbers("a\nb\n", 9), " 9  a\n10  b");
    EXPECT_EQ(format_line_numbers("", 1), "");
    EXPECT_EQ(format_line_numbers("a\n\n", 1), "1  a\n2  ");
    std::string longline(12000, 'x');
    auto out = format_line_numbers(longline, 3);
    EXPECT_EQ(out, "  3  " + std::string(5000, 'x') + "\n3.1  " + std::string(5000, 'x') + "\n3.2  " +
                       std::string(2000, 'x'));
}

TEST(ExecuteOutput, StatusLineAndTruncationNote) {
    EXPECT_EQ(format_execute_output(ExecuteResponse{"hi", 0, false}), "hi\n[Command succeeded with exit code 0]");
    EXPECT_EQ(format_execute_output(ExecuteResponse{"", 2, true}),
              "\n[Command failed with exit code 2]\n[Output was truncated due to size limits]");
    EXPECT_EQ(format_execute_output(ExecuteResponse{"x", std::nullopt, false}), "x");
}

TEST(PathList, PythonListRepr) {
    EXPECT_EQ(format_path_list({}), "No files found");
    EXPECT_EQ(format_path_list({"/a", "/b c"}), "['/a', '/b c']");
    EXPECT_EQ(python_repr("it's"), "\"it's\"");
    EXPECT_EQ(python_repr("a'\"b"), "'a\\'\"b'");
    EXPECT_EQ(python_repr("t\tn\nb\\\x01"), "'t\\tn\\nb\\\\\\x01'");
    EXPECT_EQ(python_repr("\xC3\xA9\xC2\xA0"), "'\xC3\xA9\\xa0'");
    std::vector<std::string> many(2000, std::string(100, 'p'));  // 200,000 characters
    auto out = format_path_list(many);
    EXPECT_NE(out.find("'... [results truncated, try being more specific with your parameters]']"), std::string::npos);
    EXPECT_EQ(std::count(out.begin(), out.end(), ','), 801);  // 800 paths kept, the note (holding a comma)
}

TEST(GrepRendering, ThreeModes) {
    std::vector<GrepMatch> m{{"/b", 1, "x"}, {"/a", 2, "y"}, {"/b", 5, "z"}};
    EXPECT_EQ(format_grep_matches(m, GrepOutputMode::files_with_matches), "/a\n/b");
    EXPECT_EQ(format_grep_matches(m, GrepOutputMode::count), "/a: 1\n/b: 2");
    EXPECT_EQ(format_grep_matches(m, GrepOutputMode::content), "/b:\n  1: x\n/a:\n  2: y\n/b:\n  5: z");
    EXPECT_EQ(format_grep_matches({}, GrepOutputMode::content), "No matches found");
}

}  // namespace
