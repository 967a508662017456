#include "util/bounded_for_each.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <exception>
#include <memory>

namespace kubesandbox::util {

namespace asio = boost::asio;

namespace {

struct Shared {
    std::size_t next = 0;
    std::size_t count = 0;
    std::size_t running = 0;
    BoundedStep step;
    std::exception_ptr first_error;
};

// Takes the next index until none is left; all workers share one strand.
asio::awaitable<void> worker(std::shared_ptr<Shared> shared) {
    while (shared->next < shared->count) {
        std::size_t index = shared->next++;
        try {
            co_await shared->step(index);
        } catch (...) {
            if (!shared->first_error) shared->first_error = std::current_exception();
        }
    }
}

// Runs on the strand: starts the workers there and waits until the last has finished. Not an
// asio parallel_group: Boost 1.81's ranged group reads its operations after the last of them
// may have completed it on another thread (a use-after-free ASan found on a 4-thread pool).
asio::awaitable<void> run_workers(std::shared_ptr<Shared> shared, std::size_t workers) {
    // The workers hold references into this frame's state: it must outlive them, cancelled or not.
    co_await asio::this_coro::throw_if_cancelled(false);
    auto strand = co_await asio::this_coro::executor;
    asio::steady_timer all_done(strand, asio::steady_timer::time_point::max());
    shared->running = workers;
    for (std::size_t i = 0; i < workers; ++i)
        asio::co_spawn(strand, worker(shared), asio::bind_executor(strand, [shared, &all_done](std::exception_ptr) {
                           if (--shared->running == 0) all_done.cancel();
                       }));
    while (shared->running > 0) {
        all_done.expires_at(asio::steady_timer::time_point::max());
        if (shared->running == 0) break;
        co_await all_done.async_wait(asio::as_tuple(asio::use_awaitable));
    }
}

}  // namespace

asio::awaitable<void> bounded_for_each(std::size_t count, std::size_t limit, BoundedStep step) {
    if (count == 0) co_return;
    auto shared = std::make_shared<Shared>();
    shared->count = count;
    shared->step = std::move(step);
    auto strand = asio::make_strand(co_await asio::this_coro::executor);
    const std::size_t workers = std::min(std::max<std::size_t>(limit, 1), count);
    co_await asio::co_spawn(strand, run_workers(shared, workers), asio::use_awaitable);
    if (shared->first_error) std::rethrow_exception(shared->first_error);
}

}  // namespace kubesandbox::util
