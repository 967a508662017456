// Kubernetes Status objects: decoding error responses into typed errors, and building them
// (the local cluster answers with the same bodies a real API server sends). Sans-IO.
#pragma once

#include <kubesandbox/error.hpp>

#include <boost/json/object.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kubesandbox::proto {

// Maps an HTTP status and Status.reason to our code. The reason wins when it is known.
errc errc_from_status(unsigned http_status, std::string_view reason) noexcept;

// The canonical reason for an HTTP status ("NotFound" for 404...), "" when there is none.
std::string_view reason_for_http_status(unsigned http_status) noexcept;

// Turns a non-2xx response into an Error. A JSON Status body supplies message, reason, causes
// and retryAfterSeconds; any other body (a 429 from priority-and-fairness is plain text) becomes
// the message, truncated. `retry_after_header` is the raw Retry-After header, if any.
Error error_from_response(unsigned http_status, std::string_view content_type, std::string_view body,
                          std::string_view retry_after_header = {});

// The typed error of a watch ERROR event's Status object. Code 410 (reason Expired or Gone: the
// resourceVersion is too old) is always errc::expired, so callers re-list on one code.
Error error_from_watch_status(const boost::json::object& status);

// Parses a Retry-After header in integer seconds (HTTP-dates are not used by Kubernetes).
std::optional<std::chrono::seconds> parse_retry_after(std::string_view header) noexcept;

struct StatusDetails {
    std::string name;
    std::string group;
    std::string kind;
    std::vector<StatusCause> causes;
    std::optional<int> retry_after_seconds;
};

// {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",...}
boost::json::object make_status(unsigned http_status, std::string_view reason, std::string_view message,
                                const std::optional<StatusDetails>& details = std::nullopt);
// {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success",...}
boost::json::object make_success_status(const std::optional<StatusDetails>& details = std::nullopt);

}  // namespace kubesandbox::proto
