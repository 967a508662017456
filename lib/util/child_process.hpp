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

// A pipe grown past its default 64 KiB. Every pipe counts against its user's
// fs.pipe-user-pages-soft (a privileged process's too), past which the kernel makes every new
// pipe of that user, in any process, a couple of pages; so growth draws on a process-wide budget
// of a quarter of that limit, and a pipe that finds it spent keeps its size. The kernel counts a
// pipe until both of its ends are closed, and a command's background children may keep theirs:
// its pages come back to the budget only when it is shrunk back before our end closes.
class GrownPipe {
public:
    GrownPipe() = default;
    // Grows the pipe `fd` belongs to to `bytes`, if the budget has room.
    GrownPipe(int fd, int bytes);
    GrownPipe(GrownPipe&& other) noexcept;
    GrownPipe& operator=(GrownPipe&& other) noexcept;
    ~GrownPipe() = default;  // pages not given back by shrink() stay spent

    // Back to the size it had, just before our end `fd` closes; the pages come back to the budget
    // unless the bytes in the pipe do not fit (then they stay spent).
    void shrink(int fd) noexcept;

    // Pages taken from the budget and not given back.
    long budget_pages() const { return pages_; }
    // The capacity now.
    int capacity() const { return capacity_; }

private:
    long pages_ = 0;
    int capacity_ = 0;
    int before_ = 0;
};

}  // namespace kubesandbox::util
