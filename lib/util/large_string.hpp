// Appending to a string that may grow to hundreds of megabytes: collected command output, a
// downloaded file. Past a few MiB each larger buffer is taken before its pages are touched and
// marked for transparent huge pages (the kernel's default is "madvise"), so filling it costs a
// page fault per 2 MiB instead of one per 4 KiB; on a VM each fault costs microseconds, and a
// 100 MB download spent most of its CPU in them. Growth stays geometric; a capped string takes its
// cap at once (see append_capped).
#pragma once

#include <string>
#include <string_view>

namespace kubesandbox::util {

void append_large(std::string& s, std::string_view data);

// append_large up to `cap` bytes in `s` in all; sets `truncated` when bytes had to be left out.
void append_capped(std::string& s, std::string_view data, std::size_t cap, bool& truncated);

}  // namespace kubesandbox::util
