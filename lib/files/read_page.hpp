// read(): DeepAgents 0.7.8's paging over what the sandbox sent back. The sandbox sends a small
// file whole, and of a large one only the first 8 KiB and the newline-normalised text from the
// requested line on; the rules (budget, truncation, total_lines, next_offset) are applied here.
// Sans-IO.
#pragma once

#include <kubesandbox/file_ops.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace kubesandbox::files {

// Files up to this size come back whole (they are at most one page anyway).
inline constexpr std::size_t whole_file_bytes = file_limits::max_output_bytes;

// Offsets are clamped here (no file has this many lines; keeps offset + limit from overflowing).
inline constexpr long long max_read_offset = 1'000'000'000'000'000LL;

enum class FileKind { text, image, video, audio, document };

// By extension, case-insensitive, as DeepAgents decides it.
FileKind file_kind(std::string_view path);

struct ReadSource {
    std::size_t size{};
    bool whole{};          // `body` is the whole file, raw
    std::string head{};    // large file: its first min(size, 8192) raw bytes
    std::string body{};    // large file: normalised text from line `offset` on, limit + 1 lines at most, cut at 500 KiB
    bool body_complete{};  // large file: `body` reaches the end of the file
    std::optional<long long> line_count{};  // large file: counted by the sandbox when asked
};

// What the read script printed, or the error text ("file_not_found", "unexpected server
// response: ...") to put after "File '<path>': ".
struct ParsedRead {
    std::optional<std::string> error{};
    ReadSource source{};
    bool too_large_binary{};
    bool large{};  // the file is larger than a whole read: read it again with read_command(..., true)
};
ParsedRead parse_read_output(std::string_view output, bool output_truncated);

ReadResult read_page(const ReadSource& source, FileKind kind, long long offset, long long limit);

// The sh script and its arguments for a read of lines [offset, offset + limit) of `path`; `large`
// once a first read said the file is larger than a whole read.
std::string read_command(std::string_view path, FileKind kind, long long offset, long long limit, bool large = false);

}  // namespace kubesandbox::files
