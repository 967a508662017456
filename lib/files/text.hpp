// Byte-level text helpers shared by the file operations: UTF-8 validity as Python's strict
// decoder sees it, replacement of invalid sequences, universal newlines, base64. Sans-IO.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace kubesandbox::files {

// Python's strict UTF-8 (no surrogates, no overlong forms, at most U+10FFFF). With
// allow_partial_tail a sequence cut by the end of `s` counts as valid (an incremental decoder
// that has not seen the end yet).
bool valid_utf8(std::string_view s, bool allow_partial_tail = false);

// Invalid sequences replaced by U+FFFD, one per maximal invalid subpart (errors="replace").
std::string replace_invalid_utf8(std::string_view s);

// Length of the longest prefix of s[0, n) that ends on a character boundary of valid UTF-8 `s`.
std::size_t utf8_floor(std::string_view s, std::size_t n);

// Number of code points of valid UTF-8 (a stray byte counts as one).
std::size_t code_points(std::string_view s);

// "\r\n" and a lone "\r" become "\n" (Python's universal newlines on reading).
std::string universal_newlines(std::string_view s);

// Lines of newline-normalised text, without their "\n"; a last line without one counts.
std::vector<std::string_view> split_lines(std::string_view normalised);

std::string base64_encode(std::string_view bytes);

// POSIX shell single-quoted word: safe for any bytes but NUL.
std::string shell_quote(std::string_view s);

}  // namespace kubesandbox::files
