// Sans-IO parts of the local kubelet: image resolution, turning a pod spec into a launch plan
// (bubblewrap arguments, environment, user), container/pod status JSON, exec channel helpers.
#pragma once

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kubesandbox::local {

// Where a container's root filesystem comes from.
struct ImageRoot {
    enum class Kind { host, busybox, directory } kind = Kind::host;
    std::filesystem::path directory;  // for Kind::directory
    std::string id;                   // imageID reported in containerStatuses
    // An agent-sandbox runtime image: the kubelet mounts kubesandbox-runtime at runtime_path and
    // runs it by default, as user 1000 in /app (python-runtime's defaults).
    bool runtime = false;
};

inline constexpr const char* runtime_path = "/.kubesandbox/sandbox-runtime";

// Maps an image reference to a root. `images` (exact name, or prefix ending in '*') wins over the
// defaults: python*, ubuntu*, debian* -> host userland; busybox* -> busybox root; images whose
// last path component is python-runtime-sandbox* (agent-sandbox's runtime) or busybox-runtime*
// -> host or busybox root running kubesandbox-runtime. A value may carry "+runtime" ("host",
// "busybox" or a directory, then "+runtime"). A leading "docker.io/library/" or "docker.io/" is
// ignored when matching. nullopt = unknown image.
std::optional<ImageRoot> resolve_image(const std::map<std::string, std::string>& images, std::string_view image);

// The command an image runs when the container gives none (the image's CMD): these exit at
// once without a terminal, as they do on a real node.
std::vector<std::string> default_image_command(std::string_view image, const ImageRoot& root);

struct MountPlan {
    std::string name;                 // volume name, or "" for the implicit workspace / tmp
    std::filesystem::path host_path;  // below the pod directory
    std::string path;                 // mount path inside the container
    bool read_only = false;
    std::string sub_path;  // below host_path; resolved at start without following symlinks
};

// resources.limits as the local kubelet enforces them (plus a pids limit of its own).
struct ResourceLimits {
    std::optional<std::int64_t> memory_bytes;
    std::optional<std::int64_t> cpu_millis;
    std::optional<std::int64_t> ephemeral_storage_bytes;
    std::string ephemeral_storage_text;  // as written in the spec, for messages
    std::int64_t pids = 4096;            // no Kubernetes field: a node's pod pids limit
};

// An emptyDir volume's sizeLimit.
struct EmptyDirLimit {
    std::string name;
    std::int64_t bytes = 0;
    std::string text;  // as written in the spec, for messages
};

// A Kubernetes quantity ("64Mi", "1G", "500m", "1.5", "2e3") in base units, or in thousandths
// of them when `milli` (CPU); nullopt when malformed, negative or too large.
std::optional<std::int64_t> parse_quantity(std::string_view quantity, bool milli);

// Everything needed to start (and exec into) one container.
struct ContainerPlan {
    std::string name;
    std::string image;
    ImageRoot root;
    std::vector<std::string> argv;  // command + args
    std::vector<std::string> env;   // "KEY=VALUE", final environment
    std::string working_dir;        // cwd inside the container
    std::uint32_t uid = 0;
    std::uint32_t gid = 0;
    std::vector<MountPlan> mounts;  // emptyDir volumes, workspace, /tmp
    bool read_only_root = false;
    bool drop_all_caps = false;
    // The runtime-default seccomp filter (seccomp_filter.hpp) unless the container's or the
    // pod's securityContext.seccompProfile.type is Unconfined.
    bool seccomp = true;
    bool host_network = false;  // spec.hostNetwork: the host's network namespace, as Kubernetes does
    // readinessProbe.httpGet.port or tcpSocket.port (a number, or a named container port).
    std::optional<std::uint16_t> readiness_port;
    ResourceLimits limits;
    std::vector<EmptyDirLimit> empty_dir_limits;  // every emptyDir of the pod with a sizeLimit
    std::vector<std::string> warnings;            // unsupported fields that were ignored
};

// A pod spec the local kubelet cannot run as asked: waiting reason + message.
struct PlanError {
    std::string reason;  // ErrImagePull, CreateContainerConfigError, ...
    std::string message;
};

// Builds the plan of spec.containers[index] (or initContainers when `init`). `pod_dir` is
// data_dir/pods/<uid>.
struct PlanResult {
    std::optional<ContainerPlan> plan;
    std::optional<PlanError> error;
};
PlanResult plan_container(const boost::json::object& pod, const boost::json::object& container,
                          const std::map<std::string, std::string>& images, const std::filesystem::path& pod_dir);

// Host layout facts the bwrap command line depends on (so argv building stays pure).
struct HostLayout {
    // Top-level entries of the host root that are symlinks (merged /usr): name -> target.
    std::map<std::string, std::string> symlinks;
    std::vector<std::string> dirs;  // top-level system dirs that exist as real directories
    // Busybox / directory roots: top-level entries of the root, name -> is_symlink target or "".
    std::filesystem::path busybox_root;
    // kubesandbox-runtime as pods see it (a copy below the data dir); empty when unavailable.
    std::filesystem::path runtime_program;
    // kubesandbox-enter on the host (exec into pods); empty when unavailable.
    std::filesystem::path enter_program;
    // When set, bwrap runs as this unprivileged host uid/gid (through setpriv) because running
    // the sandbox's user namespace on top of host root would make host root's files the pod's.
    std::optional<std::uint32_t> outer_uid;
};

// The full argv (setpriv + bwrap + command) to start the container. `info_fd` is the fd bwrap
// writes its child-pid JSON to; `seccomp_fd` (-1: none) the one it reads the filter from, used
// when the plan asks for it. `root_entries` lists the top-level names of a non-host root.
std::vector<std::string> bwrap_argv(const ContainerPlan& plan, const HostLayout& layout, const std::string& hostname,
                                    int info_fd, int seccomp_fd,
                                    const std::vector<std::pair<std::string, std::string>>& root_entries);

// argv for running `command` inside a running pod through kubesandbox-enter: the pod's
// namespaces (those of `pod_pid`, its first process), user, capabilities, seccomp filter and
// the cgroups whose cgroup.procs files are given.
// `pidfd_fd` (-1: none) is the descriptor number at which the command gets a pidfd of `pod_pid`.
std::vector<std::string> exec_argv(const ContainerPlan& plan, const HostLayout& layout, int pod_pid, int pidfd_fd,
                                   const std::vector<std::string>& cgroup_procs,
                                   const std::vector<std::string>& command);

// argv for the pod's spawner: kubesandbox-enter as above, serving the socket at descriptor 3
// instead of running one command (pod_spawner.hpp).
std::vector<std::string> spawner_argv(const ContainerPlan& plan, const HostLayout& layout, int pod_pid, int pidfd_fd,
                                      const std::vector<std::string>& cgroup_procs);

// Parses {"child-pid": N, ...} from bwrap --info-fd output; 0 when absent.
int parse_child_pid(std::string_view info_json);

// RFC 3339 UTC timestamp with seconds, as the API uses.
std::string format_time(std::int64_t unix_seconds);

// Kubernetes' query boolean rule: absent, "0" or "false" (any case) -> false; otherwise true.
bool query_bool(std::optional<std::string_view> value);

// An exec request's query: the command (one `command` parameter per argument), the container and
// which streams it wants.
struct ExecQuery {
    std::vector<std::string> command;
    std::string container;
    bool has_container = false;
    bool in = false, out = false, err = false, tty = false;
};
ExecQuery parse_exec_query(std::string_view target);

// Channel-3 Status after an exec finished (v4/v5 shape: no kind/apiVersion).
boost::json::object exec_exit_status(int exit_code, const std::vector<std::string>& command);
// Channel-3 Status for an infrastructure failure (InternalError, code 500).
boost::json::object exec_internal_error(std::string_view message);

// Watches the raw client->server byte stream of a WebSocket and notices fragmented messages
// (FIN clear or continuation opcode), which the real server would mis-parse.
class FrameSniffer {
public:
    void feed(const unsigned char* data, std::size_t n);
    bool fragmented() const { return fragmented_; }

private:
    unsigned char header_[14] = {};
    std::size_t have_ = 0;    // header bytes collected
    std::uint64_t skip_ = 0;  // payload bytes left in the current frame
    bool fragmented_ = false;
};

}  // namespace kubesandbox::local
