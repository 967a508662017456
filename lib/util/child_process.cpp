#include "util/child_process.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <utility>

namespace kubesandbox::util {

namespace asio = boost::asio;

namespace {

struct SpawnSetup {
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attr;
    SpawnSetup() {
        posix_spawn_file_actions_init(&actions);
        posix_spawnattr_init(&attr);
    }
    ~SpawnSetup() {
        posix_spawn_file_actions_destroy(&actions);
        posix_spawnattr_destroy(&attr);
    }
};

void close_all(std::initializer_list<int> fds) {
    for (int fd : fds)
        if (fd >= 0) ::close(fd);
}

}  // namespace

tl::expected<SpawnedChild, int> spawn_child(const std::vector<std::string>& argv, char* const* envp) {
    if (argv.empty()) return tl::unexpected(EINVAL);
    std::vector<std::string> args = argv;
    std::vector<char*> pointers;
    for (auto& a : args) pointers.push_back(a.data());
    pointers.push_back(nullptr);
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0) return tl::unexpected(errno);
    if (::pipe2(err, O_CLOEXEC) != 0) {
        int e = errno;
        close_all({out[0], out[1]});
        return tl::unexpected(e);
    }
    pid_t pid = -1;
    int rc = 0;
    {
        SpawnSetup setup;
        posix_spawn_file_actions_addopen(&setup.actions, 0, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_adddup2(&setup.actions, out[1], 1);
        posix_spawn_file_actions_adddup2(&setup.actions, err[1], 2);
        // The host's sockets (Asio does not set CLOEXEC) stay out of the child.
        posix_spawn_file_actions_addclosefrom_np(&setup.actions, 3);
        sigset_t empty, all;
        sigemptyset(&empty);
        sigfillset(&all);
        posix_spawnattr_setsigmask(&setup.attr, &empty);
        posix_spawnattr_setsigdefault(&setup.attr, &all);
        posix_spawnattr_setpgroup(&setup.attr, 0);
        posix_spawnattr_setflags(&setup.attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
        rc = ::posix_spawnp(&pid, pointers[0], &setup.actions, &setup.attr, pointers.data(), envp);
    }
    close_all({out[1], err[1]});
    if (rc != 0) {
        close_all({out[0], err[0]});
        return tl::unexpected(rc);
    }
    return SpawnedChild{pid, out[0], err[0]};
}

int open_pidfd(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

namespace {

// Pages growth may take: a quarter of fs.pipe-user-pages-soft (0 there: no limit, -1 here).
long pipe_page_budget() {
    long soft = 16384;
    if (FILE* f = std::fopen("/proc/sys/fs/pipe-user-pages-soft", "re")) {
        if (std::fscanf(f, "%ld", &soft) != 1) soft = 16384;
        std::fclose(f);
    }
    return soft <= 0 ? -1 : soft / 4;
}

std::atomic<long> pipe_pages_taken{0};

}  // namespace

GrownPipe::GrownPipe(int fd, int bytes) {
    static const long budget = pipe_page_budget();
    const long page = ::sysconf(_SC_PAGESIZE);
    before_ = capacity_ = ::fcntl(fd, F_GETPIPE_SZ);
    if (before_ < 0 || bytes <= before_) return;
    const long extra = (bytes - before_ + page - 1) / page;
    // Taken before the resize, so that racing growers never overshoot together.
    if (budget >= 0 && pipe_pages_taken.fetch_add(extra) + extra > budget) {
        pipe_pages_taken.fetch_sub(extra);
        return;
    }
    if (::fcntl(fd, F_SETPIPE_SZ, bytes) < 0) {
        pipe_pages_taken.fetch_sub(extra);
        return;
    }
    pages_ = extra;
    capacity_ = ::fcntl(fd, F_GETPIPE_SZ);
}

GrownPipe::GrownPipe(GrownPipe&& other) noexcept
    : pages_(std::exchange(other.pages_, 0)), capacity_(other.capacity_), before_(other.before_) {}

GrownPipe& GrownPipe::operator=(GrownPipe&& other) noexcept {
    if (this != &other) {
        pages_ = std::exchange(other.pages_, 0);  // what this one held stays spent
        capacity_ = other.capacity_;
        before_ = other.before_;
    }
    return *this;
}

void GrownPipe::shrink(int fd) noexcept {
    if (pages_ == 0 || ::fcntl(fd, F_SETPIPE_SZ, before_) < 0) return;
    pipe_pages_taken.fetch_sub(std::exchange(pages_, 0));
    capacity_ = before_;
}

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
