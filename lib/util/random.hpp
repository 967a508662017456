// Unpredictable names, tokens and markers (the kernel's CSPRNG, OpenSSL's as a fallback).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kubesandbox::util {

// 2 * bytes lowercase hex digits.
std::string random_hex(std::size_t bytes);
// `length` characters drawn from `alphabet`.
std::string random_string(std::string_view alphabet, std::size_t length);
// The first `chars` hex digits of SHA-256(data).
std::string sha256_hex(std::string_view data, std::size_t chars);

}  // namespace kubesandbox::util
