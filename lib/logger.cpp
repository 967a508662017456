// The default sink: one line per call on stderr, written with a single fwrite so lines from
// several threads do not interleave.
#include <kubesandbox/logger.hpp>

#include <cstdio>
#include <string>

namespace kubesandbox {

std::string_view to_string(LogLevel level) noexcept {
    switch (level) {
        case LogLevel::debug:
            return "debug";
        case LogLevel::info:
            return "info";
        case LogLevel::warning:
            return "warning";
        case LogLevel::error:
            return "error";
    }
    return "unknown";
}

void Logger::log(LogLevel level, std::string_view message) const {
    if (!enabled(level)) return;
    if (sink_) {
        sink_(level, message);
        return;
    }
    std::string line = "kubesandbox: ";
    line += to_string(level);
    line += ": ";
    line += message;
    line += '\n';
    std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace kubesandbox
