#include "files/edit_core.hpp"

#include "files/text.hpp"

namespace kubesandbox::files {

namespace {

std::string replace_all_of(std::string_view s, std::string_view from, std::string_view to) {
    std::string out;
    std::size_t start = 0;
    for (std::size_t at; (at = s.find(from, start)) != std::string_view::npos; start = at + from.size()) {
        out.append(s.substr(start, at - start));
        out.append(to);
    }
    out.append(s.substr(start));
    return out;
}

std::string to_lf(std::string_view s) { return replace_all_of(s, "\r\n", "\n"); }
std::string to_crlf(std::string_view s) { return replace_all_of(to_lf(s), "\n", "\r\n"); }

long long count_of(std::string_view text, std::string_view needle) {
    if (needle.empty()) return static_cast<long long>(code_points(text)) + 1;
    long long n = 0;
    for (std::size_t at = text.find(needle); at != std::string_view::npos; at = text.find(needle, at + needle.size()))
        ++n;
    return n;
}

// Python's str.replace(old, new) / str.replace(old, new, 1), empty `old` included.
std::string replaced(std::string_view text, std::string_view old_s, std::string_view new_s, bool all) {
    if (!old_s.empty()) {
        if (all) return replace_all_of(text, old_s, new_s);
        std::size_t at = text.find(old_s);
        std::string out(text.substr(0, at));
        out.append(new_s).append(text.substr(at + old_s.size()));
        return out;
    }
    if (!all) return std::string(new_s) + std::string(text);
    std::string out(new_s);
    for (std::size_t i = 0; i < text.size();) {
        std::size_t j = i + 1;
        while (j < text.size() && (static_cast<unsigned char>(text[j]) & 0xC0) == 0x80) ++j;
        out.append(text.substr(i, j - i)).append(new_s);
        i = j;
    }
    return out;
}

}  // namespace

EditOutcome apply_edit(std::string_view content, std::string_view old_string, std::string_view new_string,
                       bool replace_all) {
    EditOutcome outcome;
    if (!valid_utf8(content)) {
        outcome.code = "not_a_text_file";
        return outcome;
    }
    std::string variants[3][2] = {{std::string(old_string), std::string(new_string)},
                                  {to_crlf(old_string), to_crlf(new_string)},
                                  {to_lf(old_string), to_lf(new_string)}};
    for (const auto& [old_v, new_v] : variants) {
        long long count = count_of(content, old_v);
        if (count == 0) continue;
        outcome.count = count;
        if (count > 1 && !replace_all) {
            outcome.code = "multiple_occurrences";
            return outcome;
        }
        outcome.content = replaced(content, old_v, new_v, replace_all);
        return outcome;
    }
    outcome.code = "string_not_found";
    return outcome;
}

std::string edit_error_text(std::string_view code, std::string_view path, std::string_view old_string) {
    std::string p(path), old_s(old_string);
    if (code == "file_not_found") return "Error: File '" + p + "' not found";
    if (code == "permission_denied") return "Error: Permission denied editing file '" + p + "'";
    if (code == "not_a_file") return "Error: '" + p + "' is not a regular file";
    if (code == "not_a_text_file") return "Error: File '" + p + "' is not a text file";
    if (code == "string_not_found") return "Error: String not found in file: '" + old_s + "'";
    if (code == "multiple_occurrences")
        return "Error: String '" + old_s + "' appears multiple times. Use replace_all=True to replace all occurrences.";
    return "Error editing file '" + p + "': " + std::string(code);
}

}  // namespace kubesandbox::files
