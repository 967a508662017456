// Scanning /proc while processes come and go. A process can exit between the directory read and
// the read of its files (reading then fails with ESRCH); that is an absent process, never an
// exception out of a test.
#pragma once

#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <vector>

namespace kubesandbox::test {

// The whole of /proc/PID/FILE, or empty if the process is gone.
inline std::string read_proc_file(pid_t pid, const char* file) {
    const std::string path = "/proc/" + std::to_string(pid) + "/" + file;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return {};
    std::string out;
    char chunk[4096];
    for (;;) {
        const ssize_t n = ::read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            out.clear();
            break;
        }
        if (n == 0) break;
        out.append(chunk, static_cast<std::size_t>(n));
    }
    ::close(fd);
    return out;
}

struct ProcessEntry {
    pid_t pid;
    std::string cmdline;  // arguments separated (and ended) by NUL, as the kernel keeps them
    bool zombie;
};

// The processes alive now that could still be read.
inline std::vector<ProcessEntry> processes() {
    std::vector<ProcessEntry> found;
    std::error_code ec;
    for (std::filesystem::directory_iterator it("/proc", ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
        const pid_t pid = static_cast<pid_t>(std::stol(name));
        std::string stat = read_proc_file(pid, "stat");
        if (stat.empty()) continue;
        const auto paren = stat.rfind(')');
        const bool zombie = paren != std::string::npos && stat.compare(paren, 4, ") Z ") == 0;
        found.push_back({pid, read_proc_file(pid, "cmdline"), zombie});
    }
    return found;
}

}  // namespace kubesandbox::test
