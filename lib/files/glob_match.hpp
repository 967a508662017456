// Pattern matching for the file operations, done on the client so that every image (busybox
// included) gives the same answer: Python's fnmatchcase, the brace expansion and `**` rules of
// DeepAgents' glob, and Python's glob.glob rules used by grep's path filter. Sans-IO.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kubesandbox::files {

// Python fnmatch.fnmatchcase: *, ?, [seq], [!seq]; no escapes; an unclosed '[' is literal.
// ? and classes consume one UTF-8 character (one byte where the bytes are not UTF-8).
bool fnmatch(std::string_view pattern, std::string_view name);

// {a,b} alternatives, nested; a group without a top-level comma stays literal. Empty when the
// expansion would give more than `limit` patterns.
std::optional<std::vector<std::string>> expand_braces(std::string_view pattern, std::size_t limit);

// A compiled DeepAgents glob pattern (one brace alternative).
class GlobPattern {
public:
    // `pattern` after brace expansion and with '\' already turned into '/'.
    explicit GlobPattern(std::string_view pattern);
    // `relative` = path below the search root, segments separated by '/', no leading '/'.
    bool matches(std::string_view relative) const;
    // The basename pattern a candidate's last segment must match, for a remote pre-filter;
    // empty when every name may match (a trailing **).
    std::optional<std::string> last_segment() const;

private:
    bool anywhere_{};  // no '/': match the basename at any depth
    bool never_{};     // ends in '/' after a non-** segment: matches nothing (only files are listed)
    std::vector<std::string> segments_{};
};

// True when a pattern has a ".." segment (after '\' → '/').
bool has_parent_segment(std::string_view pattern);

// Python glob.glob(pattern, recursive=True) applied to one relative file path: hidden names
// match only a segment that starts with '.', ** spans directories that are not hidden.
bool python_glob_matches(std::string_view pattern, std::string_view relative);

// Splits on '/', dropping empty segments.
std::vector<std::string_view> split_segments(std::string_view path);

}  // namespace kubesandbox::files
