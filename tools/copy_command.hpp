// The CLI's `cp`: a local file into a sandbox or out of it, streamed in pieces, so a file of any
// size costs the same memory.
#pragma once

#include <kubesandbox/sandbox.hpp>

#include <boost/asio/awaitable.hpp>

#include <optional>
#include <string>

namespace kubesandbox::cli {

// What went wrong, ready to print after "kubesandbox: error: "; nothing on success.
// copy_out writes a file beside `local` and renames it over at the end, so a failed copy leaves
// `local` as it was (a device or a pipe such as /dev/stdout is written directly).
boost::asio::awaitable<std::optional<std::string>> copy_in(Sandbox& sandbox, const std::string& local,
                                                           const std::string& remote);
boost::asio::awaitable<std::optional<std::string>> copy_out(Sandbox& sandbox, const std::string& remote,
                                                            const std::string& local);

}  // namespace kubesandbox::cli
