#include "sandbox/transfer_status.hpp"

#include <kubesandbox/sandbox.hpp>

namespace kubesandbox {

std::optional<std::string> transfer_error(std::int64_t exit_code, std::string_view stderr_text) {
    switch (exit_code) {
        case 0:
            return std::nullopt;
        case 20:
            return std::string(file_error::permission_denied);
        case 21:
            return std::string(file_error::is_directory);
        case 22:
            return std::string(file_error::file_not_found);
        case 23:
            return std::string(file_error::file_too_large);
        default:
            break;
    }
    std::string why(stderr_text.substr(0, 200));
    while (!why.empty() && (why.back() == '\n' || why.back() == '\r')) why.pop_back();
    std::string out = "transfer failed (exit code " + std::to_string(exit_code) + ")";
    if (!why.empty()) out += ": " + why;
    return out;
}

}  // namespace kubesandbox
