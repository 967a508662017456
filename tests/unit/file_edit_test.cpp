// edit(): DeepAgents' replacement rules.
#include "files/edit_core.hpp"

#include <gtest/gtest.h>

namespace {
using namespace kubesandbox::files;

TEST(ApplyEdit, ReplacesOnceOrAllAndCounts) {
    auto e = apply_edit("a b a", "b", "c", false);
    EXPECT_FALSE(e.code);
    EXPECT_EQ(e.content, "a c a");
    EXPECT_EQ(e.count, 1);
    e = apply_edit("a b a", "a", "x", false);
    EXPECT_EQ(e.code, "multiple_occurrences");
    EXPECT_EQ(e.count, 2);
    e = apply_edit("a b a", "a", "x", true);
    EXPECT_EQ(e.content, "x b x");
    EXPECT_EQ(e.count, 2);
    e = apply_edit("abc", "zz", "x", true);
    EXPECT_EQ(e.code, "string_not_found");
}

TEST(ApplyEdit, LineEndsOfEitherKindMatch) {
    auto e = apply_edit("one\r\ntwo\r\n", "one\ntwo", "1\n2", false);
    EXPECT_FALSE(e.code);
    EXPECT_EQ(e.content, "1\r\n2\r\n");  // the new text takes the file's line ends
    e = apply_edit("one\ntwo\n", "one\r\ntwo", "1\r\n2", false);
    EXPECT_EQ(e.content, "1\n2\n");
}

TEST(ApplyEdit, EmptyOldStringAndNonText) {
    auto e = apply_edit("", "", "new", false);
    EXPECT_EQ(e.content, "new");
    EXPECT_EQ(e.count, 1);
    e = apply_edit("h\xC3\xA9", "", "-", false);
    EXPECT_EQ(e.code, "multiple_occurrences");
    EXPECT_EQ(e.count, 3);  // characters + 1
    e = apply_edit("h\xC3\xA9", "", "-", true);
    EXPECT_EQ(e.content, "-h-\xC3\xA9-");
    e = apply_edit(std::string("\xff\xfe", 2), "a", "b", false);
    EXPECT_EQ(e.code, "not_a_text_file");
}

TEST(EditErrors, AreWordedAsDeepAgentsWordsThem) {
    EXPECT_EQ(edit_error_text("file_not_found", "/p", "x"), "Error: File '/p' not found");
    EXPECT_EQ(edit_error_text("permission_denied", "/p", "x"), "Error: Permission denied editing file '/p'");
    EXPECT_EQ(edit_error_text("not_a_file", "/p", "x"), "Error: '/p' is not a regular file");
    EXPECT_EQ(edit_error_text("not_a_text_file", "/p", "x"), "Error: File '/p' is not a text file");
    EXPECT_EQ(edit_error_text("string_not_found", "/p", "x"), "Error: String not found in file: 'x'");
    EXPECT_EQ(edit_error_text("multiple_occurrences", "/p", "x"),
              "Error: String 'x' appears multiple times. Use replace_all=True to replace all occurrences.");
    EXPECT_EQ(edit_error_text("file_too_large", "/p", "x"), "Error editing file '/p': file_too_large");
}

}  // namespace
