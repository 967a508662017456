#include "files/glob_match.hpp"

#include <cstdint>
#include <map>
#include <utility>

namespace kubesandbox::files {

namespace {

// One character at s[i]: its code point and length; a byte that does not start a valid UTF-8
// sequence counts as one character of its own.
std::pair<std::uint32_t, std::size_t> next_char(std::string_view s, std::size_t i) {
    auto b = static_cast<unsigned char>(s[i]);
    std::size_t n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
    if (n <= 1 || i + n > s.size()) return {b, 1};
    std::uint32_t cp = b & (0x7F >> n);
    for (std::size_t k = 1; k < n; ++k) {
        auto c = static_cast<unsigned char>(s[i + k]);
        if ((c & 0xC0) != 0x80) return {b, 1};
        cp = (cp << 6) | (c & 0x3F);
    }
    return {cp, n};
}

// A [..] class starting at p[i] == '['. Returns the index after ']' or npos when unclosed.
std::size_t class_end(std::string_view p, std::size_t i) {
    std::size_t j = i + 1;
    if (j < p.size() && p[j] == '!') ++j;
    if (j < p.size() && p[j] == ']') ++j;
    while (j < p.size() && p[j] != ']') ++j;
    return j < p.size() ? j + 1 : std::string_view::npos;
}

bool class_matches(std::string_view p, std::size_t i, std::size_t end, std::uint32_t c) {
    std::size_t k = i + 1;
    bool negate = false;
    if (p[k] == '!') {
        negate = true;
        ++k;
    }
    bool found = false;
    std::size_t last = end - 1;  // index of the closing ']'
    while (k < last) {
        auto [lo, n] = next_char(p, k);
        k += n;
        std::uint32_t hi = lo;
        if (k + 1 < last && p[k] == '-') {
            auto [h, m] = next_char(p, k + 1);
            hi = h;
            k += 1 + m;
        }
        if (lo <= c && c <= hi) found = true;
    }
    return found != negate;
}

bool is_magic(std::string_view segment) { return segment.find_first_of("*?[") != std::string_view::npos; }

}  // namespace

bool fnmatch(std::string_view p, std::string_view s) {
    std::size_t pi = 0, si = 0;
    std::size_t star = std::string_view::npos, star_s = 0;
    while (si < s.size()) {
        if (pi < p.size()) {
            char pc = p[pi];
            if (pc == '*') {
                star = ++pi;
                star_s = si;
                continue;
            }
            auto [c, n] = next_char(s, si);
            if (pc == '?') {
                ++pi;
                si += n;
                continue;
            }
            if (pc == '[') {
                std::size_t end = class_end(p, pi);
                if (end != std::string_view::npos) {
                    if (class_matches(p, pi, end, c)) {
                        pi = end;
                        si += n;
                        continue;
                    }
                } else if (s[si] == '[') {
                    ++pi;
                    ++si;
                    continue;
                }
            } else if (pc == s[si]) {
                ++pi;
                ++si;
                continue;
            }
        }
        if (star == std::string_view::npos) return false;
        // Backtrack: the last '*' takes one more character.
        pi = star;
        star_s += next_char(s, star_s).second;
        si = star_s;
    }
    while (pi < p.size() && p[pi] == '*') ++pi;
    return pi == p.size();
}

namespace {

// Index of the '}' closing the '{' at i, or npos.
std::size_t brace_end(std::string_view p, std::size_t i) {
    int depth = 0;
    for (std::size_t j = i; j < p.size(); ++j) {
        if (p[j] == '{') ++depth;
        if (p[j] == '}' && --depth == 0) return j;
    }
    return std::string_view::npos;
}

std::vector<std::string_view> top_level_parts(std::string_view inner) {
    std::vector<std::string_view> parts;
    int depth = 0;
    std::size_t start = 0;
    for (std::size_t j = 0; j < inner.size(); ++j) {
        if (inner[j] == '{') ++depth;
        if (inner[j] == '}') --depth;
        if (inner[j] == ',' && depth == 0) {
            parts.push_back(inner.substr(start, j - start));
            start = j + 1;
        }
    }
    parts.push_back(inner.substr(start));
    return parts;
}

bool expand_into(std::string_view p, std::size_t from, std::vector<std::string>& out, std::size_t limit) {
    for (std::size_t i = from; i < p.size(); ++i) {
        if (p[i] != '{') continue;
        std::size_t end = brace_end(p, i);
        if (end == std::string_view::npos) break;  // no group closes: the rest is literal
        auto parts = top_level_parts(p.substr(i + 1, end - i - 1));
        if (parts.size() < 2) continue;  // a single-element group stays literal
        std::string_view prefix = p.substr(0, i), suffix = p.substr(end + 1);
        for (auto part : parts) {
            std::string next;
            next.reserve(prefix.size() + part.size() + suffix.size());
            next.append(prefix).append(part).append(suffix);
            // The prefix holds no group left to expand: continue from where the part starts.
            if (!expand_into(next, i, out, limit)) return false;
        }
        return true;
    }
    if (out.size() >= limit) return false;
    out.emplace_back(p);
    return true;
}

}  // namespace

std::optional<std::vector<std::string>> expand_braces(std::string_view pattern, std::size_t limit) {
    std::vector<std::string> out;
    if (!expand_into(pattern, 0, out, limit)) return std::nullopt;
    return out;
}

std::vector<std::string_view> split_segments(std::string_view path) {
    std::vector<std::string_view> out;
    std::size_t start = 0;
    while (start <= path.size()) {
        std::size_t slash = path.find('/', start);
        if (slash == std::string_view::npos) slash = path.size();
        if (slash > start) out.push_back(path.substr(start, slash - start));
        start = slash + 1;
    }
    return out;
}

bool has_parent_segment(std::string_view pattern) {
    std::string p(pattern);
    for (char& c : p)
        if (c == '\\') c = '/';
    for (auto s : split_segments(p))
        if (s == "..") return true;
    return false;
}

GlobPattern::GlobPattern(std::string_view pattern) {
    std::string p(pattern);
    // [^..] is a negated class in the shells' sense; fnmatch spells it [!..].
    for (std::size_t i = 0; i + 1 < p.size(); ++i)
        if (p[i] == '[' && p[i + 1] == '^') p[i + 1] = '!';
    anywhere_ = p.find('/') == std::string::npos;
    for (auto s : split_segments(p)) segments_.emplace_back(s);
    if (!anywhere_ && !p.empty() && p.back() == '/' && (segments_.empty() || segments_.back() != "**")) never_ = true;
    if (segments_.empty()) never_ = true;
}

std::optional<std::string> GlobPattern::last_segment() const {
    if (never_ || segments_.back() == "**") return std::nullopt;
    return segments_.back();
}

namespace {

// Segment-wise match with memo: ** spans zero or more segments, never a hidden one; a trailing
// ** needs at least one.
bool match_segments(const std::vector<std::string>& pat, const std::vector<std::string_view>& path, bool python_hidden,
                    std::size_t i, std::size_t j, std::map<std::pair<std::size_t, std::size_t>, bool>& memo) {
    if (i == pat.size()) return j == path.size();
    auto key = std::make_pair(i, j);
    if (auto it = memo.find(key); it != memo.end()) return it->second;
    bool result = false;
    if (pat[i] == "**") {
        bool trailing = i + 1 == pat.size();
        // Zero segments (not for a trailing **), then one more at a time while not hidden.
        if (!trailing && match_segments(pat, path, python_hidden, i + 1, j, memo)) result = true;
        for (std::size_t k = j; !result && k < path.size(); ++k) {
            if (!path[k].empty() && path[k][0] == '.') break;
            if (match_segments(pat, path, python_hidden, i + 1, k + 1, memo)) result = true;
        }
    } else if (j < path.size()) {
        bool ok;
        if (python_hidden && !is_magic(pat[i])) ok = pat[i] == path[j];
        else if (python_hidden && !path[j].empty() && path[j][0] == '.' && pat[i][0] != '.') ok = false;
        else ok = fnmatch(pat[i], path[j]);
        result = ok && match_segments(pat, path, python_hidden, i + 1, j + 1, memo);
    }
    memo[key] = result;
    return result;
}

}  // namespace

bool GlobPattern::matches(std::string_view relative) const {
    if (never_) return false;
    auto path = split_segments(relative);
    if (path.empty()) return false;
    if (anywhere_) return fnmatch(segments_[0], path.back());
    std::map<std::pair<std::size_t, std::size_t>, bool> memo;
    return match_segments(segments_, path, false, 0, 0, memo);
}

bool python_glob_matches(std::string_view pattern, std::string_view relative) {
    if (!pattern.empty() && pattern.back() == '/') return false;  // directories only
    std::vector<std::string> pat;
    for (auto s : split_segments(pattern)) pat.emplace_back(s);
    // In glob.glob a ** that is not the last segment matches directories; the last one also
    // matches files, which is what "zero or more" gives here. It may match zero segments too.
    auto path = split_segments(relative);
    if (pat.empty() || path.empty()) return false;
    std::map<std::pair<std::size_t, std::size_t>, bool> memo;
    // glob's trailing ** lists what lies at any depth below: spelled here as ** then one name.
    if (pat.back() == "**") pat.emplace_back("*");
    return match_segments(pat, path, true, 0, 0, memo);
}

}  // namespace kubesandbox::files
