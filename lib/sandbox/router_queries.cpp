// RouterSandbox's reads of the runtime's own views: GET /list/{path} and GET /exists/{path}.
#include "sandbox/router_internals.hpp"

#include "sandbox/runtime_files.hpp"

namespace kubesandbox {

namespace asio = boost::asio;
namespace rp = runtime_protocol;
using router_detail::BytesSink;
using router_detail::max_error_body;
using router_detail::status_error;

namespace {

// A listing held whole: a directory of a million entries is about 80 MiB of JSON.
constexpr std::size_t max_listing_bytes = 64 * 1024 * 1024;

}  // namespace

asio::awaitable<Result<std::string>> RouterSandbox::Internals::read_view(RouterSandbox& self, std::string_view route,
                                                                         const std::string& path, std::size_t cap) {
    const bool clean = !path.empty() && path.front() == '/' && path.find('\0') == std::string::npos;
    auto segment = clean ? rp::runtime_view_segment(self.options_.base_dir, path) : std::nullopt;
    if (!segment)
        co_return fail(errc::invalid_argument, path + ": the runtime answers for " + self.options_.base_dir +
                                                   " and the paths below it it can name");
    RouterRequest request;
    request.method = "GET";
    request.target.append("/").append(route).append("/").append(*segment);
    const auto deadline = transfer_deadline(0);
    add_headers(request, self, "");
    request.replay_safe = true;  // only when nothing came back
    BytesSink sink(cap);
    auto status = co_await self.connection_->impl().send(std::move(request), deadline, sink);
    if (!status && sink.too_large && sink.status == 200)
        co_return fail(errc::invalid_response, "GET /" + std::string(route) + " of " + path + ": the answer is over " +
                                                   std::to_string(cap) + " bytes");
    if (!status) co_return fail(status.error());
    if (*status != 200) co_return fail(status_error(*status, sink.body, "GET /" + std::string(route) + " of " + path));
    if (self.options_.on_activity) self.options_.on_activity();
    co_return std::move(sink.body);
}

asio::awaitable<Result<std::vector<RuntimeEntry>>> RouterSandbox::list_directory(std::string path) {
    auto body = co_await Internals::read_view(*this, "list", path, max_listing_bytes);
    if (!body) co_return fail(body.error());
    auto entries = rp::parse_listing(*body);
    if (!entries) co_return fail(errc::invalid_response, "GET /list of " + path + ": not a listing");
    co_return std::move(*entries);
}

asio::awaitable<Result<bool>> RouterSandbox::exists(std::string path) {
    // The answer echoes the path, JSON-escaped (at most 6 bytes a byte).
    auto body = co_await Internals::read_view(*this, "exists", path, max_error_body + 6 * path.size());
    if (!body) co_return fail(body.error());
    auto exists = rp::parse_exists(*body);
    if (!exists) co_return fail(errc::invalid_response, "GET /exists of " + path + ": not an answer");
    co_return *exists;
}

}  // namespace kubesandbox
