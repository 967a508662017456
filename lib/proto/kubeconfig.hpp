// Internals of kubeconfig loading shared with the exec plugin code and tests: strict base64 and
// PEM checks. Sans-IO.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kubesandbox::proto {

// Standard base64 (RFC 4648 §4). Line breaks are skipped; padding is optional; anything else
// that is not in the alphabet makes the input invalid (nullopt).
std::optional<std::string> base64_decode(std::string_view in);
std::string base64_encode(std::string_view in);

// Whether `pem` holds at least one certificate (all of them must parse).
bool pem_has_certificates(std::string_view pem);
// Whether `pem` holds a private key OpenSSL can read.
bool pem_has_private_key(std::string_view pem);

}  // namespace kubesandbox::proto
