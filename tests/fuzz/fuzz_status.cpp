// libFuzzer target: turning an error response into an Error. Input layout: two bytes of HTTP
// status, then content type and Retry-After header (each up to '\n'), then the body. Whatever
// the input, the result is a typed kubesandbox Error, nothing throws, and a Status body that
// decoded survives a make_status round trip unchanged.
#include "proto/status.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

namespace {

namespace ks = kubesandbox;

std::string_view take_line(std::string_view& in) {
    auto nl = in.find('\n');
    std::string_view line = in.substr(0, nl);
    in.remove_prefix(nl == std::string_view::npos ? in.size() : nl + 1);
    return line;
}

// What error_from_response must have decoded as a JSON Status (strings then are valid UTF-8).
bool is_json_status(std::string_view content_type, std::string_view body) {
    if (content_type.find("json") == std::string_view::npos && (body.empty() || body.front() != '{')) return false;
    boost::system::error_code ec;
    auto v = boost::json::parse(body, ec);
    if (ec || !v.is_object()) return false;
    auto* kind = v.get_object().if_contains("kind");
    return kind && kind->is_string() && kind->get_string() == "Status";
}

void check_typed(const ks::Error& e, unsigned http_status, std::string_view body) {
    if (e.code.category() != ks::error_category() || !e.code) std::abort();
    if (e.code != ks::make_error_code(ks::proto::errc_from_status(http_status, e.reason))) std::abort();
    if (e.http_status != http_status) std::abort();
    // The message comes from the body (unescaped or truncated to 1 KiB) or is "HTTP <n>".
    if (e.message.size() > std::max<std::size_t>(body.size(), 1027) + 16) std::abort();
    if (e.causes.size() > body.size()) std::abort();
    if (e.retry_after && e.retry_after->count() < 0) std::abort();
    if (e.describe().empty()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 2) return 0;
    const unsigned http_status = (static_cast<unsigned>(data[0]) << 8 | data[1]) % 1000;
    std::string_view rest(reinterpret_cast<const char*>(data + 2), size - 2);
    const std::string_view content_type = take_line(rest);
    const std::string_view retry_after = take_line(rest);
    const std::string_view body = rest;

    try {
        const ks::Error e = ks::proto::error_from_response(http_status, content_type, body, retry_after);
        check_typed(e, http_status, body);

        if (auto ra = ks::proto::parse_retry_after(retry_after)) {
            if (e.retry_after != ra || ra->count() > 24 * 3600) std::abort();
        }

        if (is_json_status(content_type, body)) {
            // Encoder and decoder agree: re-encoding what was decoded gives the same Error.
            ks::proto::StatusDetails details;
            details.causes = e.causes;
            const auto again = ks::proto::error_from_response(
                http_status, "application/json",
                boost::json::serialize(ks::proto::make_status(http_status, e.reason, e.message, details)));
            if (again.code != e.code || again.reason != e.reason || again.message != e.message ||
                again.causes != e.causes)
                std::abort();
        }

        // Watch ERROR events carry a Status object; any object must still give a typed error.
        boost::system::error_code ec;
        auto v = boost::json::parse(body, ec);
        if (!ec && v.is_object()) {
            const ks::Error w = ks::proto::error_from_watch_status(v.get_object());
            if (w.code.category() != ks::error_category() || !w.code || w.message.empty()) std::abort();
        }
    } catch (...) {
        std::abort();  // parsing bad input must never throw
    }
    return 0;
}
