// The router connection's HTTP/1.1 codec, without I/O: the request head written in one piece
// (the body follows as a second buffer of the same write), and a response parser that hands the
// body to a ResponseSink as it is parsed, with no body buffer of its own.
#pragma once

#include "connection/router_connection.hpp"

#include <boost/beast/http/basic_parser.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace kubesandbox::http1 {

bool has_line_break(std::string_view s);

// "METHOD <prefix><target> HTTP/1.1" and the fields: Host, User-Agent, Authorization (when a
// token is set), the request's own fields, Content-Length (when there is a body or the method
// sends one), then the blank line. A request with a refused field, or a line break in the
// method, target, host or token, gets an empty head (the caller refuses it).
std::string request_head(const RouterRequest& request, std::string_view prefix, std::string_view host,
                         std::string_view token);

// X-Sandbox-Timeout's value for a request with `left` before its deadline: a margin less (a
// quarter of the time, at most 5 s) so the router answers first, at most `at_most` seconds;
// whole seconds from 10 s on, else milliseconds as a decimal (the routers read a float).
std::string router_timeout_value(std::chrono::steady_clock::duration left, std::int64_t at_most);

// Parses one response; `sink` sees the head once the fields are complete and then each piece
// of the body (chunked or not). Feed it with put(); a sink that refuses a piece ends parsing
// with refused_by_sink() set.
class ResponseParser final : public boost::beast::http::basic_parser<false> {
public:
    explicit ResponseParser(ResponseSink& sink) : sink_(sink) {}

    unsigned status() const noexcept { return status_; }
    bool refused_by_sink() const noexcept { return refused_; }

private:
    using error_code = boost::system::error_code;
    using string_view = boost::beast::string_view;

    void on_request_impl(boost::beast::http::verb, string_view, string_view, int, error_code& ec) override;
    void on_response_impl(int code, string_view, int, error_code&) override { status_ = static_cast<unsigned>(code); }
    void on_field_impl(boost::beast::http::field f, string_view, string_view value, error_code&) override;
    void on_header_impl(error_code&) override { sink_.on_head(status_, content_type_); }
    void on_body_init_impl(const boost::optional<std::uint64_t>& length, error_code&) override {
        if (length) sink_.on_body_size(*length);
    }
    std::size_t on_body_impl(string_view body, error_code& ec) override;
    void on_chunk_header_impl(std::uint64_t, string_view, error_code&) override {}
    std::size_t on_chunk_body_impl(std::uint64_t, string_view body, error_code& ec) override;
    void on_finish_impl(error_code&) override {}

    ResponseSink& sink_;
    unsigned status_ = 0;
    // A copy: the field may come from an earlier put() than the end of the head, out of a
    // buffer the caller has since consumed (or, for a folded value, out of Beast's own).
    std::string content_type_;
    bool refused_ = false;
};

}  // namespace kubesandbox::http1
