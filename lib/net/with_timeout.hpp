// The one way to bound an operation by a deadline: race it against a timer and cancel the
// loser. The operation must report errors as values (as_tuple / Result): an exception thrown by
// a raced operation is hidden behind the full timeout by Asio's `||` (style-anchors.md §0).
#pragma once

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <optional>
#include <utility>

namespace kubesandbox::net {

inline constexpr auto use_tuple = boost::asio::as_tuple(boost::asio::use_awaitable);

// The operation's result, or nullopt when `timer` (armed by the caller, often shared by the
// steps of one exchange) fired first; the operation is then cancelled.
template <class T>
boost::asio::awaitable<std::optional<T>> with_timeout(boost::asio::awaitable<T> op, boost::asio::steady_timer& timer) {
    using namespace boost::asio::experimental::awaitable_operators;
    auto raced = co_await (std::move(op) || timer.async_wait(use_tuple));
    if (raced.index() == 1) co_return std::nullopt;
    co_return std::optional<T>(std::move(std::get<0>(raced)));
}

}  // namespace kubesandbox::net
