// The request interface behind RouterConnection: one HTTP request to the router with a deadline,
// the response streamed into a sink so large bodies need not be held. Never replays a request
// that may have reached the server unless the caller says it is safe.
#pragma once

#include <kubesandbox/error.hpp>
#include <kubesandbox/router_sandbox.hpp>
#include <kubesandbox/sandbox.hpp>

#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kubesandbox {

struct RouterRequest {
    std::string method{"GET"};
    std::string target{};  // path and query, below the connection's URL prefix
    std::string fields{};  // header lines, "Name: value\r\n" each, written by add_header
    std::string body{};
    // Instead of `body` when set: exactly body_size bytes pulled piece by piece (each valid until
    // the next call, an empty piece at the end). Such a body can be sent once only, so it goes
    // out on a connection opened for it (a reused one may have been closed while idle) and is
    // never replayed; the source's own error is returned as it is.
    ByteSource body_source{};
    std::uint64_t body_size{0};
    bool replay_safe{false};  // may be sent again on a fresh connection after a stale reuse
    // Set: the request carries X-Sandbox-Timeout, written as it goes out (after any wait for a
    // free connection): a little less than the time left before the deadline, and at most this
    // many seconds. The router then ends a slow call with an answer before the client gives up.
    std::optional<std::int64_t> router_timeout_at_most{};
    bool bad_field{false};  // add_header refused a field: the request is never sent

    // A name with a colon or a line break, or a value with a line break, is refused (and marks
    // the request); anything else is appended to `fields`.
    void add_header(std::string_view name, std::string_view value);
};

// Receives the response: the head, then the body in pieces. on_body returning false stops the
// transfer (the connection is then closed, not reused).
class ResponseSink {
public:
    virtual ~ResponseSink() = default;
    virtual void on_head(unsigned status, std::string_view content_type) = 0;
    // The body's announced size (its Content-Length), when it has one, before any of it.
    virtual void on_body_size(std::uint64_t) {}
    virtual bool on_body(std::string_view chunk) = 0;
    // A sink that hands the body on asynchronously says so: drain() is then awaited after each
    // read's pieces went to on_body, before more is read (false stops the transfer), so what it
    // holds stays within one read.
    virtual bool drains() const { return false; }
    virtual boost::asio::awaitable<bool> drain() { co_return true; }
};

struct RouterConnection::Impl {
    virtual ~Impl() = default;
    // The status on a complete response. Errors: errc::timeout, errc::connection_failed,
    // errc::connection_closed (the response was cut short: the request may have run),
    // errc::invalid_response, errc::cancelled (the sink stopped the transfer).
    virtual boost::asio::awaitable<Result<unsigned>> send(RouterRequest request,
                                                          std::chrono::steady_clock::time_point deadline,
                                                          ResponseSink& sink) = 0;
    // Closes the idle connections kept for reuse (after a failed health check).
    virtual void drop_idle() {}
};

}  // namespace kubesandbox
