// The local kubelet on its own (no API server): real bubblewrap pods, real processes, exec over
// a real loopback WebSocket, logs over a real HTTP connection.
#include "local/kubelet.hpp"
#include "local/kubelet_plan.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/json.hpp>

#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>
#include <thread>

#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

extern char** environ;

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace json = boost::json;
namespace fs = std::filesystem;
using asio::ip::tcp;
using namespace std::chrono_literals;
using kubesandbox::local::Kubelet;
using kubesandbox::local::KubeletOptions;
using kubesandbox::local::StreamRequest;

constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);

std::string random_uid() {
    static std::mt19937_64 rng{std::random_device{}()};
    char buf[40];
    std::snprintf(buf, sizeof buf, "%08llx-test-%012llx", static_cast<unsigned long long>(rng() & 0xffffffff),
                  static_cast<unsigned long long>(rng() & 0xffffffffffffULL));
    return buf;
}

json::object make_pod(const std::string& name, const std::string& image, json::array command,
                      const std::string& restart_policy = "Always", std::int64_t uid = 1000) {
    json::object container{{"name", "main"},
                           {"image", image},
                           {"command", std::move(command)},
                           {"workingDir", "/workspace"},
                           {"securityContext", json::object{{"runAsUser", uid}, {"runAsGroup", uid}}}};
    return json::object{{"metadata", json::object{{"name", name}, {"namespace", "default"}, {"uid", random_uid()}}},
                        {"spec", json::object{{"containers", json::array{container}},
                                              {"restartPolicy", restart_policy},
                                              {"nodeName", "local"},
                                              {"terminationGracePeriodSeconds", 2}}},
                        {"status", json::object{{"phase", "Pending"}}}};
}

std::string uid_of(const json::object& pod) { return std::string(pod.at("metadata").at("uid").as_string()); }

class KubeletTest : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("kubelet-test-" + random_uid());
        fs::create_directories(dir_);
        KubeletOptions options;
        options.data_dir = dir_;
        options.pod_pids_limit = 128;  // small enough for a fork loop to hit quickly
        options.storage_check_interval = 200ms;
        kubelet_ =
            std::make_unique<Kubelet>(io_.get_executor(), options,
                                      [this](const std::string&, const std::string&, const std::string& uid,
                                             json::object status) { statuses_[uid].push_back(std::move(status)); });
        ASSERT_TRUE(kubelet_->isolation_available()) << kubelet_->isolation_problem();
    }
    void TearDown() override {
        kubelet_->shutdown();
        kubelet_.reset();
        io_.restart();
        io_.poll();
        std::error_code ec;
        fs::remove_all(dir_, ec);
    }

    // Runs the io_context until `pred` holds or `timeout` passes.
    bool run_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout = 10s) {
        auto deadline = std::chrono::steady_clock::now() + timeout;
        while (!pred()) {
            if (std::chrono::steady_clock::now() > deadline) return false;
            io_.restart();
            io_.run_for(20ms);
        }
        return true;
    }

    const json::object* last(const json::object& pod) {
        auto it = statuses_.find(uid_of(pod));
        if (it == statuses_.end() || it->second.empty()) return nullptr;
        return &it->second.back();
    }
    std::string phase(const json::object& pod) {
        auto* s = last(pod);
        return s ? std::string(s->at("phase").as_string()) : "";
    }
    const json::object& container_state(const json::object& pod) {
        return last(pod)->at("containerStatuses").as_array()[0].as_object().at("state").as_object();
    }
    bool running(const json::object& pod) {
        auto* s = last(pod);
        return s && phase(pod) == "Running" && container_state(pod).contains("running");
    }
    std::string waiting_reason(const json::object& pod) {
        auto* s = last(pod);
        if (!s) return "";
        auto& st = container_state(pod);
        if (!st.contains("waiting")) return "";
        return std::string(st.at("waiting").at("reason").as_string());
    }
    std::string condition(const json::object& pod, const std::string& type) {
        for (auto& c : last(pod)->at("conditions").as_array()) {
            if (c.at("type").as_string() == type) return std::string(c.at("status").as_string());
        }
        return "";
    }
    std::string log_of(const json::object& pod) {
        std::ifstream in(dir_ / "pods" / uid_of(pod) / "container.log");
        return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    }
    json::object start(json::object pod) {
        kubelet_->pod_changed(pod);
        return pod;
    }

    // ---- exec over a real WebSocket ----
    struct ExecResult {
        std::string out, err, status;
        std::size_t out_bytes = 0;
        std::string protocol;
        unsigned http_status = 0;
        std::string http_body;
        int close_code = -1;
        bool done = false;
    };

    asio::awaitable<void> exec_client(tcp::endpoint ep, std::string target, std::string protocols, std::string input,
                                      bool count_only, bool fragment, ExecResult& r) {
        websocket::stream<tcp::socket> ws(co_await asio::this_coro::executor);
        auto [cec] = co_await ws.next_layer().async_connect(ep, tuple_awaitable);
        if (cec) co_return;
        ws.set_option(websocket::stream_base::decorator(
            [protocols](websocket::request_type& req) { req.set(http::field::sec_websocket_protocol, protocols); }));
        ws.auto_fragment(fragment);
        if (fragment) ws.write_buffer_bytes(1024);
        ws.binary(true);
        websocket::response_type res;
        auto [hec] = co_await ws.async_handshake(res, "127.0.0.1", target, tuple_awaitable);
        r.http_status = res.result_int();
        r.http_body = res.body();
        if (hec) {
            r.done = true;
            co_return;
        }
        r.protocol = std::string(res[http::field::sec_websocket_protocol]);
        if (!input.empty() || fragment) {
            std::string msg = std::string(1, '\0') + input;
            co_await ws.async_write(asio::buffer(msg), tuple_awaitable);
            if (!fragment) {
                const unsigned char close_stdin[2] = {0xff, 0x00};
                co_await ws.async_write(asio::buffer(close_stdin, 2), tuple_awaitable);
            }
        }
        beast::flat_buffer buf;
        for (;;) {
            auto [ec, n] = co_await ws.async_read(buf, tuple_awaitable);
            if (ec) {
                r.close_code = ws.reason().code;
                break;
            }
            auto* d = static_cast<const char*>(buf.data().data());
            if (n > 0) {
                if (d[0] == 1) {
                    r.out_bytes += n - 1;
                    if (!count_only) r.out.append(d + 1, n - 1);
                } else if (d[0] == 2) {
                    r.err.append(d + 1, n - 1);
                } else if (d[0] == 3) {
                    r.status.append(d + 1, n - 1);
                }
            }
            buf.consume(buf.size());
        }
        r.done = true;
    }

    ExecResult exec(const json::object& pod, std::vector<std::string> argv, std::string input = {},
                    std::string extra = "&stdout=true&stderr=true", bool count_only = false,
                    std::string protocols = "v5.channel.k8s.io", bool fragment = false,
                    std::chrono::milliseconds timeout = 20s) {
        tcp::acceptor acceptor(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
        std::string target =
            "/api/v1/namespaces/default/pods/" + std::string(pod.at("metadata").at("name").as_string()) + "/exec?";
        for (auto& a : argv) {
            std::string enc;
            for (unsigned char c : a) {
                if (std::isalnum(c) || c == '-' || c == '_' || c == '.') {
                    enc += static_cast<char>(c);
                } else {
                    char b[4];
                    std::snprintf(b, sizeof b, "%%%02X", c);
                    enc += b;
                }
            }
            target += "command=" + enc + "&";
        }
        target += "container=main" + (input.empty() && !fragment ? extra : extra + "&stdin=true");
        ExecResult r;
        // Server side: accept, read the request head, hand everything to the kubelet.
        asio::co_spawn(
            io_,
            [&]() -> asio::awaitable<void> {
                auto [ec, sock] = co_await acceptor.async_accept(tuple_awaitable);
                if (ec) co_return;
                beast::flat_buffer buf;
                http::request<http::string_body> req;
                auto [rec, n] = co_await http::async_read(sock, buf, req, tuple_awaitable);
                if (rec) co_return;
                StreamRequest sr{kubesandbox::net::AnyStream::tcp(std::move(sock)), std::move(buf), std::move(req),
                                 pod};
                co_await kubelet_->serve_exec(std::move(sr));
            },
            asio::detached);
        asio::co_spawn(io_, exec_client(acceptor.local_endpoint(), target, protocols, input, count_only, fragment, r),
                       asio::detached);
        EXPECT_TRUE(run_until([&] { return r.done; }, timeout)) << "exec did not finish";
        return r;
    }

    static int exit_code(const ExecResult& r) {
        auto v = json::parse(r.status).as_object();
        if (v.at("status").as_string() == "Success") return 0;
        EXPECT_EQ(v.at("reason").as_string(), "NonZeroExitCode") << r.status;
        return std::stoi(std::string(v.at("details").at("causes").as_array()[0].at("message").as_string()));
    }

    json::object running_pod(const std::string& name, const std::string& image = "busybox:1.36",
                             std::int64_t uid = 1000) {
        auto pod = start(make_pod(name, image, json::array{"sleep", "infinity"}, "Always", uid));
        EXPECT_TRUE(run_until([&] { return running(pod); })) << "pod did not start; log: " << log_of(pod);
        return pod;
    }

    asio::io_context io_;
    fs::path dir_;
    std::unique_ptr<Kubelet> kubelet_;
    std::map<std::string, std::vector<json::object>> statuses_;
};

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
    ASSERT_TRUE(run_until([&] { return running(pod); }));
    ASSERT_TRUE(run_until([&] { return phase(pod) == "Failed"; }, 6s));
    EXPECT_EQ(last(pod)->at("reason").as_string(), "DeadlineExceeded");
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
TEST_F(KubeletTest, ExecdCommandsAreConfinedLikeThePod) {
    auto pod = running_pod("exec-confined");
    auto r = exec(pod, {"sh", "-c",
                        "unshare -U true 2>/dev/null && echo LEAK-userns; "
                        "(: < /dev/tty) 2>/dev/null && echo LEAK-tty; echo checked"});
    EXPECT_EQ(r.out, "checked\n") << r.err;
}

// A pod's processes and the commands exec'd into it run under the runtime-default seccomp
// filter with the pod's capabilities: none, even for uid 0 (entering the pod's user namespace
// used to hand exec'd commands every capability in it), and no_new_privs.
TEST_F(KubeletTest, ExecdCommandsGetThePodsSeccompFilterAndCapabilities) {
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
TEST_F(KubeletTest, ExecdCommandsCountAgainstThePodsLimits) {
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
    for (auto& e : fs::directory_iterator("/proc")) {
        auto name = e.path().filename().string();
        if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
        std::ifstream in(e.path() / "cmdline");
        std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        if (cmd.find(needle) != std::string::npos) pids.push_back(std::stoi(name));
    }
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

TEST_F(KubeletTest, ExecSeparatesStdoutAndStderr) {
    auto pod = running_pod("exec1");
    auto r = exec(pod, {"sh", "-c", "echo out; echo err >&2; pwd; id -u"});
    EXPECT_EQ(r.protocol, "v5.channel.k8s.io");
    EXPECT_EQ(r.out, "out\n/workspace\n1000\n");
    EXPECT_EQ(r.err, "err\n");
    EXPECT_EQ(r.status, R"({"metadata":{},"status":"Success"})");
    EXPECT_EQ(r.close_code, 1000);
}

TEST_F(KubeletTest, ExecExitCodes) {
    auto pod = running_pod("exec2");
    EXPECT_EQ(exit_code(exec(pod, {"true"})), 0);
    EXPECT_EQ(exit_code(exec(pod, {"sh", "-c", "exit 1"})), 1);
    EXPECT_EQ(exit_code(exec(pod, {"sh", "-c", "exit 255"})), 255);
    auto missing = exec(pod, {"no-such-command"});
    EXPECT_EQ(exit_code(missing), 127);
    EXPECT_FALSE(missing.err.empty());
}

TEST_F(KubeletTest, ExecStdinWithV5Close) {
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

TEST_F(KubeletTest, ExecEndsWhenThePodDies) {
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

}  // namespace
