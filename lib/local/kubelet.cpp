// The local cluster's kubelet: pods are bubblewrap sandboxes (one per pod, its first container),
// supervised through pidfds on the cluster's executor; exec joins a pod's namespaces with
// nsenter and speaks the Kubernetes WebSocket channel protocol (v5/v4); logs are files.
#include "local/kubelet.hpp"

#include "local/kubelet_plan.hpp"
#include "local/port_forward.hpp"
#include "proto/status.hpp"
#include "util/child_process.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/json/serialize.hpp>
#include <boost/url/parse.hpp>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <random>
#include <set>
#include <sstream>
#include <variant>

extern char** environ;

namespace kubesandbox::local {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace json = boost::json;
namespace fs = std::filesystem;
using boost::system::error_code;
using namespace std::chrono_literals;
using namespace asio::experimental::awaitable_operators;

constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);
constexpr std::uint32_t kOuterUid = 65534;  // host "nobody": owner of sandbox processes when we are root
constexpr auto kRestartBackoffBase = 1s;    // real kubelet: 10 s; doubled per restart, capped
constexpr auto kRestartBackoffCap = 300s;
constexpr std::size_t kChunk = 32 * 1024;  // exec messages: 32 KiB payload, like client-go/kubelet

std::int64_t now_seconds() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}
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

int exit_code_of(int wstatus) {
    if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
    if (WIFSIGNALED(wstatus)) return 128 + WTERMSIG(wstatus);
    return 255;
}

// Waits for our child `pid` to exit and reaps it: its exit code, or 255 when that is unknown.
// The pidfd is borrowed (duplicated), so the caller keeps its own.
asio::awaitable<int> reap_child(asio::any_io_executor executor, int pidfd, pid_t pid) {
    std::optional<asio::posix::stream_descriptor> sd;
    if (int own = pidfd >= 0 ? ::fcntl(pidfd, F_DUPFD_CLOEXEC, 0) : -1; own >= 0) sd.emplace(executor, own);
    auto status = co_await util::reap_child(sd ? &*sd : nullptr, pid);
    co_return status&&* status != -1 ? exit_code_of(*status) : 255;
}

// Descendants of `pid` (by /proc/<pid>/task/*/children), deepest last.
std::vector<pid_t> descendants(pid_t pid) {
    std::vector<pid_t> out;
    std::vector<pid_t> todo{pid};
    while (!todo.empty() && out.size() < 100000) {
        pid_t p = todo.back();
        todo.pop_back();
        error_code ec;
        fs::path task_dir = "/proc/" + std::to_string(p) + "/task";
        for (fs::directory_iterator it(task_dir, ec), end; !ec && it != end; it.increment(ec)) {
            std::ifstream in(it->path() / "children");
            pid_t child;
            while (in >> child) {
                out.push_back(child);
                todo.push_back(child);
            }
        }
    }
    return out;
}

// File actions + argv/envp storage for posix_spawnp.
struct Spawn {
    std::vector<std::string> argv;
    std::vector<std::string> env;
    std::vector<std::pair<int, int>> dups;  // (from fd, to fd)
    bool new_group = false;

    // Returns the pid or -errno.
    pid_t run() const {
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        int highest = 2;
        for (auto [from, to] : dups) {
            posix_spawn_file_actions_adddup2(&fa, from, to);
            highest = std::max(highest, to);
        }
        // Asio opens sockets without CLOEXEC: without this a pod would inherit the API server's
        // listening socket and client connections (and keep closed connections open).
        posix_spawn_file_actions_addclosefrom_np(&fa, highest + 1);
        posix_spawnattr_t attr;
        posix_spawnattr_init(&attr);
        short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
        sigset_t empty, all;
        sigemptyset(&empty);
        sigfillset(&all);
        posix_spawnattr_setsigmask(&attr, &empty);
        posix_spawnattr_setsigdefault(&attr, &all);
        if (new_group) {
            flags |= POSIX_SPAWN_SETPGROUP;
            posix_spawnattr_setpgroup(&attr, 0);
        }
        posix_spawnattr_setflags(&attr, flags);
        std::vector<char*> a, e;
        for (auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
        a.push_back(nullptr);
        for (auto& s : env) e.push_back(const_cast<char*>(s.c_str()));
        e.push_back(nullptr);
        pid_t pid = -1;
        int rc = posix_spawnp(&pid, a[0], &fa, &attr, a.data(), e.data());
        posix_spawn_file_actions_destroy(&fa);
        posix_spawnattr_destroy(&attr);
        return rc == 0 ? pid : -rc;
    }
};

struct Fd {
    int fd = -1;
    Fd() = default;
    explicit Fd(int f) : fd(f) {}
    Fd(Fd&& o) noexcept : fd(std::exchange(o.fd, -1)) {}
    Fd& operator=(Fd&& o) noexcept {
        reset();
        fd = std::exchange(o.fd, -1);
        return *this;
    }
    ~Fd() { reset(); }
    void reset() {
        if (fd >= 0) ::close(fd);
        fd = -1;
    }
    int release() { return std::exchange(fd, -1); }
};

std::string random_hex(std::size_t n) {
    static std::mt19937_64 rng{std::random_device{}()};
    static const char* digits = "0123456789abcdef";
    std::string s;
    for (std::size_t i = 0; i < n; ++i) s += digits[rng() % 16];
    return s;
}

// A byte stream for Beast's websocket: replays bytes the HTTP server read past the request head,
// then reads the socket; every inbound byte goes through a FrameSniffer.
class ExecStream {
public:
    using executor_type = asio::any_io_executor;
    ExecStream(net::AnyStream& s, beast::flat_buffer& pre, FrameSniffer& sniffer)
        : s_(&s), pre_(&pre), sniffer_(&sniffer) {}
    executor_type get_executor() { return s_->get_executor(); }
    net::AnyStream& next() { return *s_; }

    template <class MutableBufferSequence, class Token>
    auto async_read_some(const MutableBufferSequence& buffers, Token&& token) {
        asio::mutable_buffer b;
        for (auto it = asio::buffer_sequence_begin(buffers); it != asio::buffer_sequence_end(buffers); ++it) {
            if (asio::mutable_buffer(*it).size() != 0) {
                b = *it;
                break;
            }
        }
        return asio::async_initiate<Token, void(error_code, std::size_t)>(
            [this](auto handler, asio::mutable_buffer buf) {
                auto ex = asio::get_associated_executor(handler, s_->get_executor());
                if (pre_->size() > 0) {
                    std::size_t n = asio::buffer_copy(buf, pre_->data());
                    pre_->consume(n);
                    sniffer_->feed(static_cast<const unsigned char*>(buf.data()), n);
                    asio::post(ex, [h = std::move(handler), n]() mutable { std::move(h)(error_code{}, n); });
                    return;
                }
                s_->async_read_some(buf, asio::bind_executor(ex, [this, buf, h = std::move(handler)](
                                                                     error_code ec, std::size_t n) mutable {
                                        sniffer_->feed(static_cast<const unsigned char*>(buf.data()), n);
                                        std::move(h)(ec, n);
                                    }));
            },
            token, b);
    }

    template <class ConstBufferSequence, class Token>
    auto async_write_some(const ConstBufferSequence& buffers, Token&& token) {
        return s_->async_write_some(buffers, std::forward<Token>(token));
    }

private:
    net::AnyStream* s_;
    beast::flat_buffer* pre_;
    FrameSniffer* sniffer_;
};

void beast_close_socket(ExecStream& s) { s.next().close(); }
[[maybe_unused]] void teardown(beast::role_type role, ExecStream& s, error_code& ec) {
    net::teardown(role, s.next(), ec);
}
template <class TeardownHandler>
void async_teardown(beast::role_type role, ExecStream& s, TeardownHandler&& handler) {
    net::async_teardown(role, s.next(), std::forward<TeardownHandler>(handler));
}

// Serialises writes of several coroutines on one executor (a timer used as a condition variable).
class WriteGate {
public:
    explicit WriteGate(asio::any_io_executor ex) : cv_(ex) {}
    asio::awaitable<void> lock() {
        while (busy_) {
            cv_.expires_at(asio::steady_timer::time_point::max());
            co_await cv_.async_wait(tuple_awaitable);
        }
        busy_ = true;
    }
    void unlock() {
        busy_ = false;
        cv_.cancel();
    }

private:
    bool busy_ = false;
    asio::steady_timer cv_;
};

asio::awaitable<void> write_response(net::AnyStream& stream, unsigned version, http::status status,
                                     std::string content_type, std::string body) {
    http::response<http::string_body> res{status, version};
    res.set(http::field::content_type, content_type);
    res.set(http::field::cache_control, "no-cache, private");
    res.keep_alive(false);
    res.body() = std::move(body);
    res.prepare_payload();
    auto [ec, n] = co_await http::async_write(stream, res, tuple_awaitable);
    (void)n;
    if (!ec) co_await stream.async_shutdown(tuple_awaitable);
    stream.close();
}

asio::awaitable<void> write_status(net::AnyStream& stream, unsigned version, unsigned code, std::string_view reason,
                                   std::string message) {
    co_await write_response(stream, version, static_cast<http::status>(code), "application/json",
                            json::serialize(proto::make_status(code, reason, message)));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Pod bookkeeping

struct PodRecord {
    explicit PodRecord(asio::any_io_executor ex) : timer(ex), deadline_timer(ex), grace_timer(ex) {}
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
    int pidfd = -1;
    bool stopping = false;  // deletionTimestamp seen
    bool removed = false;   // gone from the store / kubelet shut down
    bool deadline_hit = false;
    bool finished = false;  // terminal status written
    bool running() const { return pid > 0 && inner_pid > 0 && state.contains("running"); }

    asio::steady_timer timer;           // back-off waits
    asio::steady_timer deadline_timer;  // activeDeadlineSeconds
    asio::steady_timer grace_timer;     // SIGKILL after the grace period
};

struct Core {
    asio::any_io_executor executor;
    KubeletOptions options;
    PodStatusWriter writer;
    std::string problem;
    bool isolation = false;
    bool shut_down = false;
    HostLayout layout;
    std::map<std::string, std::shared_ptr<PodRecord>> pods;  // uid -> pod (incl. being removed)
    std::set<pid_t> exec_pids;                               // running exec processes (groups)

    fs::path pods_dir() const { return options.data_dir / "pods"; }

    void log(const std::string& line) const { options.logger.warning("local cluster kubelet: " + line); }

    // ---- setup ----

    void prepare_layout() {
        for (const char* name : {"bin", "lib", "lib32", "lib64", "libx32", "sbin", "etc"}) {
            fs::path p = fs::path("/") / name;
            error_code ec;
            auto st = fs::symlink_status(p, ec);
            if (ec) continue;
            if (fs::is_symlink(st)) {
                layout.symlinks[name] = fs::read_symlink(p, ec).string();
            } else if (fs::is_directory(st)) {
                layout.dirs.push_back(name);
            }
        }
        if (::geteuid() == 0) layout.outer_uid = kOuterUid;
        layout.busybox_root = options.data_dir / "images" / "busybox";
    }

    // Makes a directory the sandbox user (the outer uid when we are root) can write.
    void make_dir(const fs::path& p) {
        error_code ec;
        fs::create_directories(p, ec);
        if (layout.outer_uid) {
            if (::chown(p.c_str(), *layout.outer_uid, *layout.outer_uid) != 0)
                log("chown " + p.string() + ": " + std::strerror(errno));
        }
    }

    bool build_busybox_root(std::string& why) {
        fs::path root = layout.busybox_root;
        error_code ec;
        if (fs::exists(root / "bin" / "busybox", ec)) return true;
        fs::path source;
        for (const char* c : {"/bin/busybox", "/usr/bin/busybox"}) {
            if (fs::exists(c, ec)) source = c;
        }
        if (source.empty()) {
            why = "busybox images need a static busybox (apt-get install busybox-static)";
            return false;
        }
        fs::path tmp = root.string() + ".tmp" + random_hex(6);
        fs::create_directories(tmp / "bin", ec);
        for (const char* d : {"usr/bin", "usr/sbin", "sbin", "etc", "root", "home", "var", "proc", "dev", "tmp"}) {
            fs::create_directories(tmp / d, ec);
        }
        fs::copy_file(source, tmp / "bin" / "busybox", fs::copy_options::overwrite_existing, ec);
        if (ec) {
            why = "copying busybox: " + ec.message();
            return false;
        }
        // Applets at their usual places (busybox --list-full), as symlinks to /bin/busybox.
        Fd out;
        int p[2];
        if (::pipe2(p, O_CLOEXEC) != 0) return false;
        Fd rd(p[0]);
        out = Fd(p[1]);
        Spawn s{{source.string(), "--list-full"}, {"PATH=/usr/bin:/bin"}, {{out.fd, 1}}, false};
        pid_t pid = s.run();
        out.reset();
        std::string list;
        char buf[4096];
        ssize_t n;
        while ((n = ::read(rd.fd, buf, sizeof buf)) > 0) list.append(buf, static_cast<std::size_t>(n));
        if (pid > 0) {
            int st;
            ::waitpid(pid, &st, 0);
        }
        std::istringstream lines(list);
        std::string applet;
        while (std::getline(lines, applet)) {
            if (applet.empty() || applet == "bin/busybox") continue;
            fs::path link = tmp / applet;
            fs::create_directories(link.parent_path(), ec);
            fs::create_symlink("/bin/busybox", link, ec);
        }
        std::ofstream(tmp / "etc" / "passwd")
            << "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n";
        std::ofstream(tmp / "etc" / "group") << "root:x:0:\nnogroup:x:65534:\n";
        fs::rename(tmp, root, ec);
        if (ec && !fs::exists(root / "bin" / "busybox")) {
            why = "installing the busybox root: " + ec.message();
            return false;
        }
        fs::remove_all(tmp, ec);
        return true;
    }

    // The configured bubblewrap program in place of the plain name bwrap_argv puts in.
    void use_bwrap_program(std::vector<std::string>& argv) const {
        if (options.bwrap_program.empty() || options.bwrap_program == "bwrap") return;
        for (auto& a : argv)
            if (a == "bwrap") {
                a = options.bwrap_program;
                return;
            }
    }

    // Runs a throw-away sandbox the way pods run: namespaces + a bind from data_dir.
    void probe_isolation() {
        fs::path probe = options.data_dir / "pods" / ".probe";
        make_dir(probe);
        ContainerPlan plan;
        plan.root.kind = ImageRoot::Kind::host;
        plan.argv = {"true"};
        plan.working_dir = "/probe";
        plan.uid = 1000;
        plan.gid = 1000;
        plan.mounts.push_back(MountPlan{"", probe, "/probe", false});
        auto argv = bwrap_argv(plan, layout, "probe", 3, {});
        use_bwrap_program(argv);
        int p[2];
        if (::pipe2(p, O_CLOEXEC) != 0) {
            problem = "pipe failed";
            return;
        }
        Fd rd(p[0]), wr(p[1]);
        Fd err(
            ::open((options.data_dir / "pods" / ".probe.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
        Spawn s{argv, {"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"}, {{wr.fd, 3}}, true};
        if (err.fd >= 0) s.dups.push_back({err.fd, 2});
        pid_t pid = s.run();
        wr.reset();
        if (pid < 0) {
            problem = "cannot start bubblewrap (" + argv[0] + "): " + std::strerror(-pid) +
                      "; install the bubblewrap package";
            return;
        }
        int st = 0;
        auto deadline = std::chrono::steady_clock::now() + 10s;
        while (::waitpid(pid, &st, WNOHANG) == 0) {
            if (std::chrono::steady_clock::now() > deadline) {
                ::kill(pid, SIGKILL);
                ::waitpid(pid, &st, 0);
                problem = "bubblewrap did not finish a trivial sandbox within 10 s";
                return;
            }
            ::usleep(5000);
        }
        if (exit_code_of(st) != 0) {
            std::ifstream in(options.data_dir / "pods" / ".probe.log");
            std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
            while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
            problem = "bubblewrap cannot create the pod namespaces here (exit " + std::to_string(exit_code_of(st)) +
                      "): " + text + " (user namespaces must be enabled; data_dir must be reachable by uid " +
                      std::to_string(layout.outer_uid.value_or(::geteuid())) + ")";
            return;
        }
        isolation = true;
    }

    // ---- status ----

    json::object build_status(PodRecord& p) {
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
        json::object scheduled{{"type", "PodScheduled"},
                               {"status", "True"},
                               {"lastProbeTime", nullptr},
                               {"lastTransitionTime", p.start_time}};
        for (const auto& c : arr(p.base_status, "conditions")) {
            if (c.is_object() && str(c.get_object(), "type") == "PodScheduled") scheduled = c.get_object();
        }
        conditions.push_back(scheduled);

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
                 json::object{{"waiting",
                               json::object{{"reason", "CreateContainerError"},
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

    void publish(const std::shared_ptr<PodRecord>& p) {
        if (shut_down || p->removed || !writer) return;
        auto status = build_status(*p);
        // Posted: the writer re-enters the store, which may call pod_changed again.
        asio::post(executor, [this, p, status = std::move(status), alive = alive_token]() mutable {
            if (alive.expired() || shut_down || p->removed) return;
            writer(p->ns, p->name, p->uid, std::move(status));
        });
    }

    std::weak_ptr<void> alive_token;

    // ---- processes ----

    // Starts the container; fills pid/pidfd; returns the bwrap info pipe (read end) or an error text.
    std::variant<Fd, std::string> start(PodRecord& p) {
        const ContainerPlan& plan = *p.plan;
        make_dir(p.dir / "workspace");
        make_dir(p.dir / "tmp");
        make_dir(p.dir / "volumes");
        make_dir(p.dir / "unsupported-volume");
        for (const auto& m : plan.mounts) make_dir(m.host_path);
        Fd log_fd(::open((p.dir / "container.log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
        Fd null_in(::open("/dev/null", O_RDONLY | O_CLOEXEC));
        if (log_fd.fd < 0 || null_in.fd < 0)
            return std::string("cannot open the container log: ") + std::strerror(errno);
        Spawn s;
        s.env = plan.env;
        s.new_group = true;
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
            s.argv = bwrap_argv(plan, layout, p.name, 3, entries);
            use_bwrap_program(s.argv);
            s.dups.push_back({info_wr.fd, 3});
            // posix_spawnp searches the caller's PATH for setpriv/bwrap; the child gets plan.env.
            p.pid = s.run();
        } else {
            log("WARNING: pod " + p.ns + "/" + p.name + " runs WITHOUT isolation (allow_no_isolation)");
            fs::path cwd = plan.working_dir;
            // Without namespaces the mounts cannot be placed; run in the pod's workspace.
            s.argv = {"/bin/sh", "-c", "cd \"$0\" && exec \"$@\"", (p.dir / "workspace").string()};
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

    void kill_pod(PodRecord& p, int sig) {
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

    asio::awaitable<void> wait_exit(int pidfd, pid_t pid, int& code) {
        code = co_await reap_child(executor, pidfd, pid);
    }

    asio::awaitable<int> read_child_pid(Fd fd) {
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

    // bwrap reports child-pid before the sandbox is set up; the sandbox is complete once its
    // init has forked the command and the command has exec'd (exec/nsenter joins only then).
    asio::awaitable<void> wait_sandbox_ready(PodRecord& p) {
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

    // A container that fails on its own is worth a line: with restartPolicy Never its pod is over.
    void log_container_exit(const PodRecord& p, int code, std::chrono::steady_clock::time_point begun) const {
        auto ran = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - begun);
        std::string line = "pod " + p.ns + "/" + p.name + ": container exited with code " + std::to_string(code) +
                           (code > 128 ? " (signal " + std::to_string(code - 128) + ")" : std::string()) + " after " +
                           std::to_string(ran.count()) + " ms";
        std::ifstream in(p.dir / "container.log", std::ios::binary);
        std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        if (text.size() > 2000) text.erase(0, text.size() - 2000);
        if (!text.empty()) line += "; last output: " + text;
        log(line);
    }

    asio::awaitable<void> run_pod(std::shared_ptr<PodRecord> p) {
        auto gone = [&] { return shut_down || p->removed; };
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
            if (gone() || p->stopping || p->deadline_hit) co_return;
            p->state =
                json::object{{"waiting", json::object{{"reason", "ImagePullBackOff"},
                                                      {"message", "Back-off pulling image \"" + p->image + "\""}}}};
            publish(p);
            co_return;
        }
        p->plan = std::move(planned.plan);
        p->image_id = p->plan->root.id;
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
            if (p->stopping || p->deadline_hit) break;
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
                    if (gone()) co_return;
                    co_await wait_sandbox_ready(*p);
                    if (gone()) co_return;
                }
                p->container_id =
                    "local://" + p->uid.substr(0, 8) + "-" + std::to_string(p->restart_count) + "-" + random_hex(8);
                p->state = json::object{{"running", json::object{{"startedAt", started_at}}}};
                p->ready = true;
                p->started = true;
                p->phase = "Running";
                publish(p);
                co_await wait_exit(p->pidfd, p->pid, code);
                if (p->pidfd >= 0) ::close(p->pidfd);
                p->pidfd = -1;
                p->pid = -1;
                p->inner_pid = 0;
                if (gone()) co_return;
                if (code != 0 && !p->stopping && !p->deadline_hit) log_container_exit(*p, code, begun);
            }
            p->ready = false;
            p->started = false;
            json::object term{{"exitCode", code},
                              {"reason", !fail_message.empty() ? "ContainerCannotRun"
                                         : code == 0           ? "Completed"
                                                               : "Error"},
                              {"startedAt", started_at},
                              {"finishedAt", now_time()}};
            if (!fail_message.empty()) term["message"] = fail_message;
            if (!p->container_id.empty()) term["containerID"] = p->container_id;
            p->state = json::object{{"terminated", term}};
            bool terminal = p->stopping || p->deadline_hit || policy == "Never" || (policy == "OnFailure" && code == 0);
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
            if (p->stopping || p->deadline_hit) break;
            ++p->restart_count;
        }
        // Terminal.
        if (!p->state.contains("terminated")) {
            json::object term{{"exitCode", 137}, {"reason", "Error"}, {"finishedAt", now_time()}};
            if (auto* last = p->last_state.if_contains("terminated")) term = last->get_object();
            p->state = json::object{{"terminated", term}};
        }
        std::int64_t code = num(obj(p->state, "terminated"), "exitCode").value_or(1);
        if (p->deadline_hit) {
            p->phase = "Failed";
            p->reason = "DeadlineExceeded";
            p->message = "Pod was active on the node longer than the specified deadline";
        } else {
            p->phase = code == 0 ? "Succeeded" : "Failed";
        }
        p->ready = false;
        p->finished = true;
        p->deadline_timer.cancel();
        p->grace_timer.cancel();
        publish(p);
    }

    asio::awaitable<void> run_deadline(std::shared_ptr<PodRecord> p, std::int64_t seconds) {
        p->deadline_timer.expires_after(std::chrono::seconds(seconds));
        auto [ec] = co_await p->deadline_timer.async_wait(tuple_awaitable);
        if (ec || shut_down || p->removed || p->finished) co_return;
        p->deadline_hit = true;
        if (p->pid > 0) {
            kill_pod(*p, SIGKILL);
        } else {
            p->timer.cancel();
            if (!p->plan) {
                // Never started (image error): the pod fails without a container.
                p->phase = "Failed";
                p->reason = "DeadlineExceeded";
                p->message = "Pod was active on the node longer than the specified deadline";
                p->finished = true;
                publish(p);
            }
        }
    }

    asio::awaitable<void> run_grace(std::shared_ptr<PodRecord> p, std::int64_t seconds) {
        kill_pod(*p, SIGTERM);
        p->timer.cancel();
        p->grace_timer.expires_after(std::chrono::seconds(std::max<std::int64_t>(seconds, 0)));
        auto [ec] = co_await p->grace_timer.async_wait(tuple_awaitable);
        if (ec || shut_down || p->removed) co_return;
        kill_pod(*p, SIGKILL);
        if (p->pid <= 0 && !p->finished) {
            // Nothing was running (pending, or waiting in back-off).
            p->finished = true;
            if (!p->state.contains("terminated")) {
                p->phase = "Failed";
            }
            publish(p);
        }
    }

    void remove_pod_dir(const std::shared_ptr<PodRecord>& p) {
        error_code ec;
        fs::remove_all(p->dir, ec);
    }

    asio::awaitable<void> reap_removed(std::shared_ptr<PodRecord> p) {
        if (p->pid > 0) {
            int code = 0;
            co_await wait_exit(p->pidfd, p->pid, code);
        }
        if (shut_down) co_return;
        remove_pod_dir(p);
        if (auto it = pods.find(p->uid); it != pods.end() && it->second == p) pods.erase(it);
    }

    // Detached pod coroutines may outlive the Kubelet object: each holds the Core alive.
    void spawn(asio::awaitable<void> a) {
        auto keep = self.lock();
        auto run = [keep, a = std::move(a)]() mutable -> asio::awaitable<void> { co_await std::move(a); };
        asio::co_spawn(executor, std::move(run), asio::detached);
    }
    std::weak_ptr<Core> self;
};

struct Kubelet::Impl {
    std::shared_ptr<Core> core;
    std::shared_ptr<int> alive = std::make_shared<int>(0);
};

Kubelet::Kubelet(asio::any_io_executor executor, KubeletOptions options, PodStatusWriter status_writer)
    : impl_(std::make_unique<Impl>()) {
    auto core = std::make_shared<Core>();
    core->self = core;
    core->executor = std::move(executor);
    core->options = std::move(options);
    core->writer = std::move(status_writer);
    core->alive_token = impl_->alive;
    if (core->options.data_dir.empty())
        core->options.data_dir = fs::temp_directory_path() / ("kubesandbox-kubelet-" + random_hex(8));
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
    core->probe_isolation();
    if (!core->isolation) {
        core->log("isolation unavailable: " + core->problem +
                  (core->options.allow_no_isolation ? " -- pods will run UNISOLATED (allow_no_isolation)" : ""));
    }
    impl_->core = std::move(core);
}

Kubelet::~Kubelet() { shutdown(); }

bool Kubelet::isolation_available() const { return impl_->core->isolation; }
const std::string& Kubelet::isolation_problem() const { return impl_->core->problem; }

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
    }
}

// ---------------------------------------------------------------------------------------------
// Exec

namespace {

struct ExecQuery {
    std::vector<std::string> command;
    std::string container;
    bool has_container = false;
    bool in = false, out = false, err = false, tty = false;
};

ExecQuery parse_exec_query(std::string_view target) {
    ExecQuery q;
    auto url = boost::urls::parse_origin_form(target);
    if (!url) return q;
    std::map<std::string, std::optional<std::string>> flags;
    for (auto param : url->params()) {
        if (param.key == "command") {
            q.command.push_back(param.value);
        } else if (param.key == "container") {
            q.container = param.value;
            q.has_container = true;
        } else {
            flags[param.key] =
                param.has_value ? std::optional<std::string>(param.value) : std::optional<std::string>("");
        }
    }
    auto flag = [&](const char* k) -> bool {
        auto it = flags.find(k);
        if (it == flags.end()) return false;
        return query_bool(it->second ? std::optional<std::string_view>(*it->second) : std::nullopt);
    };
    q.in = flag("stdin");
    q.out = flag("stdout");
    q.err = flag("stderr");
    q.tty = flag("tty");
    return q;
}

std::vector<std::string> container_names(const json::object& pod) {
    std::vector<std::string> names;
    for (const auto& c : arr(obj(pod, "spec"), "containers")) {
        if (c.is_object()) names.push_back(str(c.get_object(), "name"));
    }
    return names;
}

// Resolves the container of an exec/log request; on failure returns the 400 message.
std::optional<std::string> pick_container(const json::object& pod, bool has_container, std::string& container) {
    auto names = container_names(pod);
    std::string pod_name = str(obj(pod, "metadata"), "name");
    if (!has_container || container.empty()) {
        if (names.size() == 1) {
            container = names[0];
            return std::nullopt;
        }
        std::string list;
        for (const auto& n : names) list += (list.empty() ? "" : " ") + n;
        return "a container name must be specified for pod " + pod_name + ", choose one of: [" + list + "]";
    }
    if (std::find(names.begin(), names.end(), container) == names.end()) {
        return "container " + container + " is not valid for pod " + pod_name;
    }
    return std::nullopt;
}

struct ExecSession {
    using Ws = websocket::stream<ExecStream>;
    ExecSession(asio::any_io_executor ex, net::AnyStream& s, beast::flat_buffer& pre)
        : ws(s, pre, sniffer), gate(ex), in_sd(ex), out_sd(ex), err_sd(ex), close_timer(ex), watch_timer(ex) {}
    FrameSniffer sniffer;
    Ws ws;
    WriteGate gate;
    bool v5 = true;
    asio::posix::stream_descriptor in_sd, out_sd, err_sd;
    asio::steady_timer close_timer, watch_timer;
    pid_t pid = -1;
    int pidfd = -1;
    bool exited = false;
    bool reader_done = false;
    bool closing = false;
    int pumps_left = 0;
    int pumps_writing = 0;
    std::uint64_t progress = 0;

    asio::awaitable<error_code> send(unsigned char channel, const void* data, std::size_t n) {
        std::string msg(1, static_cast<char>(channel));
        msg.append(static_cast<const char*>(data), n);
        co_await gate.lock();
        auto [ec, written] = co_await ws.async_write(asio::buffer(msg), tuple_awaitable);
        (void)written;
        gate.unlock();
        co_return ec;
    }

    void kill_process() {
        if (pid > 0 && !exited) {
            ::kill(-pid, SIGKILL);
            ::kill(pid, SIGKILL);
        }
    }

    asio::awaitable<void> pump(asio::posix::stream_descriptor& sd, unsigned char channel) {
        std::vector<char> buf(kChunk + 1);
        buf[0] = static_cast<char>(channel);
        for (;;) {
            auto [ec, n] = co_await sd.async_read_some(asio::buffer(buf.data() + 1, kChunk), tuple_awaitable);
            if (n > 0) {
                ++progress;
                ++pumps_writing;
                co_await gate.lock();
                auto [wec, w] = co_await ws.async_write(asio::buffer(buf.data(), n + 1), tuple_awaitable);
                (void)w;
                gate.unlock();
                --pumps_writing;
                if (wec) {
                    kill_process();  // nobody reads the output any more
                    break;
                }
            }
            if (ec) break;
        }
        error_code ignored;
        sd.close(ignored);
        if (--pumps_left == 0) watch_timer.cancel();
    }

    // After the process exited, output pipes may be held open by its background children:
    // stop pumping once nothing flows for a while.
    asio::awaitable<void> drain_watch() {
        std::uint64_t last = progress;
        while (pumps_left > 0) {
            watch_timer.expires_after(1s);
            co_await watch_timer.async_wait(tuple_awaitable);
            if (pumps_left == 0) break;
            if (progress == last && pumps_writing == 0) {
                error_code ignored;
                out_sd.cancel(ignored);
                err_sd.cancel(ignored);
                break;
            }
            last = progress;
        }
    }

    asio::awaitable<void> outputs(bool out, bool err) {
        if (out && err) {
            co_await (pump(out_sd, 1) && pump(err_sd, 2));
        } else if (out) {
            co_await pump(out_sd, 1);
        } else if (err) {
            co_await pump(err_sd, 2);
        }
    }

    asio::awaitable<int> wait_process() {
        int code = co_await reap_child(ws.get_executor(), pidfd, pid);
        if (pidfd >= 0) ::close(pidfd);
        pidfd = -1;
        exited = true;
        error_code ignored;
        in_sd.close(ignored);
        co_return code;
    }

    asio::awaitable<void> reader(bool want_stdin) {
        beast::flat_buffer buf;
        for (;;) {
            auto [ec, n] = co_await ws.async_read(buf, tuple_awaitable);
            (void)n;
            if (ec) break;
            bool violation = !ws.got_binary() || sniffer.fragmented();
            auto data = static_cast<const unsigned char*>(buf.data().data());
            std::size_t size = buf.size();
            if (!violation && size > 0) {
                unsigned ch = data[0];
                if (ch == 0) {
                    if (want_stdin && in_sd.is_open() && size > 1) {
                        auto [wec, w] =
                            co_await asio::async_write(in_sd, asio::buffer(data + 1, size - 1), tuple_awaitable);
                        (void)w;
                        if (wec) {
                            error_code ignored;
                            in_sd.close(ignored);
                        }
                    }
                } else if (ch == 255 && v5) {
                    if (size != 2 || data[1] > 4) {
                        violation = true;
                    } else if (data[1] == 0) {
                        error_code ignored;
                        in_sd.close(ignored);
                    }
                }
                // Channel 4 (resize) and others: ignored; there is no terminal.
            }
            buf.consume(buf.size());
            if (violation) {
                co_await gate.lock();
                closing = true;
                co_await ws.async_close(websocket::close_code::protocol_error, tuple_awaitable);
                gate.unlock();
                break;
            }
        }
        reader_done = true;
        close_timer.cancel();
        // Client gone (or protocol error): no one will read the result.
        if (!closing) kill_process();
        error_code ignored;
        in_sd.close(ignored);
        if (closing) kill_process();
    }

    asio::awaitable<void> main_flow(bool out, bool err, const std::vector<std::string>& command) {
        pumps_left = (out ? 1 : 0) + (err ? 1 : 0);
        co_await (outputs(out, err) && run_until_exit());
        int code = exit_code;
        if (!reader_done && !closing) {
            auto status = json::serialize(exec_exit_status(code, command));
            co_await send(3, status.data(), status.size());
            co_await gate.lock();
            closing = true;
            co_await ws.async_close(websocket::close_code::normal, tuple_awaitable);
            gate.unlock();
        }
        // Give the client a moment to answer the close, then cut the connection.
        if (!reader_done) {
            close_timer.expires_after(5s);
            co_await close_timer.async_wait(tuple_awaitable);
            if (!reader_done) ws.next_layer().next().close();
        }
    }

    int exit_code = 255;
    asio::awaitable<void> run_until_exit() {
        exit_code = co_await wait_process();
        if (pumps_left > 0) co_await drain_watch();
    }
};

}  // namespace

asio::awaitable<void> Kubelet::serve_exec(StreamRequest request) {
    auto core = impl_->core;
    auto& stream = request.stream;
    unsigned version = request.request.version();
    ExecQuery q = parse_exec_query(request.request.target());
    std::string container = q.container;
    if (auto bad = pick_container(request.pod, q.has_container, container)) {
        co_await write_status(stream, version, 400, "BadRequest", *bad);
        co_return;
    }
    if (q.command.empty()) {
        co_await write_status(stream, version, 400, "BadRequest",
                              "you must specify at least one command for the container");
        co_return;
    }
    if (!q.in && !q.out && !q.err) {
        co_await write_status(stream, version, 400, "BadRequest",
                              "you must specify at least 1 of stdin, stdout, stderr");
        co_return;
    }
    if (q.tty) q.err = false;  // a terminal merges stderr into stdout
    if (!websocket::is_upgrade(request.request)) {
        co_await write_status(
            stream, version, 400, "BadRequest",
            "the local cluster serves exec over WebSocket only (v5.channel.k8s.io, v4.channel.k8s.io)");
        co_return;
    }
    std::string protocol;
    {
        std::string offered(request.request[http::field::sec_websocket_protocol]);
        std::set<std::string> set;
        std::stringstream ss(offered);
        std::string item;
        while (std::getline(ss, item, ',')) {
            item.erase(0, item.find_first_not_of(" \t"));
            item.erase(item.find_last_not_of(" \t") + 1);
            set.insert(item);
        }
        if (set.count("v5.channel.k8s.io")) {
            protocol = "v5.channel.k8s.io";
        } else if (set.count("v4.channel.k8s.io")) {
            protocol = "v4.channel.k8s.io";
        }
    }
    if (protocol.empty()) {
        co_await write_response(stream, version, http::status::forbidden, "text/plain", "");
        co_return;
    }
    std::string uid = str(obj(request.pod, "metadata"), "uid");
    std::shared_ptr<PodRecord> pod;
    if (auto it = core->pods.find(uid); it != core->pods.end() && !it->second->removed) pod = it->second;
    // A pod published Ready can be a moment ahead of its process bookkeeping under load: wait
    // briefly in exactly that state instead of failing the exec.
    if (pod && pod->plan && container == pod->container_name) {
        asio::steady_timer settle(core->executor);
        for (int i = 0; i < 150 && !pod->removed && pod->ready && !pod->running(); ++i) {
            settle.expires_after(std::chrono::milliseconds(20));
            co_await settle.async_wait(tuple_awaitable);
        }
    }
    bool running = pod && pod->running() && pod->plan && container == pod->container_name;
    std::string not_found = "container not found (\"" + container + "\")";
    if (!running && protocol != "v5.channel.k8s.io") {
        co_await write_response(stream, version, http::status::internal_server_error, "text/plain", not_found);
        co_return;
    }

    auto session = std::make_unique<ExecSession>(core->executor, stream, request.buffer);
    auto& s = *session;
    s.v5 = protocol == "v5.channel.k8s.io";
    s.ws.set_option(websocket::stream_base::decorator(
        [protocol](websocket::response_type& res) { res.set(http::field::sec_websocket_protocol, protocol); }));
    s.ws.auto_fragment(false);
    s.ws.binary(true);
    s.ws.read_message_max(32 * 1024 * 1024);
    auto [aec] = co_await s.ws.async_accept(request.request, tuple_awaitable);
    if (aec) {
        stream.close();
        co_return;
    }
    auto fail_session = [&](std::string message) -> asio::awaitable<void> {
        auto body = json::serialize(exec_internal_error(message));
        co_await s.send(3, body.data(), body.size());
        co_await s.ws.async_close(websocket::close_code::normal, tuple_awaitable);
        beast::flat_buffer drain;
        stream.expires_after(5s);
        for (;;) {
            auto [ec, n] = co_await s.ws.async_read(drain, tuple_awaitable);
            (void)n;
            if (ec) break;
            drain.consume(drain.size());
        }
        stream.close();
    };
    if (!running) {
        co_await fail_session("unable to upgrade connection: " + not_found);
        co_return;
    }

    // The connected marker: an empty message on the lowest requested output channel.
    unsigned char marker = q.out ? 1 : q.err ? 2 : 3;
    co_await s.send(marker, nullptr, 0);

    // Pipes: ours non-blocking and close-on-exec; the child's ends are dup'ed onto 0/1/2.
    int in_p[2] = {-1, -1}, out_p[2] = {-1, -1}, err_p[2] = {-1, -1};
    Fd null_fd(::open("/dev/null", O_RDWR | O_CLOEXEC));
    bool ok = ::pipe2(in_p, O_CLOEXEC) == 0 && ::pipe2(out_p, O_CLOEXEC) == 0 && ::pipe2(err_p, O_CLOEXEC) == 0;
    Fd in_r(in_p[0]), in_w(in_p[1]), out_r(out_p[0]), out_w(out_p[1]), err_r(err_p[0]), err_w(err_p[1]);
    if (!ok || null_fd.fd < 0) {
        co_await fail_session(std::string("unable to create pipes: ") + std::strerror(errno));
        co_return;
    }
    Spawn sp;
    sp.env = pod->plan->env;
    sp.new_group = true;
    if (core->isolation) {
        sp.argv = exec_argv(*pod->plan, pod->inner_pid, q.command);
    } else {
        sp.argv = {"/bin/sh", "-c", "cd \"$0\" && exec \"$@\"", (pod->dir / "workspace").string()};
        sp.argv.insert(sp.argv.end(), q.command.begin(), q.command.end());
    }
    sp.dups = {{q.in ? in_r.fd : null_fd.fd, 0},
               {q.out ? out_w.fd : null_fd.fd, 1},
               {q.err ? err_w.fd : (q.tty && q.out ? out_w.fd : null_fd.fd), 2}};
    pid_t pid = sp.run();
    in_r.reset();
    out_w.reset();
    err_w.reset();
    if (pid < 0) {
        co_await fail_session(std::string("unable to start the command: ") + std::strerror(-pid));
        co_return;
    }
    s.pid = pid;
    s.pidfd = util::open_pidfd(pid);
    core->exec_pids.insert(pid);
    for (int fd : {in_w.fd, out_r.fd, err_r.fd}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    s.in_sd.assign(in_w.release());
    s.out_sd.assign(out_r.release());
    s.err_sd.assign(err_r.release());
    if (!q.in) {
        error_code ignored;
        s.in_sd.close(ignored);
    }
    stream.expires_never();
    co_await (s.reader(q.in) && s.main_flow(q.out, q.err, q.command));
    core->exec_pids.erase(pid);
    stream.close();
}

// ---------------------------------------------------------------------------------------------
// Port-forward

asio::awaitable<void> Kubelet::serve_portforward(StreamRequest request) {
    auto core = impl_->core;
    unsigned version = request.request.version();
    std::string uid = str(obj(request.pod, "metadata"), "uid");
    std::shared_ptr<PodRecord> pod;
    if (auto it = core->pods.find(uid); it != core->pods.end() && !it->second->removed) pod = it->second;
    if (!pod || !pod->running()) {
        co_await write_status(request.stream, version, 400, "BadRequest",
                              "pod " + str(obj(request.pod, "metadata"), "name") + " is not running");
        co_return;
    }
    co_await serve_port_forward(std::move(request), pod->inner_pid);
}

// ---------------------------------------------------------------------------------------------
// Logs

namespace {

// The last `lines` lines of the file's first `size` bytes: the offset they start at.
std::uint64_t tail_offset(int fd, std::uint64_t size, std::int64_t lines) {
    if (lines < 0) return 0;
    if (lines == 0) return size;
    std::uint64_t pos = size;
    std::int64_t seen = 0;
    char buf[8192];
    bool first = true;
    while (pos > 0) {
        std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(sizeof buf, pos));
        pos -= n;
        if (::pread(fd, buf, n, static_cast<off_t>(pos)) != static_cast<ssize_t>(n)) return 0;
        for (std::size_t i = n; i-- > 0;) {
            if (buf[i] == '\n') {
                // A trailing newline ends the last line rather than starting an empty one.
                if (first && pos + i == size - 1) {
                    first = false;
                    continue;
                }
                if (++seen == lines) return pos + i + 1;
            }
            first = false;
        }
    }
    return 0;
}

}  // namespace

asio::awaitable<void> Kubelet::serve_log(StreamRequest request) {
    auto core = impl_->core;
    auto& stream = request.stream;
    unsigned version = request.request.version();
    std::string pod_name = str(obj(request.pod, "metadata"), "name");
    std::map<std::string, std::string> params;
    bool has_container = false;
    if (auto url = boost::urls::parse_origin_form(request.request.target())) {
        for (auto p : url->params()) {
            params[p.key] = p.value;
            if (p.key == "container") has_container = true;
        }
    }
    std::string container = params["container"];
    if (auto bad = pick_container(request.pod, has_container, container)) {
        co_await write_status(stream, version, 400, "BadRequest", *bad);
        co_return;
    }
    auto flag = [&](const char* k) {
        auto it = params.find(k);
        return it != params.end() && query_bool(std::string_view(it->second));
    };
    std::string uid = str(obj(request.pod, "metadata"), "uid");
    std::shared_ptr<PodRecord> pod;
    if (auto it = core->pods.find(uid); it != core->pods.end() && !it->second->removed) pod = it->second;
    if (flag("previous")) {
        co_await write_status(
            stream, version, 400, "BadRequest",
            "previous terminated container \"" + container + "\" in pod \"" + pod_name + "\" not found");
        co_return;
    }
    fs::path file = core->pods_dir() / uid / "container.log";
    Fd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
    if (!pod || container != pod->container_name || fd.fd < 0) {
        std::string reason = "ContainerCreating";
        if (pod && container == pod->container_name) {
            if (auto* w = pod->state.if_contains("waiting"); w && w->is_object())
                reason = str(w->get_object(), "reason");
        }
        std::string msg = "container \"" + container + "\" in pod \"" + pod_name + "\" is waiting to start: " + reason;
        if (reason == "ErrImagePull" || reason == "ImagePullBackOff") {
            msg = "container \"" + container + "\" in pod \"" + pod_name +
                  "\" is waiting to start: trying and failing to pull image";
        }
        co_await write_status(stream, version, 400, "BadRequest", msg);
        co_return;
    }
    std::int64_t tail = -1;
    std::int64_t limit = -1;
    auto parse_int = [](const std::string& text, std::int64_t& out) {
        if (text.empty()) return true;
        char* end = nullptr;
        errno = 0;
        long long v = std::strtoll(text.c_str(), &end, 10);
        if (errno != 0 || *end != '\0') return false;
        out = v;
        return true;
    };
    if (!parse_int(params["tailLines"], tail) || !parse_int(params["limitBytes"], limit)) {
        co_await write_status(stream, version, 400, "BadRequest", "invalid tailLines or limitBytes");
        co_return;
    }
    bool follow = flag("follow");
    struct stat st {};
    ::fstat(fd.fd, &st);
    std::uint64_t offset = tail_offset(fd.fd, static_cast<std::uint64_t>(st.st_size), tail);
    std::uint64_t sent = 0;
    auto budget = [&]() -> std::uint64_t {
        return limit < 0 ? UINT64_MAX : static_cast<std::uint64_t>(limit) - std::min<std::uint64_t>(sent, limit);
    };

    std::string head =
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nCache-Control: no-cache, private\r\n"
        "Connection: close\r\nTransfer-Encoding: chunked\r\n\r\n";
    stream.expires_never();
    auto [hec, hn] = co_await asio::async_write(stream, asio::buffer(head), tuple_awaitable);
    (void)hn;
    if (hec) {
        stream.close();
        co_return;
    }
    bool client_gone = false;
    auto watch_client = [&]() -> asio::awaitable<void> {
        char b[512];
        for (;;) {
            auto [ec, n] = co_await stream.async_read_some(asio::buffer(b), tuple_awaitable);
            (void)n;
            if (ec) break;
        }
        client_gone = true;
    };
    auto send_loop = [&]() -> asio::awaitable<void> {
        std::vector<char> buf(64 * 1024);
        asio::steady_timer timer(core->executor);
        for (;;) {
            std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), budget()));
            ssize_t n = want == 0 ? 0 : ::pread(fd.fd, buf.data(), want, static_cast<off_t>(offset));
            if (n > 0) {
                offset += static_cast<std::uint64_t>(n);
                sent += static_cast<std::uint64_t>(n);
                char size_line[32];
                int len = std::snprintf(size_line, sizeof size_line, "%zx\r\n", static_cast<std::size_t>(n));
                std::array<asio::const_buffer, 3> parts{asio::buffer(size_line, static_cast<std::size_t>(len)),
                                                        asio::buffer(buf.data(), static_cast<std::size_t>(n)),
                                                        asio::buffer("\r\n", 2)};
                auto [ec, w] = co_await asio::async_write(stream, parts, tuple_awaitable);
                (void)w;
                if (ec) co_return;
                continue;
            }
            if (!follow || budget() == 0 || client_gone) break;
            // Follow: stop once the container is no longer running and the file is drained.
            bool live = pod && !pod->removed && !core->shut_down && !pod->finished;
            if (!live) break;
            timer.expires_after(200ms);
            co_await timer.async_wait(tuple_awaitable);
        }
        auto [ec, w] = co_await asio::async_write(stream, asio::buffer("0\r\n\r\n", 5), tuple_awaitable);
        (void)ec;
        (void)w;
    };
    if (follow) {
        // Both return normally (errors as values), so the race cannot hide an exception.
        auto loop = send_loop();
        auto watch = watch_client();
        co_await (std::move(loop) || std::move(watch));
    } else {
        co_await send_loop();
    }
    co_await stream.async_shutdown(tuple_awaitable);
    stream.close();
}

}  // namespace kubesandbox::local
