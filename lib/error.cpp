#include <kubesandbox/error.hpp>

namespace kubesandbox {
namespace {

class Category final : public boost::system::error_category {
public:
    const char* name() const noexcept override { return "kubesandbox"; }
    std::string message(int ev) const override {
        switch (static_cast<errc>(ev)) {
            case errc::bad_request:
                return "bad request";
            case errc::unauthorized:
                return "unauthorized";
            case errc::forbidden:
                return "forbidden";
            case errc::not_found:
                return "not found";
            case errc::method_not_allowed:
                return "method not allowed";
            case errc::already_exists:
                return "already exists";
            case errc::conflict:
                return "conflict";
            case errc::gone:
                return "gone";
            case errc::expired:
                return "expired";
            case errc::request_entity_too_large:
                return "request entity too large";
            case errc::unsupported_media_type:
                return "unsupported media type";
            case errc::invalid:
                return "invalid";
            case errc::too_many_requests:
                return "too many requests";
            case errc::internal_error:
                return "internal server error";
            case errc::service_unavailable:
                return "service unavailable";
            case errc::server_timeout:
                return "server timeout";
            case errc::unknown_status:
                return "unexpected HTTP status";
            case errc::timeout:
                return "timed out";
            case errc::cancelled:
                return "cancelled";
            case errc::connection_failed:
                return "connection failed";
            case errc::connection_closed:
                return "connection closed";
            case errc::tls_error:
                return "TLS error";
            case errc::invalid_response:
                return "invalid response";
            case errc::invalid_config:
                return "invalid configuration";
            case errc::exec_plugin_failed:
                return "exec credential plugin failed";
            case errc::invalid_argument:
                return "invalid argument";
            case errc::io_error:
                return "I/O error";
            case errc::unsupported:
                return "unsupported";
            case errc::pod_failed:
                return "pod failed";
            case errc::image_pull_failed:
                return "image pull failed";
            case errc::startup_timeout:
                return "startup timeout";
            case errc::sandbox_lost:
                return "sandbox lost";
        }
        return "unknown kubesandbox error";
    }
};

}  // namespace

const boost::system::error_category& error_category() noexcept {
    static const Category category;
    return category;
}

boost::system::error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), error_category()}; }

Error make_error(errc code, std::string message) { return make_error(make_error_code(code), std::move(message)); }

Error make_error(boost::system::error_code code, std::string message) {
    Error e;
    e.code = code;
    e.message = std::move(message);
    return e;
}

bool Error::is_permanent() const noexcept {
    return is(errc::invalid_config) || is(errc::tls_error) || is(errc::cancelled) || is(errc::invalid_argument) ||
           is(errc::unsupported) || is(errc::exec_plugin_failed);
}

bool Error::outcome_unknown() const noexcept {
    return is(errc::timeout) || is(errc::connection_closed) || is(errc::invalid_response) || is(errc::internal_error) ||
           is(errc::service_unavailable) || is(errc::server_timeout) || is(errc::unknown_status);
}

std::string Error::describe() const {
    std::string out = code.message();
    if (!message.empty()) {
        out += ": ";
        out += message;
    }
    if (http_status != 0) {
        out += " (HTTP " + std::to_string(http_status);
        if (!reason.empty()) out += " " + reason;
        out += ")";
    }
    return out;
}

}  // namespace kubesandbox
