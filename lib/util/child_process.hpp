// Starting a helper program (an exec credential plugin, kubectl) and waiting for it on an
// executor: never blocking the thread, and never taking a wake-up of the pidfd for an exit (only
// waitpid says a child is gone).
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include <optional>
#include <string>
#include <vector>

#include <tl/expected.hpp>

#include <sys/types.h>

namespace kubesandbox::util {

// A started child; the caller owns both descriptors (close-on-exec, blocking).
struct SpawnedChild {
    pid_t pid = -1;
    int stdout_fd = -1;
    int stderr_fd = -1;
};

// Starts argv[0] (looked up in PATH) with `envp`: stdin /dev/null, stdout and stderr pipes, no
// other inherited descriptor, its own process group (so it can be stopped with its children),
// default signal dispositions and an empty mask. The errno on failure (ENOENT: not found).
tl::expected<SpawnedChild, int> spawn_child(const std::vector<std::string>& argv, char* const* envp);

// A pidfd for `pid` (close-on-exec), or -1 where the kernel has none.
int open_pidfd(pid_t pid);

// Waits for the child `pid` to exit and reaps it. Returns its wait status, -1 when someone else
// reaped it, or nullopt when the wait was cancelled. Without a pidfd it polls every 10 ms.
boost::asio::awaitable<std::optional<int>> reap_child(boost::asio::posix::stream_descriptor* pidfd, pid_t pid);

// A pipe grown past its default 64 KiB while this object lives. Without CAP_SYS_RESOURCE a
// user's pipes count against fs.pipe-user-pages-soft, past which the kernel gives every new
// pipe of that user (every process, not just ours) a single page; so unprivileged growth draws
// on a process-wide budget of a quarter of that limit, and a pipe that finds it spent keeps its
// default size.
class GrownPipe {
public:
    GrownPipe() = default;
    // Grows the pipe `fd` belongs to to `bytes` (at most the budget allows) and holds its share.
    GrownPipe(int fd, int bytes);
    GrownPipe(GrownPipe&& other) noexcept;
    GrownPipe& operator=(GrownPipe&& other) noexcept;
    ~GrownPipe();

    // Pages taken from the budget (0 when privileged, refused or not grown).
    long budget_pages() const { return pages_; }
    // The capacity after growing.
    int capacity() const { return capacity_; }

private:
    long pages_ = 0;
    int capacity_ = 0;
};

}  // namespace kubesandbox::util
