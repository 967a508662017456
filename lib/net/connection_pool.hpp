// Keep-alive connections to one server: at most `max_connections` in use at once (a counting
// semaphore that is safe on a multi-threaded io_context) and the idle ones kept for reuse while
// they are young and the peer has not closed them.
#pragma once

#include "net/any_stream.hpp"
#include "net/token_channel.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>

#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>

namespace kubesandbox::net {

struct PooledConnection {
    AnyStream stream;
    boost::beast::flat_buffer buffer;
    std::chrono::steady_clock::time_point idle_since{};
    std::uint64_t generation{0};  // of the endpoint it was opened to (see PooledConnectionSettings)
};

class ConnectionPool {
public:
    ConnectionPool(boost::asio::any_io_executor executor, std::size_t max_connections,
                   std::chrono::steady_clock::duration max_idle = std::chrono::seconds(55));

    // The right to use one connection; returned to the pool when destroyed.
    class Slot {
    public:
        Slot(Slot&& other) noexcept : pool_(std::exchange(other.pool_, nullptr)) {}
        // The slot held before goes back at once; `other` is left empty.
        Slot& operator=(Slot&& other) noexcept {
            if (this != &other) {
                Slot previous(std::move(*this));
                pool_ = std::exchange(other.pool_, nullptr);
            }
            return *this;
        }
        ~Slot();

    private:
        friend class ConnectionPool;
        explicit Slot(ConnectionPool* pool) : pool_(pool) {}
        ConnectionPool* pool_;
    };

    // A free slot, waiting for one until `deadline` (nullopt then). Taking a free slot costs no
    // timer and no suspension: this is on every request's path.
    boost::asio::awaitable<std::optional<Slot>> acquire(std::chrono::steady_clock::time_point deadline);
    // A free slot if there is one now: no coroutine frame either.
    std::optional<Slot> try_acquire();

    // An idle connection that still looks usable, if any (stale ones are closed).
    std::optional<PooledConnection> take_idle();
    void give_back(PooledConnection connection);

private:
    boost::asio::any_io_executor executor_;
    using SlotChannel = TokenChannel;
    std::chrono::steady_clock::duration max_idle_;
    std::unique_ptr<SlotChannel> slots_;
    std::mutex mutex_;
    std::deque<PooledConnection> idle_;
};

}  // namespace kubesandbox::net
