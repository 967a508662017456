// The fixture of the kubelet tests: a kubelet of its own (no API server) over a temporary data
// directory, pods started straight from JSON, statuses recorded, exec over a real loopback
// WebSocket (kubelet_fixture.cpp).
#pragma once

#include "local/kubelet.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace kubelet_test {

namespace asio = boost::asio;
namespace json = boost::json;
namespace fs = std::filesystem;
using asio::ip::tcp;
using kubesandbox::local::Kubelet;
using kubesandbox::local::KubeletOptions;
using kubesandbox::local::StreamRequest;

inline constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);

inline std::string random_uid() {
    static std::mt19937_64 rng{std::random_device{}()};
    char buf[40];
    std::snprintf(buf, sizeof buf, "%08llx-test-%012llx", static_cast<unsigned long long>(rng() & 0xffffffff),
                  static_cast<unsigned long long>(rng() & 0xffffffffffffULL));
    return buf;
}

inline json::object make_pod(const std::string& name, const std::string& image, json::array command,
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

inline std::string uid_of(const json::object& pod) { return std::string(pod.at("metadata").at("uid").as_string()); }

class KubeletTest : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("kubelet-test-" + random_uid());
        fs::create_directories(dir_);
        KubeletOptions options;
        options.data_dir = dir_;
        options.pod_pids_limit = 128;  // small enough for a fork loop to hit quickly
        options.storage_check_interval = std::chrono::milliseconds(200);
        adjust(options);
        kubelet_ =
            std::make_unique<Kubelet>(io_.get_executor(), options,
                                      [this](const std::string&, const std::string&, const std::string& uid,
                                             json::object status) { statuses_[uid].push_back(std::move(status)); });
        ASSERT_TRUE(kubelet_->isolation_available()) << kubelet_->isolation_problem();
    }
    // A test's own kubelet options.
    virtual void adjust(KubeletOptions&) {}
    void TearDown() override {
        kubelet_->shutdown();
        kubelet_.reset();
        io_.restart();
        io_.poll();
        std::error_code ec;
        fs::remove_all(dir_, ec);
    }

    // Runs the io_context until `pred` holds or `timeout` passes.
    bool run_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
        auto deadline = std::chrono::steady_clock::now() + timeout;
        while (!pred()) {
            if (std::chrono::steady_clock::now() > deadline) return false;
            io_.restart();
            io_.run_for(std::chrono::milliseconds(20));
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
                                      bool count_only, bool fragment, ExecResult& r);

    // Execs `argv` in the pod through the kubelet's exec endpoint over a loopback WebSocket.
    ExecResult exec(const json::object& pod, std::vector<std::string> argv, std::string input = {},
                    std::string extra = "&stdout=true&stderr=true", bool count_only = false,
                    std::string protocols = "v5.channel.k8s.io", bool fragment = false,
                    std::chrono::milliseconds timeout = std::chrono::seconds(20));

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

// Exec tests that hold for both ways the kubelet starts a command: from the pod's spawner, and
// with a kubesandbox-enter of its own (the way without a spawner).
class KubeletExecTest : public KubeletTest, public ::testing::WithParamInterface<bool> {
protected:
    void adjust(KubeletOptions& options) override { options.exec_spawner = GetParam(); }
};

inline std::string exec_way(const ::testing::TestParamInfo<bool>& info) {
    return info.param ? "FromTheSpawner" : "EnterPerExec";
}

}  // namespace kubelet_test
