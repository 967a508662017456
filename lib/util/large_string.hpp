// Appending to a string that may grow to hundreds of megabytes: collected command output, a
// downloaded file. Growth stays geometric; past a few MiB a capped string takes its cap at once,
// reserved and untouched until written (see append_capped), so its pages are touched once.
#pragma once

#include <string>
#include <string_view>

namespace kubesandbox::util {

void append_large(std::string& s, std::string_view data);

// append_large up to `cap` bytes in `s` in all; sets `truncated` when bytes had to be left out.
void append_capped(std::string& s, std::string_view data, std::size_t cap, bool& truncated);

}  // namespace kubesandbox::util
