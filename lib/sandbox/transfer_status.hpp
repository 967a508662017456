// What a file-transfer command's exit code means, shared by every sandbox that moves files with
// shell scripts: 0 ok, 20 permission denied, 21 is a directory, 22 not found, 23 larger than the
// limit; anything else is described with the start of its stderr. Sans-IO.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kubesandbox {

// The per-file error (one of the DeepAgents literals, or a description); nullopt for 0.
std::optional<std::string> transfer_error(std::int64_t exit_code, std::string_view stderr_text);

}  // namespace kubesandbox
