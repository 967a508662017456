// The shell session's driver (sandbox/shell_session_core) run by dash and by busybox over pipes,
// outside any sandbox: trailers end each command's output, each command runs in a fresh shell,
// and end of input ends the driver.
#include "sandbox/shell_session_core.hpp"

#include <gtest/gtest.h>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>

namespace {

using kubesandbox::sandbox::encode_shell_request;
using kubesandbox::sandbox::parse_driver_hello;
using kubesandbox::sandbox::TrailerScanner;

// The driver in a real shell, over pipes: stdout and stderr end with the trailers, each command
// runs in a fresh shell, and nothing of the driver's own variables reaches it.
class Driver {
public:
    Driver(const char* shell, const char* own_groups) {
        int in[2], out[2], err[2];
        if (pipe(in) != 0 || pipe(out) != 0 || pipe(err) != 0) return;
        pid_ = fork();
        if (pid_ == 0) {
            setsid();  // as runtimes start an exec'd process: `kill 0` in a command stays in the driver's group
            dup2(in[0], 0);
            dup2(out[1], 1);
            dup2(err[1], 2);
            for (int fd : {in[0], in[1], out[0], out[1], err[0], err[1]}) close(fd);
            const std::string script(kubesandbox::sandbox::shell_session_driver());
            execl(shell, shell, "-c", script.c_str(), "sh", shell, own_groups, "token", static_cast<char*>(nullptr));
            _exit(127);
        }
        close(in[0]);
        close(out[1]);
        close(err[1]);
        in_ = in[1];
        out_ = out[0];
        err_ = err[0];
    }
    ~Driver() {
        if (in_ >= 0) close(in_);
        if (out_ >= 0) close(out_);
        if (err_ >= 0) close(err_);
        if (pid_ > 0) {
            kill(pid_, SIGKILL);
            waitpid(pid_, nullptr, 0);
        }
    }
    bool send(const std::string& s) { return write(in_, s.data(), s.size()) == static_cast<ssize_t>(s.size()); }
    // Reads `fd` until `done` says so; false after 10 s.
    template <typename Done>
    bool read_until(int fd, std::string& into, Done done) {
        const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (!done()) {
            pollfd p{fd, POLLIN, 0};
            if (std::chrono::steady_clock::now() > limit || poll(&p, 1, 100) < 0) return false;
            if (!(p.revents & (POLLIN | POLLHUP))) continue;
            char buf[4096];
            ssize_t n = read(fd, buf, sizeof buf);
            if (n <= 0) return false;
            into.append(buf, static_cast<std::size_t>(n));
        }
        return true;
    }
    pid_t pid() const { return pid_; }
    int out() const { return out_; }
    int err() const { return err_; }
    void forget() { pid_ = -1; }
    void close_input() {
        close(in_);
        in_ = -1;
    }

private:
    pid_t pid_{-1};
    int in_{-1}, out_{-1}, err_{-1};
};

struct Ran {
    std::string out, err;
    int status{-1};
};

Ran run_in(Driver& d, const std::string& m, const std::string& script) {
    Ran r;
    EXPECT_TRUE(d.send(encode_shell_request(m, script)));
    TrailerScanner out(m, TrailerScanner::Kind::stdout_with_status), err(m, TrailerScanner::Kind::stderr_bare);
    bool truncated = false;
    std::string raw_out, raw_err;
    EXPECT_TRUE(d.read_until(d.out(), raw_out, [&] {
        std::string piece = std::move(raw_out);
        raw_out.clear();
        out.feed(piece, r.out, SIZE_MAX, truncated);
        return out.done();
    }));
    EXPECT_TRUE(d.read_until(d.err(), raw_err, [&] {
        std::string piece = std::move(raw_err);
        raw_err.clear();
        err.feed(piece, r.err, SIZE_MAX, truncated);
        return err.done();
    }));
    r.status = out.status();
    return r;
}

// `own_groups`: "1" to start each command in a process group of its own.
void exercise_driver(const char* shell, const char* own_groups) {
    Driver d(shell, own_groups);
    ASSERT_GT(d.pid(), 0);
    std::string hello;
    ASSERT_TRUE(d.read_until(d.out(), hello, [&] { return hello.find('\n') != std::string::npos; }));
    auto parsed = parse_driver_hello(hello.substr(0, hello.size() - 1));
    ASSERT_TRUE(parsed) << hello;
    EXPECT_EQ(parsed->pid, d.pid());
    EXPECT_EQ(parsed->own_groups, std::string(own_groups) == "1");

    auto first = run_in(d, "m" + std::string(31, 'a'), "cd /; X=1; printf 'no newline'; echo oops >&2; exit 3");
    EXPECT_EQ(first.out, "no newline");
    EXPECT_EQ(first.err, "oops\n");
    EXPECT_EQ(first.status, 3);
    // A fresh shell: the last command's directory and variables are gone; the driver's own
    // variables were never exported; the input is empty; backslashes, quotes and blank lines
    // arrive as written.
    auto second =
        run_in(d, "m" + std::string(31, 'b'),
               "pwd\necho \"${X-unset}${_ksb_m-}${_ksb_c-}${_ksb_l-}${_ksb_r-}${_ksb_g-}${_ksb_nl-}${_ksb_own-}\"\n\n"
               "printf '%s\\n' 'a\\b' \"$(cat)\"");
    char cwd[4096];
    ASSERT_NE(getcwd(cwd, sizeof cwd), nullptr);
    EXPECT_EQ(second.out, std::string(cwd) + "\nunset\na\\b\n\n");
    EXPECT_EQ(second.err, "");
    EXPECT_EQ(second.status, 0);
    auto killed = run_in(d, "m" + std::string(31, 'c'), "kill -9 $$");
    EXPECT_EQ(killed.status, 137);
    // A last line without a newline stays one: its backslash does not join the next line.
    auto last = run_in(d, "m" + std::string(31, 'd'), "echo a\\");
    EXPECT_EQ(last.out, "a\\\n");
    // `kill 0` ends the command's group: with groups of their own that is the command alone;
    // shared, the driver catches the signal and goes on.
    auto group = run_in(d, "m" + std::string(31, 'e'), "kill 0; sleep 1; echo survived");
    EXPECT_EQ(group.status, 143);
    EXPECT_EQ(group.out + group.err, "");  // the driver reports nothing of its own
    auto fds = run_in(d, "m" + std::string(31, 'g'), "[ -e /proc/$$/fd/3 ] && echo fd3 open; exit 0");
    EXPECT_EQ(fds.out, "");
    // Its own group: `kill -- -$$` reaches the command's shell exactly when groups are its own.
    auto leader =
        run_in(d, "m" + std::string(31, 'f'), "read -r _ _ _ _ g _ < /proc/$$/stat; [ \"$g\" = $$ ] && echo leads");
    EXPECT_EQ(leader.out, std::string(own_groups) == "1" ? "leads\n" : "");
    // End of input ends the driver.
    d.close_input();
    int status = 0;
    ASSERT_EQ(waitpid(d.pid(), &status, 0), d.pid());
    d.forget();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST(ShellSessionDriver, RunsCommandsInFreshShellsUnderDash) {
    exercise_driver("/bin/sh", "0");
    exercise_driver("/bin/sh", "1");
}

TEST(ShellSessionDriver, RunsCommandsInFreshShellsUnderBusybox) {
    if (access("/bin/busybox", X_OK) != 0) GTEST_FAIL() << "busybox is part of the test set-up";
    // busybox's sh applet, reached through a symlink named sh.
    char dir[] = "/tmp/ksb-driver-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    const std::string sh = std::string(dir) + "/sh";
    ASSERT_EQ(symlink("/bin/busybox", sh.c_str()), 0);
    exercise_driver(sh.c_str(), "0");
    exercise_driver(sh.c_str(), "1");
    unlink(sh.c_str());
    rmdir(dir);
}

}  // namespace
