// The kubesandbox command line: its usage text, and its arguments parsed into Args (no I/O
// beyond what prepare_file_command reads: the files named by --old-file/--new-file).
#pragma once

#include "file_commands.hpp"

#include <kubesandbox/agent_sandbox_provider.hpp>
#include <kubesandbox/raw_provider.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kubesandbox::cli {

extern const char* const usage_text;

// A mistake in the arguments: the message, then the usage text, and exit code 2.
struct UsageError {
    std::string message;
};

// The global options, the command and its options, as given.
struct Args {
    std::string kubeconfig, context, namespace_name;
    bool local = false, json = false;
    RawProviderOptions config;
    std::string mode{"raw"};
    AgentSandboxProviderOptions agent;
    std::string router_url, router_token, connection{"direct"};
    std::string gateway_name{"sandbox-router-gateway"}, gateway_namespace{"default"};
    std::string router_service{"agent-sandbox-system/sandbox-router-svc:8080"};
    std::string command;
    std::vector<std::string> rest;  // positional arguments of the command
    // command options
    std::string id;
    std::vector<std::pair<std::string, std::string>> labels;
    std::optional<std::int64_t> ttl, ttl_idle, timeout, max_idle;
    std::optional<std::string> status;
    std::string selector;
    bool fill = false;
    std::vector<std::string> argv;  // exec command after --
    FileCommand file;               // file commands' options
};

// KEY and VALUE of "KEY=VALUE"; throws UsageError naming `flag` for anything else.
std::pair<std::string, std::string> parse_kv(const std::string& flag, const std::string& v);

// Throws UsageError for an unknown option or command, a missing or malformed value.
Args parse(int argc, char** argv);

}  // namespace kubesandbox::cli
