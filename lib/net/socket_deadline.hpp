// Pieces shared by the socket-backed AnyStream implementations (plain TCP and TLS).
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <poll.h>

#include <chrono>
#include <functional>
#include <memory>

namespace kubesandbox::net {

// An idle keep-alive socket is reusable only while open with nothing to read: readable while
// idle means EOF, a reset or stray bytes.
inline bool socket_idle_alive(boost::asio::ip::tcp::socket& socket) {
    if (!socket.is_open()) return false;
    pollfd pfd{socket.native_handle(), POLLIN, 0};
    return ::poll(&pfd, 1, 0) == 0;
}

// Socket-level deadline: when it passes, `expire` ends the connection (closes the socket, or
// shuts it down), so every pending operation completes with an error (the beast::tcp_stream
// idea). `expire` runs on the executor given, under the deadline's lock, and never after the
// Deadline is gone.
//
// Arming a timer costs a system call whenever it becomes the earliest one (timerfd_settime,
// ~2 µs here), and keep-alive connections arm and disarm once per request. So a disarm leaves
// the wait in place until the executor's next turn, and an arm whose deadline is not earlier
// than the wait already out keeps that wait: it fires early, looks at the current deadline and
// waits again. Back-to-back requests on a connection then arm one timer between them, and no
// wait outlives a disarmed deadline by more than a turn (an io_context with nothing else to do
// still returns from run()).
class Deadline {
public:
    Deadline(const boost::asio::any_io_executor& ex, std::function<void()> expire);
    ~Deadline();
    Deadline(const Deadline&) = delete;
    Deadline& operator=(const Deadline&) = delete;

    void arm(std::chrono::steady_clock::duration d);
    void disarm();

private:
    struct State;
    std::shared_ptr<State> state_;
};

}  // namespace kubesandbox::net
