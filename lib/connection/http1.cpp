#include "connection/http1.hpp"

#include <boost/beast/http/error.hpp>

#include <cstring>

namespace kubesandbox::http1 {

namespace http = boost::beast::http;

// Two vectorised scans: find_first_of with a two-byte set runs a memchr per character.
bool has_line_break(std::string_view s) {
    return !s.empty() && (std::memchr(s.data(), '\n', s.size()) || std::memchr(s.data(), '\r', s.size()));
}

namespace {

void add_field(std::string& head, std::string_view name, std::string_view value) {
    head.append(name).append(": ").append(value).append("\r\n");
}

}  // namespace

std::string request_head(const RouterRequest& request, std::string_view prefix, std::string_view host,
                         std::string_view token) {
    if (request.bad_field || has_line_break(request.method) || has_line_break(request.target) || has_line_break(host) ||
        has_line_break(token) || request.method.find(' ') != std::string::npos ||
        request.target.find(' ') != std::string::npos)
        return {};
    std::string head;
    head.reserve(256 + request.target.size() + token.size() + request.fields.size());
    head.append(request.method).append(" ").append(prefix).append(request.target).append(" HTTP/1.1\r\n");
    add_field(head, "Host", host);
    add_field(head, "User-Agent", "kubesandbox");
    if (!token.empty()) head.append("Authorization: Bearer ").append(token).append("\r\n");
    head.append(request.fields);
    if (request.body_source) add_field(head, "Content-Length", std::to_string(request.body_size));
    else if (!request.body.empty() || request.method == "POST" || request.method == "PUT" || request.method == "PATCH")
        add_field(head, "Content-Length", std::to_string(request.body.size()));
    head.append("\r\n");
    return head;
}

void ResponseParser::on_request_impl(http::verb, string_view, string_view, int, error_code& ec) {
    ec = http::error::bad_version;  // never called for a response parser
}

void ResponseParser::on_field_impl(http::field f, string_view, string_view value, error_code&) {
    if (f == http::field::content_type) content_type_.assign(value.data(), value.size());
}

std::string router_timeout_value(std::chrono::steady_clock::duration left, std::int64_t at_most) {
    const std::int64_t left_ms =
        std::max<std::int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(left).count());
    std::int64_t ms = std::max<std::int64_t>(1, left_ms - std::min<std::int64_t>(5000, left_ms / 4));
    if (at_most > 0 && at_most < INT64_MAX / 1000) ms = std::min(ms, at_most * 1000);
    if (ms >= 10000 || ms % 1000 == 0) return std::to_string(ms / 1000);
    std::string frac = std::to_string(ms % 1000);
    return std::to_string(ms / 1000) + "." + std::string(3 - frac.size(), '0') + frac;
}

std::size_t ResponseParser::on_body_impl(string_view body, error_code& ec) {
    if (!sink_.on_body(std::string_view(body.data(), body.size()))) {
        refused_ = true;
        ec = http::error::body_limit;  // stops the parser; refused_by_sink() tells why
        return 0;
    }
    return body.size();
}

std::size_t ResponseParser::on_chunk_body_impl(std::uint64_t, string_view body, error_code& ec) {
    return on_body_impl(body, ec);
}

}  // namespace kubesandbox::http1

namespace kubesandbox {

void RouterRequest::add_header(std::string_view name, std::string_view value) {
    if (name.empty() || name.find(':') != std::string_view::npos || http1::has_line_break(name) ||
        http1::has_line_break(value)) {
        bad_field = true;
        return;
    }
    fields.append(name).append(": ").append(value).append("\r\n");
}

}  // namespace kubesandbox
