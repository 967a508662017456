// A bound on the connections one client is opening at once. A TLS handshake holds ~60 KiB
// (record buffers, the handshake buffer, the peer's chain) until it ends, so a burst of 1,000
// executes, each on a connection of its own, would hold them all at once; behind the gate only
// a few do, and the others wait as a coroutine frame. Safe on a multi-threaded io_context.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>

namespace kubesandbox::net {

class ConnectGate {
public:
    ConnectGate(boost::asio::any_io_executor executor, std::size_t limit);
    ~ConnectGate();
    ConnectGate(const ConnectGate&) = delete;
    ConnectGate& operator=(const ConnectGate&) = delete;

    // The right to open one connection; the next waiter goes in when it is destroyed.
    class Permit {
    public:
        Permit(Permit&& other) noexcept;
        Permit& operator=(Permit&& other) noexcept;
        ~Permit();

    private:
        friend class ConnectGate;
        explicit Permit(ConnectGate* gate) : gate_(gate) {}
        ConnectGate* gate_;
    };

    // A permit, waiting for one until `deadline` (nullopt then). A free one costs no timer.
    boost::asio::awaitable<std::optional<Permit>> enter(std::chrono::steady_clock::time_point deadline);

    std::size_t limit() const { return limit_; }

private:
    struct Tokens;
    std::size_t limit_;
    std::unique_ptr<Tokens> tokens_;
};

}  // namespace kubesandbox::net
