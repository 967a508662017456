// Error model: every remote or I/O failure is a value, never an exception.
#pragma once

#if __cplusplus < 202002L
#error "kubesandbox needs C++20 (coroutines): compile with -std=c++20 or later"
#endif

#include <boost/system/error_code.hpp>
#include <tl/expected.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace kubesandbox {

// Typed failure codes of kubesandbox itself. Lower-layer codes (Asio, Beast, SSL) are carried
// unchanged in Error::code instead of being mapped onto these.
enum class errc {
    // Kubernetes Status reasons
    bad_request = 1,
    unauthorized,
    forbidden,
    not_found,
    method_not_allowed,
    already_exists,
    conflict,
    gone,
    expired,  // 410 Expired: continue token or resourceVersion too old
    request_entity_too_large,
    unsupported_media_type,
    invalid,  // 422 with causes
    too_many_requests,
    internal_error,
    service_unavailable,
    server_timeout,  // 504 / Status reason Timeout
    unknown_status,  // a non-2xx response with no recognisable reason
    // Transport and protocol
    timeout,  // our own deadline expired
    cancelled,
    connection_failed,
    connection_closed,  // peer closed or reset mid-exchange
    tls_error,
    invalid_response,  // garbage JSON, bad framing, protocol violation
    // Configuration
    invalid_config,
    exec_plugin_failed,
    // Caller mistakes and sandbox-level outcomes
    invalid_argument,
    io_error,
    unsupported,
    pod_failed,         // container terminated, CrashLoopBackOff, ...
    image_pull_failed,  // ErrImagePull / ImagePullBackOff
    startup_timeout,    // sandbox not Ready within the startup timeout
    sandbox_lost,       // a sandbox known to exist is gone (expired, deleted, its pod died)
};

}  // namespace kubesandbox

template <>
struct boost::system::is_error_code_enum<kubesandbox::errc> : std::true_type {};

namespace kubesandbox {

const boost::system::error_category& error_category() noexcept;
boost::system::error_code make_error_code(errc e) noexcept;

// One entry of a Status' details.causes (422 Invalid and friends).
struct StatusCause {
    std::string reason{};
    std::string message{};
    std::string field{};
    friend bool operator==(const StatusCause&, const StatusCause&) = default;
};

struct Error {
    boost::system::error_code code{};
    std::string message{};                              // human text; never holds tokens or keys
    unsigned http_status = 0;                           // 0 when no HTTP response was involved
    std::string reason{};                               // Kubernetes Status.reason when there was one
    std::vector<StatusCause> causes{};                  // Status.details.causes
    std::optional<std::chrono::seconds> retry_after{};  // Retry-After header or details.retryAfterSeconds
    // The Asio/Beast/SSL code behind a typed transport errc (connection_closed, invalid_response,
    // tls_error, timeout), kept so callers can tell a reset from an EOF; empty otherwise.
    boost::system::error_code lower_code{};

    bool is(errc e) const noexcept { return code == make_error_code(e); }
    // Retrying the same request cannot help: bad configuration, TLS verification, a caller
    // mistake, a cancellation.
    bool is_permanent() const noexcept;
    // The request may or may not have been applied: its answer was lost (timeout, connection
    // closed mid-response, garbage, a 5xx). Read the state back before acting on it.
    bool outcome_unknown() const noexcept;
    // "<category>: <message> (HTTP 409 AlreadyExists)" for logs and CLI output.
    std::string describe() const;
};

Error make_error(errc code, std::string message);
Error make_error(boost::system::error_code code, std::string message);

template <class T>
using Result = tl::expected<T, Error>;

inline tl::unexpected<Error> fail(Error e) { return tl::unexpected<Error>(std::move(e)); }
inline tl::unexpected<Error> fail(errc code, std::string message) {
    return tl::unexpected<Error>(make_error(code, std::move(message)));
}

}  // namespace kubesandbox
