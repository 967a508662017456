// RFC 3339 timestamps as Kubernetes writes them (metadata times, our annotations).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace kubesandbox::util {

// "2026-11-24T14:28:48Z", or with milliseconds "2026-11-24T14:28:48.123Z".
std::string format_rfc3339(std::chrono::system_clock::time_point tp, bool milliseconds = false);
std::string now_rfc3339(bool milliseconds = false);

// Accepts "Z", "z" or a "+hh:mm"/"-hh:mm" offset and an optional fraction (to microseconds).
// nullopt when unparsable or outside 1970..2200.
std::optional<std::chrono::system_clock::time_point> parse_rfc3339(std::string_view s);

// A non-negative decimal integer below 2^50 (annotation values); nullopt otherwise.
std::optional<std::int64_t> parse_decimal(std::string_view s);

}  // namespace kubesandbox::util
