#include "net/connection_pool.hpp"

namespace kubesandbox::net {

using std::chrono::steady_clock;

ConnectionPool::ConnectionPool(boost::asio::any_io_executor executor, std::size_t max_connections,
                               steady_clock::duration max_idle)
    : executor_(executor), max_idle_(max_idle) {
    const std::size_t n = std::max<std::size_t>(1, max_connections);
    slots_ = std::make_unique<SlotChannel>(executor, n);
    for (std::size_t i = 0; i < n; ++i) slots_->try_send(boost::system::error_code{});
}

ConnectionPool::Slot::~Slot() {
    if (pool_) pool_->slots_->try_send(boost::system::error_code{});
}

std::optional<ConnectionPool::Slot> ConnectionPool::try_acquire() {
    if (slots_->try_receive([](boost::system::error_code) {})) return Slot(this);
    return std::nullopt;
}

boost::asio::awaitable<std::optional<ConnectionPool::Slot>> ConnectionPool::acquire(steady_clock::time_point deadline) {
    if (auto free = try_acquire()) co_return free;
    boost::asio::steady_timer timer(executor_);
    timer.expires_at(deadline);
    if (!co_await take_token(*slots_, timer)) co_return std::nullopt;
    co_return std::optional<Slot>(Slot(this));
}

std::optional<PooledConnection> ConnectionPool::take_idle() {
    std::lock_guard lock(mutex_);
    while (!idle_.empty()) {
        PooledConnection c = std::move(idle_.back());
        idle_.pop_back();
        if (steady_clock::now() - c.idle_since < max_idle_ && c.stream.idle_alive()) return c;
        c.stream.close();
    }
    return std::nullopt;
}

void ConnectionPool::give_back(PooledConnection connection) {
    connection.idle_since = steady_clock::now();
    connection.stream.expires_never();
    std::lock_guard lock(mutex_);
    idle_.push_back(std::move(connection));
}

}  // namespace kubesandbox::net
