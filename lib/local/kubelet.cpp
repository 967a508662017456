// The local cluster's kubelet: the Kubelet object (start-up checks, the pods the API server
// hands it, shutdown). The pod lifecycle is in kubelet_pods.cpp, the status it reports in
// kubelet_status.cpp, host preparation in kubelet_setup.cpp, exec and logs beside them.
#include "local/kubelet.hpp"

#include "local/kubelet_core.hpp"
#include "local/seccomp_filter.hpp"
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

using boost::system::error_code;
using namespace std::chrono_literals;

using namespace kubelet_detail;

Kubelet::Kubelet(asio::any_io_executor executor, KubeletOptions options, PodStatusWriter status_writer)
    : impl_(std::make_unique<Impl>()) {
    auto core = std::make_shared<Core>();
    core->self = core;
    core->executor = std::move(executor);
    core->options = std::move(options);
    core->writer = std::move(status_writer);
    core->alive_token = impl_->alive;
    if (core->options.data_dir.empty())
        core->options.data_dir = fs::temp_directory_path() / ("kubesandbox-kubelet-" + util::random_hex(4));
    error_code ec;
    fs::create_directories(core->options.data_dir / "pods", ec);
    core->prepare_layout();
    if (core->layout.outer_uid) {
        // The sandbox user must be able to reach the bind sources below data_dir.
        ::chmod(core->options.data_dir.c_str(), 0755);
        ::chmod((core->options.data_dir / "pods").c_str(), 0755);
    }
    std::string why;
    if (!core->build_busybox_root(why)) core->log("busybox images unavailable: " + why);
    if (!core->install_runtime(why)) core->log("agent-sandbox runtime images unavailable: " + why);
    core->seccomp_bytes = seccomp_program_bytes(runtime_default_seccomp());
    if (core->seccomp_bytes.empty())
        core->log("no seccomp filter for this architecture: system calls are not filtered");
    core->probe_isolation();
    if (core->isolation) core->start_sweeper();
    if (core->isolation) {
        core->cgroups = Cgroups::open("kubesandbox-" + util::random_hex(4), core->limits_problem);
        if (!core->cgroups) core->log("resources.limits are not enforced: " + core->limits_problem);
    }
    if (!core->isolation) {
        core->log("isolation unavailable: " + core->problem +
                  (core->options.allow_no_isolation ? " -- pods will run UNISOLATED (allow_no_isolation)" : ""));
    }
    impl_->core = std::move(core);
}

Kubelet::~Kubelet() { shutdown(); }

bool Kubelet::isolation_available() const { return impl_->core->isolation; }
const std::string& Kubelet::isolation_problem() const { return impl_->core->problem; }
std::string Kubelet::limits_mode() const { return impl_->core->cgroups ? impl_->core->cgroups->mode() : ""; }
const std::string& Kubelet::limits_problem() const { return impl_->core->limits_problem; }

void Kubelet::pod_changed(const json::object& pod) {
    auto& c = *impl_->core;
    if (c.shut_down) return;
    const auto& meta = obj(pod, "metadata");
    std::string uid = str(meta, "uid");
    if (uid.empty()) return;
    auto it = c.pods.find(uid);
    if (it == c.pods.end()) {
        // A pod that already finished, or one the API server reports as terminal, is not restarted.
        auto phase = str(obj(pod, "status"), "phase");
        if (phase == "Succeeded" || phase == "Failed") return;
        auto p = std::make_shared<PodRecord>(c.executor);
        p->ns = str(meta, "namespace");
        p->name = str(meta, "name");
        p->uid = uid;
        p->pod = pod;
        p->dir = c.pods_dir() / uid;
        p->base_status = obj(pod, "status");
        p->start_time = now_time();
        const auto& containers = arr(obj(pod, "spec"), "containers");
        if (!containers.empty() && containers[0].is_object()) {
            p->container_name = str(containers[0].get_object(), "name");
            p->image = str(containers[0].get_object(), "image");
        }
        p->state = json::object{{"waiting", json::object{{"reason", "ContainerCreating"}}}};
        c.make_dir(p->dir);
        c.pods[uid] = p;
        c.publish(p);
        c.spawn(c.run_pod(p));
        if (auto deadline = num(obj(pod, "spec"), "activeDeadlineSeconds"); deadline && *deadline > 0) {
            c.spawn(c.run_deadline(p, *deadline));
        }
        it = c.pods.find(uid);
    }
    auto p = it->second;
    if (p->removed) return;
    p->pod = pod;
    if (meta.contains("deletionTimestamp") && !p->stopping) {
        p->stopping = true;
        std::int64_t grace = num(meta, "deletionGracePeriodSeconds")
                                 .value_or(num(obj(pod, "spec"), "terminationGracePeriodSeconds").value_or(30));
        if (p->finished) return;
        c.spawn(c.run_grace(p, grace));
    }
}

void Kubelet::pod_deleted(const json::object& pod) {
    auto& c = *impl_->core;
    std::string uid = str(obj(pod, "metadata"), "uid");
    auto it = c.pods.find(uid);
    if (it == c.pods.end()) return;
    auto p = it->second;
    if (p->removed) return;
    p->removed = true;
    c.kill_pod(*p, SIGKILL);
    p->timer.cancel();
    p->deadline_timer.cancel();
    p->grace_timer.cancel();
    c.spawn(c.reap_removed(p));
}

void Kubelet::shutdown() {
    if (!impl_ || !impl_->core) return;
    auto& c = *impl_->core;
    if (c.shut_down) return;
    c.shut_down = true;
    impl_->alive.reset();
    std::vector<pid_t> pids, inner;
    for (auto& [uid, p] : c.pods) {
        p->removed = true;
        if (p->inner_pid > 0 && c.isolation) {
            auto tree = descendants(p->inner_pid);
            tree.push_back(p->inner_pid);
            for (pid_t q : tree) ::kill(q, SIGKILL);
            inner.insert(inner.end(), tree.begin(), tree.end());
        }
        if (p->pid > 0) {
            c.kill_pod(*p, SIGKILL);
            pids.push_back(p->pid);
        }
        p->timer.cancel();
        p->deadline_timer.cancel();
        p->grace_timer.cancel();
    }
    for (pid_t pid : c.exec_pids) {
        ::kill(-pid, SIGKILL);
        ::kill(pid, SIGKILL);
        pids.push_back(pid);
    }
    // Reap synchronously (bounded): nothing may outlive the cluster. Processes inside the pid
    // namespaces are not our children: wait until they are dead (gone or zombie).
    auto deadline = std::chrono::steady_clock::now() + 5s;
    for (pid_t pid : pids) {
        int st;
        while (::waitpid(pid, &st, WNOHANG) == 0 && std::chrono::steady_clock::now() < deadline) ::usleep(2000);
    }
    for (pid_t pid : inner) {
        for (;;) {
            std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
            std::string stat;
            std::getline(in, stat);
            auto close_paren = stat.rfind(')');
            bool dead = !in || close_paren == std::string::npos || close_paren + 2 >= stat.size() ||
                        stat[close_paren + 2] == 'Z' || stat[close_paren + 2] == 'X';
            if (dead || std::chrono::steady_clock::now() >= deadline) break;
            ::usleep(2000);
        }
    }
    for (auto& [uid, p] : c.pods) {
        if (p->pidfd >= 0) ::close(p->pidfd);
        p->pidfd = -1;
        p->pid = -1;
        p->inner_pid = 0;
        p->inner_pidfd.reset();
    }
    c.cgroups.reset();  // kills anything left in a pod's cgroup, removes them
    // The sweeper's last pass catches a bubblewrap that was still starting; then reap it.
    c.sweeper.reset();
    if (c.sweeper_pid > 0) {
        int st;
        while (::waitpid(c.sweeper_pid, &st, WNOHANG) == 0 && std::chrono::steady_clock::now() < deadline + 2s)
            ::usleep(2000);
        c.sweeper_pid = -1;
    }
}

}  // namespace kubesandbox::local
