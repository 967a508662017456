// Helpers for Sandbox::upload_from and download_to: a source held to its announced size.
// Internal.
#pragma once

#include <kubesandbox/sandbox.hpp>

#include <cstdint>
#include <memory>
#include <string>

namespace kubesandbox::sandbox {

// `source` as it is, except that an end before `size` bytes, or a byte past them, is an
// invalid_argument error (so a writer that counts on `size` never gets a wrong file quietly).
ByteSource exactly(ByteSource source, std::uint64_t size);

// `source` in pieces of `piece_bytes` (the last one shorter), for writers that send a fixed
// amount at a time; an empty source gives one empty piece.
ByteSource regrouped(ByteSource source, std::size_t piece_bytes);

// `before`, then `source`'s pieces, then `after`: a file inside the framing a protocol puts
// around it.
ByteSource framed(std::string before, ByteSource source, std::string after);

// All of `source` (held to `size`) in one string.
boost::asio::awaitable<Result<std::string>> collect(ByteSource source, std::uint64_t size);

}  // namespace kubesandbox::sandbox
