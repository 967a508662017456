#include "files/policy.hpp"

#include "files/glob_match.hpp"
#include "files/scripts.hpp"
#include "files/text.hpp"

namespace kubesandbox::files {

namespace {

// Segments after resolving "." and ".."; `climbed` set when ".." went above the start.
std::vector<std::string_view> resolve_segments(std::string_view path, bool& climbed) {
    std::vector<std::string_view> out;
    climbed = false;
    for (auto s : split_segments(path)) {
        if (s == ".") continue;
        if (s == "..") {
            if (out.empty()) climbed = true;
            else out.pop_back();
            continue;
        }
        out.push_back(s);
    }
    return out;
}

std::string join_segments(const std::vector<std::string_view>& segments) {
    std::string out;
    for (auto s : segments) out.append("/").append(s);
    return out.empty() ? "/" : out;
}

}  // namespace

bool path_covers(std::string_view prefix, std::string_view path) {
    auto p = normalize_absolute(prefix);
    if (!p) return false;
    if (*p == "/") return true;
    return path == *p || (path.size() > p->size() && path.substr(0, p->size()) == *p && path[p->size()] == '/');
}

std::optional<std::string> normalize_absolute(std::string_view path) {
    if (path.empty() || path[0] != '/') return std::nullopt;
    bool climbed = false;
    return join_segments(resolve_segments(path, climbed));
}

std::optional<std::string> virtual_to_real(std::string_view root, std::string_view virtual_path) {
    bool climbed = false;
    auto segments = resolve_segments(virtual_path, climbed);
    if (climbed) return std::nullopt;
    auto base = normalize_absolute(root);
    if (!base) return std::nullopt;
    if (segments.empty()) return *base;
    std::string rel = join_segments(segments);
    return *base == "/" ? rel : *base + rel;
}

bool write_allowed(const FilePolicy& policy, std::string_view canonical) {
    for (const auto& d : policy.deny_prefixes)
        if (path_covers(d, canonical)) return false;
    if (policy.allow_prefixes.empty()) return true;
    for (const auto& a : policy.allow_prefixes)
        if (path_covers(a, canonical)) return true;
    return false;
}

bool remove_allowed(const FilePolicy& policy, std::string_view canonical) {
    if (!write_allowed(policy, canonical)) return false;
    for (const auto& d : policy.deny_prefixes)
        if (path_covers(canonical, d)) return false;  // rm -rf of a folder holding a denied one
    return true;
}

std::optional<std::string> denied_command(const FilePolicy& policy, std::string_view command) {
    for (const auto& d : policy.deny_commands)
        if (!d.empty() && command.find(d) != std::string_view::npos) return d;
    return std::nullopt;
}

std::string canonical_paths_command(bool follow_last, const std::vector<std::string>& paths) {
    std::string cmd = follow_last ? "set -- follow" : "set -- parent";
    for (const auto& p : paths) cmd += " " + shell_quote(p);
    return cmd.append("\n").append(canonical_script);
}

std::optional<std::vector<std::optional<std::string>>> parse_canonical_paths(std::string_view output,
                                                                             std::size_t count) {
    std::vector<std::optional<std::string>> out;
    std::size_t start = 0;
    for (std::size_t z; (z = output.find('\0', start)) != std::string_view::npos; start = z + 1)
        out.push_back(normalize_absolute(output.substr(start, z - start)));  // empty or relative: refused
    if (out.size() != count || start != output.size()) return std::nullopt;
    return out;
}

bool audit(const FilePolicy& policy, AuditEvent event) {
    if (!policy.audit) return true;
    auto recorded = policy.audit(event);
    if (recorded) return true;
    policy.logger.warning("audit hook failed for " + event.operation + ": " + recorded.error().describe() +
                          (policy.fail_closed ? " (operation refused)" : " (operation proceeds)"));
    return !policy.fail_closed;
}

}  // namespace kubesandbox::files
