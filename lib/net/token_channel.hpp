// A counting semaphore as a channel of tokens (one per free unit), for the connection pool's
// slots and the connect gate. Safe on a multi-threaded io_context.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/steady_timer.hpp>

namespace kubesandbox::net {

using TokenChannel = boost::asio::experimental::concurrent_channel<void(boost::system::error_code)>;

// Takes a token, waiting until `timer` fires; false then. A token that arrives as the timer
// fires is kept, never dropped (racing the two with `||` would lose it, and the unit for good).
boost::asio::awaitable<bool> take_token(TokenChannel& channel, boost::asio::steady_timer& timer);

}  // namespace kubesandbox::net
