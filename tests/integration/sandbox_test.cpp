// SandboxTest, commands: results and their composition, timeouts, cancellation, dropped
// connections and deleted pods (sandbox_fixture.hpp).
#include "sandbox_fixture.hpp"

namespace {
using namespace kubesandbox;
using namespace kubesandbox::test::sandbox;
using kubesandbox::test::sleep_for;

TEST_F(SandboxTest, ExitCodesAndOutputComposition) {
    with_sandbox([&](PodExecSandbox& s) -> asio::awaitable<void> {
        for (int code : {0, 1, 255}) {
            auto r = co_await s.execute("exit " + std::to_string(code));
            EXPECT_TRUE(r && r->exit_code == code) << code;
        }
        auto missing = co_await s.execute("no-such-command-xyz");
        EXPECT_TRUE(missing && missing->exit_code == 127);
        auto err_only = co_await s.execute("echo oops >&2");
        EXPECT_TRUE(err_only && err_only->output == "oops\n");
        auto both = co_await s.execute("printf out; printf err >&2");
        EXPECT_TRUE(both && both->output == "out\nerr");
        auto cwd = co_await s.execute("pwd");
        EXPECT_TRUE(cwd && cwd->output == "/workspace\n");
        auto binary = co_await s.execute("printf 'a\\000b\\r\\n\\377'");
        EXPECT_TRUE(binary && binary->output == std::string("a\0b\r\n\xff", 6));
    });
}

TEST_F(SandboxTest, LargeOutputIsCappedOnUtf8BoundaryAndDrained) {
    with_sandbox([&](PodExecSandbox& s) -> asio::awaitable<void> {
        // 20 MB through the default 1 MiB cap: truncated, and the exit status still arrives.
        auto big = co_await s.execute("head -c 20000000 /dev/zero | tr '\\000' a; exit 3");
        EXPECT_TRUE(big.has_value());
        if (big) {
            EXPECT_EQ(big->output.size(), 1024u * 1024u);
            EXPECT_TRUE(big->truncated);
            EXPECT_EQ(big->exit_code, 3);
        }
        // A 5-byte cap over two-byte characters cuts after the second character, not inside one.
        PodExecSandboxOptions small;
        small.max_output_bytes = 5;
        PodExecSandbox capped(client(), s.namespace_name(), s.pod_name(), small);
        auto utf8 = co_await capped.execute("printf '\\303\\251\\303\\251\\303\\251'");
        EXPECT_TRUE(utf8 && utf8->output == "\xc3\xa9\xc3\xa9" && utf8->truncated);
    });
}

TEST_F(SandboxTest, TimeoutReturns124AndKillsTheRemoteProcesses) {
    with_sandbox([&](PodExecSandbox& s) -> asio::awaitable<void> {
        // The pod's first exec also starts its exec spawner: done here, so the 1 s timeout
        // below times the command and not that start (a kill before the command has started
        // finds nothing to kill).
        EXPECT_TRUE(co_await s.execute("true"));
        auto start = std::chrono::steady_clock::now();
        // `setsid` leaves the exec's process group and `env -i` drops the environment: the kill
        // must still find them (marker, descendants, the command's own process group).
        auto r = co_await s.execute(
            "sleep 301 & setsid sleep 303 & env -i sleep 305 & (env -i sleep 306 &); sleep 302; echo never",
            std::chrono::seconds(1));
        EXPECT_LT(std::chrono::steady_clock::now() - start, 20s);
        EXPECT_TRUE(r.has_value());
        if (r) {
            EXPECT_EQ(r->exit_code, 124);
            EXPECT_EQ(r->output, "Command timed out after 1 seconds");
        }
        EXPECT_EQ(co_await processes_left(s, "sleep 30[12356]"), "") << "survived the timeout";
        // A last command that clears its environment: busybox would exec it in the marked
        // shell's place, leaving nothing marked.
        auto bare = co_await s.execute("env -i sleep 317", std::chrono::seconds(1));
        EXPECT_TRUE(bare && bare->exit_code == 124);
        EXPECT_EQ(co_await processes_left(s, "sleep 317"), "") << "the last command survived";
        // A command that starts nothing: only its own shell runs, and it is killed too.
        auto spin = co_await s.execute("spin315=1; while :; do :; done", std::chrono::seconds(1));
        EXPECT_TRUE(spin && spin->exit_code == 124);
        EXPECT_EQ(co_await processes_left(s, "spin315"), "") << "the timed-out shell survived";
        // run() (the CLI's exec) kills on timeout too, and keeps the streams apart.
        PodExecSandboxOptions opts;
        PodExecSandbox raw(client(), s.namespace_name(), s.pod_name(), opts);
        std::vector<std::string> argv{"sh", "-c", "echo out; echo err >&2; setsid sleep 307 & sleep 308"};
        std::string no_input;
        auto rr = co_await raw.run(argv, no_input, std::chrono::seconds(1));
        EXPECT_TRUE(rr.has_value());
        if (rr) {
            EXPECT_TRUE(rr->timed_out);
            EXPECT_EQ(rr->exit_code, 124);
        }
        std::vector<std::string> both{"sh", "-c", "echo out; echo err >&2; exit 3"};
        auto split = co_await raw.run(both, no_input, std::chrono::seconds(30));
        EXPECT_TRUE(split && split->stdout_data == "out\n" && split->stderr_data == "err\n" && split->exit_code == 3);
        EXPECT_EQ(co_await processes_left(s, "sleep 30[78]"), "") << "survived run()'s timeout";
    });
}

// execute runs its command in the launcher's shell: what the command sees and prints is what
// `sh -c COMMAND` (run() here) sees and prints, error texts and line numbers included.
TEST_F(SandboxTest, AShellCommandBehavesAsShC) {
    with_sandbox([&](PodExecSandbox& s) -> asio::awaitable<void> {
        PodExecSandbox raw(client(), s.namespace_name(), s.pod_name(), PodExecSandboxOptions{});
        for (std::string command : {"echo \"$0 $# [$*]\"; pwd", "echo a; no_such_command_316", "echo a\nif then",
                                    "exit 7", "set -u; echo $undefined_317", "false &&", ""}) {
            auto shell = co_await s.execute(command);
            std::vector<std::string> argv{raw.options().shell, "-c", command};
            auto reference = co_await raw.run(argv, std::string(), std::nullopt);
            EXPECT_TRUE(shell && reference) << command;
            if (!shell || !reference) continue;
            EXPECT_EQ(shell->exit_code, reference->exit_code) << command;
            std::string joined = reference->stdout_data;
            if (!joined.empty() && !reference->stderr_data.empty()) joined += '\n';
            EXPECT_EQ(shell->output, joined + reference->stderr_data) << command;
            EXPECT_FALSE(joined.empty() && reference->stderr_data.empty() && command.find("echo") != std::string::npos)
                << command << " printed nothing: the comparison would prove little";
        }
    });
}

// A command line near the API server's limit on a request head (64 KiB here): longer than one
// message to the local kubelet's spawner, so it starts the other way, with the same result.
TEST_F(SandboxTest, ACommandLineOfSixtyKilobytesRuns) {
    with_sandbox([&](PodExecSandbox& s) -> asio::awaitable<void> {
        const std::string word(61 * 1024, 'a');
        auto r = co_await s.execute("x=" + word + "; echo ${#x}");
        EXPECT_TRUE(r && r->exit_code == 0 && r->output == std::to_string(word.size()) + "\n")
            << (r ? r->output : r.error().message);
    });
}

// Many commands at once on one sandbox, ending in another order than they started: each call
// gets its own command's output and exit code.
TEST_F(SandboxTest, ConcurrentExecutesEachGetTheirOwnResult) {
    using namespace asio::experimental::awaitable_operators;
    with_sandbox([&](PodExecSandbox& s) -> asio::awaitable<void> {
        // The spawner of the pod's execs is up before the burst, so the burst goes through it.
        auto first = co_await s.execute("true");
        EXPECT_TRUE(first && first->exit_code == 0);
        constexpr int kCalls = 24;
        std::vector<std::optional<Result<ExecuteResponse>>> results(kCalls);
        auto one = [&](int i) -> asio::awaitable<void> {
            // Later calls sleep less, so they end first.
            results[i] = co_await s.execute("sleep 0." + std::to_string((kCalls - i) % 10) + "; echo call" +
                                            std::to_string(i) + "; exit " + std::to_string(i));
        };
        auto ex = co_await asio::this_coro::executor;
        int running = kCalls;
        asio::steady_timer all_done(ex, std::chrono::steady_clock::time_point::max());
        for (int i = 0; i < kCalls; ++i) {
            asio::co_spawn(ex, one(i), [&](std::exception_ptr) {
                if (--running == 0) all_done.cancel();
            });
        }
        while (running > 0) co_await all_done.async_wait(asio::as_tuple(asio::use_awaitable));
        for (int i = 0; i < kCalls; ++i) {
            EXPECT_TRUE(results[i] && *results[i]) << i;
            if (!results[i] || !*results[i]) continue;
            EXPECT_EQ((*results[i])->output, "call" + std::to_string(i) + "\n");
            EXPECT_EQ((*results[i])->exit_code, i);
        }
    });
}

// A NUL would cut the command short on its way through exec's argv; a negative timeout has no
// meaning. Both are refused before anything runs.
TEST_F(SandboxTest, CallerMistakesAreTypedErrorsAndRunNothing) {
    with_sandbox([&](PodExecSandbox& s) -> asio::awaitable<void> {
        auto nul = co_await s.execute(std::string("touch /workspace/ran\0; rm -rf /workspace", 37));
        EXPECT_TRUE(!nul && nul.error().is(errc::invalid_argument)) << (nul ? "ran" : nul.error().message);
        auto negative = co_await s.execute("touch /workspace/ran", std::chrono::seconds(-1));
        EXPECT_TRUE(!negative && negative.error().is(errc::invalid_argument));
        PodExecSandbox raw(client(), s.namespace_name(), s.pod_name(), PodExecSandboxOptions{});
        std::vector<std::string> argv{"touch", std::string("/workspace/ran\0x", 16)};
        auto run_nul = co_await raw.run(argv, std::string(), std::nullopt);
        EXPECT_TRUE(!run_nul && run_nul.error().is(errc::invalid_argument));
        auto left = co_await s.execute("ls -A /workspace");
        EXPECT_TRUE(left && left->output.empty() && left->exit_code == 0) << (left ? left->output : "");
    });
}

// The caller gives up on a command (here: an `||` with a timer): the command is killed in the
// sandbox as on a timeout, and the caller gets its answer at once.
TEST_F(SandboxTest, ACancelledExecuteKillsItsCommand) {
    using namespace asio::experimental::awaitable_operators;
    with_sandbox([&](PodExecSandbox& s) -> asio::awaitable<void> {
        EXPECT_TRUE(co_await s.execute("true"));  // the pod's exec spawner starts before the timing
        asio::steady_timer give_up(co_await asio::this_coro::executor, 1s);
        auto start = std::chrono::steady_clock::now();
        auto first = co_await (s.execute("setsid sleep 313 & sleep 311; echo done") ||
                               give_up.async_wait(asio::as_tuple(asio::use_awaitable)));
        EXPECT_EQ(first.index(), 1u);
        EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
        EXPECT_EQ(co_await processes_left(s, "sleep 31[13]"), "") << "the cancelled command survived";
    });
}

// Cancellation reaches a caller that moved files first: the transfers do not switch it off
// for the rest of the caller's coroutine.
TEST_F(SandboxTest, CancellationStillReachesACallerAfterTransfers) {
    using namespace asio::experimental::awaitable_operators;
    with_sandbox([&](PodExecSandbox& s) -> asio::awaitable<void> {
        auto agent_turn = [&]() -> asio::awaitable<void> {
            std::vector<std::pair<std::string, std::string>> files{{"/workspace/a", "x"}, {"/workspace/b", "y"}};
            co_await s.upload_files(files);
            std::vector<std::string> paths{"/workspace/a"};
            co_await s.download_files(paths);
            co_await s.execute("sleep 312");
        };
        asio::steady_timer give_up(co_await asio::this_coro::executor, 2s);
        auto start = std::chrono::steady_clock::now();
        auto first = co_await (agent_turn() || give_up.async_wait(asio::as_tuple(asio::use_awaitable)));
        EXPECT_EQ(first.index(), 1u);
        EXPECT_LT(std::chrono::steady_clock::now() - start, 15s);
        EXPECT_EQ(co_await processes_left(s, "sleep 312"), "") << "the cancelled command survived";
    });
}

// The connection drops mid-command: the command ran once (never replayed), is killed, and the
// error says so.
TEST_F(SandboxTest, ADroppedConnectionKillsTheCommandAndSaysSo) {
    with_sandbox([&](PodExecSandbox& s) -> asio::awaitable<void> {
        FaultRule drop;
        drop.path_contains = "/exec";
        drop.action = FaultRule::Action::drop_mid_stream;
        drop.drop_after_bytes = 1000;
        cluster_->add_fault(drop);
        auto r = co_await s.execute("echo ran >> /workspace/count; head -c 5000 /dev/zero; sleep 314");
        EXPECT_FALSE(r.has_value());
        if (!r) {
            EXPECT_TRUE(r.error().is(errc::connection_closed)) << r.error().message;
            EXPECT_NE(r.error().message.find("the command was killed"), std::string::npos) << r.error().message;
        }
        auto count = co_await s.execute("cat /workspace/count; ps | grep 'sleep 314' | grep -v grep || true");
        EXPECT_TRUE(count && count->output == "ran\n") << (count ? count->output : count.error().message);
    });
}

TEST_F(SandboxTest, PodDeletedMidCommandIsATypedErrorNotAHang) {
    auto p = provider();
    run(
        [&]() -> asio::awaitable<void> {
            auto sb = co_await p.get_or_create_pod();
            EXPECT_TRUE(sb.has_value());
            if (!sb) co_return;
            auto kc = client();
            ResourcePath pod;
            pod.plural = "pods";
            pod.namespace_name = (*sb)->namespace_name();
            pod.name = (*sb)->pod_name();
            auto deleter = [&]() -> asio::awaitable<void> {
                co_await sleep_for(1000ms);
                DeleteOptions now;
                now.grace_period_seconds = 0;
                co_await kc.remove(pod, now);
            };
            asio::co_spawn(io_, deleter, asio::detached);
            auto start = std::chrono::steady_clock::now();
            auto r = co_await (*sb)->execute("sleep 120", std::chrono::seconds(0));
            EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);
            // A typed NotFound, whether the runtime reported a kill (exit 137) or the stream broke.
            EXPECT_FALSE(r.has_value()) << (r ? r->output : "");
            if (!r) {
                EXPECT_TRUE(r.error().is(errc::not_found)) << r.error().describe();
            }
            co_await p.delete_sandbox((*sb)->pod_name());
        },
        60s);
}

TEST_F(SandboxTest, ClientRetriesIdempotentRequestsOnInjectedFaults) {
    auto kc = client();
    ResourcePath cms;
    cms.plural = "configmaps";
    cms.namespace_name = "default";
    json::object cm;
    cm["metadata"].emplace_object()["name"] = "fault-probe";
    run([&]() -> asio::awaitable<void> {
        auto created = co_await kc.create(cms, cm);
        EXPECT_TRUE(created.has_value());
        FaultRule fail500;
        fail500.path_contains = "/configmaps/fault-probe";
        fail500.method = "GET";
        fail500.count = 2;
        fail500.status = 500;
        cluster_->add_fault(fail500);
        auto got = co_await kc.get(cms.with_name("fault-probe"));
        EXPECT_TRUE(got.has_value()) << (got ? "" : got.error().describe());

        FaultRule throttle;
        throttle.path_contains = "/configmaps";
        throttle.method = "GET";
        throttle.count = 1;
        throttle.status = 429;
        throttle.retry_after_seconds = 1;
        cluster_->add_fault(throttle);
        auto listed = co_await kc.list(cms);
        EXPECT_TRUE(listed.has_value());

        // A create whose response is lost is not replayed: typed error, no duplicate.
        FaultRule drop;
        drop.path_contains = "/configmaps";
        drop.method = "POST";
        drop.count = 1;
        drop.action = FaultRule::Action::drop_before_response;
        cluster_->add_fault(drop);
        json::object cm2;
        cm2["metadata"].emplace_object()["generateName"] = "dropped-";
        auto lost = co_await kc.create(cms, cm2);
        EXPECT_FALSE(lost.has_value()) << "a lost create must not be replayed";
        if (!lost) {
            EXPECT_TRUE(lost.error().is(errc::connection_closed))
                << lost.error().describe() << " / " << lost.error().code.message();
        }

        // Marked idempotent (fixed name): retried, and a 409 after a lost response means ours.
        cluster_->add_fault(drop);
        json::object cm3;
        cm3["metadata"].emplace_object()["name"] = "fixed-name";
        CreateOptions idem;
        idem.idempotent = true;
        auto again = co_await kc.create(cms, cm3, idem);
        EXPECT_TRUE(again.has_value()) << "the retried create must return our object: " << again.error().describe();
        if (again) {
            EXPECT_EQ(again->at("metadata").at("name").as_string(), "fixed-name");
        }
        auto one = co_await kc.get(cms.with_name("fixed-name"));
        EXPECT_TRUE(one.has_value());
        co_await kc.remove(cms.with_name("fault-probe"));
        co_await kc.remove(cms.with_name("fixed-name"));
    });
}

}  // namespace
