// RouterSandbox against the local cluster: the python-runtime protocol through the sandbox router
// to a runtime in a real pod (busybox root: no python3, no bash). Files: router_transfer_test.cpp.
#include <kubesandbox/router_sandbox.hpp>

#include "router_fixture.hpp"

#include "../support/runtime_pod.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/json/serialize.hpp>

#include <gtest/gtest.h>

namespace {
namespace asio = boost::asio;
using namespace kubesandbox;
using namespace std::chrono_literals;
using namespace std::string_literals;

// Runs `n` executes of "echo i" at once on `sb`; how many came back right (bounded in time).
asio::awaitable<int> concurrent_echoes(std::shared_ptr<RouterSandbox> sb, int n) {
    auto right = std::make_shared<int>(0);
    auto finished = std::make_shared<int>(0);
    auto first_wrong = std::make_shared<std::string>();  // what the first wrong call gave
    auto ex = co_await asio::this_coro::executor;
    for (int i = 0; i < n; ++i) {
        asio::co_spawn(
            ex,
            [sb, i, right, finished, first_wrong]() -> asio::awaitable<void> {
                auto one = co_await sb->execute("echo " + std::to_string(i));
                if (one && one->output == std::to_string(i) + "\n") ++*right;
                else if (first_wrong->empty())
                    *first_wrong =
                        "call " + std::to_string(i) + ": " +
                        (one ? "output \"" + one->output + "\", exit " + std::to_string(one->exit_code.value_or(-1))
                             : one.error().describe());
                ++*finished;
            },
            asio::detached);
    }
    for (int waited = 0; *finished < n && waited < 2400; ++waited) co_await test::sleep_for(50ms);
    if (!first_wrong->empty()) ADD_FAILURE() << "of " << n << " concurrent echoes, " << *first_wrong;
    co_return *right;
}

// How many processes in the sandbox's pod run a command line matching `pattern`, once that
// count is 0 or 5 s have passed. A SIGKILL to a process group is delivered asynchronously: the
// runtime can answer (its pipes closed by the shells that died first) while a killed `sleep` has
// not yet been scheduled to exit, so an immediate `ps` may still list it (seen once in CI).
asio::awaitable<std::string> processes_matching(RouterSandbox& sb, std::string pattern) {
    std::string count = "?";
    for (int i = 0; i < 50; ++i) {
        auto r = co_await sb.execute("ps -o args | grep -c '" + pattern + "'");
        count = r ? r->output : r.error().describe();
        if (count == "0\n") break;
        co_await test::sleep_for(100ms);
    }
    co_return count;
}

using test::router::RouterSandboxTest;

TEST_F(RouterSandboxTest, ExecuteRunsShellCommandsWithRawModeResults) {
    run([&]() -> asio::awaitable<void> {
        auto sb = co_await sandbox("rt-exec");
        if (!sb) co_return;
        EXPECT_EQ(sb->id(), "default/rt-exec");
        auto r = co_await sb->execute("echo out; echo err >&2; exit 3");
        EXPECT_TRUE(r && r->output == "out\n\nerr\n" && r->exit_code == 3) << (r ? r->output : r.error().describe());
        // Pipes, variables and quotes reach sh untouched (the runtime itself runs no shell).
        r = co_await sb->execute("printf '%s|' \"a'b\" 'c\"d' '$HOME' `echo x` | wc -c; pwd");
        EXPECT_TRUE(r && r->output == "16\n/app\n") << (r ? r->output : r.error().describe());
        r = co_await sb->execute("printf 'l1\\nl2\\n' | while read -r l; do echo \"<$l>\"; done");
        EXPECT_TRUE(r && r->output == "<l1>\n<l2>\n") << (r ? r->output : "");
        // Bytes that JSON cannot carry travel base64-encoded.
        r = co_await sb->execute("printf '%s' '\xff\xfe' | wc -c");
        EXPECT_TRUE(r && r->output == "2\n" && r->exit_code == 0) << (r ? r->output : r.error().describe());
        // Output that is not UTF-8 comes back byte for byte (the runtime alone would refuse it).
        r = co_await sb->execute("printf 'a\\377b\\000c'; printf '\\376' >&2");
        EXPECT_TRUE(r && r->output ==
                             "a\xff"
                             "b\0c\n\xfe"s)
            << (r ? r->output : r.error().describe());
        r = co_await sb->execute("kill -9 $$");
        EXPECT_TRUE(r && r->exit_code == 137) << (r ? std::to_string(r->exit_code.value_or(-1)) : "");
        r = co_await sb->execute("cat; echo done");  // stdin is not a pipe that stays open
        EXPECT_TRUE(r && r->output == "done\n");
        auto nul = co_await sb->execute("echo a\0b"s);
        EXPECT_TRUE(!nul && nul.error().code == errc::invalid_argument);
        // The command inherits none of the runtime's descriptors (only ls's own directory, 3).
        r = co_await sb->execute("ls /proc/self/fd | tr '\\n' ' '");
        EXPECT_TRUE(r && r->output == "0 1 2 3 ") << (r ? r->output : r.error().describe());
        auto negative = co_await sb->execute("true", -1s);
        EXPECT_TRUE(!negative && negative.error().code == errc::invalid_argument);
        co_await remove("rt-exec");
    });
}

TEST_F(RouterSandboxTest, TimeoutAnswers124AndKillsTheCommandsGroup) {
    run([&]() -> asio::awaitable<void> {
        auto sb = co_await sandbox("rt-timeout");
        if (!sb) co_return;
        auto begun = std::chrono::steady_clock::now();
        auto r = co_await sb->execute("sleep 31 & echo started; sleep 32", 1s);
        auto took = std::chrono::steady_clock::now() - begun;
        EXPECT_TRUE(r && r->exit_code == 124 && r->output == "Command timed out after 1 seconds")
            << (r ? r->output : r.error().describe());
        EXPECT_LT(took, 10s);
        EXPECT_EQ(co_await processes_matching(*sb, "^sleep 3[12]"), "0\n");
        // A command that ends in time is not disturbed by its watchdog.
        r = co_await sb->execute("sleep 0.2; echo ok", 5s);
        EXPECT_TRUE(r && r->output == "ok\n" && r->exit_code == 0);
        // Quick commands leave no watchdog sleep behind (component WatchdogScript runs thousands).
        for (int i = 0; i < 200; ++i) {
            r = co_await sb->execute("true", 1234s);
            if (!r || r->exit_code != 0) break;
        }
        EXPECT_TRUE(r && r->exit_code == 0);
        EXPECT_EQ(co_await processes_matching(*sb, "^sleep 1234"), "0\n");
        co_await remove("rt-timeout");
    });
}

TEST_F(RouterSandboxTest, LargeOutputIsCappedWhileItStreams) {
    options_.max_output_bytes = 64 * 1024;
    run([&]() -> asio::awaitable<void> {
        auto sb = co_await sandbox("rt-big");
        if (!sb) co_return;
        auto r = co_await sb->execute("head -c 5000000 /dev/zero | tr '\\0' a; echo tail >&2");
        EXPECT_TRUE(r && r->truncated && r->output.size() == 64 * 1024 &&
                    r->output.find_first_not_of('a') == std::string::npos)
            << (r ? std::to_string(r->output.size()) : r.error().describe());
        co_await remove("rt-big");
    });
}

// Into a sink: stdout and stderr apart, each capped as execute's output is, once the runtime has
// answered; the runtime's own failure goes to stderr.
TEST_F(RouterSandboxTest, ExecuteHandsEachStreamToASink) {
    options_.max_output_bytes = 64 * 1024;
    run([&]() -> asio::awaitable<void> {
        auto sb = co_await sandbox("rt-sink");
        if (!sb) co_return;
        std::string out, err;
        OutputSink sink = [&](int stream, std::string_view data) -> asio::awaitable<bool> {
            (stream == 2 ? err : out).append(data);
            co_return true;
        };
        auto r = co_await sb->execute("printf 'a\\377'; echo oops >&2; exit 5", std::nullopt, sink);
        EXPECT_TRUE(r && r->exit_code == 5 && r->output.empty() && !r->truncated)
            << (r ? r->output : r.error().describe());
        EXPECT_EQ(out, "a\377");
        EXPECT_EQ(err, "oops\n");
        out.clear();
        r = co_await sb->execute("head -c 200000 /dev/zero | tr '\\0' a", std::nullopt, sink);
        EXPECT_TRUE(r && r->exit_code == 0 && r->truncated && out.size() == 64 * 1024)
            << (r ? std::to_string(out.size()) : r.error().describe());
        OutputSink stop = [](int, std::string_view) -> asio::awaitable<bool> { co_return false; };
        r = co_await sb->execute("echo x", std::nullopt, stop);
        EXPECT_TRUE(!r && r.error().is(errc::cancelled));
        co_await remove("rt-sink");
    });
}

TEST_F(RouterSandboxTest, RouterAndRuntimeFailuresAreTypedErrors) {
    run([&]() -> asio::awaitable<void> {
        auto sb = co_await sandbox("rt-errors");
        if (!sb) co_return;
        RouterSandboxOptions other;
        other.sandbox_name = "no-such-sandbox";
        RouterSandbox missing(test::local_router(*cluster_, io_.get_executor()), other);
        auto r = co_await missing.execute("true");
        EXPECT_TRUE(!r && r.error().code == errc::service_unavailable) << (r ? "ran" : r.error().describe());

        DirectConnectionOptions wrong;
        wrong.url = cluster_->router_url();
        wrong.token = "not-the-token";
        RouterSandboxOptions same;
        same.sandbox_name = "rt-errors";
        RouterSandbox unauthorized(*make_direct_connection(io_.get_executor(), wrong), same);
        r = co_await unauthorized.execute("true");
        EXPECT_TRUE(!r && r.error().code == errc::unauthorized) << (r ? "ran" : r.error().describe());

        DirectConnectionOptions closed;
        closed.url = "http://127.0.0.1:1";
        RouterSandbox nowhere(*make_direct_connection(io_.get_executor(), closed), same);
        r = co_await nowhere.execute("true");
        EXPECT_TRUE(!r && r.error().code == errc::connection_failed) << (r ? "ran" : r.error().describe());
        DirectConnectionOptions ftp;
        ftp.url = "ftp://x";
        EXPECT_FALSE(make_direct_connection(io_.get_executor(), ftp));

        // The runtime dies mid-command: an error, not a hang, and the command is not replayed.
        r = co_await sb->execute("echo once >> /app/count; kill -9 $(pidof sandbox-runtime)", 20s);
        EXPECT_TRUE(!r && (r.error().code == errc::connection_closed || r.error().code == errc::service_unavailable))
            << (r ? r->output : "");
        auto kube = client();
        for (int i = 0; i < 200; ++i) {
            auto again = co_await sb->execute("cat /app/count");
            if (again) {
                EXPECT_EQ(again->output, "once\n");
                break;
            }
            co_await test::sleep_for(50ms);
        }
        co_await remove("rt-errors");
    });
}

TEST_F(RouterSandboxTest, RouterRestartedMidCommandIsAnErrorAndNothingRunsTwice) {
    run([&]() -> asio::awaitable<void> {
        auto sb = co_await sandbox("rt-restart");
        if (!sb) co_return;
        auto warm = co_await sb->execute("true");  // a keep-alive connection now sits in the pool
        EXPECT_TRUE(warm);
        std::optional<Result<ExecuteResponse>> first;
        auto long_command = [&]() -> asio::awaitable<void> {
            first.emplace(co_await sb->execute("echo start >> /app/log; sleep 2; echo end >> /app/log", 20s));
        };
        auto restart = [&]() -> asio::awaitable<void> {
            // Once the command runs in the pod (a restart before would leave nothing to check).
            for (int i = 0; i < 200; ++i) {
                auto seen = co_await sb->execute("cat /app/log 2>/dev/null");
                if (seen && seen->output == "start\n") break;
                co_await test::sleep_for(20ms);
            }
            cluster_->restart_router();
        };
        using namespace asio::experimental::awaitable_operators;
        co_await (long_command() && restart());
        EXPECT_TRUE(first && !*first && (*first).error().code == errc::connection_closed)
            << (first && *first ? (**first).output : (first ? (*first).error().describe() : "no result"));
        // The command finished in the pod, once: the call was not replayed (a replay would have
        // written its "start" before the first command's "end").
        auto log = co_await sb->execute("cat /app/log");
        for (int i = 0; i < 100 && !(log && log->output.ends_with("end\n")); ++i) {
            co_await test::sleep_for(100ms);
            log = co_await sb->execute("cat /app/log");
        }
        EXPECT_TRUE(log && log->output == "start\nend\n") << (log ? log->output : log.error().describe());

        // A slow router: calls take longer and still succeed.
        cluster_->set_router_delay(400ms);
        auto begun = std::chrono::steady_clock::now();
        auto slow = co_await sb->execute("echo slow");
        EXPECT_TRUE(slow && slow->output == "slow\n");
        EXPECT_GE(std::chrono::steady_clock::now() - begun, 400ms);
        cluster_->set_router_delay(0ms);
        co_await remove("rt-restart");
    });
}

TEST_F(RouterSandboxTest, ATunnelThroughTheApiServerCarriesEverything) {
    options_.max_file_bytes = 3 * 1024 * 1024;
    run([&]() -> asio::awaitable<void> {
        auto kube = client();
        auto created = co_await test::create_runtime_pod(kube, "default", "rt-tunnel", "busybox-runtime", "/app");
        EXPECT_TRUE(created) << created.error().describe();
        if (!created) co_return;
        // Straight to the runtime's port in the pod: only the API server is reached.
        TunnelConnectionOptions tunnel;
        tunnel.pod = "rt-tunnel";
        tunnel.port = 8888;
        tunnel.max_connections = 16;
        auto connection = make_tunnel_connection(kube, tunnel);
        EXPECT_TRUE(connection) << connection.error().describe();
        if (!connection) co_return;
        EXPECT_EQ((*connection)->describe(), "tunnel to default/rt-tunnel:8888");
        RouterSandboxOptions options = options_;
        options.sandbox_name = "rt-tunnel";
        auto sb = std::make_shared<RouterSandbox>(*connection, options);
        auto r = co_await sb->execute("printf 'a\\377b'; echo err >&2; exit 4");
        EXPECT_TRUE(r &&
                    r->output ==
                        "a\xff"
                        "b\nerr\n" &&
                    r->exit_code == 4)
            << (r ? r->output : r.error().describe());
        std::string big(2 * 1024 * 1024 + 3, 'x');
        for (std::size_t i = 0; i < big.size(); i += 991) big[i] = static_cast<char>(i % 253);
        std::vector<std::pair<std::string, std::string>> files{{"/app/big.bin", big}, {"/tmp/t/small.bin", "small"}};
        auto up = co_await sb->upload_files(files);
        EXPECT_TRUE(up && up->size() == 2 && !(*up)[0].error && !(*up)[1].error);
        std::vector<std::string> paths{"/app/big.bin", "/tmp/t/small.bin"};
        auto down = co_await sb->download_files(paths);
        EXPECT_TRUE(down && down->size() == 2 && (*down)[0].content == big && (*down)[1].content == "small");
        // Many at once: each pooled connection is its own WebSocket.
        constexpr int n = 48;
        EXPECT_EQ(co_await concurrent_echoes(sb, n), n);
        // The pod goes away: a typed error, not a hang.
        ResourcePath pod{"", "v1", "pods", "default", "rt-tunnel"};
        co_await kube.remove(pod);
        for (int waited = 0; waited < 200; ++waited) {
            auto gone = co_await kube.get(pod);
            if (!gone && gone.error().code == errc::not_found) break;
            co_await test::sleep_for(50ms);
        }
        auto after = co_await sb->execute("true", 10s);
        EXPECT_TRUE(!after &&
                    (after.error().code == errc::connection_failed || after.error().code == errc::connection_closed))
            << (after ? after->output : after.error().describe());
    });
}

TEST_F(RouterSandboxTest, TunnelCutMidResponseIsAnErrorAndFiveHundredCallsShareOneTunnel) {
    run(
        [&]() -> asio::awaitable<void> {
            auto kube = client();
            auto created =
                co_await test::create_runtime_pod(kube, "default", "rt-tunnel-chaos", "busybox-runtime", "/app");
            EXPECT_TRUE(created) << (created ? "" : created.error().describe());
            if (!created) co_return;
            TunnelConnectionOptions tunnel;
            tunnel.pod = "rt-tunnel-chaos";
            tunnel.port = 8888;
            auto connection = make_tunnel_connection(kube, tunnel);
            EXPECT_TRUE(connection);
            if (!connection) co_return;
            RouterSandboxOptions options = options_;
            options.sandbox_name = "rt-tunnel-chaos";
            options.max_output_bytes = 4 * 1024 * 1024;
            auto sb = std::make_shared<RouterSandbox>(*connection, options);
            // The next tunnel opened is cut by the API server after 4 KiB of a 1 MiB response: the
            // call fails as cut short, and the command is not sent again.
            FaultRule cut;
            cut.path_contains = "/portforward";
            cut.action = FaultRule::Action::drop_mid_stream;
            cut.drop_after_bytes = 4096;
            cluster_->add_fault(cut);
            auto r = co_await sb->execute("echo once >> /app/count; head -c 1000000 /dev/zero | tr '\\0' a");
            EXPECT_TRUE(!r && r.error().code == errc::connection_closed) << (r ? "ran" : r.error().describe());
            cluster_->clear_faults();
            r = co_await sb->execute("cat /app/count");
            EXPECT_TRUE(r && r->output == "once\n") << (r ? r->output : r.error().describe());
            // 500 calls at once over one tunnel connection (its pool of WebSockets).
            constexpr int n = 500;
            EXPECT_EQ(co_await concurrent_echoes(sb, n), n);
            ResourcePath pod{"", "v1", "pods", "default", "rt-tunnel-chaos"};
            co_await kube.remove(pod);
        },
        180s);
}

TEST_F(RouterSandboxTest, ATunnelToAServiceFollowsItsEndpointsWhenThePodIsReplaced) {
    run(
        [&]() -> asio::awaitable<void> {
            auto kube = client();
            ResourcePath pods{"", "v1", "pods", "default", ""};
            // A runtime pod labelled as the service's backend, knowing its own name.
            auto backend = [&](std::string name) -> asio::awaitable<bool> {
                auto made = co_await test::create_runtime_pod(kube, "default", name, "busybox-runtime", "/app");
                EXPECT_TRUE(made) << (made ? "" : made.error().describe());
                if (!made) co_return false;
                boost::json::object labels{
                    {"metadata", boost::json::object{{"labels", boost::json::object{{"app", "rt-svc"}}}}}};
                auto labelled = co_await kube.patch(pods.with_name(name), boost::json::value(labels), PatchType::merge);
                EXPECT_TRUE(labelled);
                co_return bool(labelled);
            };
            if (!co_await backend("rt-svc-a")) co_return;
            boost::json::object service{
                {"apiVersion", "v1"},
                {"kind", "Service"},
                {"metadata", boost::json::object{{"name", "rt-svc"}}},
                {"spec", boost::json::object{{"selector", boost::json::object{{"app", "rt-svc"}}},
                                             {"ports", boost::json::array{boost::json::object{
                                                           {"name", "http"}, {"port", 80}, {"targetPort", 8888}}}}}}};
            ResourcePath services{"", "v1", "services", "default", ""};
            auto made = co_await kube.create(services, service);
            EXPECT_TRUE(made) << (made ? "" : made.error().describe());
            // The cluster's EndpointSlice controller lists the pod behind the service.
            ResourcePath slices{"discovery.k8s.io", "v1", "endpointslices", "default", "rt-svc-local"};
            auto listed = [&](std::string pod) -> asio::awaitable<bool> {
                for (int i = 0; i < 200; ++i) {
                    auto slice = co_await kube.get(slices);
                    if (slice && boost::json::serialize(*slice).find("\"name\":\"" + pod + "\"") != std::string::npos)
                        co_return true;
                    co_await test::sleep_for(50ms);
                }
                co_return false;
            };
            EXPECT_TRUE(co_await listed("rt-svc-a"));
            TunnelConnectionOptions tunnel;
            tunnel.service = "rt-svc";
            tunnel.port = 80;
            auto connection = make_tunnel_connection(kube, tunnel);
            EXPECT_TRUE(connection);
            if (!connection) co_return;
            EXPECT_EQ((*connection)->describe(), "tunnel to service default/rt-svc:80");
            RouterSandboxOptions options = options_;
            options.sandbox_name = "any";  // the runtime ignores the router's headers
            RouterSandbox sb(*connection, options);
            auto r = co_await sb.execute("echo a > /app/who; cat /app/who");
            EXPECT_TRUE(r && r->output == "a\n") << (r ? r->output : r.error().describe());
            // The pod is replaced: new connections find the new endpoint.
            co_await kube.remove(pods.with_name("rt-svc-a"));
            if (!co_await backend("rt-svc-b")) co_return;
            EXPECT_TRUE(co_await listed("rt-svc-b"));
            bool moved = false;
            for (int i = 0; i < 100 && !moved; ++i) {
                r = co_await sb.execute("cat /app/who 2>/dev/null || echo new");
                moved = r && r->output == "new\n";
                if (!moved) co_await test::sleep_for(50ms);
            }
            EXPECT_TRUE(moved) << (r ? r->output : r.error().describe());
            co_await kube.remove(pods.with_name("rt-svc-b"));
            co_await kube.remove(services.with_name("rt-svc"));
        },
        120s);
}

TEST_F(RouterSandboxTest, ManyConcurrentExecutesShareThePool) {
    run([&]() -> asio::awaitable<void> {
        auto sb = co_await sandbox("rt-many");
        if (!sb) co_return;
        constexpr int n = 64;
        int right = 0;
        std::vector<asio::awaitable<void>> calls;
        auto one = [&](int i) -> asio::awaitable<void> {
            auto r = co_await sb->execute("echo " + std::to_string(i));
            if (r && r->output == std::to_string(i) + "\n") ++right;
        };
        using namespace asio::experimental::awaitable_operators;
        for (int i = 0; i < n; i += 4) co_await (one(i) && one(i + 1) && one(i + 2) && one(i + 3));
        EXPECT_EQ(right, n);
        co_await remove("rt-many");
    });
}

}  // namespace
