// Pieces shared by the socket-backed AnyStream implementations (plain TCP and TLS).
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include <poll.h>

#include <chrono>
#include <cstdint>
#include <memory>

namespace kubesandbox::net {

// An idle keep-alive socket is reusable only while open with nothing to read: readable while
// idle means EOF, a reset or stray bytes.
inline bool socket_idle_alive(boost::asio::ip::tcp::socket& socket) {
    if (!socket.is_open()) return false;
    pollfd pfd{socket.native_handle(), POLLIN, 0};
    return ::poll(&pfd, 1, 0) == 0;
}

// Socket-level deadline: when it fires, `expire` ends the connection (closes the socket, or
// shuts it down), so every pending operation completes with an error (the beast::tcp_stream
// idea).
class Deadline {
public:
    explicit Deadline(const boost::asio::any_io_executor& ex) : timer_(ex) {}
    template <class Expire>
    void arm(std::chrono::steady_clock::duration d, Expire expire) {
        timer_.expires_after(d);
        // A wait that already fired but has not run yet must not end a re-armed or destroyed
        // stream: it checks that its generation is still current and the owner still alive.
        timer_.async_wait([expire = std::move(expire), alive = std::weak_ptr<int>(alive_), gen = ++generation_,
                           current = &generation_](boost::system::error_code ec) mutable {
            if (ec || alive.expired() || gen != *current) return;
            expire();
        });
    }
    void arm(std::chrono::steady_clock::duration d, boost::asio::ip::tcp::socket& socket) {
        arm(d, [&socket] {
            boost::system::error_code ignored;
            socket.close(ignored);
        });
    }
    void disarm() {
        ++generation_;
        timer_.cancel();
    }

private:
    boost::asio::steady_timer timer_;
    std::shared_ptr<int> alive_ = std::make_shared<int>(0);
    std::uint64_t generation_ = 0;
};

}  // namespace kubesandbox::net
