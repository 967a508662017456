#include "local/process.hpp"

#include "util/child_process.hpp"

#include <boost/asio/posix/stream_descriptor.hpp>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <system_error>

namespace kubesandbox::local {

namespace asio = boost::asio;
namespace fs = std::filesystem;

int exit_code_of(int wstatus) {
    if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
    if (WIFSIGNALED(wstatus)) return 128 + WTERMSIG(wstatus);
    return 255;
}

asio::awaitable<std::optional<int>> reap_child(asio::any_io_executor executor, int pidfd, pid_t pid) {
    std::optional<asio::posix::stream_descriptor> sd;
    if (int own = pidfd >= 0 ? ::fcntl(pidfd, F_DUPFD_CLOEXEC, 0) : -1; own >= 0) sd.emplace(executor, own);
    auto status = co_await util::reap_child(sd ? &*sd : nullptr, pid);
    if (!status) co_return std::nullopt;
    co_return *status == -1 ? 255 : exit_code_of(*status);
}

std::vector<pid_t> descendants(pid_t pid) {
    std::vector<pid_t> out;
    std::vector<pid_t> todo{pid};
    while (!todo.empty() && out.size() < 100000) {
        pid_t p = todo.back();
        todo.pop_back();
        std::error_code ec;
        fs::path task_dir = "/proc/" + std::to_string(p) + "/task";
        for (fs::directory_iterator it(task_dir, ec), end; !ec && it != end; it.increment(ec)) {
            std::ifstream in(it->path() / "children");
            pid_t child;
            while (in >> child) {
                out.push_back(child);
                todo.push_back(child);
            }
        }
    }
    return out;
}

pid_t Spawn::run() const {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    int highest = 2;
    for (auto [from, to] : dups) highest = std::max(highest, to);
    // The dup2s run in order: a source that is also another entry's target would be overwritten
    // before it is copied. Such sources are copied above every target first.
    std::vector<int> copies;
    for (auto [from, to] : dups) {
        bool clobbered =
            std::any_of(dups.begin(), dups.end(), [&](auto d) { return d.second == from && d.first != from; });
        if (clobbered) {
            int copy = ::fcntl(from, F_DUPFD_CLOEXEC, highest + 1);
            if (copy < 0) {
                for (int c : copies) ::close(c);
                posix_spawn_file_actions_destroy(&fa);
                return -errno;
            }
            copies.push_back(copy);
            from = copy;
        }
        posix_spawn_file_actions_adddup2(&fa, from, to);
    }
    // Asio opens sockets without CLOEXEC: without this a pod would inherit the API server's
    // listening socket and client connections (and keep closed connections open).
    posix_spawn_file_actions_addclosefrom_np(&fa, highest + 1);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
    sigset_t empty, all;
    sigemptyset(&empty);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attr, &empty);
    posix_spawnattr_setsigdefault(&attr, &all);
    if (new_session) flags |= POSIX_SPAWN_SETSID;
    posix_spawnattr_setflags(&attr, flags);
    std::vector<char*> a, e;
    for (auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    for (auto& s : env) e.push_back(const_cast<char*>(s.c_str()));
    e.push_back(nullptr);
    pid_t pid = -1;
    int rc = posix_spawnp(&pid, a[0], &fa, &attr, a.data(), e.data());
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    for (int c : copies) ::close(c);
    return rc == 0 ? pid : -rc;
}

}  // namespace kubesandbox::local
