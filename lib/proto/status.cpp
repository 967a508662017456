#include "proto/status.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include <charconv>

namespace kubesandbox::proto {
namespace json = boost::json;

namespace {

struct ReasonRow {
    std::string_view reason;
    unsigned http;
    errc code;
};

constexpr ReasonRow reason_table[] = {
    {"BadRequest", 400, errc::bad_request},
    {"Unauthorized", 401, errc::unauthorized},
    {"Forbidden", 403, errc::forbidden},
    {"NotFound", 404, errc::not_found},
    {"MethodNotAllowed", 405, errc::method_not_allowed},
    {"NotAcceptable", 406, errc::bad_request},
    {"AlreadyExists", 409, errc::already_exists},
    {"Conflict", 409, errc::conflict},
    {"Gone", 410, errc::gone},
    {"Expired", 410, errc::expired},
    {"RequestEntityTooLarge", 413, errc::request_entity_too_large},
    {"UnsupportedMediaType", 415, errc::unsupported_media_type},
    {"Invalid", 422, errc::invalid},
    {"TooManyRequests", 429, errc::too_many_requests},
    {"InternalError", 500, errc::internal_error},
    {"ServiceUnavailable", 503, errc::service_unavailable},
    {"Timeout", 504, errc::server_timeout},
};

std::string_view string_at(const json::object& o, std::string_view key) {
    if (auto* v = o.if_contains(key); v && v->is_string()) return v->get_string();
    return {};
}

constexpr std::size_t max_plain_message = 1024;

}  // namespace

errc errc_from_status(unsigned http_status, std::string_view reason) noexcept {
    for (const auto& row : reason_table)
        if (!reason.empty() && row.reason == reason) return row.code;
    for (const auto& row : reason_table)
        if (row.http == http_status) return row.code;
    if (http_status >= 500) return errc::internal_error;
    return errc::unknown_status;
}

std::string_view reason_for_http_status(unsigned http_status) noexcept {
    if (http_status == 409) return "Conflict";
    if (http_status == 410) return "Gone";
    for (const auto& row : reason_table)
        if (row.http == http_status) return row.reason;
    return {};
}

std::optional<std::chrono::seconds> parse_retry_after(std::string_view header) noexcept {
    while (!header.empty() && header.front() == ' ') header.remove_prefix(1);
    while (!header.empty() && header.back() == ' ') header.remove_suffix(1);
    long long seconds = 0;
    auto [end, ec] = std::from_chars(header.data(), header.data() + header.size(), seconds);
    if (ec != std::errc{} || end != header.data() + header.size() || seconds < 0 || header.empty()) return std::nullopt;
    return std::chrono::seconds(std::min<long long>(seconds, 24 * 3600));
}

Error error_from_response(unsigned http_status, std::string_view content_type, std::string_view body,
                          std::string_view retry_after_header) {
    Error e;
    e.http_status = http_status;
    e.retry_after = parse_retry_after(retry_after_header);

    bool decoded = false;
    if (content_type.find("json") != std::string_view::npos || (!body.empty() && body.front() == '{')) {
        boost::system::error_code ec;
        json::value v = json::parse(body, ec);
        if (!ec && v.is_object() && string_at(v.get_object(), "kind") == "Status") {
            const auto& st = v.get_object();
            e.reason = std::string(string_at(st, "reason"));
            e.message = std::string(string_at(st, "message"));
            if (auto* d = st.if_contains("details"); d && d->is_object()) {
                const auto& det = d->get_object();
                if (auto* causes = det.if_contains("causes"); causes && causes->is_array()) {
                    for (const auto& c : causes->get_array()) {
                        if (!c.is_object()) continue;
                        const auto& co = c.get_object();
                        e.causes.push_back({std::string(string_at(co, "reason")), std::string(string_at(co, "message")),
                                            std::string(string_at(co, "field"))});
                    }
                }
                if (auto* ra = det.if_contains("retryAfterSeconds");
                    ra && ra->is_int64() && !e.retry_after && ra->get_int64() >= 0)
                    e.retry_after = std::chrono::seconds(std::min<std::int64_t>(ra->get_int64(), 24 * 3600));
            }
            decoded = true;
        }
    }
    if (!decoded) {
        std::string_view text = body.substr(0, max_plain_message);
        while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' '))
            text.remove_suffix(1);
        e.message = text.empty() ? "HTTP " + std::to_string(http_status) : std::string(text);
        if (body.size() > max_plain_message) e.message += "...";
        e.reason = std::string(reason_for_http_status(http_status));
    }
    e.code = make_error_code(errc_from_status(http_status, e.reason));
    return e;
}

Error error_from_watch_status(const json::object& status) {
    unsigned code = 0;
    if (auto* c = status.if_contains("code"); c && c->is_number()) {
        boost::system::error_code ec;
        const auto n = c->to_number<std::int64_t>(ec);  // int64 or uint64 in the JSON model
        if (!ec && n > 0 && n < 1000) code = static_cast<unsigned>(n);
    }
    Error e = error_from_response(code, "application/json", json::serialize(status));
    if (code == 410) e.code = make_error_code(errc::expired);
    if (e.message.empty() || e.message == "HTTP 0") e.message = "watch ERROR event without a message";
    return e;
}

namespace {
json::object details_json(const StatusDetails& d) {
    json::object det;
    if (!d.name.empty()) det["name"] = d.name;
    if (!d.group.empty()) det["group"] = d.group;
    if (!d.kind.empty()) det["kind"] = d.kind;
    if (!d.causes.empty()) {
        json::array causes;
        for (const auto& c : d.causes) {
            json::object co;
            if (!c.reason.empty()) co["reason"] = c.reason;
            if (!c.message.empty()) co["message"] = c.message;
            if (!c.field.empty()) co["field"] = c.field;
            causes.push_back(std::move(co));
        }
        det["causes"] = std::move(causes);
    }
    if (d.retry_after_seconds) det["retryAfterSeconds"] = *d.retry_after_seconds;
    return det;
}
}  // namespace

json::object make_status(unsigned http_status, std::string_view reason, std::string_view message,
                         const std::optional<StatusDetails>& details) {
    json::object st;
    st["kind"] = "Status";
    st["apiVersion"] = "v1";
    st["metadata"] = json::object{};
    st["status"] = "Failure";
    st["message"] = message;
    st["reason"] = reason;
    if (details) st["details"] = details_json(*details);
    st["code"] = http_status;
    return st;
}

json::object make_success_status(const std::optional<StatusDetails>& details) {
    json::object st;
    st["kind"] = "Status";
    st["apiVersion"] = "v1";
    st["metadata"] = json::object{};
    st["status"] = "Success";
    if (details) st["details"] = details_json(*details);
    return st;
}

}  // namespace kubesandbox::proto
