// The local kubelet's status reporting: the Pod status it derives from a pod's record
// (phase, conditions, container states) and its publication to the API server.
#include "local/kubelet.hpp"

#include "local/kubelet_core.hpp"
#include "proto/status.hpp"
#include "util/child_process.hpp"
#include "util/random.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/json/serialize.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>

namespace kubesandbox::local {

namespace kubelet_detail {

using boost::system::error_code;
using namespace std::chrono_literals;
using namespace asio::experimental::awaitable_operators;

namespace {

std::int64_t now_seconds() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

}  // namespace

std::string now_time() { return format_time(now_seconds()); }

std::string str(const json::object& o, std::string_view key) {
    if (auto* v = o.if_contains(key); v && v->is_string()) return std::string(v->get_string());
    return {};
}
const json::object& obj(const json::object& o, std::string_view key) {
    static const json::object empty;
    if (auto* v = o.if_contains(key); v && v->is_object()) return v->get_object();
    return empty;
}
const json::array& arr(const json::object& o, std::string_view key) {
    static const json::array empty;
    if (auto* v = o.if_contains(key); v && v->is_array()) return v->get_array();
    return empty;
}
std::optional<std::int64_t> num(const json::object& o, std::string_view key) {
    auto* v = o.if_contains(key);
    if (!v) return std::nullopt;
    if (v->is_int64()) return v->get_int64();
    if (v->is_uint64()) return static_cast<std::int64_t>(v->get_uint64());
    return std::nullopt;
}

json::object Core::build_status(PodRecord& p) {
    std::string now = now_time();
    bool initialized = true;
    bool containers_ready = p.ready;
    auto cond = [&](const std::string& type, bool ok, const std::string& reason, const std::string& message) {
        std::string status = ok ? "True" : "False";
        auto& t = p.transitions[type];
        if (t.first != status) t = {status, now};
        json::object c{
            {"type", type}, {"status", status}, {"lastProbeTime", nullptr}, {"lastTransitionTime", t.second}};
        if (!ok && !reason.empty()) c["reason"] = reason;
        if (!ok && !message.empty()) c["message"] = message;
        return c;
    };
    std::string unready_reason = "ContainersNotReady";
    std::string unready_msg = "containers with unready status: [" + p.container_name + "]";
    if (p.phase == "Succeeded" || p.phase == "Failed") {
        unready_reason = p.phase == "Succeeded" ? "PodCompleted" : "PodFailed";
        unready_msg.clear();
    }
    json::array conditions;
    conditions.push_back(cond("PodReadyToStartContainers", p.phase != "Succeeded" && p.phase != "Failed", "", ""));
    conditions.push_back(cond("Initialized", initialized, "", ""));
    conditions.push_back(cond("Ready", containers_ready, unready_reason, unready_msg));
    conditions.push_back(cond("ContainersReady", containers_ready, unready_reason, unready_msg));
    json::object scheduled{
        {"type", "PodScheduled"}, {"status", "True"}, {"lastProbeTime", nullptr}, {"lastTransitionTime", p.start_time}};
    for (const auto& c : arr(p.base_status, "conditions")) {
        if (c.is_object() && str(c.get_object(), "type") == "PodScheduled") scheduled = c.get_object();
    }
    conditions.push_back(scheduled);
    if (p.reason == "Evicted") {
        // Since Kubernetes 1.26 a kubelet marks the pods it evicts.
        auto& t = p.transitions["DisruptionTarget"];
        if (t.first != "True") t = {"True", now};
        conditions.push_back(json::object{{"type", "DisruptionTarget"},
                                          {"status", "True"},
                                          {"lastProbeTime", nullptr},
                                          {"lastTransitionTime", t.second},
                                          {"reason", "TerminationByKubelet"},
                                          {"message", p.message}});
    }

    json::object cs{
        {"name", p.container_name},        {"state", p.state}, {"lastState", p.last_state}, {"ready", p.ready},
        {"restartCount", p.restart_count}, {"image", p.image}, {"imageID", p.image_id},     {"started", p.started}};
    if (!p.container_id.empty()) cs["containerID"] = p.container_id;
    json::array statuses{cs};
    // Other containers of a multi-container pod are not run by the local kubelet.
    const auto& containers = arr(obj(p.pod, "spec"), "containers");
    for (std::size_t i = 1; i < containers.size(); ++i) {
        if (!containers[i].is_object()) continue;
        const auto& c = containers[i].get_object();
        statuses.push_back(json::object{
            {"name", str(c, "name")},
            {"state",
             json::object{
                 {"waiting", json::object{{"reason", "CreateContainerError"},
                                          {"message", "the local cluster runs only the first container of a pod"}}}}},
            {"lastState", json::object{}},
            {"ready", false},
            {"restartCount", 0},
            {"image", str(c, "image")},
            {"imageID", ""},
            {"started", false}});
    }

    json::object status{{"phase", p.phase},          {"conditions", conditions},
                        {"hostIP", "127.0.0.1"},     {"hostIPs", json::array{json::object{{"ip", "127.0.0.1"}}}},
                        {"startTime", p.start_time}, {"containerStatuses", statuses}};
    if (p.phase != "Pending" || p.running()) {
        status["podIP"] = "127.0.0.1";
        status["podIPs"] = json::array{json::object{{"ip", "127.0.0.1"}}};
    }
    if (auto* q = p.base_status.if_contains("qosClass")) status["qosClass"] = *q;
    if (!p.reason.empty()) status["reason"] = p.reason;
    if (!p.message.empty()) status["message"] = p.message;
    return status;
}

void Core::publish(const std::shared_ptr<PodRecord>& p) {
    if (shut_down || p->removed || !writer) return;
    auto status = build_status(*p);
    // Posted: the writer re-enters the store, which may call pod_changed again.
    asio::post(executor, [this, p, status = std::move(status), alive = alive_token]() mutable {
        if (alive.expired() || shut_down || p->removed) return;
        writer(p->ns, p->name, p->uid, std::move(status));
    });
}

}  // namespace kubelet_detail

}  // namespace kubesandbox::local
