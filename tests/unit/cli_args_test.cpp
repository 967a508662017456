// The command line's parser (tools/cli_args.hpp): options, commands and their mistakes, with no
// cluster and no process.
#include "cli_args.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {
using kubesandbox::cli::Args;
using kubesandbox::cli::parse;
using kubesandbox::cli::UsageError;

Args parse_words(std::vector<std::string> words) {
    words.insert(words.begin(), "kubesandbox");
    std::vector<char*> argv;
    for (auto& w : words) argv.push_back(w.data());
    return parse(static_cast<int>(argv.size()), argv.data());
}

// The UsageError's message, or "" when the words parse.
std::string mistake(std::vector<std::string> words) {
    try {
        parse_words(std::move(words));
    } catch (const UsageError& e) {
        return e.message;
    }
    return "";
}

TEST(CliArgs, GlobalOptionsCommandAndItsOptionsLandWhereTheyBelong) {
    auto a = parse_words({"--kubeconfig", "/k", "-n", "ns", "--json", "create", "--id=conv-1", "--label", "team=a",
                          "--ttl", "60", "--image=busybox"});
    EXPECT_EQ(a.kubeconfig, "/k");
    EXPECT_EQ(a.namespace_name, "ns");
    EXPECT_TRUE(a.json);
    EXPECT_EQ(a.command, "create");
    EXPECT_EQ(a.id, "conv-1");
    ASSERT_EQ(a.labels.size(), 1u);
    EXPECT_EQ(a.labels[0], std::make_pair(std::string("team"), std::string("a")));
    EXPECT_EQ(a.ttl, 60);
    EXPECT_EQ(a.config.image, "busybox");
    EXPECT_EQ(a.mode, "raw");
}

TEST(CliArgs, WordsAfterTheDoubleDashAreTheCommandsUntouched) {
    auto a = parse_words({"exec", "default/ksb-1", "--timeout", "5", "--", "sh", "-c", "echo $HOME; --json", "--"});
    EXPECT_EQ(a.command, "exec");
    EXPECT_EQ(a.rest, std::vector<std::string>{"default/ksb-1"});
    EXPECT_EQ(a.timeout, 5);
    EXPECT_FALSE(a.json);
    EXPECT_EQ(a.argv, (std::vector<std::string>{"sh", "-c", "echo $HOME; --json", "--"}));
}

TEST(CliArgs, FileCommandsTakeWhatFollowsTheSandboxId) {
    auto a = parse_words({"edit", "ns/ksb-1", "/w/a.txt", "old", "--replace-all", "--", "-new"});
    EXPECT_EQ(a.file.name, "edit");
    EXPECT_TRUE(a.file.replace_all);
    EXPECT_EQ(a.file.args, (std::vector<std::string>{"/w/a.txt", "old", "-new"}));
    auto r = parse_words({"read", "ns/ksb-1", "/w/a.txt", "--offset", "10", "--limit=5"});
    EXPECT_EQ(r.file.offset, 10);
    EXPECT_EQ(r.file.limit, 5);
}

TEST(CliArgs, HelpWinsOverWhatFollows) {
    EXPECT_EQ(parse_words({"--help", "--no-such-option"}).command, "help");
    EXPECT_EQ(parse_words({"-h"}).command, "help");
}

TEST(CliArgs, MistakesAreUsageErrorsThatNameTheirWord) {
    EXPECT_NE(mistake({"frobnicate"}).find("unknown command \"frobnicate\""), std::string::npos);
    EXPECT_NE(mistake({"list", "--frob"}).find("unknown option --frob"), std::string::npos);
    EXPECT_NE(mistake({"create", "--ttl", "-5"}).find("--ttl needs a non-negative integer"), std::string::npos);
    EXPECT_NE(mistake({"create", "--ttl", "99999999999999"}).find("--ttl"), std::string::npos);
    EXPECT_NE(mistake({"create", "--label", "=x"}).find("--label needs KEY=VALUE"), std::string::npos);
    EXPECT_NE(mistake({"create", "--id"}).find("--id needs a value"), std::string::npos);
    EXPECT_NE(mistake({"--mode", "pods", "list"}).find("--mode must be raw or agent-sandbox"), std::string::npos);
    EXPECT_NE(mistake({"read"}).find("read needs a sandbox ID"), std::string::npos);
    EXPECT_EQ(mistake({"--mode=agent-sandbox", "list"}), "");
}

}  // namespace
