#include "net/http_exchange.hpp"

#include "net/with_timeout.hpp"

#include <boost/asio/ssl/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

namespace kubesandbox::net {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using std::chrono::steady_clock;

namespace {

Error mapped_error(errc code, std::string message, boost::system::error_code lower) {
    Error e = make_error(code, std::move(message));
    e.lower_code = lower;
    return e;
}

bool closed_early(boost::system::error_code ec) {
    return ec == http::error::end_of_stream || ec == http::error::partial_message || ec == asio::error::eof ||
           ec == asio::error::connection_reset || ec == asio::error::broken_pipe ||
           ec == asio::ssl::error::stream_truncated;
}

}  // namespace

asio::awaitable<Result<HttpReply>> exchange(AnyStream& stream, boost::beast::flat_buffer& buffer,
                                            const http::request<http::string_body>& request,
                                            steady_clock::time_point deadline, bool reused, bool& request_sent,
                                            ExchangeLimits limits) {
    request_sent = false;
    const auto remaining = deadline - steady_clock::now();
    if (remaining <= steady_clock::duration::zero())
        co_return fail(errc::timeout, "the request timed out before it could be sent");
    stream.expires_after(remaining);
    auto [wec, wn] = co_await http::async_write(stream, request, use_tuple);
    if (wec) {
        stream.close();
        if (steady_clock::now() >= deadline)
            co_return fail(mapped_error(errc::timeout, "request timed out while sending", wec));
        // Nothing reached a live server on a stale reused connection: safe to retry anything.
        request_sent = !reused;
        co_return fail(
            make_error(wec, "sending " + std::string(request.method_string()) + " request: " + wec.message()));
    }
    request_sent = true;

    http::response_parser<http::string_body> parser;
    parser.body_limit(limits.max_body);
    parser.header_limit(limits.max_header);
    auto [rec, rn] = co_await http::async_read(stream, buffer, parser, use_tuple);
    if (rec) {
        stream.close();
        if (steady_clock::now() >= deadline) co_return fail(mapped_error(errc::timeout, "request timed out", rec));
        if (closed_early(rec)) {
            // Even on a reused connection the server may have acted on the request before
            // closing: a non-idempotent request is never replayed once written (idle sockets
            // are checked before reuse instead).
            co_return fail(
                mapped_error(errc::connection_closed,
                             "the server closed the connection before a full response (" + rec.message() + ")", rec));
        }
        co_return fail(mapped_error(errc::invalid_response, "reading the response: " + rec.message(), rec));
    }
    auto msg = parser.release();
    HttpReply out;
    out.status = msg.result_int();
    out.content_type = std::string(msg[http::field::content_type]);
    out.retry_after = std::string(msg[http::field::retry_after]);
    out.body = std::move(msg.body());
    out.keep_alive = msg.keep_alive();
    if (!out.keep_alive) stream.close();
    co_return out;
}

}  // namespace kubesandbox::net
