#include "local/runtime/run_command.hpp"

#include "local/runtime/runtime_core.hpp"
#include "util/child_process.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <optional>
#include <vector>

#include <fcntl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

namespace kubesandbox::runtime {

namespace asio = boost::asio;
using namespace asio::experimental::awaitable_operators;

namespace {

constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);
constexpr std::size_t max_output = std::size_t(512) << 20;

std::string format_seconds(double seconds) {
    char buf[64];
    if (seconds == std::floor(seconds)) {
        std::snprintf(buf, sizeof buf, "%.1f", seconds);
    } else {
        std::snprintf(buf, sizeof buf, "%g", seconds);
    }
    return buf;
}

asio::awaitable<void> read_all(asio::posix::stream_descriptor& pipe, std::string& out, bool& overflow) {
    char chunk[65536];
    for (;;) {
        auto [ec, n] = co_await pipe.async_read_some(asio::buffer(chunk), tuple_awaitable);
        if (n > 0) {
            if (out.size() + n > max_output) {
                overflow = true;
            } else {
                out.append(chunk, n);
            }
        }
        if (ec) co_return;
    }
}

// Closes every descriptor from `first` up, except `keep`.
void close_descriptors_from(int first, int keep) {
    auto close_range = [](unsigned lo, unsigned hi) {
        if (lo > hi) return;
        if (::syscall(SYS_close_range, lo, hi, 0) == 0) return;
        long max = ::sysconf(_SC_OPEN_MAX);
        for (long fd = lo; fd <= std::min<long>(hi, max < 0 ? 65536 : max); ++fd) ::close(static_cast<int>(fd));
    };
    close_range(static_cast<unsigned>(first), static_cast<unsigned>(keep - 1));
    close_range(static_cast<unsigned>(keep + 1), ~0U);
}

}  // namespace

asio::awaitable<std::string> run_command(std::string command, std::string base, double timeout_seconds) {
    auto failed = [](const std::string& why) { return execute_body("", "Failed to execute command: " + why, 1); };
    auto split = shlex_split(command);
    if (!split.error.empty()) co_return failed(split.error);
    if (split.words.empty()) co_return failed("list index out of range");
    std::vector<std::string>& words = split.words;

    int out[2], err[2], report[2];
    if (::pipe2(out, O_CLOEXEC) != 0) co_return failed(std::strerror(errno));
    if (::pipe2(err, O_CLOEXEC) != 0) {
        ::close(out[0]), ::close(out[1]);
        co_return failed(std::strerror(errno));
    }
    if (::pipe2(report, O_CLOEXEC) != 0) {
        ::close(out[0]), ::close(out[1]), ::close(err[0]), ::close(err[1]);
        co_return failed(std::strerror(errno));
    }
    std::vector<char*> argv;
    for (auto& w : words) argv.push_back(w.data());
    argv.push_back(nullptr);
    pid_t pid = ::fork();
    if (pid == 0) {
        ::setsid();
        ::dup2(out[1], 1);
        ::dup2(err[1], 2);
        // Nothing else of the server's reaches the command (its listening socket would keep the
        // port after the server dies), as with python-runtime, whose descriptors close on exec.
        close_descriptors_from(3, report[1]);
        int e = 0;
        if (::chdir(base.c_str()) != 0) {
            e = errno;
        } else {
            ::signal(SIGPIPE, SIG_DFL);
            ::execvp(argv[0], argv.data());
            e = errno;
        }
        [[maybe_unused]] auto w = ::write(report[1], &e, sizeof e);
        ::_exit(127);
    }
    ::close(out[1]), ::close(err[1]), ::close(report[1]);
    if (pid < 0) {
        ::close(out[0]), ::close(err[0]), ::close(report[0]);
        co_return failed(std::strerror(errno));
    }
    auto ex = co_await asio::this_coro::executor;
    asio::posix::stream_descriptor out_pipe(ex, out[0]), err_pipe(ex, err[0]), report_pipe(ex, report[0]);
    int exec_errno = 0;
    auto [rec, rn] =
        co_await asio::async_read(report_pipe, asio::buffer(&exec_errno, sizeof exec_errno), tuple_awaitable);
    int pidfd = kubesandbox::util::open_pidfd(pid);
    std::optional<asio::posix::stream_descriptor> pidfd_stream;
    if (pidfd >= 0) pidfd_stream.emplace(ex, pidfd);
    if (rn == sizeof exec_errno) {
        co_await kubesandbox::util::reap_child(pidfd_stream ? &*pidfd_stream : nullptr, pid);
        co_return failed(os_error_text(exec_errno, words[0]));
    }

    std::string stdout_text, stderr_text;
    bool overflow = false;
    asio::steady_timer timer(ex);
    timer.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(timeout_seconds)));
    auto outcome = co_await ((read_all(out_pipe, stdout_text, overflow) && read_all(err_pipe, stderr_text, overflow)) ||
                             timer.async_wait(tuple_awaitable));
    bool timed_out = outcome.index() == 1;
    if (timed_out) {
        ::kill(-pid, SIGKILL);
        ::kill(pid, SIGKILL);
    }
    out_pipe.close();
    err_pipe.close();
    auto status = co_await kubesandbox::util::reap_child(pidfd_stream ? &*pidfd_stream : nullptr, pid);
    if (timed_out) {
        co_return failed("Command '" + python_list_repr(words) + "' timed out after " +
                         format_seconds(timeout_seconds) + " seconds");
    }
    if (overflow) co_return failed("output larger than " + std::to_string(max_output) + " bytes");
    for (const std::string* text : {&stdout_text, &stderr_text}) {
        if (auto why = utf8_decode_error(*text); !why.empty()) co_return failed(why);
    }
    int code = 0;
    if (status && *status >= 0) {
        if (WIFEXITED(*status)) code = WEXITSTATUS(*status);
        if (WIFSIGNALED(*status)) code = -WTERMSIG(*status);
    }
    co_return execute_body(stdout_text, stderr_text, code);
}

}  // namespace kubesandbox::runtime
