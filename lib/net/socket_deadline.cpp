#include "net/socket_deadline.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <cstdint>
#include <mutex>

namespace kubesandbox::net {

namespace asio = boost::asio;
using std::chrono::steady_clock;

// Shared with the timer's handlers, which run on the executor's threads and may outlive the
// owner's last call by a turn; the owner's thread and theirs meet under `mutex`.
struct Deadline::State : std::enable_shared_from_this<State> {
    State(const asio::any_io_executor& ex, std::function<void()> on_expiry) : timer(ex), expire(std::move(on_expiry)) {}

    std::mutex mutex;
    asio::steady_timer timer;
    std::function<void()> expire;                                         // emptied when the owner goes
    steady_clock::time_point deadline = steady_clock::time_point::max();  // max: disarmed
    steady_clock::time_point wait_until{};                                // of the wait out, if any
    std::uint64_t wait_id = 0;                                            // the wait out; 0 when there is none
    std::uint64_t last_id = 0;
    bool check_posted = false;

    // With `mutex` held. Setting the expiry cancels a wait still out; its handler then finds
    // its id no longer current.
    void start_wait(steady_clock::time_point at) {
        timer.expires_at(at);
        wait_until = at;
        wait_id = ++last_id;
        timer.async_wait([weak = weak_from_this(), id = wait_id](boost::system::error_code ec) {
            if (auto self = weak.lock()) self->fired(id, ec);
        });
    }

    void fired(std::uint64_t id, boost::system::error_code ec) {
        std::lock_guard lock(mutex);
        if (id != wait_id) return;  // replaced or dropped
        wait_id = 0;
        if (ec || deadline == steady_clock::time_point::max()) return;
        if (steady_clock::now() < deadline) {
            start_wait(deadline);  // woke for an earlier deadline that has since moved
            return;
        }
        deadline = steady_clock::time_point::max();
        if (expire) expire();
    }

    // A turn after a disarm: a wait nobody re-armed is cancelled, so it holds no work.
    void drop_unused_wait() {
        std::lock_guard lock(mutex);
        check_posted = false;
        if (deadline != steady_clock::time_point::max() || wait_id == 0) return;
        wait_id = 0;
        timer.cancel();
    }
};

Deadline::Deadline(const asio::any_io_executor& ex, std::function<void()> expire)
    : state_(std::make_shared<State>(ex, std::move(expire))) {}

Deadline::~Deadline() {
    std::lock_guard lock(state_->mutex);
    state_->expire = nullptr;
    state_->deadline = steady_clock::time_point::max();
    state_->wait_id = 0;
    state_->timer.cancel();
}

void Deadline::arm(steady_clock::duration d) {
    const auto now = steady_clock::now();
    // Saturated: max() itself means disarmed.
    const auto latest = steady_clock::time_point::max() - steady_clock::duration(1);
    const auto at = d >= latest - now ? latest : now + d;
    std::lock_guard lock(state_->mutex);
    state_->deadline = at;
    if (state_->wait_id != 0 && state_->wait_until <= at) return;  // that wait fires first and looks again
    state_->start_wait(at);
}

void Deadline::disarm() {
    std::lock_guard lock(state_->mutex);
    state_->deadline = steady_clock::time_point::max();
    if (state_->wait_id == 0 || state_->check_posted) return;
    state_->check_posted = true;
    asio::post(state_->timer.get_executor(), [weak = std::weak_ptr<State>(state_)] {
        if (auto self = weak.lock()) self->drop_unused_wait();
    });
}

}  // namespace kubesandbox::net
