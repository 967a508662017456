#include "proto/base64.hpp"

#include <array>
#include <cstdint>

namespace kubesandbox::proto {

namespace {

constexpr std::int8_t invalid = -1, line_break = -2, pad = -3;

constexpr std::array<std::int8_t, 256> make_table() {
    std::array<std::int8_t, 256> t{};
    for (auto& v : t) v = invalid;
    for (int i = 0; i < 26; ++i) {
        t['A' + i] = static_cast<std::int8_t>(i);
        t['a' + i] = static_cast<std::int8_t>(26 + i);
    }
    for (int i = 0; i < 10; ++i) t['0' + i] = static_cast<std::int8_t>(52 + i);
    t['+'] = 62;
    t['/'] = 63;
    t['\n'] = line_break;
    t['\r'] = line_break;
    t['='] = pad;
    return t;
}
constexpr auto table = make_table();

// Decodes `in` to `out` (room for in.size() / 4 * 3 + 3 bytes) and returns how many bytes it
// wrote. `out` may be `in` itself: the output never overtakes the input it was read from.
std::optional<std::size_t> decode_to(std::string_view in, char* const out, bool whole_groups) {
    char* o = out;
    const auto* p = reinterpret_cast<const unsigned char*>(in.data());
    const auto* end = p + in.size();
    std::uint32_t acc = 0;
    int bits = 0;
    std::size_t symbols = 0, padding = 0;
    char* group_end = o;  // output through the last whole group of four symbols
    while (p < end) {
        // Four symbols at a group boundary, none of them special: the common case, in one step.
        if (bits == 0 && padding == 0 && end - p >= 4) {
            const int a = table[p[0]], b = table[p[1]], c = table[p[2]], d = table[p[3]];
            if ((a | b | c | d) >= 0) {
                const std::uint32_t n =
                    (std::uint32_t(a) << 18) | (std::uint32_t(b) << 12) | (std::uint32_t(c) << 6) | std::uint32_t(d);
                o[0] = static_cast<char>(n >> 16);
                o[1] = static_cast<char>(n >> 8);
                o[2] = static_cast<char>(n);
                o += 3;
                group_end = o;
                symbols += 4;
                p += 4;
                continue;
            }
        }
        const int v = table[*p++];
        if (v == line_break) continue;
        if (v == pad) {
            ++padding;
            if ((symbols + padding) % 4 == 0) group_end = o;  // "YQ==" is a whole group
            continue;
        }
        if (v == invalid || padding != 0) return std::nullopt;  // not base64, or data after padding
        ++symbols;
        acc = (acc << 6) | static_cast<std::uint32_t>(v);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            *o++ = static_cast<char>((acc >> bits) & 0xff);
        }
        if (symbols % 4 == 0) group_end = o;
    }
    const std::size_t rem = symbols % 4;
    if (whole_groups) return static_cast<std::size_t>(group_end - out);
    if (rem == 1) return std::nullopt;
    if (padding != 0 && (rem == 0 || rem + padding != 4)) return std::nullopt;
    // Leftover bits must be zero in canonical encodings; be lenient like most decoders.
    return static_cast<std::size_t>(o - out);
}

std::optional<std::string> decode(std::string_view in, bool whole_groups) {
    std::string out(in.size() / 4 * 3 + 3, '\0');
    auto n = decode_to(in, out.data(), whole_groups);
    if (!n) return std::nullopt;
    out.resize(*n);
    return out;
}

}  // namespace

std::optional<std::string> base64_decode(std::string_view in) { return decode(in, false); }

std::optional<std::string> base64_decode_whole_groups(std::string_view in) { return decode(in, true); }

bool base64_decode_whole_groups_in_place(std::string& text) {
    auto n = decode_to(text, text.data(), true);
    if (!n) return false;
    text.resize(*n);
    return true;
}

std::string base64_encode(std::string_view in) {
    static constexpr char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    out.reserve((in.size() + 2) / 3 * 4);
    std::size_t i = 0;
    for (; i + 2 < in.size(); i += 3) {
        const std::uint32_t n = (static_cast<unsigned char>(in[i]) << 16) |
                                (static_cast<unsigned char>(in[i + 1]) << 8) | static_cast<unsigned char>(in[i + 2]);
        out.push_back(alphabet[(n >> 18) & 63]);
        out.push_back(alphabet[(n >> 12) & 63]);
        out.push_back(alphabet[(n >> 6) & 63]);
        out.push_back(alphabet[n & 63]);
    }
    if (i + 1 == in.size()) {
        const std::uint32_t n = static_cast<unsigned char>(in[i]) << 16;
        out.push_back(alphabet[(n >> 18) & 63]);
        out.push_back(alphabet[(n >> 12) & 63]);
        out += "==";
    } else if (i + 2 == in.size()) {
        const std::uint32_t n =
            (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8);
        out.push_back(alphabet[(n >> 18) & 63]);
        out.push_back(alphabet[(n >> 12) & 63]);
        out.push_back(alphabet[(n >> 6) & 63]);
        out.push_back('=');
    }
    return out;
}

}  // namespace kubesandbox::proto
