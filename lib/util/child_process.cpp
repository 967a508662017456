#include "util/child_process.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

namespace kubesandbox::util {

namespace asio = boost::asio;

int open_pidfd(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

asio::awaitable<std::optional<int>> reap_child(asio::posix::stream_descriptor* pidfd, pid_t pid) {
    constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);
    asio::steady_timer pause(co_await asio::this_coro::executor);
    for (;;) {
        int status = 0;
        pid_t r = ::waitpid(pid, &status, WNOHANG);
        if (r == pid) co_return status;
        if (r < 0 && errno != EINTR) co_return -1;  // ECHILD: reaped elsewhere
        // A readiness report may be spurious (an epoll registration left behind by a descriptor
        // that a child process inherited): the loop asks waitpid again either way.
        boost::system::error_code ec;
        if (pidfd != nullptr && pidfd->is_open()) {
            std::tie(ec) = co_await pidfd->async_wait(asio::posix::descriptor_base::wait_read, tuple_awaitable);
            if (ec == asio::error::operation_aborted) co_return std::nullopt;
        }
        if (pidfd == nullptr || !pidfd->is_open() || ec) {
            pause.expires_after(std::chrono::milliseconds(10));
            std::tie(ec) = co_await pause.async_wait(tuple_awaitable);
            if (ec) co_return std::nullopt;
        }
    }
}

}  // namespace kubesandbox::util
