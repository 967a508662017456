// Races an awaitable against a deadline without cancelling it: the operation runs detached and,
// when the deadline comes first, the caller moves on and the late result is dropped. For
// operations that cannot be cancelled cleanly (a watch's next() on a shared stream); `keep`
// holds what the operation uses until it has finished. An exception from the operation is
// reported as no result, like a missed deadline, so raced operations return errors as values.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <exception>
#include <memory>
#include <optional>

namespace kubesandbox::util {

namespace detail {

template <class T>
struct RaceSlot {
    explicit RaceSlot(const boost::asio::any_io_executor& ex) : signal(ex) {}
    std::optional<T> value{};
    boost::asio::steady_timer signal;
    std::shared_ptr<void> keep{};
};

template <class T>
boost::asio::awaitable<void> race_deliver(std::shared_ptr<RaceSlot<T>> slot, boost::asio::awaitable<T> op) {
    try {
        T v = co_await std::move(op);
        slot->value.emplace(std::move(v));
    } catch (const std::exception&) {}
    slot->signal.cancel();
    slot->keep.reset();
}

}  // namespace detail

// nullopt when the deadline passed first.
template <class T>
boost::asio::awaitable<std::optional<T>> until_deadline(boost::asio::awaitable<T> op,
                                                        std::chrono::steady_clock::time_point deadline,
                                                        std::shared_ptr<void> keep) {
    namespace asio = boost::asio;
    auto ex = co_await asio::this_coro::executor;
    auto slot = std::make_shared<detail::RaceSlot<T>>(ex);
    slot->keep = std::move(keep);
    slot->signal.expires_at(deadline);
    asio::co_spawn(ex, detail::race_deliver(slot, std::move(op)), asio::detached);
    if (!slot->value) co_await slot->signal.async_wait(asio::as_tuple(asio::use_awaitable));
    std::optional<T> out;
    if (slot->value) out.emplace(std::move(*slot->value));
    co_return out;
}

inline boost::asio::awaitable<void> sleep_for(std::chrono::steady_clock::duration d) {
    namespace asio = boost::asio;
    asio::steady_timer t(co_await asio::this_coro::executor);
    t.expires_after(d);
    co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
}

}  // namespace kubesandbox::util
