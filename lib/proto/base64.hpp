// Standard base64 (RFC 4648 §4) for credentials in kubeconfigs and for the streams and files
// that commands send back base64-encoded through the sandbox runtime. Sans-IO.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kubesandbox::proto {

// Line breaks are skipped; padding is optional; anything else that is not in the alphabet makes
// the input invalid (nullopt).
std::optional<std::string> base64_decode(std::string_view in);

// For output that may be cut anywhere: line breaks skipped, an incomplete group of symbols at
// the end left out rather than decoded, '=' taken as filling a group without the padding rules.
// nullopt when anything else than base64 is in it, the incomplete group included.
std::optional<std::string> base64_decode_whole_groups(std::string_view in);
// The same, decoded over `text` itself (a large output is not held twice); false, and `text`
// left unspecified, when it is not base64.
bool base64_decode_whole_groups_in_place(std::string& text);

std::string base64_encode(std::string_view in);

}  // namespace kubesandbox::proto
