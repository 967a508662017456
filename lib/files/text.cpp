#include "files/text.hpp"

namespace kubesandbox::files {

namespace {

// Length of the valid UTF-8 sequence at s[i], 0 when invalid; `partial` set when the sequence
// is a valid beginning cut by the end of s.
std::size_t sequence_length(std::string_view s, std::size_t i, bool& partial) {
    partial = false;
    auto b0 = static_cast<unsigned char>(s[i]);
    if (b0 < 0x80) return 1;
    std::size_t n;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        n = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        n = 3;
        if (b0 == 0xE0) lo = 0xA0;
        if (b0 == 0xED) hi = 0x9F;  // no surrogates
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        n = 4;
        if (b0 == 0xF0) lo = 0x90;
        if (b0 == 0xF4) hi = 0x8F;
    } else {
        return 0;
    }
    for (std::size_t k = 1; k < n; ++k) {
        if (i + k >= s.size()) {
            partial = true;
            return 0;
        }
        auto c = static_cast<unsigned char>(s[i + k]);
        if (k == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) return 0;
    }
    return n;
}

// Bytes of the maximal invalid subpart at s[i] (at least 1).
std::size_t invalid_length(std::string_view s, std::size_t i) {
    // A lead byte followed by some valid continuation bytes forms one maximal subpart.
    auto b0 = static_cast<unsigned char>(s[i]);
    std::size_t n = (b0 >= 0xC2 && b0 <= 0xDF)   ? 2
                    : (b0 >= 0xE0 && b0 <= 0xEF) ? 3
                    : (b0 >= 0xF0 && b0 <= 0xF4) ? 4
                                                 : 1;
    std::size_t k = 1;
    for (; k < n && i + k < s.size(); ++k) {
        auto c = static_cast<unsigned char>(s[i + k]);
        unsigned char lo = 0x80, hi = 0xBF;
        if (k == 1 && b0 == 0xE0) lo = 0xA0;
        if (k == 1 && b0 == 0xED) hi = 0x9F;
        if (k == 1 && b0 == 0xF0) lo = 0x90;
        if (k == 1 && b0 == 0xF4) hi = 0x8F;
        if (c < lo || c > hi) break;
    }
    return k;
}

}  // namespace

bool valid_utf8(std::string_view s, bool allow_partial_tail) {
    for (std::size_t i = 0; i < s.size();) {
        bool partial = false;
        std::size_t n = sequence_length(s, i, partial);
        if (n == 0) return partial && allow_partial_tail;
        i += n;
    }
    return true;
}

std::string replace_invalid_utf8(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (std::size_t i = 0; i < s.size();) {
        bool partial = false;
        std::size_t n = sequence_length(s, i, partial);
        if (n > 0) {
            out.append(s.substr(i, n));
            i += n;
        } else {
            out.append("\xEF\xBF\xBD");
            i += invalid_length(s, i);
        }
    }
    return out;
}

std::size_t utf8_floor(std::string_view s, std::size_t n) {
    if (n >= s.size()) return s.size();
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
    return n;
}

std::size_t code_points(std::string_view s) {
    std::size_t count = 0;
    for (unsigned char c : s)
        if ((c & 0xC0) != 0x80) ++count;
    return count;
}

std::string universal_newlines(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\r') {
            out.push_back('\n');
            if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
        } else {
            out.push_back(s[i]);
        }
    }
    return out;
}

std::vector<std::string_view> split_lines(std::string_view text) {
    std::vector<std::string_view> lines;
    std::size_t start = 0;
    while (start < text.size()) {
        std::size_t nl = text.find('\n', start);
        if (nl == std::string_view::npos) {
            lines.push_back(text.substr(start));
            break;
        }
        lines.push_back(text.substr(start, nl - start));
        start = nl + 1;
    }
    return lines;
}

std::string base64_encode(std::string_view bytes) {
    static constexpr char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    out.reserve((bytes.size() + 2) / 3 * 4);
    std::size_t i = 0;
    for (; i + 3 <= bytes.size(); i += 3) {
        unsigned v = (static_cast<unsigned char>(bytes[i]) << 16) | (static_cast<unsigned char>(bytes[i + 1]) << 8) |
                     static_cast<unsigned char>(bytes[i + 2]);
        out.push_back(alphabet[(v >> 18) & 63]);
        out.push_back(alphabet[(v >> 12) & 63]);
        out.push_back(alphabet[(v >> 6) & 63]);
        out.push_back(alphabet[v & 63]);
    }
    if (std::size_t rest = bytes.size() - i; rest > 0) {
        unsigned v = static_cast<unsigned char>(bytes[i]) << 16;
        if (rest == 2) v |= static_cast<unsigned char>(bytes[i + 1]) << 8;
        out.push_back(alphabet[(v >> 18) & 63]);
        out.push_back(alphabet[(v >> 12) & 63]);
        out.push_back(rest == 2 ? alphabet[(v >> 6) & 63] : '=');
        out.push_back('=');
    }
    return out;
}

std::string shell_quote(std::string_view s) {
    std::string out;
    out.reserve(s.size() + 2);
    out.push_back('\'');
    // Runs between single quotes are copied whole: this quotes every execute's ~1 KB wrapper.
    for (std::size_t at = 0; at < s.size();) {
        const std::size_t quote = s.find('\'', at);
        out.append(s.substr(at, quote - at));
        if (quote == std::string_view::npos) break;
        out.append("'\\''");
        at = quote + 1;
    }
    out.push_back('\'');
    return out;
}

}  // namespace kubesandbox::files
