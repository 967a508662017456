// SandboxTest, execute() through shell sessions: one session serves a run of commands, each in a
// fresh shell; a timeout kills the command's processes but not what earlier commands left
// running; output between commands retires a session; a session that ends leaves background
// processes alone, as an exec of its own would; file operations send only their arguments, and
// files up to 1 MiB move through sessions (sandbox_fixture.hpp).
#include "sandbox_fixture.hpp"

#include <kubesandbox/file_ops.hpp>

namespace {
using namespace kubesandbox;
using namespace kubesandbox::test::sandbox;
using kubesandbox::test::sleep_for;

// How many processes match `pattern` (a grep -E pattern) in the sandbox.
asio::awaitable<std::string> count_processes(Sandbox& s, const std::string& pattern) {
    auto ps = co_await s.execute("ps | grep -E '" + pattern + "' | grep -v grep | wc -l");
    co_return ps ? ps->output : "?";
}

// How many shell session drivers run in the sandbox: processes whose command line holds the
// driver's greeting tag, except the subshell each keeps ready for its next command.
const std::string count_drivers =
    "n=0; for d in /proc/[0-9]*; do "
    "tr '\\000' ' ' 2>/dev/null < $d/cmdline | grep -q '[K]SB1' || continue; "
    "read -r _ _ _ pp _ 2>/dev/null < $d/stat || continue; "
    "tr '\\000' ' ' 2>/dev/null < /proc/$pp/cmdline | grep -q '[K]SB1' || n=$((n + 1)); "
    "done; echo $n";

// Kills the processes matching `pattern` (a grep -E pattern) in the sandbox.
asio::awaitable<void> kill_processes(Sandbox& s, const std::string& pattern) {
    co_await s.execute("kill -9 $(ps | grep -E '" + pattern + "' | grep -v grep | awk '{print $1}') 2>/dev/null; true");
}

TEST_F(SandboxTest, ExecutesShareOneSessionAndEachGetsAFreshShell) {
    with_sandbox([&](PodExecSandbox& s) -> asio::awaitable<void> {
        auto first = co_await s.execute("cd /; X=1; export Y=2; echo out; echo err >&2; exit 3");
        EXPECT_TRUE(first && first->output == "out\n\nerr\n" && first->exit_code == 3);
        for (int i = 0; i < 20; ++i) {
            auto r = co_await s.execute("pwd; echo \"${X-unset} ${Y-unset}\"; printf %s " + std::to_string(i));
            EXPECT_TRUE(r.has_value());
            if (r) {
                EXPECT_EQ(r->output, "/workspace\nunset unset\n" + std::to_string(i));
            }
        }
        EXPECT_EQ(s.shell_sessions_opened(), 1u);
        // The cap and the composition are those of an exec of its own.
        auto big = co_await s.execute("head -c 3000000 /dev/zero | tr '\\0' x; echo tail >&2");
        EXPECT_TRUE(big && big->truncated && big->output.size() == s.options().max_output_bytes);
        auto after = co_await s.execute("echo still");
        EXPECT_TRUE(after && after->output == "still\n");
        EXPECT_EQ(s.shell_sessions_opened(), 1u);
    });
}

TEST_F(SandboxTest, ATimeoutSparesWhatEarlierCommandsLeftRunning) {
    with_sandbox([&](PodExecSandbox& s) -> asio::awaitable<void> {
        auto started =
            co_await s.execute("sleep 391 >/dev/null 2>&1 & (env -i sleep 392 >/dev/null 2>&1 &); echo started");
        EXPECT_TRUE(started && started->output == "started\n");
        // Same session (its driver's process group holds sleep 391 and 392 too).
        auto r = co_await s.execute("(env -i sleep 393 &); env -i sleep 394", std::chrono::seconds(1));
        EXPECT_TRUE(r && r->exit_code == 124);
        EXPECT_EQ(s.shell_sessions_opened(), 1u);
        EXPECT_EQ(co_await processes_left(s, "sleep 39[34]"), "") << "survived the timeout";
        EXPECT_EQ(co_await count_processes(s, "sleep 39[12]"), "2\n") << "an earlier command's process was killed";
        co_await kill_processes(s, "sleep 39[12]");
    });
}

// Both ways of placing a command's processes: in the driver's group (the default) and in a group
// of the command's own. A timeout kills all the command started, hidden ones included, and nothing
// an earlier command left running; `kill 0` ends the command and not the session.
TEST_F(SandboxTest, ProcessGroupsSharedOrOwnKeepTheKillGuarantees) {
    with_sandbox([&](PodExecSandbox& s) -> asio::awaitable<void> {
        for (bool own : {false, true}) {
            PodExecSandboxOptions o = s.options();
            o.shell_session_process_groups = own;
            PodExecSandbox sb(client(), s.namespace_name(), s.pod_name(), o);
            auto started = co_await sb.execute("sleep 381 >/dev/null 2>&1 & (env -i sleep 382 >/dev/null 2>&1 &)");
            EXPECT_TRUE(started && started->exit_code == 0);
            auto r =
                co_await sb.execute("setsid sleep 383 & env -i sleep 384 & (env -i sleep 385 &); sleep 386; echo never",
                                    std::chrono::seconds(1));
            EXPECT_TRUE(r && r->exit_code == 124) << own;
            EXPECT_EQ(co_await processes_left(s, "sleep 38[3-6]"), "") << "survived the timeout, own groups " << own;
            EXPECT_EQ(co_await count_processes(s, "sleep 38[12]"), "2\n") << "own groups " << own;
            // The session that timed out was ended; in the next one, `kill 0` ends the command and,
            // with a shared group, what earlier commands of that session left running.
            auto more = co_await sb.execute("sleep 387 >/dev/null 2>&1 & echo started");
            EXPECT_TRUE(more && more->output == "started\n");
            auto group = co_await sb.execute("kill 0; echo never");
            EXPECT_TRUE(group && group->exit_code == 143 && group->output.empty())
                << own << " "
                << (group ? group->output + " " + std::to_string(group->exit_code.value_or(-1))
                          : group.error().describe());
            if (own) {
                EXPECT_EQ(co_await count_processes(s, "sleep 387"), "1\n");
            } else {
                EXPECT_EQ(co_await processes_left(s, "sleep 387"), "") << "kill 0 spared an earlier process";
            }
            auto leads = co_await sb.execute(
                "read -r _ _ _ _ g _ < /proc/$$/stat; if [ \"$g\" = $$ ]; then echo leads; else echo follows; fi");
            EXPECT_TRUE(leads && leads->output == (own ? "leads\n" : "follows\n")) << own;
            EXPECT_EQ(sb.shell_sessions_opened(), 2u) << "one until the timeout, one after it; own groups " << own;
            co_await kill_processes(s, "sleep 38[127]");
        }
    });
}

// A sandbox has at most idle_shell_sessions sessions: commands beyond them run in execs of their
// own, at the same time, with the same results.
TEST_F(SandboxTest, CommandsBeyondTheSessionsGetExecsOfTheirOwn) {
    with_sandbox([&](PodExecSandbox& s) -> asio::awaitable<void> {
        PodExecSandboxOptions o = s.options();
        o.idle_shell_sessions = 1;
        PodExecSandbox sb(client(), s.namespace_name(), s.pod_name(), o);
        auto executor = co_await asio::this_coro::executor;
        std::vector<std::string> outputs(4);
        // Each command waits (10 s at most) until all four have started: they met only if they
        // ran at the same time.
        auto one = [&](int i) -> asio::awaitable<void> {
            const std::string me = std::to_string(i);
            auto r =
                co_await sb.execute("touch /tmp/meet" + me +
                                    "; n=0; while [ $n -lt 100 ]; do [ -e /tmp/meet0 ] && [ -e /tmp/meet1 ] && "
                                    "[ -e /tmp/meet2 ] && [ -e /tmp/meet3 ] && break; sleep 0.1; n=$((n+1)); done; "
                                    "[ $n -lt 100 ] && echo met " +
                                    me + "; echo e" + me + " >&2");
            outputs[i] = r ? r->output : r.error().describe();
        };
        using namespace asio::experimental::awaitable_operators;
        co_await (asio::co_spawn(executor, one(0), asio::use_awaitable) &&
                  asio::co_spawn(executor, one(1), asio::use_awaitable) &&
                  asio::co_spawn(executor, one(2), asio::use_awaitable) &&
                  asio::co_spawn(executor, one(3), asio::use_awaitable));
        for (int i = 0; i < 4; ++i)
            EXPECT_EQ(outputs[i], "met " + std::to_string(i) + "\n\ne" + std::to_string(i) + "\n");
        EXPECT_EQ(sb.shell_sessions_opened(), 1u);
    });
}

TEST_F(SandboxTest, OutputBetweenCommandsRetiresTheSession) {
    with_sandbox([&](PodExecSandbox& s) -> asio::awaitable<void> {
        PodExecSandbox sb(client(), s.namespace_name(), s.pod_name(), s.options());
        auto r = co_await sb.execute("(sleep 0.3; echo late; touch /tmp/late-written) & echo now");
        EXPECT_TRUE(r && r->output == "now\n");
        // Once "late" was written, give it time to cross the kubelet and the API server: output
        // that arrives while the next command runs cannot be told apart from that command's.
        std::string written;
        for (int i = 0; i < 100 && written != "yes\n"; ++i) {
            auto w = co_await s.execute("[ -e /tmp/late-written ] && echo yes || true");
            written = w ? w->output : "";
            if (written != "yes\n") co_await sleep_for(100ms);
        }
        EXPECT_EQ(written, "yes\n");
        // The session that received it is no longer offered.
        for (int i = 0; i < 100 && sb.shell_sessions_idle() != 0; ++i) co_await sleep_for(100ms);
        EXPECT_EQ(sb.shell_sessions_idle(), 0u);
        auto next = co_await sb.execute("echo next");
        EXPECT_TRUE(next && next->output == "next\n") << (next ? next->output : next.error().describe());
        EXPECT_EQ(sb.shell_sessions_opened(), 2u);
    });
}

TEST_F(SandboxTest, ASessionThatEndsLeavesBackgroundProcessesRunning) {
    with_sandbox([&](PodExecSandbox& s) -> asio::awaitable<void> {
        EXPECT_TRUE(co_await s.execute("true"));  // `s`'s own session, open from here on
        {
            PodExecSandbox other(client(), s.namespace_name(), s.pod_name(), s.options());
            auto r = co_await other.execute("sleep 395 >/dev/null 2>&1 & echo ok");
            EXPECT_TRUE(r && r->output == "ok\n");
            EXPECT_EQ(other.shell_sessions_opened(), 1u);
        }
        // Once `other`'s driver is gone (only `s`'s is left), its command's process is still there.
        std::string drivers;
        for (int i = 0; i < 100 && drivers != "1\n"; ++i) {
            auto d = co_await s.execute(count_drivers);
            drivers = d ? d->output : d.error().describe();
            if (drivers != "1\n") co_await sleep_for(100ms);
        }
        EXPECT_EQ(drivers, "1\n") << "the session did not end";
        EXPECT_EQ(co_await count_processes(s, "sleep 395"), "1\n") << "ending the session killed it";
        co_await kill_processes(s, "sleep 395");
        // No sessions: each command is an exec of its own, with the same results.
        PodExecSandboxOptions none = s.options();
        none.idle_shell_sessions = 0;
        PodExecSandbox plain(client(), s.namespace_name(), s.pod_name(), none);
        auto p = co_await plain.execute("echo a; echo b >&2; exit 4");
        EXPECT_TRUE(p && p->output == "a\n\nb\n" && p->exit_code == 4);
        EXPECT_EQ(plain.shell_sessions_opened(), 0u);
    });
}

// How many lines of the session driver's arguments set the grep script's pattern (the command's
// shell is the driver's child).
const std::string scripts_in_driver = "tr '\\000' '\\n' < /proc/$PPID/cmdline | grep -cF 'KSB_PATTERN=$2'";

asio::awaitable<void> check_file_operations(Sandbox& s, const std::string& dir) {
    FileOps files(s);
    auto w = co_await files.write(dir + "/a 'b'.txt", "one\nneedle $two\n");
    EXPECT_TRUE(w && !w->error) << (w ? w->error.value_or("") : w.error().describe());
    auto r = co_await files.read(dir + "/a 'b'.txt", 1, 5);
    EXPECT_TRUE(r && r->file_data && r->file_data->content == "needle $two") << (r ? r->error.value_or("") : "");
    auto g = co_await files.grep("needle", dir, "", std::nullopt);
    EXPECT_TRUE(g && g->matches && g->matches->size() == 1 && g->matches->front().line == 2);
    auto l = co_await files.ls(dir);
    EXPECT_TRUE(l && l->entries && l->entries->size() == 1);
    auto globbed = co_await files.glob("*.txt", dir);
    EXPECT_TRUE(globbed && globbed->matches && globbed->matches->size() == 1);
}

// The file operations' commands name the scripts the session's driver keeps: the driver holds them,
// and they run as if sent. A server in the way that refuses the exec's longer URL gets a session
// without them, and the commands carry their scripts in the same session.
TEST_F(SandboxTest, SessionsKeepTheFileOperationsScriptsUnlessTheLongerRequestIsRefused) {
    with_sandbox([&](PodExecSandbox& s) -> asio::awaitable<void> {
        co_await check_file_operations(s, "/tmp/kept");
        auto kept = co_await s.execute(scripts_in_driver);
        EXPECT_TRUE(kept && kept->output == "1\n") << (kept ? kept->output : kept.error().describe());
        EXPECT_EQ(s.shell_sessions_opened(), 1u);

        FaultRule too_long;
        too_long.path_contains = "KSB_PATTERN";  // only in a driver's URL that carries the scripts
        too_long.method = "GET";
        too_long.count = 1;
        too_long.status = 414;
        cluster_->add_fault(too_long);
        PodExecSandbox refused(client(), s.namespace_name(), s.pod_name(), s.options());
        co_await check_file_operations(refused, "/tmp/refused");
        auto plain = co_await refused.execute(scripts_in_driver);
        EXPECT_TRUE(plain && plain->output == "0\n") << (plain ? plain->output : plain.error().describe());
        EXPECT_EQ(refused.shell_sessions_opened(), 1u);
        EXPECT_EQ(refused.shell_sessions_idle(), 1u);
    });
}

// One file up or down, as upload_files and download_files report it: the error, or for a
// download the content.
asio::awaitable<std::string> upload_one(Sandbox& s, std::string path, std::string content) {
    std::vector<std::pair<std::string, std::string>> files{{std::move(path), std::move(content)}};
    auto r = co_await s.upload_files(std::move(files));
    if (!r) co_return "failed: " + r.error().describe();
    co_return r->size() == 1 ? r->front().error.value_or("ok") : "not one response";
}
asio::awaitable<std::string> download_one(Sandbox& s, std::string path) {
    std::vector<std::string> paths{std::move(path)};
    auto r = co_await s.download_files(std::move(paths));
    if (!r) co_return "failed: " + r.error().describe();
    if (r->size() != 1) co_return "not one response";
    co_return r->front().content ? *r->front().content : "error: " + r->front().error.value_or("none");
}

// Files up to 1 MiB go up and down through a free shell session, byte for byte and with the same
// errors; larger ones take execs of their own. A fault on every exec whose URL names a test file
// tells which way each one went. (One file at a time: files moved at once beyond the free
// sessions take execs of their own too.) The pod is named ksb-t-... so that a fault matching the
// pod's name as well would show.
TEST_F(SandboxTest, FilesUpToAMebibyteMoveThroughSessionsAndLargerOnesThroughExecsOfTheirOwn) {
    GetOrCreateOptions named;
    named.sandbox_id = "t-session-files-" + std::to_string(::getpid());
    with_sandbox(named, [&](PodExecSandbox& s) -> asio::awaitable<void> {
        EXPECT_EQ(s.pod_name().rfind("ksb-t-", 0), 0u) << s.pod_name();
        auto made = co_await s.execute(
            "mkdir -p /tmp/ksb-t && head -c 1048576 /dev/zero | tr '\\0' a > /tmp/ksb-t/mib && "
            "head -c 1048577 /dev/zero | tr '\\0' b > /tmp/ksb-t/mib1");
        EXPECT_TRUE(made && made->exit_code == 0) << (made ? made->output : made.error().describe());
        FaultRule no_exec;
        // In an exec's URL only when the path is an argument (its '/' encoded): a random pod name
        // may start with "ksb-t" too, and the name sits in the URL's path with a plain '/'.
        no_exec.path_contains = "%2Fksb-t";
        no_exec.method = "GET";
        no_exec.count = -1;
        no_exec.status = 500;
        cluster_->add_fault(no_exec);

        std::string bytes;
        for (int c = 0; c < 256; ++c) bytes.push_back(static_cast<char>(c));
        const std::string odd = "/tmp/ksb-t/odd 'q'\n$x";
        const std::string mib(1048576, 'c'), over(1048577, 'd');
        EXPECT_EQ(co_await upload_one(s, "/tmp/ksb-t/every", bytes), "ok");
        EXPECT_EQ(co_await upload_one(s, odd, "x\n"), "ok");
        EXPECT_EQ(co_await upload_one(s, "/tmp/ksb-t/up", mib), "ok");
        EXPECT_NE(co_await upload_one(s, "/tmp/ksb-t/over", over), "ok") << "1 MiB and a byte went through a session";
        // A file where its folder should be: what an exec of its own says too. Small content goes
        // as an argument; other content is input, which the failed command left unread, so that
        // session is not used again.
        EXPECT_EQ(co_await upload_one(s, "/tmp/ksb-t/every/below", "y"), file_error::file_not_found);
        EXPECT_EQ(s.shell_sessions_opened(), 1u);
        EXPECT_EQ(co_await upload_one(s, "/tmp/ksb-t/every/below", std::string("y\0", 2)), file_error::file_not_found);

        EXPECT_TRUE(co_await download_one(s, "/tmp/ksb-t/every") == bytes);
        EXPECT_EQ(co_await download_one(s, odd), "x\n");
        EXPECT_TRUE(co_await download_one(s, "/tmp/ksb-t/mib") == std::string(1048576, 'a'));
        EXPECT_TRUE(co_await download_one(s, "/tmp/ksb-t/up") == mib);
        EXPECT_EQ((co_await download_one(s, "/tmp/ksb-t/mib1")).substr(0, 6), "error:")
            << "1 MiB and a byte went through a session";
        EXPECT_EQ(co_await download_one(s, "/tmp/ksb-t/missing"), std::string("error: ") + file_error::file_not_found);
        EXPECT_EQ(co_await download_one(s, "/tmp/ksb-t"), std::string("error: ") + file_error::is_directory);
        EXPECT_EQ(s.shell_sessions_opened(), 2u);
        // Under a max_file_bytes below 1 MiB the session reads one byte more than it allows, and
        // a longer file is too large with no second read.
        PodExecSandboxOptions small_files = s.options();
        small_files.max_file_bytes = 256;
        PodExecSandbox small(client(), s.namespace_name(), s.pod_name(), small_files);
        EXPECT_TRUE(co_await download_one(small, "/tmp/ksb-t/every") == bytes);
        EXPECT_EQ(co_await download_one(small, "/tmp/ksb-t/mib"), std::string("error: ") + file_error::file_too_large);
        EXPECT_EQ(small.shell_sessions_opened(), 1u);

        cluster_->clear_faults();
        EXPECT_EQ(co_await upload_one(s, "/tmp/ksb-t/over", over), "ok");
        EXPECT_TRUE(co_await download_one(s, "/tmp/ksb-t/over") == over);
        EXPECT_TRUE(co_await download_one(s, "/tmp/ksb-t/mib1") == std::string(1048577, 'b'));
    });
}

TEST_F(SandboxTest, AnIdleSessionEndsItselfAfterTheIdleLimit) {
    with_sandbox([&](PodExecSandbox& s) -> asio::awaitable<void> {
        PodExecSandboxOptions brief = s.options();
        brief.shell_session_idle_limit = std::chrono::seconds(3);
        EXPECT_TRUE(co_await s.execute("true"));  // `s`'s own session, open from here on
        PodExecSandbox other(client(), s.namespace_name(), s.pod_name(), brief);
        EXPECT_TRUE(co_await other.execute("true"));
        // Drivers in the pod: `s`'s own (running this ps) and `other`'s.
        const std::string& drivers = count_drivers;
        // (Polled: a session that ended just before, its driver killed by its subshell, leaves
        // that subshell a moment without a driver for a parent.)
        std::string both;
        for (int i = 0; i < 50 && both != "2\n"; ++i) {
            if (i > 0) co_await sleep_for(100ms);
            auto r = co_await s.execute(drivers);
            both = r ? r->output : r.error().describe();
        }
        EXPECT_EQ(both, "2\n");
        // Its idle timer ends `other`'s session three seconds after its command.
        std::string count;
        for (int i = 0; i < 50 && count != "1\n"; ++i) {
            co_await sleep_for(200ms);
            auto one = co_await s.execute(drivers);
            count = one ? one->output : one.error().describe();
        }
        EXPECT_EQ(count, "1\n");
        auto again = co_await other.execute("echo again");
        EXPECT_TRUE(again && again->output == "again\n");
        EXPECT_EQ(other.shell_sessions_opened(), 2u);
    });
}

}  // namespace
