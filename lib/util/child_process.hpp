// Waiting for a child process on an executor: never blocking the thread, and never taking a
// wake-up of the pidfd for an exit (only waitpid says a child is gone).
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include <optional>

#include <sys/types.h>

namespace kubesandbox::util {

// A pidfd for `pid` (close-on-exec), or -1 where the kernel has none.
int open_pidfd(pid_t pid);

// Waits for the child `pid` to exit and reaps it. Returns its wait status, -1 when someone else
// reaped it, or nullopt when the wait was cancelled. Without a pidfd it polls every 10 ms.
boost::asio::awaitable<std::optional<int>> reap_child(boost::asio::posix::stream_descriptor* pidfd, pid_t pid);

}  // namespace kubesandbox::util
