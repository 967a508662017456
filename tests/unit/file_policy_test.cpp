// The policy's decisions and the virtual root's mapping.
#include "files/policy.hpp"

#include <gtest/gtest.h>

namespace {
using namespace kubesandbox;
using namespace kubesandbox::files;
using namespace std::string_literals;

TEST(NormalizeAbsolute, CollapsesDotsAndSlashes) {
    EXPECT_EQ(normalize_absolute("/a//b/./c/../d/"), "/a/b/d");
    EXPECT_EQ(normalize_absolute("/../etc"), "/etc");
    EXPECT_EQ(normalize_absolute("/"), "/");
    EXPECT_FALSE(normalize_absolute("a/b"));
    EXPECT_FALSE(normalize_absolute(""));
}

TEST(VirtualRoot, MapsBelowTheRootAndRejectsClimbing) {
    EXPECT_EQ(virtual_to_real("/workspace", "/a/b"), "/workspace/a/b");
    EXPECT_EQ(virtual_to_real("/workspace/", "a/./b"), "/workspace/a/b");
    EXPECT_EQ(virtual_to_real("/workspace", "/"), "/workspace");
    EXPECT_EQ(virtual_to_real("/workspace", "/a/../b"), "/workspace/b");
    EXPECT_FALSE(virtual_to_real("/workspace", "/../etc/passwd"));
    EXPECT_FALSE(virtual_to_real("/workspace", "/a/../../x"));
    EXPECT_EQ(virtual_to_real("/", "/x"), "/x");
}

TEST(WritePolicy, DenyWinsAndPrefixesCoverWholeSegments) {
    FilePolicy p;
    EXPECT_TRUE(write_allowed(p, "/anything"));
    p.allow_prefixes = {"/workspace"};
    p.deny_prefixes = {"/workspace/.git/"};
    EXPECT_TRUE(write_allowed(p, "/workspace"));
    EXPECT_TRUE(write_allowed(p, "/workspace/a.txt"));
    EXPECT_FALSE(write_allowed(p, "/workspace2/a.txt"));
    EXPECT_FALSE(write_allowed(p, "/workspace/.git/config"));
    EXPECT_FALSE(write_allowed(p, "/workspace/.git"));
    EXPECT_FALSE(write_allowed(p, "/etc/passwd"));
    p.allow_prefixes = {"relative"};  // never matches anything
    EXPECT_FALSE(write_allowed(p, "/workspace/a"));
}

TEST(CommandPolicy, SubstringsRefuse) {
    FilePolicy p;
    p.deny_commands = {"rm -rf /", ""};
    EXPECT_EQ(denied_command(p, "cd x && rm -rf / --no-preserve-root"), "rm -rf /");
    EXPECT_FALSE(denied_command(p, "ls"));
}

TEST(CanonicalPaths, CommandQuotesAndParserChecks) {
    auto cmd = canonical_paths_command(true, {"/a b/it's"});
    EXPECT_EQ(cmd.rfind("set -- follow '/a b/it'\\''s'\n", 0), 0u);
    EXPECT_EQ(canonical_paths_command(false, {"/x"}).rfind("set -- parent '/x'\n", 0), 0u);
    auto parsed = parse_canonical_paths("/x/y\0/z/../w\0\0"s, 3);
    ASSERT_TRUE(parsed);
    EXPECT_EQ((*parsed)[0], "/x/y");
    EXPECT_EQ((*parsed)[1], "/w");
    EXPECT_FALSE((*parsed)[2]);  // refused by the sandbox (dangling symlink, ...)
    EXPECT_FALSE(parse_canonical_paths("/x/y\0"s, 2));
    EXPECT_FALSE(parse_canonical_paths("/x/y\0/cut"s, 1));
    parsed = parse_canonical_paths("rel\0"s, 1);
    ASSERT_TRUE(parsed);
    EXPECT_FALSE((*parsed)[0]);
}

TEST(RemovePolicy, AFolderHoldingADeniedOneIsNotRemoved) {
    FilePolicy p;
    p.allow_prefixes = {"/work"};
    p.deny_prefixes = {"/work/.git"};
    EXPECT_TRUE(remove_allowed(p, "/work/a"));
    EXPECT_FALSE(remove_allowed(p, "/work"));
    EXPECT_FALSE(remove_allowed(p, "/work/.git/x"));
    EXPECT_TRUE(path_covers("/work", "/work/.git"));
    EXPECT_FALSE(path_covers("/work", "/workshop"));
}

TEST(Audit, FailOpenByDefaultFailClosedWhenAsked) {
    FilePolicy p;
    p.logger = Logger::silent();
    std::vector<std::string> seen;
    p.audit = [&](const AuditEvent& e) -> Result<void> {
        seen.push_back(e.operation + " " + e.target);
        return fail(errc::io_error, "disk full");
    };
    EXPECT_TRUE(audit(p, AuditEvent{"write", "/a", {}}));
    p.fail_closed = true;
    EXPECT_FALSE(audit(p, AuditEvent{"write", "/b", {}}));
    EXPECT_EQ(seen, (std::vector<std::string>{"write /a", "write /b"}));
    p.audit = {};
    EXPECT_TRUE(audit(p, AuditEvent{"write", "/c", {}}));
}

}  // namespace
