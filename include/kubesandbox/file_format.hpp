// Renders results as DeepAgents shows them to a model, for hosts that want the same bytes:
// numbered read output, execute output with its status line, path lists, grep output.
#pragma once

#include <kubesandbox/file_ops.hpp>
#include <kubesandbox/sandbox.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace kubesandbox {

// Lines numbered from start_line, long lines cut into 5000-character chunks numbered N, N.1,
// N.2, ...; numbers right-aligned to the widest one, two spaces, then the text.
std::string format_line_numbers(std::string_view content, long long start_line);

// Output, then "[Command succeeded/failed with exit code N]" and the truncation note.
std::string format_execute_output(const ExecuteResponse& response);

// A Python list literal of the paths (['/a', '/b']), "No files found" when empty; a list over
// 80,000 characters is cut with a note to narrow the search.
std::string format_path_list(const std::vector<std::string>& paths);

enum class GrepOutputMode { files_with_matches, count, content };
std::string format_grep_matches(const std::vector<GrepMatch>& matches, GrepOutputMode mode);

// Python's repr() of a str (single quotes unless the text holds only single ones, escapes for
// control and invisible characters).
std::string python_repr(std::string_view text);

}  // namespace kubesandbox
