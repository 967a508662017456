// The local kubelet's pod lifecycle: pods are bubblewrap sandboxes (one per pod, its first
// container), supervised through pidfds on the cluster's executor: start, readiness, restarts
// with back-off, deadlines, graceful deletion.
#include "local/kubelet.hpp"

#include "local/kubelet_core.hpp"
#include "local/port_forward.hpp"
#include "local/storage_usage.hpp"
#include "proto/status.hpp"
#include "util/child_process.hpp"
#include "util/random.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
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

constexpr auto kRestartBackoffBase = 1s;  // real kubelet: 10 s; doubled per restart, capped
constexpr auto kRestartBackoffCap = 300s;

}  // namespace

std::variant<Fd, std::string> Core::start(PodRecord& p) {
    ContainerPlan plan = *p.plan;  // subPaths resolved below, on every start
    plan.limits.pids = options.pod_pids_limit;
    if (cgroups) {
        if (auto problem = cgroups->create(p.uid, plan.limits); !problem.empty()) return problem;
    }
    make_dir(p.dir / "workspace");
    make_dir(p.dir / "tmp");
    make_dir(p.dir / "volumes");
    make_dir(p.dir / "unsupported-volume");
    for (auto& m : plan.mounts) {
        if (m.sub_path.empty()) {
            make_dir(m.host_path);
        } else if (auto problem = resolve_sub_path(m); !problem.empty()) {
            return problem;
        }
    }
    Fd log_fd(::open((p.dir / "container.log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
    Fd null_in(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (log_fd.fd < 0 || null_in.fd < 0) return std::string("cannot open the container log: ") + std::strerror(errno);
    Spawn s;
    s.env = plan.env;
    s.new_session = true;
    s.dups = {{null_in.fd, 0}, {log_fd.fd, 1}, {log_fd.fd, 2}};
    Fd info_rd;
    if (isolation) {
        std::vector<std::pair<std::string, std::string>> entries;
        if (plan.root.kind != ImageRoot::Kind::host) {
            fs::path root = plan.root.kind == ImageRoot::Kind::busybox ? layout.busybox_root : plan.root.directory;
            error_code ec;
            for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
                std::string target;
                if (it->is_symlink(ec)) target = fs::read_symlink(it->path(), ec).string();
                entries.emplace_back(it->path().filename().string(), target);
            }
        }
        int fds[2];
        if (::pipe2(fds, O_CLOEXEC) != 0) return std::string("pipe: ") + std::strerror(errno);
        info_rd = Fd(fds[0]);
        Fd info_wr(fds[1]);
        Fd filter;
        if (plan.seccomp) {
            std::string filter_error;
            filter = seccomp_pipe(filter_error);
            if (!filter_error.empty()) return filter_error;
        }
        s.argv = bwrap_argv(plan, layout, p.name, 3, filter.fd >= 0 ? 4 : -1, entries);
        use_bwrap_program(s.argv);
        if (cgroups) s.argv = join_cgroup_argv(cgroups->procs_files(p.uid), std::move(s.argv));
        s.dups.push_back({info_wr.fd, 3});
        if (filter.fd >= 0) s.dups.push_back({filter.fd, 4});
        // posix_spawnp searches the caller's PATH for setpriv/bwrap; the child gets plan.env.
        p.pid = s.run();
    } else {
        log("WARNING: pod " + p.ns + "/" + p.name + " runs WITHOUT isolation (allow_no_isolation)");
        fs::path cwd = plan.working_dir;
        // Without namespaces the mounts cannot be placed; run in the pod's workspace.
        s.argv = {"setpriv",
                  "--pdeathsig",
                  "KILL",
                  "--",
                  "/bin/sh",
                  "-c",
                  "cd \"$0\" && exec \"$@\"",
                  (p.dir / "workspace").string()};
        s.argv.insert(s.argv.end(), plan.argv.begin(), plan.argv.end());
        p.pid = s.run();
    }
    if (p.pid < 0) {
        int err = -p.pid;
        p.pid = -1;
        return std::string("failed to start the container: ") + std::strerror(err);
    }
    p.pidfd = util::open_pidfd(p.pid);
    if (!isolation) p.inner_pid = p.pid;
    return info_rd;
}

void Core::kill_pod(PodRecord& p, int sig) {
    if (p.pid <= 0) return;
    if (sig == SIGKILL) {
        ::kill(p.pid, SIGKILL);  // bwrap; --die-with-parent + the pid namespace take the rest
        if (p.inner_pid > 0 && p.inner_pid != p.pid) ::kill(p.inner_pid, SIGKILL);
        if (!isolation) ::kill(-p.pid, SIGKILL);
        return;
    }
    // Graceful: the container's main process, as a runtime signals the container's pid 1.
    if (isolation && p.inner_pid > 0) {
        for (pid_t child : descendants(p.inner_pid)) {
            ::kill(child, sig);
            break;  // the first child is the command (pid 2 under bwrap's init)
        }
    } else {
        ::kill(p.pid, sig);
    }
}

asio::awaitable<void> Core::wait_exit(int pidfd, pid_t pid, int& code) {
    code = (co_await reap_child(executor, pidfd, pid)).value_or(255);
}

asio::awaitable<int> Core::read_child_pid(Fd fd) {
    asio::posix::stream_descriptor sd(executor, fd.release());
    std::string text;
    char buf[1024];
    asio::steady_timer timer(executor, 30s);
    for (;;) {
        // Raced with a timeout; the read's error comes back as a value.
        auto result =
            co_await (sd.async_read_some(asio::buffer(buf), tuple_awaitable) || timer.async_wait(tuple_awaitable));
        if (result.index() != 0) co_return 0;
        auto [ec, n] = std::get<0>(result);
        text.append(buf, n);
        if (text.find('}') != std::string::npos) co_return parse_child_pid(text);
        if (ec) co_return parse_child_pid(text);
    }
}

asio::awaitable<void> Core::wait_sandbox_ready(PodRecord& p) {
    asio::steady_timer timer(executor);
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (p.inner_pid > 0 && std::chrono::steady_clock::now() < deadline && !shut_down && !p.removed) {
        auto kids = descendants(p.inner_pid);
        if (!kids.empty()) {
            std::ifstream in("/proc/" + std::to_string(kids.front()) + "/comm");
            std::string comm;
            std::getline(in, comm);
            if (!comm.empty() && comm != "bwrap") co_return;
        }
        if (::kill(p.inner_pid, 0) != 0) co_return;
        timer.expires_after(5ms);
        co_await timer.async_wait(tuple_awaitable);
    }
}

asio::awaitable<void> Core::probe_readiness(std::shared_ptr<PodRecord> p, std::uint16_t port, int restart) {
    asio::steady_timer timer(executor);
    while (!shut_down && !p->removed && !p->stopping && p->restart_count == restart && p->running()) {
        auto socket = co_await connect_in_pod(executor, p->inner_pid, port);
        if (socket) {
            if (shut_down || p->removed || p->restart_count != restart || !p->running()) co_return;
            p->ready = true;
            publish(p);
            co_return;
        }
        timer.expires_after(20ms);
        co_await timer.async_wait(tuple_awaitable);
    }
}

void Core::log_container_exit(const PodRecord& p, int code, std::chrono::steady_clock::time_point begun) const {
    auto ran = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - begun);
    std::string line = "pod " + p.ns + "/" + p.name + ": container exited with code " + std::to_string(code) +
                       (code > 128 ? " (signal " + std::to_string(code - 128) + ")" : std::string()) + " after " +
                       std::to_string(ran.count()) + " ms";
    constexpr std::streamoff kTail = 2000;  // the log may be large: only its end is read
    std::ifstream in(p.dir / "container.log", std::ios::binary | std::ios::ate);
    std::streamoff size = in ? static_cast<std::streamoff>(in.tellg()) : 0;
    in.seekg(std::max<std::streamoff>(0, size - kTail));
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!text.empty()) line += "; last output: " + text;
    log(line);
}

asio::awaitable<void> Core::run_pod(std::shared_ptr<PodRecord> p) {
    auto gone = [&] { return shut_down || p->removed; };
    // However the pod ends (terminal, deleted, shut down), what is left in its cgroup goes too.
    struct ReleaseCgroup {
        Core& core;
        std::string uid;
        ~ReleaseCgroup() { core.release_cgroup(uid); }
    } release{*this, p->uid};
    const auto& spec = obj(p->pod, "spec");
    std::string policy = str(spec, "restartPolicy");
    if (policy.empty()) policy = "Always";
    const auto& containers = arr(spec, "containers");
    if (containers.empty() || !containers[0].is_object()) co_return;
    auto planned = plan_container(p->pod, containers[0].get_object(), options.images, p->dir);
    if (planned.error) {
        p->state = json::object{
            {"waiting", json::object{{"reason", planned.error->reason}, {"message", planned.error->message}}}};
        publish(p);
        if (planned.error->reason != "ErrImagePull") co_return;
        p->timer.expires_after(2s);
        co_await p->timer.async_wait(tuple_awaitable);
        if (gone() || p->stopping || p->ended_by_kubelet) co_return;
        p->state = json::object{{"waiting", json::object{{"reason", "ImagePullBackOff"},
                                                         {"message", "Back-off pulling image \"" + p->image + "\""}}}};
        publish(p);
        co_return;
    }
    p->plan = std::move(planned.plan);
    p->image_id = p->plan->root.id;
    if (p->plan->root.runtime && layout.runtime_program.empty()) {
        p->state = json::object{{"waiting", json::object{{"reason", "CreateContainerError"},
                                                         {"message",
                                                          "the local cluster has no kubesandbox-runtime for "
                                                          "image \"" +
                                                              p->image + "\""}}}};
        publish(p);
        co_return;
    }
    for (const auto& w : p->plan->warnings) log("pod " + p->ns + "/" + p->name + ": " + w);
    if (!isolation && !options.allow_no_isolation) {
        p->phase = "Failed";
        p->reason = "IsolationUnavailable";
        p->message = problem;
        p->state = json::object{{"waiting", json::object{{"reason", "RunContainerError"}, {"message", problem}}}};
        p->finished = true;
        publish(p);
        co_return;
    }
    auto backoff = kRestartBackoffBase;
    for (;;) {
        if (gone()) co_return;
        if (p->stopping || p->ended_by_kubelet) break;
        auto started = start(*p);
        std::string started_at = now_time();
        auto begun = std::chrono::steady_clock::now();
        int code = 128;
        std::string fail_message;
        if (auto* err = std::get_if<std::string>(&started)) {
            fail_message = *err;
        } else {
            if (isolation) {
                p->inner_pid = co_await read_child_pid(std::move(std::get<Fd>(started)));
                ++p->container_generation;
                if (p->inner_pid > 0) p->inner_pidfd = Fd(util::open_pidfd(p->inner_pid));
                if (gone()) co_return;
                co_await wait_sandbox_ready(*p);
                if (gone()) co_return;
            }
            p->container_id =
                "local://" + p->uid.substr(0, 8) + "-" + std::to_string(p->restart_count) + "-" + util::random_hex(4);
            p->state = json::object{{"running", json::object{{"startedAt", started_at}}}};
            p->ready = !p->plan->readiness_port || !isolation;
            if (!p->ready) spawn(probe_readiness(p, *p->plan->readiness_port, p->restart_count));
            p->started = true;
            p->phase = "Running";
            publish(p);
            if (has_storage_limits(*p->plan)) spawn(watch_storage(p, p->restart_count));
            co_await wait_exit(p->pidfd, p->pid, code);
            if (p->pidfd >= 0) ::close(p->pidfd);
            p->pidfd = -1;
            p->pid = -1;
            p->inner_pid = 0;
            p->inner_pidfd.reset();
            if (gone()) co_return;
            if (code != 0 && !p->stopping && !p->ended_by_kubelet) log_container_exit(*p, code, begun);
        }
        p->ready = false;
        p->started = false;
        // The kernel's OOM killer ends a container with SIGKILL: 137, as a kubelet reports it.
        const bool oom = fail_message.empty() && code == 128 + SIGKILL && cgroups && cgroups->oom_killed(p->uid);
        json::object term{{"exitCode", code},
                          {"reason", !fail_message.empty() ? "ContainerCannotRun"
                                     : oom                 ? "OOMKilled"
                                     : code == 0           ? "Completed"
                                                           : "Error"},
                          {"startedAt", started_at},
                          {"finishedAt", now_time()}};
        if (!fail_message.empty()) term["message"] = fail_message;
        if (!p->container_id.empty()) term["containerID"] = p->container_id;
        p->state = json::object{{"terminated", term}};
        bool terminal = p->stopping || p->ended_by_kubelet || policy == "Never" || (policy == "OnFailure" && code == 0);
        if (terminal) break;
        // Restart with back-off (reset after 10 minutes of running, as a real node does).
        if (std::chrono::steady_clock::now() - begun > 600s) backoff = kRestartBackoffBase;
        p->last_state = p->state;
        p->state = json::object{
            {"waiting", json::object{{"reason", "CrashLoopBackOff"},
                                     {"message", "back-off " + std::to_string(backoff.count()) +
                                                     "s restarting failed container=" + p->container_name +
                                                     " pod=" + p->name + "_" + p->ns + "(" + p->uid + ")"}}}};
        publish(p);
        p->timer.expires_after(backoff);
        co_await p->timer.async_wait(tuple_awaitable);
        backoff = std::min<std::chrono::seconds>(backoff * 2, kRestartBackoffCap);
        if (gone()) co_return;
        if (p->stopping || p->ended_by_kubelet) break;
        ++p->restart_count;
    }
    // Terminal.
    if (!p->state.contains("terminated")) {
        json::object term{{"exitCode", 137}, {"reason", "Error"}, {"finishedAt", now_time()}};
        if (auto* last = p->last_state.if_contains("terminated")) term = last->get_object();
        p->state = json::object{{"terminated", term}};
    }
    std::int64_t code = num(obj(p->state, "terminated"), "exitCode").value_or(1);
    if (p->ended_by_kubelet) {
        p->phase = "Failed";
        p->reason = p->end_reason;
        p->message = p->end_message;
    } else {
        p->phase = code == 0 ? "Succeeded" : "Failed";
    }
    p->ready = false;
    p->finished = true;
    p->deadline_timer.cancel();
    p->grace_timer.cancel();
    publish(p);
}

asio::awaitable<void> Core::run_deadline(std::shared_ptr<PodRecord> p, std::int64_t seconds) {
    p->deadline_timer.expires_after(std::chrono::seconds(seconds));
    auto [ec] = co_await p->deadline_timer.async_wait(tuple_awaitable);
    if (ec || shut_down || p->removed || p->finished || p->ended_by_kubelet) co_return;
    p->ended_by_kubelet = true;
    p->end_reason = "DeadlineExceeded";
    p->end_message = "Pod was active on the node longer than the specified deadline";
    if (p->pid > 0) {
        kill_pod(*p, SIGKILL);
    } else {
        p->timer.cancel();
        if (!p->plan) {
            // Never started (image error): the pod fails without a container.
            p->phase = "Failed";
            p->reason = p->end_reason;
            p->message = p->end_message;
            p->finished = true;
            publish(p);
        }
    }
}

namespace {

// Walks the folders in slices of a few thousand entries, handing the thread back between.
asio::awaitable<std::uint64_t> measure_usage(asio::any_io_executor executor, std::vector<fs::path> roots) {
    DiskUsageWalk walk(std::move(roots));
    while (!walk.step(2000)) co_await asio::post(executor, asio::use_awaitable);
    co_return walk.bytes();
}

}  // namespace

asio::awaitable<void> Core::watch_storage(std::shared_ptr<PodRecord> p, int restart) {
    auto watching = [&] {
        return !shut_down && !p->removed && !p->finished && !p->ended_by_kubelet && !p->stopping &&
               p->restart_count == restart && p->pid > 0;
    };
    const ContainerPlan plan = *p->plan;
    for (;;) {
        p->storage_timer.expires_after(options.storage_check_interval);
        co_await p->storage_timer.async_wait(tuple_awaitable);
        if (!watching()) co_return;
        PodStorageUse use;
        for (const auto& m : plan.mounts) {
            if (m.name.empty() || use.volumes.count(m.name) || m.host_path.filename() == "unsupported-volume") continue;
            std::vector<fs::path> volume = {p->dir / "volumes" / m.name};
            use.volumes[m.name] = co_await measure_usage(executor, std::move(volume));
        }
        std::vector<fs::path> own = {p->dir / "workspace", p->dir / "tmp", p->dir / "container.log"};
        use.container = co_await measure_usage(executor, std::move(own));
        if (!watching()) co_return;
        auto message = storage_eviction_message(plan, use);
        if (!message) continue;
        // Evicted at once (no grace period), as a kubelet does for local storage.
        log("pod " + p->ns + "/" + p->name + " evicted: " + *message);
        p->ended_by_kubelet = true;
        p->end_reason = "Evicted";
        p->end_message = *message;
        kill_pod(*p, SIGKILL);
        co_return;
    }
}

asio::awaitable<void> Core::run_grace(std::shared_ptr<PodRecord> p, std::int64_t seconds) {
    // Nothing running (an image that cannot be pulled, a configuration error, a back-off): the
    // pod is over at once, as a node reports it, instead of holding its name for the grace period.
    auto finish_if_idle = [&] {
        if (p->pid > 0 || p->finished) return;
        p->finished = true;
        if (!p->state.contains("terminated")) p->phase = "Failed";
        publish(p);
    };
    kill_pod(*p, SIGTERM);
    p->timer.cancel();
    finish_if_idle();
    if (p->finished) co_return;
    p->grace_timer.expires_after(std::chrono::seconds(std::max<std::int64_t>(seconds, 0)));
    auto [ec] = co_await p->grace_timer.async_wait(tuple_awaitable);
    if (ec || shut_down || p->removed) co_return;
    kill_pod(*p, SIGKILL);
    finish_if_idle();
}

void Core::remove_pod_dir(const std::shared_ptr<PodRecord>& p) {
    error_code ec;
    fs::remove_all(p->dir, ec);
}

asio::awaitable<void> Core::reap_removed(std::shared_ptr<PodRecord> p) {
    if (p->pid > 0) {
        int code = 0;
        co_await wait_exit(p->pidfd, p->pid, code);
    }
    // A pod removed while starting leaves its run without closing the descriptor.
    if (p->pidfd >= 0) ::close(p->pidfd);
    p->pidfd = -1;
    if (shut_down) co_return;
    remove_pod_dir(p);
    if (auto it = pods.find(p->uid); it != pods.end() && it->second == p) pods.erase(it);
}

void Core::release_cgroup(const std::string& uid) {
    // At shutdown the cgroups' owner removes what is left, synchronously.
    if (!cgroups || cgroups->try_remove(uid) || shut_down) return;
    spawn([](Core& core, std::string uid) -> asio::awaitable<void> {
        asio::steady_timer timer(core.executor);
        for (int attempt = 0; attempt < 100; ++attempt) {
            timer.expires_after(10ms);
            co_await timer.async_wait(tuple_awaitable);
            if (core.shut_down || !core.cgroups || core.cgroups->try_remove(uid)) co_return;
        }
        core.log("cgroup of pod uid " + uid + " still busy after a second; left for shutdown");
    }(*this, uid));
}

void Core::spawn(asio::awaitable<void> a) {
    auto keep = self.lock();
    auto run = [keep, a = std::move(a)]() mutable -> asio::awaitable<void> { co_await std::move(a); };
    asio::co_spawn(executor, std::move(run), asio::detached);
}

}  // namespace kubelet_detail

}  // namespace kubesandbox::local
