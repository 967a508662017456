// The local kubelet's confinement of pods and of the commands exec'd into them: subPath,
// seccomp and capabilities, namespaces, host sockets, local storage, memory and pids limits.
#include "local/kubelet_fixture.hpp"

#include <cstdlib>

namespace kubelet_test {
namespace {

using namespace std::chrono_literals;

// A pod replaces a subPath directory of its own volume with a symlink to a host folder and
// crashes: the restarted container must not get the host folder bound in.
TEST_F(KubeletTest, SubPathRefusesSymlinksThePodPlanted) {
    auto raw = make_pod(
        "subpath", "busybox",
        json::array{"sh", "-c", "test -e /sub/from-host && exit 0; rm -rf /data/x; ln -s /etc /data/x; exit 1"},
        "Always");
    auto& spec = raw["spec"].as_object();
    spec["volumes"] = json::array{json::object{{"name", "data"}, {"emptyDir", json::object{}}}};
    spec["containers"].as_array()[0].as_object()["volumeMounts"] =
        json::array{json::object{{"name", "data"}, {"mountPath", "/data"}},
                    json::object{{"name", "data"}, {"mountPath", "/sub"}, {"subPath", "x"}}};
    auto pod = start(raw);
    auto cannot_run = [&]() -> const json::object* {
        auto* s = last(pod);
        if (!s) return nullptr;
        auto& cs = s->at("containerStatuses").as_array()[0].as_object();
        auto* term = cs.contains("lastState") ? cs.at("lastState").as_object().if_contains("terminated") : nullptr;
        return term && term->at("reason").as_string() == "ContainerCannotRun" ? &term->as_object() : nullptr;
    };
    ASSERT_TRUE(run_until([&] { return cannot_run() != nullptr; }, 15s)) << log_of(pod);
    std::string message(cannot_run()->at("message").as_string());
    EXPECT_NE(message.find("x is a symbolic link"), std::string::npos) << message;
    EXPECT_NE(phase(pod), "Succeeded");
}

// A command exec'd into a pod gets the pod's confinement: no controlling terminal, no nested
// user namespace.
TEST_P(KubeletExecTest, ExecdCommandsAreConfinedLikeThePod) {
    auto pod = running_pod("exec-confined");
    auto r = exec(pod, {"sh", "-c",
                        "unshare -U true 2>/dev/null && echo LEAK-userns; "
                        "(: < /dev/tty) 2>/dev/null && echo LEAK-tty; echo checked"});
    EXPECT_EQ(r.out, "checked\n") << r.err;
}

// A pod's processes and the commands exec'd into it run under the runtime-default seccomp
// filter with the pod's capabilities: none, even for uid 0 (entering the pod's user namespace
// used to hand exec'd commands every capability in it), and no_new_privs.
TEST_P(KubeletExecTest, ExecdCommandsGetThePodsSeccompFilterAndCapabilities) {
    const char* status_lines = "grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status";
    const std::string confined = "CapEff:\t0000000000000000\nCapBnd:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\n";
    for (auto [image, uid] : {std::pair<const char*, int>{"busybox", 1000}, {"ubuntu:24.04", 0}}) {
        SCOPED_TRACE(image);
        auto pod = start(make_pod(std::string("filtered-") + std::to_string(uid), image,
                                  json::array{"sh", "-c", std::string(status_lines) + "; exec sleep infinity"},
                                  "Always", uid));
        ASSERT_TRUE(run_until([&] { return running(pod); }, 20s)) << log_of(pod);
        ASSERT_TRUE(run_until([&] { return log_of(pod).find("Seccomp") != std::string::npos; }, 5s));
        EXPECT_EQ(log_of(pod), confined);
        auto r = exec(pod, {"sh", "-c", status_lines});
        EXPECT_EQ(r.out, confined) << r.err;
        // What the filter and the missing capabilities refuse, as root too.
        auto refused = exec(pod, {"sh", "-c",
                                  "mkdir -p /tmp/m; mount -t tmpfs none /tmp/m 2>/dev/null && echo LEAK-mount; "
                                  "unshare -n true 2>/dev/null && echo LEAK-unshare; "
                                  "echo checked"});
        EXPECT_EQ(refused.out, "checked\n") << refused.err;
        EXPECT_EQ(exec(pod, {"id", "-u"}).out, std::to_string(uid) + "\n");
        // No supplementary group of whoever runs the cluster (root's, when run as root).
        EXPECT_EQ(exec(pod, {"id", "-G"}).out, std::to_string(uid) + "\n");
    }
}

// seccompProfile Unconfined, as a real kubelet takes it: no filter, for exec'd commands too.
TEST_F(KubeletTest, AnUnconfinedSeccompProfileLoadsNoFilter) {
    auto raw = make_pod("unconfined", "busybox", json::array{"sleep", "infinity"});
    raw["spec"].as_object()["securityContext"] = json::object{{"seccompProfile", json::object{{"type", "Unconfined"}}}};
    auto pod = start(raw);
    ASSERT_TRUE(run_until([&] { return running(pod); }, 20s)) << log_of(pod);
    EXPECT_EQ(exec(pod, {"grep", "^Seccomp:", "/proc/self/status"}).out, "Seccomp:\t0\n");
    EXPECT_EQ(exec(pod, {"grep", "^Seccomp:", "/proc/1/status"}).out, "Seccomp:\t0\n");
}

// Local ephemeral storage, as a kubelet's eviction manager enforces it: a pod writing past an
// emptyDir's sizeLimit or its containers' ephemeral-storage limit is evicted at once (Failed,
// Evicted, the kubelet's message, a DisruptionTarget condition); one below its limits runs on.
TEST_F(KubeletTest, LocalStorageLimitsEvictThePod) {
    auto writer = [&](const std::string& name, const std::string& target, int mebibytes) {
        return make_pod(name, "busybox",
                        json::array{"sh", "-c",
                                    "dd if=/dev/urandom of=" + target + " bs=1048576 count=" +
                                        std::to_string(mebibytes) + " 2>/dev/null; sleep infinity"});
    };
    auto with_volume = [](json::object pod, json::object empty_dir) {
        auto& spec = pod["spec"].as_object();
        spec["volumes"] = json::array{json::object{{"name", "data"}, {"emptyDir", std::move(empty_dir)}}};
        spec["containers"].as_array()[0].as_object()["volumeMounts"] =
            json::array{json::object{{"name", "data"}, {"mountPath", "/data"}}};
        return pod;
    };
    auto with_limit = [](json::object pod, const char* quantity) {
        pod["spec"].as_object()["containers"].as_array()[0].as_object()["resources"] =
            json::object{{"limits", json::object{{"ephemeral-storage", quantity}}}};
        return pod;
    };
    auto volume = start(with_volume(writer("volume-full", "/data/f", 4), json::object{{"sizeLimit", "1Mi"}}));
    auto pod_limit = start(with_limit(writer("workspace-full", "/workspace/f", 4), "2Mi"));
    auto within =
        start(with_limit(with_volume(writer("within", "/data/f", 1), json::object{{"sizeLimit", "8Mi"}}), "8Mi"));
    auto evicted = [&](const json::object& pod) {
        auto* s = last(pod);
        return s && phase(pod) == "Failed" && s->contains("reason") && s->at("reason").as_string() == "Evicted";
    };
    ASSERT_TRUE(run_until([&] { return evicted(volume) && evicted(pod_limit); }, 20s))
        << phase(volume) << " " << phase(pod_limit) << " " << log_of(volume);
    EXPECT_EQ(last(volume)->at("message").as_string(), "Usage of EmptyDir volume \"data\" exceeds the limit \"1Mi\". ");
    EXPECT_EQ(last(pod_limit)->at("message").as_string(),
              "Pod ephemeral local storage usage exceeds the total limit of containers 2Mi. ");
    for (const auto* pod : {&volume, &pod_limit}) {
        EXPECT_EQ(container_state(*pod).at("terminated").at("exitCode").as_int64(), 137);
        bool marked = false;
        for (const auto& c : last(*pod)->at("conditions").as_array())
            if (c.at("type") == "DisruptionTarget" && c.at("status") == "True" &&
                c.at("reason") == "TerminationByKubelet")
                marked = true;
        EXPECT_TRUE(marked) << json::serialize(*last(*pod));
    }
    // Several checks later the pod below its limits still runs.
    run_until([] { return false; }, 1s);
    EXPECT_TRUE(running(within)) << phase(within);
}

// resources.limits are enforced where cgroups can be written (CI runs as root: they must be).
bool limits_enforced(Kubelet& k) {
    if (!k.limits_mode().empty()) return true;
    if (std::getenv("KUBESANDBOX_REQUIRE_ISOLATION"))
        ADD_FAILURE() << "resources.limits are not enforced: " << k.limits_problem();
    return false;
}

// A container that allocates past resources.limits.memory is killed by the kernel and reported
// as a kubelet does: OOMKilled, exit code 137.
TEST_F(KubeletTest, MemoryLimitEndsInOomKilled) {
    if (!limits_enforced(*kubelet_)) GTEST_SKIP() << kubelet_->limits_problem();
    auto raw =
        make_pod("oom", "busybox", json::array{"sh", "-c", "dd if=/dev/zero of=/dev/null bs=64M count=1"}, "Never");
    raw["spec"].as_object()["containers"].as_array()[0].as_object()["resources"] =
        json::object{{"limits", json::object{{"memory", "16Mi"}}}};
    auto pod = start(raw);
    ASSERT_TRUE(run_until([&] { return phase(pod) == "Failed"; }, 20s)) << log_of(pod);
    auto& term = container_state(pod).at("terminated").as_object();
    EXPECT_EQ(term.at("exitCode").as_int64(), 137);
    EXPECT_EQ(term.at("reason").as_string(), "OOMKilled");
    // The same allocation fits without the limit.
    auto ok = start(
        make_pod("no-oom", "busybox", json::array{"sh", "-c", "dd if=/dev/zero of=/dev/null bs=64M count=1"}, "Never"));
    ASSERT_TRUE(run_until([&] { return phase(ok) == "Succeeded"; }, 20s)) << log_of(ok);
}

// An exec'd command is inside the pod's cgroups: the same cgroup as the pod's process, and its
// memory limit ends a command that allocates past it.
TEST_P(KubeletExecTest, ExecdCommandsCountAgainstThePodsLimits) {
    if (!limits_enforced(*kubelet_)) GTEST_SKIP() << kubelet_->limits_problem();
    auto raw = make_pod("exec-limited", "busybox", json::array{"sleep", "infinity"});
    raw["spec"].as_object()["containers"].as_array()[0].as_object()["resources"] =
        json::object{{"limits", json::object{{"memory", "16Mi"}}}};
    auto pod = start(raw);
    ASSERT_TRUE(run_until([&] { return running(pod); }, 20s)) << log_of(pod);
    auto groups = exec(pod, {"sh", "-c", "cat /proc/self/cgroup; echo --; cat /proc/2/cgroup"});
    auto split = groups.out.find("--\n");
    ASSERT_NE(split, std::string::npos) << groups.out << groups.err;
    EXPECT_GT(split, 0u);
    EXPECT_EQ(groups.out.substr(0, split), groups.out.substr(split + 3));
    EXPECT_EQ(exit_code(exec(pod, {"dd", "if=/dev/zero", "of=/dev/null", "bs=64M", "count=1"})), 137);
    EXPECT_EQ(exit_code(exec(pod, {"dd", "if=/dev/zero", "of=/dev/null", "bs=4M", "count=1"})), 0);
}

// A fork loop stops at the pod's pids limit (busybox sh gives up at the first failed fork);
// a neighbour pod keeps answering meanwhile.
TEST_F(KubeletTest, AForkLoopIsBoundedByThePidsLimit) {
    if (!limits_enforced(*kubelet_)) GTEST_SKIP() << kubelet_->limits_problem();
    auto neighbour = running_pod("neighbour");
    auto loop = start(make_pod(
        "forks", "busybox",
        json::array{"sh", "-c", "i=0; while [ $i -lt 1000 ]; do sleep 1000 & i=$((i+1)); echo $i; done"}, "Never"));
    ASSERT_TRUE(run_until([&] { return phase(loop) == "Failed" || phase(loop) == "Succeeded"; }, 30s));
    EXPECT_EQ(phase(loop), "Failed") << "1000 forks fitted in a limit of 128";
    std::string log = log_of(loop);
    EXPECT_NE(log.find("can't fork"), std::string::npos) << log.substr(0, 300);
    // The last number printed is how many sleeps were started.
    int started = 0;
    std::istringstream lines(log);
    for (std::string line; std::getline(lines, line);)
        if (!line.empty() && std::isdigit(static_cast<unsigned char>(line[0]))) started = std::stoi(line);
    EXPECT_LE(started, 128);
    EXPECT_GE(started, 100) << "the loop should have filled the limit";
    auto r = exec(neighbour, {"sh", "-c", "echo alive"});
    EXPECT_EQ(r.out, "alive\n");
}

// Each check prints "ok <name>" when the pod is confined, "LEAK <name>" when it is not.
constexpr const char* kIsolationScript = R"SH(
check() { name=$1; shift; if "$@" >/dev/null 2>&1; then echo "LEAK $name"; else echo "ok $name"; fi; }
nonempty() { test -n "$(ls -A "$1" 2>/dev/null)"; }
check root nonempty /root/
check work nonempty /work/
check home nonempty /home/
check tmp-host test -e /tmp/kubelet-isolation-marker
check write-usr touch /usr/x
check write-etc touch /etc/x
check shadow cat /etc/shadow
check net nc -w 2 127.0.0.1 $PORT
check signal kill -0 $HOSTPID
check userns unshare -U true
n=$(ls -d /proc/[0-9]* | wc -l); if [ "$n" -le 5 ]; then echo "ok ps"; else echo "LEAK ps $n"; fi
echo > /workspace/written && echo "ok workspace-writable"
echo done
)SH";

void expect_confined(const std::string& log) {
    for (const char* name : {"root", "work", "home", "tmp-host", "write-usr", "write-etc", "shadow", "net", "signal",
                             "userns", "ps", "workspace-writable"}) {
        EXPECT_NE(log.find(std::string("ok ") + name + "\n"), std::string::npos) << name << " in:\n" << log;
    }
    EXPECT_EQ(log.find("LEAK"), std::string::npos) << log;
    EXPECT_NE(log.find("done"), std::string::npos) << log;
}

TEST_F(KubeletTest, PodsAreConfined) {
    // A host listener the pod must not reach, a host file it must not see.
    tcp::acceptor listener(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    listener.listen();
    std::ofstream("/tmp/kubelet-isolation-marker") << "x";
    int accepted = 0;
    listener.async_accept([&](boost::system::error_code ec, tcp::socket) {
        if (!ec) ++accepted;
    });
    for (auto [image, uid] :
         {std::pair<const char*, int>{"busybox", 1000}, {"python:3.12", 1000}, {"ubuntu:24.04", 0}}) {
        auto raw = make_pod(std::string("iso-") + std::to_string(uid), image,
                            json::array{"/bin/sh", "-c", kIsolationScript}, "Never", uid);
        auto& env = raw["spec"].as_object()["containers"].as_array()[0].as_object()["env"] =
            json::array{json::object{{"name", "PORT"}, {"value", std::to_string(listener.local_endpoint().port())}},
                        json::object{{"name", "HOSTPID"}, {"value", std::to_string(::getpid())}}};
        (void)env;
        if (std::string(image) != "busybox") {
            // Debian has no nc: use bash's /dev/tcp through a tiny shim on PATH-less sh.
            auto& cmd = raw["spec"].as_object()["containers"].as_array()[0].as_object()["command"].as_array();
            cmd[2] = std::string("nc() { timeout 3 bash -c \"echo > /dev/tcp/$3/$4\"; }\n") + kIsolationScript;
        }
        auto pod = start(raw);
        ASSERT_TRUE(run_until(
            [&] {
                auto p = phase(pod);
                return p == "Succeeded" || p == "Failed";
            },
            20s))
            << image;
        SCOPED_TRACE(image);
        expect_confined(log_of(pod));
    }
    EXPECT_EQ(accepted, 0) << "a pod reached a host TCP listener";
    fs::remove("/tmp/kubelet-isolation-marker");
}

// Asio's sockets are not close-on-exec: pods and execs must not inherit the host's sockets.
TEST_F(KubeletTest, PodsInheritNoHostSockets) {
    tcp::acceptor listener(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    listener.listen();
    tcp::socket client(io_);
    client.connect(listener.local_endpoint());
    auto pod = running_pod("fds");
    auto r = exec(pod, {"sh", "-c", "for p in /proc/[0-9]*; do ls -l $p/fd/ 2>/dev/null; done | grep -c socket:"});
    EXPECT_EQ(r.out, "0\n") << r.err;
}

}  // namespace
}  // namespace kubelet_test
