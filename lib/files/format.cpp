#include <kubesandbox/file_format.hpp>

#include "files/text.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>

namespace kubesandbox {

namespace {

constexpr std::size_t max_line_chars = 5000;
constexpr std::size_t max_result_chars = 80000;  // 20,000 tokens at 4 characters each
constexpr const char* truncation_guidance = "... [results truncated, try being more specific with your parameters]";

// Byte length of the first `n` characters of valid UTF-8.
std::size_t bytes_of_chars(std::string_view s, std::size_t n) {
    std::size_t i = 0;
    while (i < s.size() && n > 0) {
        ++i;
        while (i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) ++i;
        --n;
    }
    return i;
}

std::string truncate_text(std::string s) {
    if (files::code_points(s) <= max_result_chars) return s;
    s.resize(bytes_of_chars(s, max_result_chars));
    return s + "\n" + truncation_guidance;
}

bool invisible(std::uint32_t cp) {
    return (cp >= 0x80 && cp <= 0xA0) || cp == 0xAD || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200F) ||
           (cp >= 0x2028 && cp <= 0x202F) || (cp >= 0x205F && cp <= 0x2064) || cp == 0x3000 || cp == 0xFEFF ||
           (cp >= 0xE000 && cp <= 0xF8FF);
}

}  // namespace

std::string format_line_numbers(std::string_view content, long long start_line) {
    // str.split("\n"), then one trailing empty element dropped.
    std::vector<std::string_view> lines;
    for (std::size_t start = 0;;) {
        std::size_t nl = content.find('\n', start);
        lines.push_back(content.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start));
        if (nl == std::string_view::npos) break;
        start = nl + 1;
    }
    if (lines.back().empty()) lines.pop_back();
    std::vector<std::pair<std::string, std::string_view>> rows;
    for (std::size_t i = 0; i < lines.size(); ++i) {
        std::string number = std::to_string(start_line + static_cast<long long>(i));
        std::string_view line = lines[i];
        if (files::code_points(line) <= max_line_chars) {
            rows.emplace_back(number, line);
            continue;
        }
        for (int part = 0; !line.empty(); ++part) {
            std::size_t n = bytes_of_chars(line, max_line_chars);
            rows.emplace_back(part == 0 ? number : number + "." + std::to_string(part), line.substr(0, n));
            line.remove_prefix(n);
        }
    }
    std::size_t width = 0;
    for (const auto& row : rows) width = std::max(width, row.first.size());
    std::string out;
    for (std::size_t i = 0; i < rows.size(); ++i) {
        if (i > 0) out.push_back('\n');
        out.append(width - rows[i].first.size(), ' ').append(rows[i].first).append("  ").append(rows[i].second);
    }
    return out;
}

std::string format_execute_output(const ExecuteResponse& response) {
    std::string out = response.output;
    if (response.exit_code) {
        out += *response.exit_code == 0 ? "\n[Command succeeded with exit code " : "\n[Command failed with exit code ";
        out += std::to_string(*response.exit_code) + "]";
    }
    if (response.truncated) out += "\n[Output was truncated due to size limits]";
    return out;
}

std::string python_repr(std::string_view text) {
    bool has_single = text.find('\'') != std::string_view::npos;
    bool has_double = text.find('"') != std::string_view::npos;
    char quote = has_single && !has_double ? '"' : '\'';
    std::string out(1, quote);
    char buf[16];
    for (std::size_t i = 0; i < text.size();) {
        auto c = static_cast<unsigned char>(text[i]);
        if (c < 0x80) {
            ++i;
            if (c == '\\' || c == static_cast<unsigned char>(quote)) {
                out.push_back('\\');
                out.push_back(static_cast<char>(c));
            } else if (c == '\n') {
                out += "\\n";
            } else if (c == '\r') {
                out += "\\r";
            } else if (c == '\t') {
                out += "\\t";
            } else if (c < 0x20 || c == 0x7F) {
                std::snprintf(buf, sizeof buf, "\\x%02x", c);
                out += buf;
            } else {
                out.push_back(static_cast<char>(c));
            }
            continue;
        }
        std::size_t n = 1;
        while (i + n < text.size() && (static_cast<unsigned char>(text[i + n]) & 0xC0) == 0x80 && n < 4) ++n;
        std::uint32_t cp = c & (0xFF >> (n + 1));
        for (std::size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
        if (invisible(cp)) {
            std::snprintf(buf, sizeof buf, cp <= 0xFF ? "\\x%02x" : "\\u%04x", static_cast<unsigned>(cp));
            out += buf;
        } else {
            out.append(text.substr(i, n));
        }
        i += n;
    }
    out.push_back(quote);
    return out;
}

std::string format_path_list(const std::vector<std::string>& paths) {
    if (paths.empty()) return "No files found";
    std::size_t total = 0;
    for (const auto& p : paths) total += files::code_points(p);
    std::vector<std::string> items(paths.begin(), paths.end());
    if (total > max_result_chars) {
        items.resize(paths.size() * max_result_chars / total);
        items.emplace_back(truncation_guidance);
    }
    std::string out = "[";
    for (std::size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += ", ";
        out += python_repr(items[i]);
    }
    return out + "]";
}

std::string format_grep_matches(const std::vector<GrepMatch>& matches, GrepOutputMode mode) {
    if (matches.empty()) return "No matches found";
    std::string out;
    if (mode == GrepOutputMode::files_with_matches) {
        std::vector<std::string> files;
        for (const auto& m : matches) files.push_back(m.path);
        std::sort(files.begin(), files.end());
        files.erase(std::unique(files.begin(), files.end()), files.end());
        for (std::size_t i = 0; i < files.size(); ++i) out += (i ? "\n" : "") + files[i];
    } else if (mode == GrepOutputMode::count) {
        std::map<std::string, long long> counts;
        for (const auto& m : matches) ++counts[m.path];
        bool first = true;
        for (const auto& [path, n] : counts) {
            out += (first ? "" : "\n") + path + ": " + std::to_string(n);
            first = false;
        }
    } else {
        std::string current;
        bool first = true;
        for (const auto& m : matches) {
            if (first || m.path != current) {
                out += (first ? "" : "\n") + m.path + ":";
                current = m.path;
                first = false;
            }
            out += "\n  " + std::to_string(m.line) + ": " + m.text;
        }
    }
    return truncate_text(std::move(out));
}

}  // namespace kubesandbox
