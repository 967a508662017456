// Inside the local kubelet: pod records and the supervisor (Core) that its files share.
//   kubelet.cpp       pod lifecycle: start, readiness, restarts, deadlines, deletion, status
//   kubelet_exec.cpp  exec over the WebSocket channel protocol
//   kubelet_spawner.cpp  each pod's exec spawner (pod_spawner.hpp)
//   kubelet_streams.cpp  one-shot answers on stream connections, port-forward's entry
//   kubelet_logs.cpp  container logs (tail, limits, follow)
//   kubelet_setup.cpp host layout, busybox image root, isolation probe
//   process.cpp       spawning, reaping and finding child processes
#pragma once

#include "local/cgroups.hpp"
#include "local/kubelet.hpp"
#include "local/kubelet_plan.hpp"
#include "local/pod_spawner.hpp"
#include "local/process.hpp"
#include "net/any_stream.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace kubesandbox::local {

namespace kubelet_detail {

namespace asio = boost::asio;
namespace json = boost::json;
namespace fs = std::filesystem;

inline constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);

// Lenient readers of the pod object (a missing or mistyped field reads as empty).
std::string str(const json::object& o, std::string_view key);
const json::object& obj(const json::object& o, std::string_view key);
const json::array& arr(const json::object& o, std::string_view key);
std::optional<std::int64_t> num(const json::object& o, std::string_view key);
std::string now_time();

// Resolves the container of an exec/log request; on failure returns the 400 message.
std::optional<std::string> pick_container(const json::object& pod, bool has_container, std::string& container);

// The pod's exec spawner, started at its first exec; null when commands start one by one (no
// isolation, no pinned first process, a start under way or failed for this container).
struct Core;
struct PodRecord;
asio::awaitable<std::shared_ptr<PodSpawner>> spawner_for(std::shared_ptr<Core> core, std::shared_ptr<PodRecord> pod);

// A one-shot HTTP answer on a stream request's connection (which is then closed).
asio::awaitable<void> write_response(net::AnyStream& stream, unsigned version, boost::beast::http::status status,
                                     std::string content_type, std::string body);
asio::awaitable<void> write_status(net::AnyStream& stream, unsigned version, unsigned code, std::string_view reason,
                                   std::string message);

// ---------------------------------------------------------------------------------------------
// Pod bookkeeping

struct PodRecord {
    explicit PodRecord(asio::any_io_executor ex) : timer(ex), deadline_timer(ex), grace_timer(ex), storage_timer(ex) {}
    std::string ns, name, uid;
    json::object pod;
    fs::path dir;
    std::string container_name, image, image_id;
    std::optional<ContainerPlan> plan;

    std::string phase = "Pending";
    std::string reason, message;  // pod-level
    json::object state;           // containerStatuses[0].state
    json::object last_state;
    bool ready = false;
    bool started = false;
    int restart_count = 0;
    std::string container_id;
    std::string start_time;
    json::object base_status;  // qosClass and PodScheduled from the API server
    std::map<std::string, std::pair<std::string, std::string>> transitions;  // type -> (status, time)

    pid_t pid = -1;     // bwrap (or the command without isolation)
    int inner_pid = 0;  // first process inside the sandbox: namespace anchor for exec/port-forward
    Fd inner_pidfd;     // pins inner_pid: an exec checks through it that the pid was not reused
    int pidfd = -1;
    std::uint64_t container_generation = 0;  // one more at each start of the container
    // Starts exec'd commands in the container of generation spawner_generation (the spawner takes
    // one of the pod's pids and a little of its memory, as a runtime's shim would).
    std::shared_ptr<PodSpawner> spawner;
    std::uint64_t spawner_generation = 0;
    bool spawner_starting = false;
    SpawnerBackoff spawner_backoff;  // after a failed start
    bool stopping = false;           // deletionTimestamp seen
    bool removed = false;            // gone from the store / kubelet shut down
    // Ended by the kubelet (activeDeadlineSeconds, eviction): the pod fails with these.
    bool ended_by_kubelet = false;
    std::string end_reason, end_message;
    bool finished = false;  // terminal status written
    bool running() const { return pid > 0 && inner_pid > 0 && state.contains("running"); }

    asio::steady_timer timer;           // back-off waits
    asio::steady_timer deadline_timer;  // activeDeadlineSeconds
    asio::steady_timer grace_timer;     // SIGKILL after the grace period
    asio::steady_timer storage_timer;   // between ephemeral-storage checks
};

struct Core {
    asio::any_io_executor executor;
    KubeletOptions options;
    PodStatusWriter writer;
    std::string problem;
    bool isolation = false;
    std::unique_ptr<Cgroups> cgroups;  // null: resources.limits are not enforced (limits_problem says why)
    std::string limits_problem;
    Fd sweeper;  // write end of the sweeper's stdin: closing it (or dying) makes it sweep
    pid_t sweeper_pid = -1;
    bool shut_down = false;
    HostLayout layout;
    std::map<std::string, std::shared_ptr<PodRecord>> pods;  // uid -> pod (incl. being removed)
    std::set<pid_t> exec_pids;                               // running exec processes (groups)
    std::weak_ptr<void> alive_token;                         // expires with the Kubelet object
    std::weak_ptr<Core> self;

    fs::path pods_dir() const { return options.data_dir / "pods"; }

    void log(const std::string& line) const { options.logger.warning("local cluster kubelet: " + line); }

    // Removes the pod's cgroups, killing what is left in them; while dying processes still hold
    // one, retries on a timer instead of blocking the cluster's thread.
    void release_cgroup(const std::string& uid);

    // ---- setup ----

    void prepare_layout();

    // Makes a directory the sandbox user (the outer uid when we are root) can write.
    void make_dir(const fs::path& p);

    // Points a mount with a subPath at the directory or file below its volume, creating missing
    // directories; refuses symbolic links on the way (a pod can plant them in its own volume to
    // reach host paths). Returns an error message, empty on success.
    std::string resolve_sub_path(MountPlan& mount);

    bool build_busybox_root(std::string& why);

    // Copies kubesandbox-runtime where pods can bind it from (layout.runtime_program).
    bool install_runtime(std::string& why);

    // Finds kubesandbox-enter (layout.enter_program): the option, $KUBESANDBOX_ENTER, the
    // installed program, the built one.
    bool find_enter_program(std::string& why);

    // The read end of a pipe holding the seccomp filter for bubblewrap's --seccomp, or -1 when
    // the architecture has none (logged once) or, with `error` set, when the pipe failed: a
    // container must then not start, rather than start unfiltered.
    Fd seccomp_pipe(std::string& error) const;
    std::string seccomp_bytes;  // the runtime-default filter's instructions

    // Marks the container ready once its readinessProbe port (httpGet or tcpSocket) accepts a
    // connection inside the pod; a container without such a probe is ready when started.
    asio::awaitable<void> probe_readiness(std::shared_ptr<PodRecord> p, std::uint16_t port, int restart);

    // The configured bubblewrap program in place of the plain name bwrap_argv puts in.
    void use_bwrap_program(std::vector<std::string>& argv) const;

    // bubblewrap clears the parent-death signal while it sets up a sandbox and sets it again
    // later (setpriv likewise between its uid change and setting it), so a kubelet killed in
    // between would leave that pod running. A small process waits for the kubelet to go away
    // (EOF on a pipe only the kubelet holds) and then, in three passes, SIGKILLs every
    // bubblewrap, setpriv or shell left with an argument below this kubelet's data folder, with
    // its children.
    void start_sweeper();

    // Runs a throw-away sandbox the way pods run: namespaces + a bind from data_dir.
    void probe_isolation();

    // ---- status ----

    json::object build_status(PodRecord& p);

    void publish(const std::shared_ptr<PodRecord>& p);

    // ---- processes ----

    // Starts the container; fills pid/pidfd; returns the bwrap info pipe (read end) or an error text.
    std::variant<Fd, std::string> start(PodRecord& p);

    void kill_pod(PodRecord& p, int sig);

    asio::awaitable<void> wait_exit(int pidfd, pid_t pid, int& code);

    asio::awaitable<int> read_child_pid(Fd fd);

    // bwrap reports child-pid before the sandbox is set up; the sandbox is complete once its
    // init has forked the command and the command has exec'd (an exec joins only then).
    asio::awaitable<void> wait_sandbox_ready(PodRecord& p);

    // A container that fails on its own is worth a line: with restartPolicy Never its pod is over.
    void log_container_exit(const PodRecord& p, int code, std::chrono::steady_clock::time_point begun) const;

    asio::awaitable<void> run_pod(std::shared_ptr<PodRecord> p);

    // Measures the pod's local storage every storage_check_interval while its container runs
    // `restart`, and evicts the pod when it uses more than its limits allow.
    asio::awaitable<void> watch_storage(std::shared_ptr<PodRecord> p, int restart);
    asio::awaitable<void> run_deadline(std::shared_ptr<PodRecord> p, std::int64_t seconds);

    asio::awaitable<void> run_grace(std::shared_ptr<PodRecord> p, std::int64_t seconds);

    void remove_pod_dir(const std::shared_ptr<PodRecord>& p);

    asio::awaitable<void> reap_removed(std::shared_ptr<PodRecord> p);

    // Detached pod coroutines may outlive the Kubelet object: each holds the Core alive.
    void spawn(asio::awaitable<void> a);
};

}  // namespace kubelet_detail

struct Kubelet::Impl {
    std::shared_ptr<kubelet_detail::Core> core;
    std::shared_ptr<int> alive = std::make_shared<int>(0);
};

}  // namespace kubesandbox::local
