// One HTTP/1.1 request and its response on an open connection, bounded by one deadline, with
// failures typed by what they mean for a retry: nothing sent, sent but no full answer (the
// server may have acted), garbage, or out of time.
#pragma once

#include <kubesandbox/error.hpp>

#include "net/any_stream.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include <chrono>
#include <cstdint>
#include <string>

namespace kubesandbox::net {

struct HttpReply {
    unsigned status = 0;
    std::string content_type{};
    std::string retry_after{};
    std::string body{};
    bool keep_alive = false;  // the connection may be reused
};

struct ExchangeLimits {
    std::uint64_t max_body = std::uint64_t(512) * 1024 * 1024;
    std::uint32_t max_header = 256 * 1024;
};

// `request_sent` tells the caller whether bytes may have reached the server: false only when a
// write failed on a reused connection (a stale keep-alive socket), where replaying is safe.
// Errors: errc::timeout, errc::connection_closed (closed or reset before a full response),
// errc::invalid_response, or the write's own code. The stream is closed on any error.
boost::asio::awaitable<Result<HttpReply>> exchange(
    AnyStream& stream, boost::beast::flat_buffer& buffer,
    const boost::beast::http::request<boost::beast::http::string_body>& request,
    std::chrono::steady_clock::time_point deadline, bool reused, bool& request_sent, ExchangeLimits limits = {});

}  // namespace kubesandbox::net
