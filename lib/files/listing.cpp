#include "files/listing.hpp"

#include "files/glob_match.hpp"
#include "files/scripts.hpp"
#include "files/text.hpp"

#include <algorithm>
#include <charconv>

namespace kubesandbox::files {

namespace {

std::string with_args(std::initializer_list<std::string_view> args, const std::vector<std::string>& more,
                      std::string_view script) {
    std::string cmd = "set --";
    for (auto a : args) cmd += " " + shell_quote(a);
    for (const auto& a : more) cmd += " " + shell_quote(a);
    return cmd.append("\n").append(script);
}

std::string detail_of(std::string_view output) {
    std::string d(output.substr(0, 200));
    return d.empty() ? std::string("(empty)") : replace_invalid_utf8(d);
}

// NUL-terminated records; a last record without its NUL is dropped (cut by an output limit).
std::vector<std::string_view> nul_records(std::string_view s) {
    std::vector<std::string_view> out;
    std::size_t start = 0;
    for (std::size_t z; (z = s.find('\0', start)) != std::string_view::npos; start = z + 1)
        out.push_back(s.substr(start, z - start));
    return out;
}

std::string_view strip_dot_slash(std::string_view p) {
    if (p.substr(0, 2) == "./") p.remove_prefix(2);
    return p;
}

std::string_view rstrip_newlines(std::string_view s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t'))
        s.remove_suffix(1);
    while (!s.empty() && (s.front() == '\n' || s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    return s;
}

}  // namespace

std::string join_path(std::string_view base, std::string_view name) {
    if (base.empty()) return std::string(name);
    if (base.back() == '/') return std::string(base) + std::string(name);
    return std::string(base) + "/" + std::string(name);
}

std::string widen_for_shell(std::string_view p) {
    std::string out;
    for (std::size_t i = 0; i < p.size(); ++i) {
        if (p[i] == '?') {
            out.push_back('*');
        } else if (p[i] == '[') {
            // A class that closes becomes '*'; an unclosed '[' is literal for both matchers.
            std::size_t j = i + 1;
            if (j < p.size() && (p[j] == '!' || p[j] == '^')) ++j;
            if (j < p.size() && p[j] == ']') ++j;
            while (j < p.size() && p[j] != ']') ++j;
            if (j < p.size()) {
                out.push_back('*');
                i = j;
            } else {
                out += "[[]";
            }
        } else if (p[i] == '\\') {
            out += "[\\]";
        } else {
            out.push_back(p[i]);
        }
    }
    return out;
}

std::string ls_command(std::string_view path) { return with_args({path}, {}, ls_script); }

LsResult parse_ls_output(std::string_view path, std::string_view output) {
    LsResult r;
    std::string prefix = "Path '" + std::string(path) + "': ";
    if (output.substr(0, 2) == "E ") {
        r.error = prefix + std::string(rstrip_newlines(output.substr(2)));
        return r;
    }
    if (output.substr(0, 3) != "OK\n") {
        r.error = prefix + "unexpected server response: " + detail_of(output);
        return r;
    }
    std::vector<FileInfo> entries;
    for (auto rec : nul_records(output.substr(3))) {
        if (rec.size() < 2) continue;
        entries.push_back(FileInfo{join_path(path, rec.substr(1)), rec[0] == 'd'});
    }
    std::sort(entries.begin(), entries.end(), [](const FileInfo& a, const FileInfo& b) { return a.path < b.path; });
    r.entries = std::move(entries);
    return r;
}

std::string remove_command(std::string_view path) { return with_args({path}, {}, delete_script); }

RemoveResult parse_remove_output(std::string_view path, std::string_view output, std::optional<int> exit_code) {
    RemoveResult r;
    std::string p(path);
    if (output.substr(0, 12) == "E not_found\n") {
        r.error = "Error: '" + p + "' not found";
    } else if (exit_code == 0 && output == "OK\n") {
        r.path = p;
    } else {
        std::string_view detail = output.substr(0, 1) == "F" ? output.substr(1) : output;
        detail = rstrip_newlines(detail);
        r.error = "Error deleting file '" + p +
                  "': " + (detail.empty() ? std::string("unknown error") : replace_invalid_utf8(detail));
    }
    return r;
}

std::vector<std::string> glob_prefilter(std::string_view pattern) {
    std::string p(pattern);
    std::replace(p.begin(), p.end(), '\\', '/');
    auto expanded = expand_braces(p, file_limits::max_brace_expansions);
    if (!expanded) return {};
    std::vector<std::string> names;
    for (const auto& e : *expanded) {
        auto last = GlobPattern(e).last_segment();
        if (!last) return {};
        // [^..] spelled [!..] first, then widened.
        names.push_back(widen_for_shell(*last));
    }
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    return names;
}

std::string glob_command(std::string_view root, const std::vector<std::string>& names) {
    return with_args({root}, names, glob_script);
}

GlobResult glob_result(std::string_view root, std::string_view pattern, std::string_view output,
                       bool output_truncated) {
    GlobResult r;
    std::string prefix = "Path '" + std::string(root) + "': ";
    if (output.substr(0, 2) == "E ") {
        r.error = prefix + std::string(rstrip_newlines(output.substr(2)));
        return r;
    }
    std::string p(pattern);
    std::replace(p.begin(), p.end(), '\\', '/');
    if (has_parent_segment(p)) {
        r.error = prefix + "invalid_pattern";
        return r;
    }
    auto expanded = expand_braces(p, file_limits::max_brace_expansions);
    if (!expanded) {
        r.error = prefix + "pattern_too_broad";
        return r;
    }
    std::vector<GlobPattern> patterns;
    for (const auto& e : *expanded) patterns.emplace_back(e);

    auto records = nul_records(output);
    if (records.empty() || records[0].substr(0, 1) != "R") {
        r.error = prefix + "glob helper emitted unexpected output: " + detail_of(output);
        return r;
    }
    std::string real_root(records[0].substr(1));
    auto inside = [&](std::string_view target) {
        if (real_root == "/") return !target.empty() && target[0] == '/';
        return target.substr(0, real_root.size()) == real_root &&
               (target.size() == real_root.size() || target[real_root.size()] == '/');
    };
    std::vector<std::string> found;
    auto consider = [&](std::string_view rel) {
        for (const auto& pat : patterns)
            if (pat.matches(rel)) {
                found.emplace_back(rel);
                return;
            }
    };
    std::size_t i = 1;
    for (; i < records.size() && !records[i].empty(); ++i) consider(strip_dot_slash(records[i]));
    ++i;  // the empty record between files and symlinks
    bool finished = false, walk_errors = false;
    for (; i < records.size(); ++i) {
        if (records[i].substr(0, 1) == "X") {
            finished = true;
            walk_errors = records[i] != "X0 0";
            break;
        }
        if (i + 1 >= records.size()) break;
        if (inside(records[i + 1])) consider(strip_dot_slash(records[i]));
        ++i;
    }
    if (!finished && !output_truncated) {
        r.error = prefix + "glob helper emitted unexpected output: " + detail_of(output);
        return r;
    }
    std::sort(found.begin(), found.end());
    found.erase(std::unique(found.begin(), found.end()), found.end());
    r.truncated = walk_errors || !finished || found.size() > file_limits::max_glob_matches;
    if (found.size() > file_limits::max_glob_matches) found.resize(file_limits::max_glob_matches);
    std::string base(root);
    while (!base.empty() && base.back() == '/') base.pop_back();
    std::vector<FileInfo> matches;
    matches.reserve(found.size());
    for (const auto& rel : found) matches.push_back(FileInfo{base + "/" + rel, false});
    r.matches = std::move(matches);
    return r;
}

std::vector<std::string> grep_prefilter(std::string_view glob) {
    if (glob.empty()) return {};
    std::string_view last = glob;
    if (auto slash = glob.rfind('/'); slash != std::string_view::npos) last = glob.substr(slash + 1);
    if (last.empty() || last == "**") return {};
    return {widen_for_shell(last)};
}

std::string grep_command(std::string_view path, std::string_view pattern, std::optional<std::size_t> max_count,
                         const std::vector<std::string>& names) {
    std::string max = max_count ? std::to_string(*max_count + 1) : "0";
    return with_args({path, pattern, max}, names, grep_script);
}

GrepResult grep_result(std::string_view path, std::string_view glob, std::optional<std::size_t> max_count,
                       std::string_view output, bool output_truncated) {
    GrepResult r;
    std::string prefix = "Path '" + std::string(path) + "': ";
    if (output.substr(0, 2) == "E ") {
        r.error = prefix + std::string(rstrip_newlines(output.substr(2)));
        return r;
    }
    std::string_view by_path = glob.find('/') == std::string_view::npos ? std::string_view() : glob;
    std::string_view by_name = by_path.empty() ? glob : std::string_view();
    while (!by_path.empty() && by_path.front() == '/') by_path.remove_prefix(1);
    if (!by_path.empty() && has_parent_segment(by_path)) {
        r.error = prefix + "the glob must not contain '..'";
        return r;
    }
    if (output.size() < 2 || (output.substr(0, 2) != "D\n" && output.substr(0, 2) != "F\n")) {
        r.error = prefix + "unexpected server response: " + detail_of(output);
        return r;
    }
    bool folder = output[0] == 'D';
    std::string_view rest = output.substr(2);
    std::vector<GrepMatch> matches;
    std::vector<std::string> binary;  // display paths of files holding NUL bytes
    while (!rest.empty()) {
        if (rest.substr(0, 2) == "B\n") {
            // <length>:<name> per line; names are dropped from the matches below.
            std::string_view list = rest.substr(2);
            while (!list.empty()) {
                std::size_t len = 0;
                auto [p, ec] = std::from_chars(list.data(), list.data() + list.size(), len);
                std::size_t at = static_cast<std::size_t>(p - list.data());
                if (ec != std::errc{} || at >= list.size() || list[at] != ':' || at + 1 + len > list.size()) break;
                binary.push_back(join_path(path, strip_dot_slash(list.substr(at + 1, len))));
                list.remove_prefix(std::min(list.size(), at + 2 + len));
            }
            rest = {};
            break;
        }
        // <length>:<name>:<line>:<text>\n
        std::size_t len = 0;
        auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), len);
        std::size_t at = static_cast<std::size_t>(p - rest.data());
        std::size_t nl = std::string_view::npos;
        bool ok = ec == std::errc{} && at < rest.size() && rest[at] == ':' && at + 1 + len < rest.size() &&
                  rest[at + 1 + len] == ':';
        std::string_view name, text;
        long long line = 0;
        if (ok) {
            name = rest.substr(at + 1, len);
            std::string_view after = rest.substr(at + 2 + len);
            auto [q, ec2] = std::from_chars(after.data(), after.data() + after.size(), line);
            std::size_t k = static_cast<std::size_t>(q - after.data());
            ok = ec2 == std::errc{} && k < after.size() && after[k] == ':';
            if (ok) {
                nl = after.find('\n', k + 1);
                ok = nl != std::string_view::npos;
                if (ok) {
                    text = after.substr(k + 1, nl - k - 1);
                    rest = after.substr(nl + 1);
                }
            }
        }
        if (!ok) {
            if (output_truncated) {
                r.truncated = true;  // the last record was cut by the output limit
                break;
            }
            r.error = prefix + "unexpected server response: " + detail_of(rest);
            return r;
        }
        std::string display;
        if (folder) {
            std::string_view rel = strip_dot_slash(name);
            if (!by_name.empty()) {
                std::string_view base = rel.substr(rel.rfind('/') == std::string_view::npos ? 0 : rel.rfind('/') + 1);
                if (!fnmatch(by_name, base)) continue;
            }
            if (!by_path.empty() && !python_glob_matches(by_path, rel)) continue;
            display = join_path(path, rel);
        } else {
            display = std::string(path);
        }
        matches.push_back(GrepMatch{std::move(display), line, std::string(text)});
    }
    if (!binary.empty()) {
        std::sort(binary.begin(), binary.end());
        std::erase_if(matches,
                      [&](const GrepMatch& m) { return std::binary_search(binary.begin(), binary.end(), m.path); });
    }
    // Files in name order (find walks in directory order), lines in file order.
    std::stable_sort(matches.begin(), matches.end(),
                     [](const GrepMatch& a, const GrepMatch& b) { return a.path < b.path; });
    if (max_count && matches.size() > *max_count) {
        matches.resize(*max_count);
        r.truncated = true;
    }
    r.matches = std::move(matches);
    return r;
}

}  // namespace kubesandbox::files
