// Watches: one long-lived response read event by event, with an idle deadline, auth refresh on
// 401 and retries of the initial request.
#include <kubesandbox/kube_client.hpp>

#include "kube/client_impl.hpp"
#include "kube/retry_policy.hpp"
#include "net/with_timeout.hpp"
#include "proto/status.hpp"
#include "proto/watch_decoder.hpp"

#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <array>

namespace kubesandbox {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using net::use_tuple;
using std::chrono::steady_clock;

namespace {

Error mapped_error(errc code, std::string message, boost::system::error_code lower) {
    Error e = make_error(code, std::move(message));
    e.lower_code = lower;
    return e;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Watch

struct WatchStream::Impl {
    std::shared_ptr<KubeClient::Impl> client;
    net::AnyStream stream;
    beast::flat_buffer buffer;
    http::response_parser<http::buffer_body> parser;
    proto::WatchDecoder decoder;
    std::array<char, 64 * 1024> chunk{};
    std::chrono::milliseconds idle_timeout{0};  // 0 = none
    bool finished = false;
    std::optional<Error> failure;  // reported once the events received before it are out
};

WatchStream::WatchStream() = default;
WatchStream::WatchStream(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
WatchStream::WatchStream(WatchStream&&) noexcept = default;
WatchStream& WatchStream::operator=(WatchStream&&) noexcept = default;
WatchStream::~WatchStream() { close(); }

void WatchStream::close() {
    if (impl_) {
        impl_->stream.close();
        impl_->finished = true;
    }
}

asio::awaitable<Result<std::optional<WatchEvent>>> WatchStream::next() {
    if (!impl_) co_return fail(errc::invalid_argument, "watch stream is not open");
    auto& s = *impl_;
    for (;;) {
        auto ev = s.decoder.next();
        if (!ev) co_return fail(ev.error());
        if (*ev) {
            if ((*ev)->type == WatchEvent::Type::error) {
                // The server ends the stream after an ERROR event; its Status is the error.
                s.finished = true;
                s.stream.close();
                co_return fail(proto::error_from_watch_status((*ev)->object));
            }
            co_return std::move(*ev);
        }
        if (s.failure) co_return fail(*s.failure);
        if (s.finished || s.parser.is_done()) {
            s.finished = true;
            if (s.decoder.buffered() != 0)
                co_return fail(errc::invalid_response, "watch stream ended in the middle of an event");
            co_return std::optional<WatchEvent>{};
        }
        s.parser.get().body().data = s.chunk.data();
        s.parser.get().body().size = s.chunk.size();
        // The idle deadline runs only while we wait for bytes, not while the caller works.
        const auto idle_deadline = steady_clock::now() + s.idle_timeout;
        if (s.idle_timeout.count() > 0) s.stream.expires_after(s.idle_timeout);
        auto [ec, n] = co_await http::async_read_some(s.stream, s.buffer, s.parser, use_tuple);
        if (s.idle_timeout.count() > 0 && !s.finished) s.stream.expires_never();
        if (ec == http::error::need_buffer) ec = {};
        const std::size_t got = s.chunk.size() - s.parser.get().body().size;
        if (got != 0) s.decoder.feed(std::string_view(s.chunk.data(), got));
        if (ec) {
            const bool closed_by_caller = s.finished;
            s.finished = true;
            s.stream.close();
            if (!closed_by_caller && s.idle_timeout.count() > 0 && steady_clock::now() >= idle_deadline)
                s.failure = mapped_error(
                    errc::timeout, "watch idle: nothing received for " + std::to_string(s.idle_timeout.count()) + " ms",
                    ec);
            else if (ec == asio::error::operation_aborted) s.failure = make_error(errc::cancelled, "watch cancelled");
            else s.failure = mapped_error(errc::connection_closed, "watch connection lost: " + ec.message(), ec);
        }
    }
}

asio::awaitable<Result<WatchStream>> KubeClient::watch(ResourcePath collection, WatchOptions options) {
    auto& c = *impl_;
    if (c.config_error) co_return fail(*c.config_error);
    bool auth_refreshed = false;
    for (int number = 0;; ++number) {
        auto auth = co_await c.authorization(auth_refreshed);
        if (!auth) co_return fail(auth.error());
        auto stream = co_await c.connect();
        kube::Attempt a;
        a.number = number;
        a.idempotent = true;
        if (stream) {
            auto impl = std::make_unique<WatchStream::Impl>();
            impl->client = impl_;
            impl->stream = std::move(*stream);
            impl->idle_timeout = options.idle_timeout;
            http::request<http::empty_body> req{http::verb::get,
                                                c.full_target(proto::watch_target(collection, options)), 11};
            req.set(http::field::host, c.host_header());
            req.set(http::field::user_agent, c.options.user_agent);
            req.set(http::field::accept, "application/json");
            if (!auth->empty()) req.set(http::field::authorization, *auth);
            impl->stream.expires_after(c.options.request_timeout);
            auto [wec, wn] = co_await http::async_write(impl->stream, req, use_tuple);
            boost::system::error_code hec = wec;
            if (!wec) {
                impl->parser.body_limit(boost::none);
                auto [rec, rn] = co_await http::async_read_header(impl->stream, impl->buffer, impl->parser, use_tuple);
                hec = rec;
            }
            if (!hec) {
                const unsigned status = impl->parser.get().result_int();
                if (status == 200) {
                    impl->stream.expires_never();
                    co_return WatchStream(std::move(impl));
                }
                // Read the (small) error body, then report it.
                std::string body;
                std::array<char, 8192> buf{};
                while (!impl->parser.is_done() && body.size() < 64 * 1024) {
                    impl->parser.get().body().data = buf.data();
                    impl->parser.get().body().size = buf.size();
                    auto [bec, bn] =
                        co_await http::async_read_some(impl->stream, impl->buffer, impl->parser, use_tuple);
                    body.append(buf.data(), buf.size() - impl->parser.get().body().size);
                    if (bec && bec != http::error::need_buffer) break;
                }
                impl->stream.close();
                Error e = proto::error_from_response(status, std::string(impl->parser.get()[http::field::content_type]),
                                                     body, std::string(impl->parser.get()[http::field::retry_after]));
                if (status == 401 && !auth_refreshed && c.can_refresh_credentials()) {
                    auth_refreshed = true;
                    --number;
                    continue;
                }
                a.http_status = status;
                a.retry_after = e.retry_after;
                auto delay = c.retry_delay(a);
                if (!delay) co_return fail(std::move(e));
                asio::steady_timer t(c.executor, *delay);
                co_await t.async_wait(use_tuple);
                continue;
            }
            impl->stream.close();
            stream = fail(mapped_error(errc::connection_closed, "watch request failed: " + hec.message(), hec));
        }
        if (stream.error().is_permanent()) co_return fail(stream.error());
        auto delay = c.retry_delay(a);
        if (!delay) co_return fail(stream.error());
        asio::steady_timer t(c.executor, *delay);
        co_await t.async_wait(use_tuple);
    }
}

}  // namespace kubesandbox
