// The DeepAgents file operations (0.7 semantics), written once over the Sandbox interface, so
// every mode gets them. They need only a POSIX shell and the usual utilities in the sandbox
// (busybox is enough; no python3).
//
// Two kinds of failure: a file-level outcome the agent should see (missing file, string not
// found, ...) is the result's `error` string, worded as DeepAgents words it; a transport failure,
// a lost sandbox or an invalid argument (NUL in a path or pattern) is the Error of the Result.
#pragma once

#include <kubesandbox/file_policy.hpp>
#include <kubesandbox/sandbox.hpp>

#include <boost/asio/awaitable.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace kubesandbox {

struct FileInfo {
    std::string path{};
    bool is_dir{};
};

struct LsResult {
    std::optional<std::string> error{};
    std::optional<std::vector<FileInfo>> entries{};
};

struct FileData {
    std::string content{};  // UTF-8 text, or base64 when encoding is "base64"
    std::string encoding{"utf-8"};
};

struct ReadResult {
    std::optional<std::string> error{};
    std::optional<FileData> file_data{};
    std::optional<long long> total_lines{};  // empty when unknown (large file, page not at EOF)
    std::optional<long long> start_line{};   // 1-based, set with end_line
    std::optional<long long> end_line{};
    std::optional<long long> next_offset{};  // == end_line while lines remain (or may remain)
    bool no_lines_requested{};
};

struct WriteResult {
    std::optional<std::string> error{};
    std::optional<std::string> path{};
};

struct EditResult {
    std::optional<std::string> error{};
    std::optional<std::string> path{};
    std::optional<long long> occurrences{};
};

struct RemoveResult {
    std::optional<std::string> error{};
    std::optional<std::string> path{};
};

struct GrepMatch {
    std::string path{};
    long long line{};  // 1-based
    std::string text{};
};

struct GrepResult {
    std::optional<std::string> error{};
    std::optional<std::vector<GrepMatch>> matches{};
    bool truncated{};
};

struct GlobResult {
    std::optional<std::string> error{};
    std::optional<std::vector<FileInfo>> matches{};  // absolute paths, regular files only
    bool truncated{};
};

// Limits of DeepAgents 0.7.8 (§2.2 of the spec they come from), kept as named values.
namespace file_limits {
inline constexpr std::size_t max_output_bytes = 500 * 1024;   // read page budget, binary preview
inline constexpr std::size_t text_probe_bytes = 8192;         // text/binary decision
inline constexpr std::size_t full_count_bytes = 1024 * 1024;  // total_lines of larger files only at EOF
inline constexpr std::size_t max_glob_matches = 10000;
inline constexpr std::size_t max_brace_expansions = 1000;
inline constexpr const char* empty_content_warning = "System reminder: File exists but has empty contents";
inline constexpr const char* read_truncation_message =
    "\n\n[Output was truncated due to size limits. This paginated read result exceeded the sandbox stdout "
    "limit. Continue reading with a larger offset or smaller limit to inspect the rest of the file.]";
}  // namespace file_limits

struct FileOpsOptions {
    // Virtual root: every path is taken below root_dir ("/a" is root_dir + "/a"; ".." may not
    // climb above it: invalid_path) and paths in results are given back below "/" again. Writes,
    // edits and removes also resolve symlinks in the sandbox (one more execute) and refuse a path
    // that leads out of the root; reads are mapped lexically.
    std::string root_dir{};
    // Checked for write, edit and remove (on the canonical real path); audited for every operation.
    FilePolicy policy{};
};

class FileOps {
public:
    // The sandbox must outlive this object (FileOps holds a reference).
    explicit FileOps(Sandbox& sandbox) : sandbox_(sandbox) {}
    FileOps(Sandbox& sandbox, FileOpsOptions options) : sandbox_(sandbox), options_(std::move(options)) {}

    // Entries of a directory (not recursive), sorted by name; is_dir does not follow symlinks.
    boost::asio::awaitable<Result<LsResult>> ls(std::string path);

    // Lines [offset, offset+limit) of a text file (universal newlines), at most 500 KiB of them;
    // images, audio, video, PDF and non-UTF-8 files come back whole as base64 up to 500 KiB.
    boost::asio::awaitable<Result<ReadResult>> read(std::string path, long long offset, long long limit);
    boost::asio::awaitable<Result<ReadResult>> read(std::string path) { return read(std::move(path), 0, 2000); }

    // Creates missing parent folders; overwrites an existing file.
    boost::asio::awaitable<Result<WriteResult>> write(std::string path, std::string content);

    // Replaces old_string (exactly once unless replace_all) in a UTF-8 file; a string written
    // with LF line ends also matches the file's CRLF ones and the other way round.
    boost::asio::awaitable<Result<EditResult>> edit(std::string path, std::string old_string, std::string new_string,
                                                    bool replace_all);

    // Removes a file or a whole folder (rm -rf); a missing path is an error.
    boost::asio::awaitable<Result<RemoveResult>> remove(std::string path);

    // Literal (not regex) search. path empty = "." (the sandbox's working directory); glob
    // filters files by name ("*.py") or, when it contains '/', by path below `path`.
    boost::asio::awaitable<Result<GrepResult>> grep(std::string pattern, std::string path, std::string glob,
                                                    std::optional<std::size_t> max_count);

    // Regular files below `path` (empty = "/") matching a pattern with *, ?, [..], {a,b} and **.
    boost::asio::awaitable<Result<GlobResult>> glob(std::string pattern, std::string path);

private:
    struct Target;
    struct Internals;
    friend struct Internals;

    Sandbox& sandbox_;
    FileOpsOptions options_{};
};

}  // namespace kubesandbox
