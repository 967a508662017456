// The policy's decisions and the virtual root's path mapping. Sans-IO, except for the script
// that asks the sandbox for canonical paths.
#pragma once

#include <kubesandbox/file_policy.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kubesandbox::files {

// "/a//b/./c/../d" -> "/a/b/d"; empty for a relative path. ".." at "/" stays at "/" (as POSIX).
std::optional<std::string> normalize_absolute(std::string_view path);

// Virtual path -> real path below root (a relative virtual path is taken from the virtual "/");
// empty when ".." would climb above the virtual root.
std::optional<std::string> virtual_to_real(std::string_view root, std::string_view virtual_path);

// Whether `prefix` is `path` or one of its parent folders ("/w" covers "/w" and "/w/x", not "/wx").
bool path_covers(std::string_view prefix, std::string_view path);

// Whether a canonical absolute path may be written. A prefix covers itself and what lies below
// it ("/w" covers "/w" and "/w/x", not "/wx").
bool write_allowed(const FilePolicy& policy, std::string_view canonical);
// rm -rf: also refused when a denied prefix lies below the path.
bool remove_allowed(const FilePolicy& policy, std::string_view canonical);

// The deny_commands entry the command contains, if any.
std::optional<std::string> denied_command(const FilePolicy& policy, std::string_view command);

// A script printing, NUL-terminated, the canonical form of each (absolute, normalised) path:
// symlinked parents resolved, and with follow_last the path itself when it is a symlink (a
// dangling one, or a folder that cannot be entered, gives an empty record: refused).
std::string canonical_paths_command(bool follow_last, const std::vector<std::string>& paths);
// One entry per path, empty where the sandbox refused; nothing when the output is malformed.
std::optional<std::vector<std::optional<std::string>>> parse_canonical_paths(std::string_view output,
                                                                             std::size_t count);

// Calls the hook; false when the operation must not proceed (audit failed and fail_closed).
bool audit(const FilePolicy& policy, AuditEvent event);

}  // namespace kubesandbox::files
