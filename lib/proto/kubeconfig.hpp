// Internals of kubeconfig loading shared with the exec plugin code and tests: strict base64
// (base64.hpp) and PEM checks. Sans-IO.
#pragma once

#include "proto/base64.hpp"

#include <optional>
#include <string>
#include <string_view>

namespace kubesandbox::proto {

// Whether `pem` holds at least one certificate (all of them must parse).
bool pem_has_certificates(std::string_view pem);
// Whether `pem` holds a private key OpenSSL can read.
bool pem_has_private_key(std::string_view pem);

}  // namespace kubesandbox::proto
