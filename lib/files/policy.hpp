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

// Whether a canonical absolute path may be written. A prefix covers itself and what lies below
// it ("/w" covers "/w" and "/w/x", not "/wx").
bool write_allowed(const FilePolicy& policy, std::string_view canonical);

// The deny_commands entry the command contains, if any.
std::optional<std::string> denied_command(const FilePolicy& policy, std::string_view command);

// A script printing, NUL-terminated, the canonical form of each (absolute, normalised) path:
// symlinked parents resolved, and the path itself when it is a symlink.
std::string canonical_paths_command(const std::vector<std::string>& paths);
std::optional<std::vector<std::string>> parse_canonical_paths(std::string_view output, std::size_t count);

// Calls the hook; false when the operation must not proceed (audit failed and fail_closed).
bool audit(const FilePolicy& policy, AuditEvent event);

}  // namespace kubesandbox::files
