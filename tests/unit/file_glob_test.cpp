// Pattern matching of the file operations: Python fnmatchcase, DeepAgents glob rules, glob.glob.
#include "files/glob_match.hpp"
#include "files/listing.hpp"

#include <gtest/gtest.h>

namespace {
using namespace kubesandbox::files;

TEST(Fnmatch, BehavesLikePythonFnmatchcase) {
    EXPECT_TRUE(fnmatch("*.py", "a.py"));
    EXPECT_TRUE(fnmatch("*.py", ".hidden.py"));  // no special leading dot
    EXPECT_FALSE(fnmatch("*.py", "a.pyc"));
    EXPECT_TRUE(fnmatch("a?c", "abc"));
    EXPECT_TRUE(fnmatch("a?c",
                        "a\xC3\xA9"
                        "c"));  // ? is one character, not one byte
    EXPECT_FALSE(fnmatch("a??c",
                         "a\xC3\xA9"
                         "c"));
    EXPECT_TRUE(fnmatch("[a-c]x", "bx"));
    EXPECT_FALSE(fnmatch("[!a-c]x", "bx"));
    EXPECT_TRUE(fnmatch("[]]", "]"));
    EXPECT_TRUE(fnmatch("[!]]", "a"));
    EXPECT_TRUE(fnmatch("[a-]", "-"));
    EXPECT_TRUE(fnmatch("[", "["));  // unclosed class: literal
    EXPECT_TRUE(fnmatch("a[b", "a[b"));
    EXPECT_TRUE(fnmatch("\\*", "\\x"));   // no escapes: backslash is literal, * matches x
    EXPECT_FALSE(fnmatch("Abc", "abc"));  // case-sensitive
    EXPECT_TRUE(fnmatch("*", ""));
    EXPECT_TRUE(fnmatch("**a*b*c", "xxaxxbxxc"));
    EXPECT_FALSE(fnmatch("*a*b*c*d", std::string(2000, 'a')));
}

TEST(BraceExpansion, ExpandsNestsAndKeepsSingleGroupsLiteral) {
    auto e = expand_braces("*.{py,md}", 1000);
    ASSERT_TRUE(e);
    EXPECT_EQ(*e, (std::vector<std::string>{"*.py", "*.md"}));
    e = expand_braces("{a,b{c,d}}x", 1000);
    ASSERT_TRUE(e);
    EXPECT_EQ(*e, (std::vector<std::string>{"ax", "bcx", "bdx"}));
    e = expand_braces("{solo}.txt", 1000);
    ASSERT_TRUE(e);
    EXPECT_EQ(*e, (std::vector<std::string>{"{solo}.txt"}));
    e = expand_braces("{a{b,c}}", 1000);
    ASSERT_TRUE(e);
    EXPECT_EQ(*e, (std::vector<std::string>{"{ab}", "{ac}"}));
    e = expand_braces("unclosed{a,b", 1000);
    ASSERT_TRUE(e);
    EXPECT_EQ(*e, (std::vector<std::string>{"unclosed{a,b"}));
    // 4 groups of 6 = 1296 > 1000
    EXPECT_FALSE(expand_braces("{a,b,c,d,e,f}{a,b,c,d,e,f}{a,b,c,d,e,f}{a,b,c,d,e,f}", 1000));
    EXPECT_TRUE(expand_braces("{a,b,c,d,e,f}{a,b,c,d,e,f}{a,b,c,d,e,f}", 1000));
}

TEST(GlobPattern, BasenamePatternsMatchAtAnyDepth) {
    GlobPattern p("*.py");
    EXPECT_TRUE(p.matches("a.py"));
    EXPECT_TRUE(p.matches("src/deep/b.py"));
    EXPECT_TRUE(p.matches(".git/hooks/x.py"));  // inside hidden folders too
    EXPECT_FALSE(p.matches("src/b.txt"));
    EXPECT_EQ(p.last_segment(), "*.py");
}

TEST(GlobPattern, PathPatternsFollowTheDoubleStarRules) {
    EXPECT_TRUE(GlobPattern("src/*.py").matches("src/a.py"));
    EXPECT_FALSE(GlobPattern("src/*.py").matches("src/x/a.py"));
    EXPECT_TRUE(GlobPattern("/src/*.py").matches("src/a.py"));    // leading / anchors at the root
    EXPECT_TRUE(GlobPattern("src/**/*.py").matches("src/a.py"));  // ** spans zero segments
    EXPECT_TRUE(GlobPattern("src/**/*.py").matches("src/x/y/a.py"));
    EXPECT_FALSE(GlobPattern("src/**/*.py").matches("src/.cache/a.py"));  // never into dot segments
    EXPECT_TRUE(GlobPattern("src/**").matches("src/a/b"));
    EXPECT_FALSE(GlobPattern("src/**").matches("src"));  // x/** needs a descendant
    EXPECT_FALSE(GlobPattern("src/").matches("src"));    // a trailing / matches no file
    EXPECT_TRUE(GlobPattern("src/**/").matches("src/a"));
    EXPECT_TRUE(GlobPattern("a//b").matches("a/b"));  // empty segments dropped
    EXPECT_TRUE(GlobPattern("**/[^a]*.c").matches("x/b.c"));
    EXPECT_FALSE(GlobPattern("**/[^a]*.c").matches("x/a.c"));
    EXPECT_FALSE(GlobPattern("src/**").last_segment());
    // Many ** segments over a deep path stay fast (memoised).
    std::string deep;
    for (int i = 0; i < 60; ++i) deep += "d/";
    EXPECT_FALSE(GlobPattern("**/**/**/**/**/**/**/**/x").matches(deep + "y"));
}

TEST(GlobPattern, ParentSegmentsAreDetected) {
    EXPECT_TRUE(has_parent_segment("../x"));
    EXPECT_TRUE(has_parent_segment("a\\..\\b"));
    EXPECT_FALSE(has_parent_segment("a..b/c"));
}

TEST(PythonGlob, HiddenNamesNeedADotPattern) {
    EXPECT_TRUE(python_glob_matches("src/*.py", "src/a.py"));
    EXPECT_FALSE(python_glob_matches("src/*.py", "src/.a.py"));
    EXPECT_TRUE(python_glob_matches("src/.*.py", "src/.a.py"));
    EXPECT_TRUE(python_glob_matches("**/*.py", "a.py"));
    EXPECT_TRUE(python_glob_matches("**/*.py", "x/y/a.py"));
    EXPECT_FALSE(python_glob_matches("**/*.py", ".git/a.py"));
    EXPECT_TRUE(python_glob_matches(".git/*.py", ".git/a.py"));  // a literal segment may be hidden
    EXPECT_TRUE(python_glob_matches("src/**", "src/a/b.txt"));
    EXPECT_FALSE(python_glob_matches("src/**", "src/.a/b.txt"));
}

TEST(ShellPrefilter, WidensToASupersetOfPythonMatching) {
    EXPECT_EQ(widen_for_shell("a?[bc].py"), "a**.py");
    EXPECT_EQ(widen_for_shell("a[b"), "a[[]b");
    EXPECT_EQ(widen_for_shell("a\\b"), "a[\\]b");
    EXPECT_EQ(glob_prefilter("src/**/*.{py,md}"), (std::vector<std::string>{"*.md", "*.py"}));
    EXPECT_TRUE(glob_prefilter("src/**").empty());
    EXPECT_EQ(grep_prefilter("*.py"), (std::vector<std::string>{"*.py"}));
    EXPECT_TRUE(grep_prefilter("").empty());
}

}  // namespace
