#include "net/token_channel.hpp"

#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace kubesandbox::net {

boost::asio::awaitable<bool> take_token(TokenChannel& channel, boost::asio::steady_timer& timer) {
    if (channel.try_receive([](boost::system::error_code) {})) co_return true;
    // Both results are seen: when the timer won but the receive had completed too, the token
    // is ours all the same.
    auto [order, received, waited] =
        co_await boost::asio::experimental::make_parallel_group(channel.async_receive(boost::asio::deferred),
                                                                timer.async_wait(boost::asio::deferred))
            .async_wait(boost::asio::experimental::wait_for_one(), boost::asio::use_awaitable);
    (void)order;
    (void)waited;
    co_return !received;
}

}  // namespace kubesandbox::net
