// The shell session's driver (sandbox/shell_session_core) run by dash and by busybox over pipes,
// outside any sandbox: trailers end each command's output, each command runs in a fresh shell,
// and end of input ends the driver.
#include "files/listing.hpp"
#include "files/policy.hpp"
#include "files/read_page.hpp"
#include "files/scripts.hpp"
#include "sandbox/shell_session_core.hpp"

#include <gtest/gtest.h>

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace {

using kubesandbox::sandbox::command_trailer;
using kubesandbox::sandbox::encode_shell_request;
using kubesandbox::sandbox::parse_driver_hello;
using kubesandbox::sandbox::TrailerScanner;

// The driver in a real shell, over pipes: stdout and stderr end with the trailers, each command
// runs in a fresh shell, and nothing of the driver's own variables reaches it.
class Driver {
public:
    // `stored`: the scripts the driver keeps, after its token.
    Driver(const char* shell, const char* own_groups, const std::vector<std::string>& stored = {}) {
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
            std::vector<const char*> argv{
                shell,  "-c",       script.c_str(),      "sh",
                shell,  own_groups, "KUBESANDBOX_EXEC=", "; export KUBESANDBOX_EXEC; trap : EXIT; ",
                "token"};
            for (const auto& s : stored) argv.push_back(s.c_str());
            argv.push_back(nullptr);
            execv(shell, const_cast<char* const*>(argv.data()));
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

// Runs the `n`-th command of the session whose marker is `session`.
// `stored`: the scripts the driver keeps.
Ran run_in(Driver& d, const std::string& session, std::uint64_t n, const std::string& script,
           std::span<const std::string_view> stored = {}, const std::optional<std::string>& input = std::nullopt) {
    Ran r;
    EXPECT_TRUE(d.send(encode_shell_request(script, session, n, stored, input.has_value()) + input.value_or("")));
    const std::string m = command_trailer(session, n);
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

    const std::string session(32, 'a');
    ASSERT_TRUE(d.send(session + " k7\n"));
    std::uint64_t n = 0;
    auto first = run_in(d, session, ++n, "cd /; X=1; printf 'no newline'; echo oops >&2; exit 3");
    EXPECT_EQ(first.out, "no newline");
    EXPECT_EQ(first.err, "oops\n");
    EXPECT_EQ(first.status, 3);
    // A fresh shell: the last command's directory and variables are gone; the driver's own
    // variables were never exported; the input is empty; backslashes, quotes and blank lines
    // arrive as written.
    auto second =
        run_in(d, session, ++n,
               "pwd\necho \"${X-unset}${_ksb_m-}${_ksb_c-}${_ksb_l-}${_ksb_r-}${_ksb_g-}${_ksb_nl-}${_ksb_own-}"
               "${_ksb_t-}${_ksb_n-}${_ksb_k-}${_ksb_i-}${_ksb_j-}\"\n\n"
               "printf '%s\\n' 'a\\b' \"$(cat)\"");
    char cwd[4096];
    ASSERT_NE(getcwd(cwd, sizeof cwd), nullptr);
    EXPECT_EQ(second.out, std::string(cwd) + "\nunset\na\\b\n\n");
    EXPECT_EQ(second.err, "");
    EXPECT_EQ(second.status, 0);
    // Every byte but NUL arrives as it was sent.
    std::string bytes;
    for (int c = 1; c < 256; ++c) bytes.push_back(static_cast<char>(c));
    std::string quoted = "'";
    for (char c : bytes) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    auto every_byte = run_in(d, session, ++n, "printf %s " + quoted + "'");
    EXPECT_EQ(every_byte.out, bytes);
    EXPECT_EQ(every_byte.status, 0);
    // Each command's marker, in its environment: the session's prefix and its number.
    // Input follows the request when the command is to read it: every byte, NUL included; the
    // next request is read as usual after it.
    std::string all(bytes);
    all.push_back('\0');
    const std::string kept = "/tmp/ksb-driver-input-" + std::to_string(getpid());
    auto fed = run_in(d, session, ++n, "head -c 256 > " + kept + "; echo $?", {}, all);
    EXPECT_EQ(fed.out, "0\n");
    {
        FILE* f = fopen(kept.c_str(), "rb");
        std::string got(300, '\0');
        got.resize(f ? fread(got.data(), 1, got.size(), f) : 0);
        if (f) fclose(f);
        EXPECT_TRUE(got == all) << got.size();
        unlink(kept.c_str());
    }
    auto marked = run_in(d, session, ++n, "echo \"$KUBESANDBOX_EXEC\"");
    EXPECT_EQ(marked.out, "k7" + std::to_string(n) + "\n");
    auto killed = run_in(d, session, ++n, "kill -9 $$");
    EXPECT_EQ(killed.status, 137);
    EXPECT_EQ(killed.out + killed.err, "");  // the driver reports nothing of its own
    // A last line without a newline stays one: its backslash does not join the next line.
    auto last = run_in(d, session, ++n, "echo a\\");
    EXPECT_EQ(last.out, "a\\\n");
    // `kill 0` ends the command's group: with groups of their own that is the command alone;
    // shared, the driver ignores the signal and goes on. The command starts with the signal at its
    // default either way.
    auto group = run_in(d, session, ++n, "kill 0; sleep 1; echo survived");
    EXPECT_EQ(group.status, 143);
    EXPECT_EQ(group.out + group.err, "");
    // The same from something left running, between commands: the next command runs as usual.
    // It signals once the driver's child is the subshell forked for the next command, not the
    // command's shell.
    const std::string sent = "/tmp/ksb-driver-sent-" + std::to_string(getpid());
    const std::string children = "/proc/" + std::to_string(d.pid()) + "/task/" + std::to_string(d.pid()) + "/children";
    unlink(sent.c_str());
    auto left = run_in(d, session, ++n,
                       "c=$$; (trap '' TERM; i=0; while [ $i -lt 500 ]; do k=$(cat " + children +
                           "); case \" $k \" in *\" $c \"*|\"  \") ;; *) break ;; esac; sleep 0.01; "
                           "i=$((i + 1)); done; kill 0; : > " +
                           sent + ") >/dev/null 2>&1 &");
    EXPECT_EQ(left.status, 0);
    for (int i = 0; i < 500 && access(sent.c_str(), F_OK) != 0; ++i) usleep(10 * 1000);
    EXPECT_EQ(access(sent.c_str(), F_OK), 0) << "the signal was not sent";
    unlink(sent.c_str());
    auto after = run_in(d, session, ++n, "echo still");
    EXPECT_EQ(after.out, "still\n");
    EXPECT_EQ(after.status, 0);
    auto fds = run_in(d, session, ++n, "[ -e /proc/$$/fd/3 ] && echo fd3 open; exit 0");
    EXPECT_EQ(fds.out, "");
    // Its own group: `kill -- -$$` reaches the command's shell exactly when groups are its own.
    auto leader = run_in(d, session, ++n, "read -r _ _ _ _ g _ < /proc/$$/stat; [ \"$g\" = $$ ] && echo leads");
    EXPECT_EQ(leader.out, std::string(own_groups) == "1" ? "leads\n" : "");
    // End of input ends the driver (killed by the subshell that read it).
    d.close_input();
    int status = 0;
    ASSERT_EQ(waitpid(d.pid(), &status, 0), d.pid());
    d.forget();
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
}

// Commands that end with a script the driver keeps name it instead of carrying it, and run as if
// they had carried it: the file operations' commands print the same bytes either way, and so does a
// script of every byte.
void run_stored_scripts(const char* shell) {
    std::string bytes;
    for (int c = 1; c < 256; ++c) bytes.push_back(static_cast<char>(c));
    std::string every_byte = "printf %s '";
    for (char c : bytes) every_byte += c == '\'' ? std::string("'\\''") : std::string(1, c);
    every_byte += "'";  // no newline at its end
    std::vector<std::string> stored(kubesandbox::files::command_scripts.begin(),
                                    kubesandbox::files::command_scripts.end());
    stored.push_back(every_byte);
    std::vector<std::string_view> names(stored.begin(), stored.end());
    Driver kept(shell, "0", stored);
    Driver plain(shell, "0");
    for (Driver* d : {&kept, &plain}) {
        ASSERT_GT(d->pid(), 0);
        std::string hello;
        ASSERT_TRUE(d->read_until(d->out(), hello, [&] { return hello.find('\n') != std::string::npos; }));
        ASSERT_TRUE(d->send(std::string(32, 'c') + " k7\n"));
    }
    char dir[] = "/tmp/ksb-stored-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    const std::string root = dir;
    const std::string odd = root + "/a 'b' $c\n.txt";
    {
        FILE* f = fopen(odd.c_str(), "w");
        ASSERT_NE(f, nullptr);
        fputs("one\nneedle two\n\nneedle three", f);
        fclose(f);
    }
    namespace files = kubesandbox::files;
    const std::vector<std::string> commands{
        files::ls_command(root),
        files::glob_command(root, {"*.txt"}),
        files::grep_command(root, "needle", std::nullopt, {}),
        files::read_command(odd, files::FileKind::text, 1, 10),
        files::read_command(odd, files::FileKind::text, 1, 10, true),
        files::canonical_paths_command(true, {odd, root + "/missing/x"}),
        "echo before; " + every_byte,
        every_byte,
        "printf 'no newline'" + std::string(files::ls_script),  // the script follows the line at once
        files::remove_command(odd),
    };
    std::uint64_t n = 0;
    for (const auto& command : commands) {
        ++n;
        const std::string request = encode_shell_request(command, std::string(32, 'c'), n, names);
        EXPECT_LT(request.size(), 200u) << "the script was sent: " << command;
        auto with = run_in(kept, std::string(32, 'c'), n, command, names);
        // The plain driver runs the removal once only: it is compared with what the kept one left.
        if (command == commands.back()) {
            EXPECT_EQ(with.out, "OK\n");
            EXPECT_NE(access(odd.c_str(), F_OK), 0);
            continue;
        }
        auto without = run_in(plain, std::string(32, 'c'), n, command);
        EXPECT_EQ(with.out, without.out) << command;
        EXPECT_EQ(with.err, without.err) << command;
        EXPECT_EQ(with.status, without.status) << command;
        EXPECT_FALSE(with.out.empty()) << command;
    }
    EXPECT_EQ(run_in(kept, std::string(32, 'c'), ++n, every_byte, names).out, bytes);
    rmdir(dir);
}

// A request the driver cannot read ends it, before anything runs; so does one numbered for
// another command (what a subshell killed before its request would leave to the next).
void refuse_request(const char* shell, const std::string& request) {
    Driver d(shell, "0");
    ASSERT_GT(d.pid(), 0);
    const pid_t driver = d.pid();
    const std::string never = "/tmp/ksb-driver-never-" + std::to_string(getpid());
    unlink(never.c_str());
    // The driver's orphans come to this process, to be reaped here and not whenever init does.
    struct Subreaper {
        Subreaper() { prctl(PR_SET_CHILD_SUBREAPER, 1); }
        ~Subreaper() { prctl(PR_SET_CHILD_SUBREAPER, 0); }
    } subreaper;
    ASSERT_TRUE(d.send(std::string(32, 'b') + " k7\n+touch " + never + "\n" + request));
    // Bounded: a driver that ran the request goes on waiting for the next one.
    int status = 0;
    pid_t waited = 0;
    for (int i = 0; i < 1000 && (waited = waitpid(driver, &status, WNOHANG)) == 0; ++i) usleep(10 * 1000);
    ASSERT_EQ(waited, driver) << "the driver did not end";
    d.forget();
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
    // Nothing of the driver's is left (its subshell included), and the command never ran.
    for (int i = 0; i < 500 && kill(-driver, 0) == 0; ++i) {
        while (waitpid(-1, nullptr, WNOHANG) > 0) {}
        usleep(10 * 1000);
    }
    EXPECT_NE(kill(-driver, 0), 0) << "the driver's process group still has members";
    EXPECT_NE(access(never.c_str(), F_OK), 0) << request;
    unlink(never.c_str());
}

void refuse_malformed(const char* shell) {
    const std::string end = std::string(32, 'b') + ".1\n";  // the first request's last line
    refuse_request(shell, "bad\n" + end);
    refuse_request(shell, "*1\n" + end);  // this driver keeps no scripts
    refuse_request(shell, "*0\n" + end);
    refuse_request(shell, "*01\n" + end);
    refuse_request(shell, "*1x\n" + end);
    refuse_request(shell, "<<\n" + end);
    refuse_request(shell, std::string(32, 'b') + ".2\n");
    refuse_request(shell, std::string(32, 'b') + ".\n");
    // Without the session's marker the number ends nothing: what a command leaves unread of its
    // input, which the next subshell reads, can never be run.
    refuse_request(shell, ".1\n");
    refuse_request(shell, std::string(32, 'c') + ".1\n");
}

// A command given input that fails without reading it leaves it to the next subshell: a request
// in it (here what the old protocol would have run) ends the driver instead of running.
void leftover_input_never_runs(const char* shell) {
    Driver d(shell, "0");
    ASSERT_GT(d.pid(), 0);
    std::string hello;
    ASSERT_TRUE(d.read_until(d.out(), hello, [&] { return hello.find('\n') != std::string::npos; }));
    const std::string session(32, 'e');
    ASSERT_TRUE(d.send(session + " k7\n"));
    const std::string never = "/tmp/ksb-driver-leftover-" + std::to_string(getpid());
    unlink(never.c_str());
    auto failed = run_in(d, session, 1, "exit 3", {}, "+touch " + never + "\n.2\n+touch " + never + "\n");
    EXPECT_EQ(failed.status, 3);
    int status = 0;
    pid_t waited = 0;
    for (int i = 0; i < 1000 && (waited = waitpid(d.pid(), &status, WNOHANG)) == 0; ++i) usleep(10 * 1000);
    ASSERT_EQ(waited, d.pid()) << "the driver did not end";
    d.forget();
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
    EXPECT_NE(access(never.c_str(), F_OK), 0) << "input left unread was run";
    unlink(never.c_str());
}

TEST(ShellSessionDriver, RunsCommandsInFreshShellsUnderDash) {
    exercise_driver("/bin/sh", "0");
    exercise_driver("/bin/sh", "1");
    run_stored_scripts("/bin/sh");
    refuse_malformed("/bin/sh");
    leftover_input_never_runs("/bin/sh");
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
    run_stored_scripts(sh.c_str());
    refuse_malformed(sh.c_str());
    leftover_input_never_runs(sh.c_str());
    unlink(sh.c_str());
    rmdir(dir);
}

TEST(ShellSessionDriver, RunsCommandsInFreshShellsUnderBash) {
    if (access("/bin/bash", X_OK) != 0) GTEST_FAIL() << "bash is part of the test set-up";
    exercise_driver("/bin/bash", "0");
    exercise_driver("/bin/bash", "1");
    run_stored_scripts("/bin/bash");
    refuse_malformed("/bin/bash");
    leftover_input_never_runs("/bin/bash");
}

}  // namespace
