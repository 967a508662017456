// ls, glob, grep and delete: parsers of what the scripts print.
#include "files/listing.hpp"

#include <gtest/gtest.h>

namespace {
using namespace kubesandbox;
using namespace kubesandbox::files;
using namespace std::string_literals;

TEST(JoinPath, AsPythonJoins) {
    EXPECT_EQ(join_path("/a", "x"), "/a/x");
    EXPECT_EQ(join_path("/a/", "x"), "/a/x");
    EXPECT_EQ(join_path("", "x"), "x");
    EXPECT_EQ(join_path(".", "x"), "./x");
}

TEST(LsOutput, SortsJoinsAndReportsErrors) {
    auto r = parse_ls_output("/w/", "OK\nfz.txt\0dsrc\0fa:b\nc\0"s);
    ASSERT_TRUE(r.entries);
    ASSERT_EQ(r.entries->size(), 3u);
    EXPECT_EQ((*r.entries)[0].path, "/w/a:b\nc");
    EXPECT_FALSE((*r.entries)[0].is_dir);
    EXPECT_EQ((*r.entries)[1].path, "/w/src");
    EXPECT_TRUE((*r.entries)[1].is_dir);
    r = parse_ls_output("/nope", "E path_not_found\n");
    EXPECT_EQ(r.error, "Path '/nope': path_not_found");
    EXPECT_FALSE(r.entries);
    r = parse_ls_output("/w", "sh: python3: not found");
    EXPECT_EQ(r.error, "Path '/w': unexpected server response: sh: python3: not found");
}

TEST(RemoveOutput, MapsEachOutcome) {
    EXPECT_EQ(parse_remove_output("/x", "OK\n", 0).path, "/x");
    EXPECT_EQ(parse_remove_output("/x", "E not_found\n", 0).error, "Error: '/x' not found");
    EXPECT_EQ(parse_remove_output("/x", "Frm: can't remove '/x/y': Permission denied\n", 1).error,
              "Error deleting file '/x': rm: can't remove '/x/y': Permission denied");
    EXPECT_EQ(parse_remove_output("/x", "", 137).error, "Error deleting file '/x': unknown error");
}

TEST(GlobOutput, MatchesSortsAbsolutisesAndChecksSymlinks) {
    std::string out =
        "R/real/w\0./b.py\0./a.py\0./x/.h/c.py\0./n.txt\0\0./l.py\0/real/w/n.txt\0./out.py\0/etc/x.py\0X0 0\0"s;
    auto r = glob_result("/w/", "*.py", out, false);
    ASSERT_TRUE(r.matches) << r.error.value_or("");
    std::vector<std::string> paths;
    for (const auto& m : *r.matches) paths.push_back(m.path);
    EXPECT_EQ(paths, (std::vector<std::string>{"/w/a.py", "/w/b.py", "/w/l.py", "/w/x/.h/c.py"}));
    EXPECT_FALSE(r.truncated);
    // An unreadable subtree marks the result truncated.
    r = glob_result("/w", "*.py", "R/w\0./a.py\0\0X1 0\0"s, false);
    EXPECT_TRUE(r.truncated);
    EXPECT_EQ(r.matches->size(), 1u);
    EXPECT_EQ(glob_result("/w", "../*", "R/w\0\0X0 0\0"s, false).error, "Path '/w': invalid_pattern");
    EXPECT_EQ(glob_result("/w", "{a,b,c,d,e,f}{a,b,c,d,e,f}{a,b,c,d,e,f}{a,b,c,d,e,f}", "R/w\0\0X0 0\0"s, false).error,
              "Path '/w': pattern_too_broad");
    EXPECT_EQ(glob_result("/nope", "*", "E path_not_found\n", false).error, "Path '/nope': path_not_found");
    // Cut by the output limit: what arrived counts, marked truncated.
    r = glob_result("/", "*.py", "R/\0./a.py\0./b.p"s, true);
    ASSERT_TRUE(r.matches);
    EXPECT_EQ(r.matches->size(), 1u);
    EXPECT_EQ(r.matches->front().path, "/a.py");
    EXPECT_TRUE(r.truncated);
}

TEST(GrepOutput, ParsesLengthPrefixedNamesWithColonsAndNewlines) {
    std::string name = "./a:1:b\nc.txt";
    std::string out =
        "D\n" + std::to_string(name.size()) + ":" + name + ":7:hit: here\n" + "7:./z.txt:2:x\n" + "7:./a.txt:3:y\n";
    auto r = grep_result("/w", "", std::nullopt, out, false);
    ASSERT_TRUE(r.matches) << r.error.value_or("");
    ASSERT_EQ(r.matches->size(), 3u);
    EXPECT_EQ((*r.matches)[0].path, "/w/a.txt");
    EXPECT_EQ((*r.matches)[1].path, "/w/a:1:b\nc.txt");
    EXPECT_EQ((*r.matches)[1].line, 7);
    EXPECT_EQ((*r.matches)[1].text, "hit: here");
    // max_count cuts and marks truncated; the glob filters by name or by path.
    r = grep_result("/w", "", 2, out, false);
    EXPECT_EQ(r.matches->size(), 2u);
    EXPECT_TRUE(r.truncated);
    r = grep_result("/w", "z*", std::nullopt, out, false);
    EXPECT_EQ(r.matches->size(), 1u);
    r = grep_result("/w", "sub/*.txt", std::nullopt, "D\n11:./sub/q.txt:1:x\n7:./q.txt:1:x\n", false);
    ASSERT_EQ(r.matches->size(), 1u);
    EXPECT_EQ(r.matches->front().path, "/w/sub/q.txt");
    // One file searched: its path as given.
    r = grep_result("f.txt", "", std::nullopt, "F\n0::4:line\n", false);
    EXPECT_EQ(r.matches->front().path, "f.txt");
    EXPECT_EQ(grep_result(".", "", std::nullopt, "E path_not_found\n", false).error, "Path '.': path_not_found");
    EXPECT_TRUE(grep_result(".", "", std::nullopt, "D\ngarbage\n", false).error);
    r = grep_result(".", "", std::nullopt, "D\n7:./a.txt:1:x\n7:./b.t", true);
    EXPECT_EQ(r.matches->size(), 1u);
    EXPECT_TRUE(r.truncated);
    EXPECT_EQ(grep_result(".", "../*.txt", std::nullopt, "D\n", false).error,
              "Path '.': the glob must not contain '..'");
}

}  // namespace
