// The kubelet's child processes: spawned with exactly the descriptors given, reaped on the
// executor without blocking it, and the process tree under a sandbox's first process.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include <sys/types.h>
#include <unistd.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kubesandbox::local {

// A wait status as a container runtime reports it: the exit code, or 128 + the signal.
int exit_code_of(int wstatus);

// Waits for our child `pid` to exit and reaps it: its exit code (255 when someone else reaped
// it), or nullopt when the wait was cancelled. The pidfd is borrowed (duplicated).
boost::asio::awaitable<std::optional<int>> reap_child(boost::asio::any_io_executor executor, int pidfd, pid_t pid);

// Descendants of `pid` (by /proc/<pid>/task/*/children), deepest last.
std::vector<pid_t> descendants(pid_t pid);

// File actions + argv/envp storage for posix_spawnp.
struct Spawn {
    std::vector<std::string> argv;
    std::vector<std::string> env;
    std::vector<std::pair<int, int>> dups;  // (from fd, to fd)
    // Its own session (and process group, pgid = pid): no controlling terminal, so a sandboxed
    // command cannot open the /dev/tty of whoever runs the cluster.
    bool new_session = false;

    // Returns the pid or -errno.
    pid_t run() const;
};

struct Fd {
    int fd = -1;
    Fd() = default;
    explicit Fd(int f) : fd(f) {}
    Fd(Fd&& o) noexcept : fd(std::exchange(o.fd, -1)) {}
    Fd& operator=(Fd&& o) noexcept {
        reset();
        fd = std::exchange(o.fd, -1);
        return *this;
    }
    ~Fd() { reset(); }
    void reset() {
        if (fd >= 0) ::close(fd);
        fd = -1;
    }
    int release() { return std::exchange(fd, -1); }
};

}  // namespace kubesandbox::local
