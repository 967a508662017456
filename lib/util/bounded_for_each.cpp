#include "util/bounded_for_each.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <exception>
#include <memory>
#include <vector>

namespace kubesandbox::util {

namespace asio = boost::asio;

namespace {

struct Shared {
    std::size_t next = 0;
    std::size_t count = 0;
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

}  // namespace

asio::awaitable<void> bounded_for_each(std::size_t count, std::size_t limit, BoundedStep step) {
    if (count == 0) co_return;
    auto shared = std::make_shared<Shared>();
    shared->count = count;
    shared->step = std::move(step);
    auto strand = asio::make_strand(co_await asio::this_coro::executor);
    using Op = decltype(asio::co_spawn(strand, worker(shared), asio::deferred));
    std::vector<Op> workers;
    const std::size_t n = std::min(std::max<std::size_t>(limit, 1), count);
    workers.reserve(n);
    for (std::size_t i = 0; i < n; ++i) workers.push_back(asio::co_spawn(strand, worker(shared), asio::deferred));
    co_await asio::experimental::make_parallel_group(std::move(workers))
        .async_wait(asio::experimental::wait_for_all(), asio::use_awaitable);
    if (shared->first_error) std::rethrow_exception(shared->first_error);
}

}  // namespace kubesandbox::util
