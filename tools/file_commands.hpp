// The CLI's file commands (ls, read, write, edit, glob, grep, rm): FileOps results printed as
// DeepAgents renders them, or as one JSON document with DeepAgents' field names.
#pragma once

#include <kubesandbox/sandbox.hpp>

#include <boost/asio/awaitable.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kubesandbox::cli {

struct FileCommand {
    std::string name;               // ls, read, write, edit, glob, grep, rm
    std::vector<std::string> args;  // positional arguments after the sandbox ID
    std::optional<long long> offset, limit, max_count;
    std::optional<std::string> path, glob, old_file, new_file;
    bool replace_all{};
    bool json{};
    std::string input;  // write: the content (stdin); edit: filled from --old-file/--new-file
};

bool is_file_command(std::string_view name);

// Everything an open descriptor (a file, a pipe, stdin) gives until its end, or nothing on a
// read error; and a local file's bytes, or nothing when it cannot be read.
std::optional<std::string> read_all(int fd);
std::optional<std::string> read_local_file(const std::string& path);

// A usage problem with the arguments, or nothing. Reads --old-file/--new-file into `args`.
std::optional<std::string> prepare_file_command(FileCommand& command);

// Exit code: 0 when the result has no error, 1 when it has one or the call failed.
boost::asio::awaitable<int> run_file_command(Sandbox& sandbox, const FileCommand& command);

}  // namespace kubesandbox::cli
