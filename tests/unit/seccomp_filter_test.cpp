// The runtime-default seccomp filter, installed in a forked child: what it must refuse fails
// with the documented errno, what ordinary programs need still works.
#include "local/seccomp_filter.hpp"

#include <gtest/gtest.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>

namespace {

using kubesandbox::local::runtime_default_seccomp;

// Runs `check` in a child under the filter; the child's exit code is the check's result
// (0: every expectation held, else the number of the first that failed).
int under_filter(int (*check)()) {
    pid_t pid = ::fork();
    if (pid == 0) {
        auto program = runtime_default_seccomp();
        sock_fprog prog{static_cast<unsigned short>(program.size()), program.data()};
        if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) _exit(100);
        if (::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) _exit(101);
        _exit(check());
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 200 + WTERMSIG(status);
}

bool fails_with(long result, int err) { return result == -1 && errno == err; }

}  // namespace

TEST(SeccompFilter, IsBuiltForThisArchitecture) {
#if defined(__x86_64__) || defined(__aarch64__)
    EXPECT_GT(runtime_default_seccomp().size(), 50u);
#else
    GTEST_SKIP() << "no filter for this architecture";
#endif
}

TEST(SeccompFilter, RefusesWhatAContainerMayNotDo) {
    if (runtime_default_seccomp().empty()) GTEST_SKIP() << "no filter for this architecture";
    int r = under_filter([]() -> int {
        if (!fails_with(::syscall(SYS_unshare, 0), EPERM)) return 1;
        if (!fails_with(::syscall(SYS_mount, "none", "/mnt", "tmpfs", 0, nullptr), EPERM)) return 2;
        if (!fails_with(::syscall(SYS_setns, 0, 0), EPERM)) return 3;
        if (!fails_with(::syscall(SYS_bpf, 0, nullptr, 0), EPERM)) return 4;
        if (!fails_with(::syscall(SYS_keyctl, 0, 0, 0, 0, 0), EPERM)) return 5;
        if (!fails_with(::syscall(SYS_perf_event_open, nullptr, 0, -1, -1, 0), EPERM)) return 6;
        if (!fails_with(::syscall(SYS_io_uring_setup, 1, nullptr), EPERM)) return 7;
        // clone3 answers ENOSYS so that libc falls back to clone, whose flags are checked.
        if (!fails_with(::syscall(SYS_clone3, nullptr, 0), ENOSYS)) return 8;
        if (!fails_with(::syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, nullptr, nullptr, nullptr, 0), EPERM)) return 9;
        if (!fails_with(::syscall(SYS_clone, CLONE_NEWNET | SIGCHLD, nullptr, nullptr, nullptr, 0), EPERM)) return 10;
#if defined(__x86_64__)
        // The x32 ABI's numbers are refused as a whole.
        if (!fails_with(::syscall(0x40000000 | SYS_getpid), ENOSYS)) return 11;
#endif
        return 0;
    });
    EXPECT_EQ(r, 0) << "expectation " << r << " did not hold";
}

TEST(SeccompFilter, LeavesOrdinaryProgramsAlone) {
    if (runtime_default_seccomp().empty()) GTEST_SKIP() << "no filter for this architecture";
    int r = under_filter([]() -> int {
        if (::getpid() <= 0) return 1;
        // fork (clone without namespace flags) and exec work.
        pid_t child = ::fork();
        if (child < 0) return 2;
        if (child == 0) {
            ::execl("/bin/sh", "sh", "-c", "exit 7", static_cast<char*>(nullptr));
            _exit(99);
        }
        int status = 0;
        if (::waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 7) return 3;
        int fds[2];
        if (::pipe(fds) != 0) return 4;
        if (::write(fds[1], "x", 1) != 1) return 5;
        return 0;
    });
    EXPECT_EQ(r, 0) << "expectation " << r << " did not hold";
}
