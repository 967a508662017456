// ls, glob, grep and delete: the sh scripts sent to the sandbox and the parsers of what they
// print. Paths travel NUL-terminated or length-prefixed, so any byte but NUL is safe in a name;
// matching is done here (glob_match.hpp) so every image answers alike. Sans-IO.
#pragma once

#include <kubesandbox/file_ops.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kubesandbox::files {

// Python's os.path.join(base, name) for a relative name.
std::string join_path(std::string_view base, std::string_view name);

std::string ls_command(std::string_view path);
LsResult parse_ls_output(std::string_view path, std::string_view output);

std::string remove_command(std::string_view path);
RemoveResult parse_remove_output(std::string_view path, std::string_view output, std::optional<int> exit_code);

// The glob script for a search root; `names` pre-filter candidates by basename (shell patterns
// with only '*', a superset of what will match); empty = every file.
std::string glob_command(std::string_view root, const std::vector<std::string>& names);
GlobResult glob_result(std::string_view root, std::string_view pattern, std::string_view output, bool output_truncated);
// The basename pre-filters for a glob pattern, or empty when every file is a candidate.
std::vector<std::string> glob_prefilter(std::string_view pattern);

std::string grep_command(std::string_view path, std::string_view pattern, std::optional<std::size_t> max_count,
                         const std::vector<std::string>& names);
// glob: "" = no filter; one without '/' filters basenames, one with '/' paths below `path`.
GrepResult grep_result(std::string_view path, std::string_view glob, std::optional<std::size_t> max_count,
                       std::string_view output, bool output_truncated);
std::vector<std::string> grep_prefilter(std::string_view glob);

// A shell pattern accepting at least what `pattern` (Python fnmatch) accepts: '?' and classes
// widened to '*' (the sandbox's fnmatch counts bytes, ours characters).
std::string widen_for_shell(std::string_view pattern);

}  // namespace kubesandbox::files
