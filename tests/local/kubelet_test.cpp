// The local kubelet on its own (no API server): real bubblewrap pods, real processes, exec over
// a real loopback WebSocket, logs over a real HTTP connection. Lifecycle, exec and logs here;
// confinement and limits in kubelet_isolation_test.cpp.
#include "../support/proc_scan.hpp"
#include "local/kubelet_fixture.hpp"
#include "local/kubelet_plan.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <sstream>

extern char** environ;

namespace kubelet_test {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
using namespace std::chrono_literals;

TEST(KubeletPlan, ResolvesImagesAndFailsUnknownOnes) {
    using kubesandbox::local::ImageRoot;
    using kubesandbox::local::resolve_image;
    std::map<std::string, std::string> none;
    EXPECT_EQ(resolve_image(none, "python:3.12-slim")->kind, ImageRoot::Kind::host);
    EXPECT_EQ(resolve_image(none, "docker.io/library/busybox:1.36")->kind, ImageRoot::Kind::busybox);
    EXPECT_EQ(resolve_image(none, "ubuntu:24.04")->kind, ImageRoot::Kind::host);
    EXPECT_FALSE(resolve_image(none, "ghcr.io/acme/tool:1"));
    std::map<std::string, std::string> custom{{"ghcr.io/acme/*", "busybox"}, {"python:*", "/srv/py"}};
    EXPECT_EQ(resolve_image(custom, "ghcr.io/acme/tool:1")->kind, ImageRoot::Kind::busybox);
    EXPECT_EQ(resolve_image(custom, "python:3.12")->directory, "/srv/py");
}

TEST(KubeletPlan, ExecStatusShapes) {
    using kubesandbox::local::exec_exit_status;
    EXPECT_EQ(json::serialize(exec_exit_status(0, {"true"})), R"({"metadata":{},"status":"Success"})");
    EXPECT_EQ(
        json::serialize(exec_exit_status(3, {"sh", "-c", "exit 3"})),
        R"({"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}})");
}

TEST(KubeletPlan, ExecQueriesKeepTheirArgumentsInOrder) {
    auto q = kubesandbox::local::parse_exec_query(
        "/api/v1/namespaces/d/pods/p/exec?command=sh&command=-c&command=echo%20%22a%26b%22%3B%20%24HOME"
        "&command=&container=main&stdout=true&stderr=1&stdin=false&tty");
    EXPECT_EQ(q.command, (std::vector<std::string>{"sh", "-c", "echo \"a&b\"; $HOME", ""}));
    EXPECT_TRUE(q.has_container);
    EXPECT_EQ(q.container, "main");
    EXPECT_TRUE(q.out);
    EXPECT_TRUE(q.err);
    EXPECT_FALSE(q.in);
    EXPECT_TRUE(q.tty);  // present without a value: true, as the API server reads it
    auto none = kubesandbox::local::parse_exec_query("/exec?stdin=0");
    EXPECT_TRUE(none.command.empty());
    EXPECT_FALSE(none.has_container);
    EXPECT_FALSE(none.in || none.out || none.err || none.tty);
}

TEST(KubeletPlan, FrameSnifferSeesFragments) {
    kubesandbox::local::FrameSniffer whole, split;
    const unsigned char single[] = {0x82, 0x82, 1, 2, 3, 4, 0xaa, 0xbb};  // FIN binary, masked, 2 bytes
    whole.feed(single, 4);
    whole.feed(single + 4, 4);
    EXPECT_FALSE(whole.fragmented());
    const unsigned char first[] = {0x02, 0x81, 1, 2, 3, 4, 0xaa};  // no FIN
    split.feed(first, sizeof first);
    EXPECT_TRUE(split.fragmented());
}

TEST_F(KubeletTest, BusyboxPodRunsAndIsReady) {
    auto pod = running_pod("ready");
    EXPECT_EQ(condition(pod, "Ready"), "True");
    EXPECT_EQ(condition(pod, "ContainersReady"), "True");
    auto& cs = last(pod)->at("containerStatuses").as_array()[0].as_object();
    EXPECT_TRUE(cs.at("ready").as_bool());
    EXPECT_TRUE(cs.at("started").as_bool());
    EXPECT_EQ(cs.at("restartCount").as_int64(), 0);
    EXPECT_TRUE(cs.at("containerID").as_string().starts_with("local://"));
    EXPECT_TRUE(cs.at("state").at("running").as_object().contains("startedAt"));
}

TEST_F(KubeletTest, ExitZeroSucceeds) {
    auto pod = start(make_pod("ok", "busybox", json::array{"sh", "-c", "echo hello; exit 0"}, "Never"));
    ASSERT_TRUE(run_until([&] { return phase(pod) == "Succeeded"; }));
    auto& term = container_state(pod).at("terminated").as_object();
    EXPECT_EQ(term.at("exitCode").as_int64(), 0);
    EXPECT_EQ(term.at("reason").as_string(), "Completed");
    EXPECT_EQ(log_of(pod), "hello\n");
    EXPECT_EQ(condition(pod, "Ready"), "False");
}

TEST_F(KubeletTest, ExitThreeFailsWithNever) {
    auto pod = start(make_pod("bad", "busybox", json::array{"sh", "-c", "echo oops >&2; exit 3"}, "Never"));
    ASSERT_TRUE(run_until([&] { return phase(pod) == "Failed"; }));
    auto& term = container_state(pod).at("terminated").as_object();
    EXPECT_EQ(term.at("exitCode").as_int64(), 3);
    EXPECT_EQ(term.at("reason").as_string(), "Error");
    EXPECT_EQ(log_of(pod), "oops\n");
}

TEST_F(KubeletTest, RestartAlwaysGoesToCrashLoopBackOff) {
    auto pod = start(make_pod("crash", "busybox", json::array{"sh", "-c", "exit 1"}, "Always"));
    ASSERT_TRUE(run_until([&] { return waiting_reason(pod) == "CrashLoopBackOff"; }));
    EXPECT_EQ(phase(pod), "Running");
    ASSERT_TRUE(run_until([&] {
        auto* s = last(pod);
        return s && s->at("containerStatuses").as_array()[0].at("restartCount").as_int64() >= 1;
    }));
    auto& cs = last(pod)->at("containerStatuses").as_array()[0].as_object();
    EXPECT_EQ(cs.at("lastState").at("terminated").at("exitCode").as_int64(), 1);
}

TEST_F(KubeletTest, UnknownImageNeverRuns) {
    auto pod = start(make_pod("noimg", "registry.example/nope:1", json::array{"sleep", "infinity"}));
    ASSERT_TRUE(run_until([&] { return waiting_reason(pod) == "ErrImagePull"; }));
    auto* s = last(pod);
    EXPECT_NE(std::string(container_state(pod).at("waiting").at("message").as_string()).find("failed to pull"),
              std::string::npos);
    EXPECT_EQ(s->at("phase").as_string(), "Pending");
    ASSERT_TRUE(run_until([&] { return waiting_reason(pod) == "ImagePullBackOff"; }));
    EXPECT_EQ(phase(pod), "Pending");
    EXPECT_FALSE(fs::exists(dir_ / "pods" / uid_of(pod) / "container.log"));
}

TEST_F(KubeletTest, ActiveDeadlineKillsThePod) {
    auto raw = make_pod("deadline", "busybox", json::array{"sleep", "infinity"});
    raw["spec"].as_object()["activeDeadlineSeconds"] = 1;
    auto pod = start(raw);
    // Running may be reported right before Failed when the start takes most of the second: look
    // for it in every status written, not in the latest one.
    ASSERT_TRUE(run_until([&] { return phase(pod) == "Failed"; }, 8s));
    EXPECT_EQ(last(pod)->at("reason").as_string(), "DeadlineExceeded");
    const auto& written = statuses_[uid_of(pod)];
    EXPECT_TRUE(std::any_of(written.begin(), written.end(), [](const json::object& s) {
        return s.at("phase").as_string() == "Running";
    })) << "the container never ran before the deadline";
}

TEST_F(KubeletTest, DeletionTerminatesGracefully) {
    auto pod = running_pod("deleted");
    auto deleting = pod;
    deleting["metadata"].as_object()["deletionTimestamp"] = "2026-01-01T00:00:00Z";
    deleting["metadata"].as_object()["deletionGracePeriodSeconds"] = 5;
    kubelet_->pod_changed(deleting);
    // sleep dies of SIGTERM at once: well before the 5 s grace period.
    ASSERT_TRUE(run_until([&] { return container_state(pod).contains("terminated"); }, 3s));
    EXPECT_EQ(container_state(pod).at("terminated").at("exitCode").as_int64(), 128 + 15);
}

// A pod with nothing running (its image cannot be pulled) has nothing to wait for: deleting it
// ends it at once, not after its 30 s grace period.
TEST_F(KubeletTest, DeletingAPodThatNeverRanEndsItAtOnce) {
    auto pod = start(make_pod("never-ran", "registry.example/nope:1", json::array{"sleep", "infinity"}));
    ASSERT_TRUE(run_until([&] { return waiting_reason(pod) == "ErrImagePull"; }));
    auto deleting = pod;
    deleting["metadata"].as_object()["deletionTimestamp"] = "2026-01-01T00:00:00Z";
    deleting["metadata"].as_object()["deletionGracePeriodSeconds"] = 30;
    kubelet_->pod_changed(deleting);
    ASSERT_TRUE(run_until([&] { return phase(pod) == "Failed"; }, 3s));
}

TEST_F(KubeletTest, ExecSeparatesStdoutAndStderr) {
    auto pod = running_pod("exec1");
    auto r = exec(pod, {"sh", "-c", "echo out; echo err >&2; pwd; id -u"});
    EXPECT_EQ(r.protocol, "v5.channel.k8s.io");
    EXPECT_EQ(r.out, "out\n/workspace\n1000\n");
    EXPECT_EQ(r.err, "err\n");
    EXPECT_EQ(r.status, R"({"metadata":{},"status":"Success"})");
    EXPECT_EQ(r.close_code, 1000);
}

TEST_P(KubeletExecTest, ExecExitCodes) {
    auto pod = running_pod("exec2");
    EXPECT_EQ(exit_code(exec(pod, {"true"})), 0);
    EXPECT_EQ(exit_code(exec(pod, {"sh", "-c", "exit 1"})), 1);
    EXPECT_EQ(exit_code(exec(pod, {"sh", "-c", "exit 255"})), 255);
    auto missing = exec(pod, {"no-such-command"});
    EXPECT_EQ(exit_code(missing), 127);
    EXPECT_FALSE(missing.err.empty());
}

TEST_P(KubeletExecTest, ExecStdinWithV5Close) {
    auto pod = running_pod("exec3");
    std::string input(100000, 'x');
    input += "end\n";
    auto r = exec(pod, {"sh", "-c", "tee /tmp/in | wc -c; tail -c 4 /tmp/in"}, input);
    EXPECT_NE(r.out.find("100004\nend\n"), std::string::npos) << r.out;
    EXPECT_EQ(r.status, R"({"metadata":{},"status":"Success"})");
    auto r2 = exec(pod, {"cat"}, "hello stdin");
    EXPECT_EQ(r2.out, "hello stdin");
}

TEST_F(KubeletTest, ExecSharesThePodsProcesses) {
    auto pod = running_pod("exec4");
    auto r = exec(pod, {"sh", "-c", "sleep 4242 >/dev/null 2>&1 &"});
    EXPECT_EQ(r.status, R"({"metadata":{},"status":"Success"})");
    auto ps = exec(pod, {"ps"});
    EXPECT_NE(ps.out.find("sleep 4242"), std::string::npos) << ps.out;
    EXPECT_NE(ps.out.find("sleep infinity"), std::string::npos) << ps.out;
    auto files = exec(pod, {"sh", "-c", "echo hi > /workspace/f; cat /workspace/f"});
    EXPECT_EQ(files.out, "hi\n");
}

TEST_P(KubeletExecTest, ExecLeadsASessionOfItsOwn) {
    // As under runc: the command leads its own session and process group, so a client's
    // launcher needs no setsid and a timeout can kill the group whole.
    auto pod = running_pod("exec6");
    auto r = exec(pod, {"sh", "-c", "read -r _ _ _ _ pg sid _ < /proc/$$/stat; echo $$ $pg $sid"});
    std::istringstream in(r.out);
    long pid = 0, pg = -1, sid = -1;
    in >> pid >> pg >> sid;
    EXPECT_GT(pid, 1) << r.out;
    EXPECT_EQ(pg, pid) << r.out;
    EXPECT_EQ(sid, pid) << r.out;
}

TEST_F(KubeletTest, ExecStreamsLargeOutputExactly) {
    auto pod = running_pod("exec5");
    auto r = exec(pod, {"head", "-c", "20000000", "/dev/zero"}, {}, "&stdout=true&stderr=true", true);
    EXPECT_EQ(r.out_bytes, 20000000u);
    EXPECT_EQ(r.status, R"({"metadata":{},"status":"Success"})");
}

TEST_F(KubeletTest, ExecFailuresBeforeAndAfterUpgrade) {
    auto pod = running_pod("exec6");
    auto other = pod;
    other["spec"].as_object()["containers"].as_array()[0].as_object()["name"] = "side";
    auto bad = exec(other, {"true"});
    EXPECT_EQ(bad.http_status, 400u);
    EXPECT_NE(bad.http_body.find("container main is not valid for pod exec6"), std::string::npos) << bad.http_body;
    auto v4 = exec(pod, {"sh", "-c", "echo v4"}, {}, "&stdout=true", false, "v4.channel.k8s.io");
    EXPECT_EQ(v4.protocol, "v4.channel.k8s.io");
    EXPECT_EQ(v4.out, "v4\n");
    auto none = exec(pod, {"true"}, {}, "&stdout=true", false, "channel.k8s.io");
    EXPECT_EQ(none.http_status, 403u);
    // Not running: v5 upgrades, then reports an InternalError on channel 3.
    auto done = start(make_pod("exec7", "busybox", json::array{"true"}, "Never"));
    ASSERT_TRUE(run_until([&] { return phase(done) == "Succeeded"; }));
    auto late = exec(done, {"true"});
    EXPECT_NE(late.status.find("\"reason\":\"InternalError\""), std::string::npos) << late.status;
    EXPECT_NE(late.status.find("container not found (\\\"main\\\")"), std::string::npos) << late.status;
}

TEST_F(KubeletTest, ExecRejectsFragmentedMessages) {
    auto pod = running_pod("exec8");
    auto r = exec(pod, {"cat"}, std::string(8000, 'y'), "&stdout=true", false, "v5.channel.k8s.io", true);
    EXPECT_EQ(r.close_code, 1002);
}

TEST_P(KubeletExecTest, ExecEndsWhenThePodDies) {
    auto pod = running_pod("exec9");
    ExecResult r;
    bool started = false;
    asio::steady_timer killer(io_, 1s);
    killer.async_wait([&](boost::system::error_code) {
        started = true;
        kubelet_->pod_deleted(pod);
    });
    r = exec(pod, {"sleep", "1000"}, {}, "&stdout=true", false, "v5.channel.k8s.io", false, 10s);
    EXPECT_TRUE(started);
    EXPECT_TRUE(r.done);
    EXPECT_EQ(exit_code(r), 137);
}

// The reactor's readiness reports can be spurious. One way to make them: a socket Asio opened
// (not close-on-exec) is closed while a child process still holds a copy, so its epoll
// registration stays behind and its events reach whichever descriptor reuses the slot. A
// wake-up of a pod's exit wait must not be taken for the container's exit.
TEST_F(KubeletTest, StaleEpollRegistrationsDoNotEndARunningPod) {
    tcp::acceptor listener(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    listener.listen();
    std::vector<tcp::socket> clients, servers;
    for (int i = 0; i < 8; ++i) {
        clients.emplace_back(io_);
        clients.back().connect(listener.local_endpoint());
        servers.push_back(listener.accept());
        // Registered with the reactor, as every socket a server reads from is.
        clients.back().async_wait(tcp::socket::wait_read, [](boost::system::error_code) {});
    }
    // The child inherits every descriptor and keeps them open while it sleeps.
    pid_t child = -1;
    char sleep_arg[] = "sleep", seconds[] = "5";
    char* argv[] = {sleep_arg, seconds, nullptr};
    ASSERT_EQ(::posix_spawnp(&child, "sleep", nullptr, nullptr, argv, environ), 0);
    for (auto& c : clients) c.close();  // still open in the child: registrations stay behind
    io_.restart();
    io_.poll();
    auto pod = start(make_pod("stale", "busybox", json::array{"sleep", "3600"}, "Never"));
    EXPECT_TRUE(run_until([&] { return running(pod); }));
    // Data for the closed sockets: events for registrations whose slots are now the pod's.
    for (auto& s : servers) {
        boost::system::error_code ec;
        asio::write(s, asio::buffer("x", 1), ec);
    }
    run_until([] { return false; }, 500ms);
    EXPECT_TRUE(running(pod)) << json::serialize(*last(pod));
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
}

std::vector<int> processes_mentioning(const std::string& needle) {
    std::vector<int> pids;
    for (const auto& p : kubesandbox::test::processes())
        if (p.cmdline.find(needle) != std::string::npos) pids.push_back(p.pid);
    return pids;
}

TEST_F(KubeletTest, ShutdownLeavesNoProcess) {
    auto a = start(make_pod("sd1", "busybox", json::array{"sleep", "98765"}));
    auto b = start(make_pod("sd2", "python:3.12", json::array{"sleep", "98766"}));
    ASSERT_TRUE(run_until([&] { return running(a) && running(b); }));
    auto r = exec(a, {"sh", "-c", "sleep 98767 >/dev/null 2>&1 &"});
    EXPECT_EQ(r.status, R"({"metadata":{},"status":"Success"})");
    std::string needle = dir_.string();
    EXPECT_GE(processes_mentioning(needle).size(), 2u);
    EXPECT_GE(processes_mentioning(std::string("98765")).size(), 1u);
    kubelet_->shutdown();
    for (const char* n : {"98765", "98766", "98767"}) {
        EXPECT_TRUE(processes_mentioning(n).empty()) << n;
    }
    EXPECT_TRUE(processes_mentioning(needle).empty());
}

// Spawners this test's kubelet started (their parent is this process).
std::size_t own_spawners() {
    const std::string serving("\0--serve\0", 9);
    std::size_t n = 0;
    for (const auto& p : kubesandbox::test::processes()) {
        if (p.zombie || p.cmdline.find(serving) == std::string::npos) continue;
        std::string stat = kubesandbox::test::read_proc_file(p.pid, "stat");
        auto close_paren = stat.rfind(')');
        if (close_paren == std::string::npos) continue;
        std::istringstream rest(stat.substr(close_paren + 2));
        std::string state;
        pid_t parent = 0;
        rest >> state >> parent;
        if (parent == ::getpid()) ++n;
    }
    return n;
}

// Execs start from one spawner per pod (kubesandbox-enter --serve), outside the pod's pid
// namespace: the command's parent is invisible to it. The spawner ends with its pod.
TEST_F(KubeletTest, ExecsStartFromOneSpawnerPerPod) {
    EXPECT_EQ(own_spawners(), 0u);
    auto pod = running_pod("spawned");
    for (int i = 0; i < 3; ++i) {
        auto r = exec(pod, {"sh", "-c", "grep PPid /proc/$$/status; exit " + std::to_string(i)});
        EXPECT_EQ(r.out, "PPid:\t0\n") << r.err;
        EXPECT_EQ(exit_code(r), i);
    }
    EXPECT_EQ(own_spawners(), 1u);
    kubelet_->pod_deleted(pod);
    EXPECT_TRUE(run_until([&] { return own_spawners() == 0; }, 10s));
}

std::size_t open_descriptors() {
    std::size_t n = 0;
    for ([[maybe_unused]] const auto& entry : fs::directory_iterator("/proc/self/fd")) ++n;
    return n;
}

// The client breaks the protocol (a fragmented message) while its command runs on silently: the
// session ends at once and lets go of its connection and pipes, and the command runs on, as
// under a real kubelet, until a client kills it.
TEST_P(KubeletExecTest, ASessionWhoseClientIsGoneEndsWhileItsCommandRunsOn) {
    auto pod = running_pod("abandoned");
    EXPECT_EQ(exec(pod, {"true"}).status, R"({"metadata":{},"status":"Success"})");
    const std::size_t before = open_descriptors();
    auto r = exec(pod, {"sleep", "4343"}, std::string(8000, 'y'), "&stdout=true", false, "v5.channel.k8s.io", true);
    EXPECT_EQ(r.close_code, 1002);
    EXPECT_TRUE(run_until([&] { return open_descriptors() <= before; }, 5s))
        << open_descriptors() << " descriptors open, " << before << " before";
    EXPECT_NE(exec(pod, {"ps"}).out.find("sleep 4343"), std::string::npos);
}

TEST_F(KubeletTest, LogsFollowUntilThePodEnds) {
    auto pod = start(make_pod("logs", "busybox",
                              json::array{"sh", "-c", "for i in 1 2 3; do echo line$i; sleep 0.3; done"}, "Never"));
    ASSERT_TRUE(run_until([&] { return running(pod); }));
    tcp::acceptor acceptor(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    auto fetch = [&](std::string query) {
        std::string body;
        bool done = false;
        asio::co_spawn(
            io_,
            [&]() -> asio::awaitable<void> {
                auto [ec, sock] = co_await acceptor.async_accept(tuple_awaitable);
                if (ec) co_return;
                http::request<http::string_body> req{http::verb::get,
                                                     "/api/v1/namespaces/default/pods/logs/log" + query, 11};
                StreamRequest sr{kubesandbox::net::AnyStream::tcp(std::move(sock)), {}, std::move(req), pod};
                co_await kubelet_->serve_log(std::move(sr));
            },
            asio::detached);
        asio::co_spawn(
            io_,
            [&]() -> asio::awaitable<void> {
                tcp::socket s(io_);
                co_await s.async_connect(acceptor.local_endpoint(), tuple_awaitable);
                beast::flat_buffer buf;
                http::response<http::string_body> res;
                auto [ec, n] = co_await http::async_read(s, buf, res, tuple_awaitable);
                if (!ec) body = res.body();
                done = true;
            },
            asio::detached);
        EXPECT_TRUE(run_until([&] { return done; }, 10s));
        return body;
    };
    EXPECT_EQ(fetch("?follow=true"), "line1\nline2\nline3\n");
    EXPECT_EQ(fetch("?tailLines=1"), "line3\n");
}

// The exec tests marked TEST_P here and in kubelet_isolation_test.cpp.
INSTANTIATE_TEST_SUITE_P(BothWays, KubeletExecTest, ::testing::Bool(), exec_way);

}  // namespace
}  // namespace kubelet_test
