// Decoding the exec Status that v4/v5 servers send on channel 3. Sans-IO.
#pragma once

#include <kubesandbox/error.hpp>

#include <optional>
#include <string_view>

namespace kubesandbox::proto {

// Success -> 0; Failure/NonZeroExitCode -> the ExitCode cause (0..255); an empty payload ->
// nullopt (no status). Any other Failure means the command did not run: errc::pod_failed (or
// the code matching its reason) carrying the server's message. Garbage: errc::invalid_response.
Result<std::optional<int>> decode_exec_status(std::string_view payload);

}  // namespace kubesandbox::proto
