#include "proto/exec_status.hpp"

#include "proto/status.hpp"

#include <boost/json/parse.hpp>

#include <charconv>

namespace kubesandbox::proto {
namespace json = boost::json;

Result<std::optional<int>> decode_exec_status(std::string_view payload) {
    if (payload.empty()) return std::optional<int>{};
    boost::system::error_code ec;
    json::value v = json::parse(payload, ec);
    if (ec || !v.is_object()) return fail(errc::invalid_response, "exec status is not a JSON object");
    const auto& st = v.get_object();
    auto str = [&](std::string_view key) -> std::string_view {
        if (auto* f = st.if_contains(key); f && f->is_string()) return f->get_string();
        return {};
    };
    const auto status = str("status");
    if (status == "Success") return std::optional<int>(0);
    if (status != "Failure") return fail(errc::invalid_response, "exec status has an unknown status value");
    if (str("reason") == "NonZeroExitCode") {
        const auto* details = st.if_contains("details");
        const auto* causes = details && details->is_object() ? details->get_object().if_contains("causes") : nullptr;
        if (causes && causes->is_array()) {
            for (const auto& c : causes->get_array()) {
                if (!c.is_object()) continue;
                const auto* reason = c.get_object().if_contains("reason");
                const auto* message = c.get_object().if_contains("message");
                if (!reason || !reason->is_string() || reason->get_string() != "ExitCode") continue;
                if (!message || !message->is_string()) break;
                std::string_view m = message->get_string();
                int code = -1;
                auto [end, perr] = std::from_chars(m.data(), m.data() + m.size(), code);
                if (perr != std::errc{} || end != m.data() + m.size() || code < 0 || code > 255) break;
                return std::optional<int>(code);
            }
        }
        return fail(errc::invalid_response, "exec status NonZeroExitCode without a valid ExitCode cause");
    }
    Error e;
    e.message = std::string(str("message"));
    e.reason = std::string(str("reason"));
    if (auto* code = st.if_contains("code"); code && code->is_int64())
        e.http_status = static_cast<unsigned>(code->get_int64());
    e.code = make_error_code(errc::pod_failed);
    if (e.message.empty()) e.message = "the command could not be run";
    return fail(std::move(e));
}

}  // namespace kubesandbox::proto
