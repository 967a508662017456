// Sans-IO parts of the local kubelet (see kubelet_plan.hpp).
#include "local/kubelet_plan.hpp"
#include "proto/validation.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/string.hpp>
#include <boost/json/value.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <ctime>
#include <set>

namespace kubesandbox::local {

namespace json = boost::json;

namespace {

std::string_view strip_registry(std::string_view image) {
    for (std::string_view prefix : {"docker.io/library/", "docker.io/", "index.docker.io/library/"}) {
        if (image.substr(0, prefix.size()) == prefix) return image.substr(prefix.size());
    }
    return image;
}

bool pattern_matches(std::string_view pattern, std::string_view image) {
    if (!pattern.empty() && pattern.back() == '*') {
        auto prefix = pattern.substr(0, pattern.size() - 1);
        return image.substr(0, prefix.size()) == prefix;
    }
    return pattern == image;
}

ImageRoot root_from_value(std::string value) {
    ImageRoot root;
    constexpr std::string_view runtime_suffix = "+runtime";
    if (value.size() > runtime_suffix.size() &&
        std::string_view(value).substr(value.size() - runtime_suffix.size()) == runtime_suffix) {
        root.runtime = true;
        value.resize(value.size() - runtime_suffix.size());
    }
    if (value == "host") {
        root.kind = ImageRoot::Kind::host;
        root.id = "local://host";
    } else if (value == "busybox") {
        root.kind = ImageRoot::Kind::busybox;
        root.id = "local://busybox";
    } else {
        root.kind = ImageRoot::Kind::directory;
        root.directory = value;
        root.id = "local://" + value;
    }
    return root;
}

std::string get_string(const json::object& o, std::string_view key) {
    if (auto* v = o.if_contains(key); v && v->is_string()) return std::string(v->get_string());
    return {};
}

const json::object* get_object(const json::object& o, std::string_view key) {
    if (auto* v = o.if_contains(key); v && v->is_object()) return &v->get_object();
    return nullptr;
}

const json::array* get_array(const json::object& o, std::string_view key) {
    if (auto* v = o.if_contains(key); v && v->is_array()) return &v->get_array();
    return nullptr;
}

std::optional<std::int64_t> get_int(const json::object* o, std::string_view key) {
    if (!o) return std::nullopt;
    auto* v = o->if_contains(key);
    if (!v) return std::nullopt;
    if (v->is_int64()) return v->get_int64();
    if (v->is_uint64()) return static_cast<std::int64_t>(v->get_uint64());
    return std::nullopt;
}

std::optional<bool> get_bool(const json::object* o, std::string_view key) {
    if (!o) return std::nullopt;
    if (auto* v = o->if_contains(key); v && v->is_bool()) return v->get_bool();
    return std::nullopt;
}

}  // namespace

std::optional<ImageRoot> resolve_image(const std::map<std::string, std::string>& images, std::string_view image) {
    if (image.empty()) return std::nullopt;
    std::string_view short_name = strip_registry(image);
    // Exact entries first, then the longest matching prefix.
    for (std::string_view candidate : {image, short_name}) {
        if (auto it = images.find(std::string(candidate)); it != images.end()) return root_from_value(it->second);
    }
    const std::pair<const std::string, std::string>* best = nullptr;
    for (const auto& entry : images) {
        if (pattern_matches(entry.first, image) || pattern_matches(entry.first, short_name)) {
            if (!best || entry.first.size() > best->first.size()) best = &entry;
        }
    }
    if (best) return root_from_value(best->second);
    // The runtime images are known by their last path component, whatever the registry.
    std::string_view last = short_name.substr(short_name.find_last_of('/') + 1);
    for (const auto& [pattern, value] :
         {std::pair<std::string_view, std::string_view>{"python-runtime-sandbox*", "host+runtime"},
          {"busybox-runtime*", "busybox+runtime"}}) {
        if (pattern_matches(pattern, last)) return root_from_value(std::string(value));
    }
    static const std::pair<std::string_view, std::string_view> defaults[] = {
        {"python", "host"},  {"python:*", "host"}, {"python@*", "host"},
        {"ubuntu*", "host"}, {"debian*", "host"},  {"busybox*", "busybox"},
    };
    for (const auto& [pattern, value] : defaults) {
        if (pattern_matches(pattern, short_name)) return root_from_value(std::string(value));
    }
    return std::nullopt;
}

std::vector<std::string> default_image_command(std::string_view image, const ImageRoot& root) {
    std::string_view name = strip_registry(image);
    if (root.runtime) return {runtime_path};
    if (root.kind == ImageRoot::Kind::host) {
        if (name.substr(0, 6) == "python") return {"python3"};
        return {"bash"};
    }
    return {"sh"};
}

std::optional<std::int64_t> parse_quantity(std::string_view q, bool milli) {
    // number: digits with an optional fraction and exponent; then a binary or decimal suffix.
    std::size_t i = 0;
    if (i < q.size() && q[i] == '+') ++i;
    std::size_t digits_start = i;
    while (i < q.size() && (std::isdigit(static_cast<unsigned char>(q[i])) || q[i] == '.')) ++i;
    std::string number(q.substr(digits_start, i - digits_start));
    if (number.empty() || number == "." || std::count(number.begin(), number.end(), '.') > 1) return std::nullopt;
    std::string_view suffix = q.substr(i);
    long double scale = 1;
    static const std::pair<std::string_view, long double> suffixes[] = {{"Ki", 1024.0L},
                                                                        {"Mi", 1048576.0L},
                                                                        {"Gi", 1073741824.0L},
                                                                        {"Ti", 1099511627776.0L},
                                                                        {"Pi", 1125899906842624.0L},
                                                                        {"Ei", 1152921504606846976.0L},
                                                                        {"n", 1e-9L},
                                                                        {"u", 1e-6L},
                                                                        {"m", 1e-3L},
                                                                        {"k", 1e3L},
                                                                        {"M", 1e6L},
                                                                        {"G", 1e9L},
                                                                        {"T", 1e12L},
                                                                        {"P", 1e15L},
                                                                        {"E", 1e18L},
                                                                        {"", 1.0L}};
    bool known = false;
    for (const auto& [name, value] : suffixes)
        if (suffix == name) {
            scale = value;
            known = true;
            break;
        }
    if (!known) {
        if (suffix.size() < 2 || (suffix[0] != 'e' && suffix[0] != 'E')) return std::nullopt;
        std::string exp(suffix.substr(1));
        if (exp.empty() || exp.size() > 3 || exp.find_first_not_of("+-0123456789") != std::string::npos)
            return std::nullopt;
        scale = std::pow(10.0L, std::stoi(exp));
    }
    long double value = std::stold(number) * scale * (milli ? 1000.0L : 1.0L);
    if (!(value >= 0) || value > 9.2e18L) return std::nullopt;
    return static_cast<std::int64_t>(std::ceil(value));  // Kubernetes rounds a fraction up
}

PlanResult plan_container(const json::object& pod, const json::object& container,
                          const std::map<std::string, std::string>& images, const std::filesystem::path& pod_dir) {
    PlanResult result;
    ContainerPlan plan;
    plan.name = get_string(container, "name");
    plan.image = get_string(container, "image");
    if (const json::value* spec = pod.if_contains("spec"); spec && spec->is_object())
        if (const json::value* host = spec->get_object().if_contains("hostNetwork"); host && host->is_bool())
            plan.host_network = host->get_bool();
    auto root = resolve_image(images, plan.image);
    if (!root) {
        result.error =
            PlanError{"ErrImagePull", "Failed to pull image \"" + plan.image +
                                          "\": rpc error: code = NotFound desc = failed to pull and unpack image \"" +
                                          plan.image +
                                          "\": image is not available in the local cluster (known images: python*, "
                                          "ubuntu*, debian*, busybox* and the configured ones)"};
        return result;
    }
    plan.root = *root;

    const json::object* spec = get_object(pod, "spec");
    static const json::object empty;
    if (!spec) spec = &empty;

    // Command: command replaces the image entrypoint, args its CMD.
    std::vector<std::string> command, args;
    if (auto* a = get_array(container, "command")) {
        for (const auto& v : *a) command.emplace_back(v.is_string() ? std::string(v.get_string()) : std::string());
    }
    if (auto* a = get_array(container, "args")) {
        for (const auto& v : *a) args.emplace_back(v.is_string() ? std::string(v.get_string()) : std::string());
    }
    if (command.empty())
        command = args.empty() ? default_image_command(plan.image, plan.root) : std::vector<std::string>{};
    plan.argv = command;
    plan.argv.insert(plan.argv.end(), args.begin(), args.end());
    if (plan.argv.empty()) plan.argv = default_image_command(plan.image, plan.root);

    if (auto* probe = get_object(container, "readinessProbe")) {
        const json::object* action = get_object(*probe, "httpGet");
        if (!action) action = get_object(*probe, "tcpSocket");
        if (action) {
            std::optional<std::int64_t> port = get_int(action, "port");
            if (auto* named = action->if_contains("port"); named && named->is_string()) {
                if (auto* ports = get_array(container, "ports")) {
                    for (const auto& cp : *ports) {
                        if (cp.is_object() && get_string(cp.get_object(), "name") == named->get_string())
                            port = get_int(&cp.get_object(), "containerPort");
                    }
                }
            }
            if (port && *port > 0 && *port < 65536) plan.readiness_port = static_cast<std::uint16_t>(*port);
        }
    }

    // User: container securityContext wins over the pod's; the images' default user is root.
    const json::object* pod_sc = get_object(*spec, "securityContext");
    const json::object* sc = get_object(container, "securityContext");
    auto uid = get_int(sc, "runAsUser");
    if (!uid) uid = get_int(pod_sc, "runAsUser");
    auto gid = get_int(sc, "runAsGroup");
    if (!gid) gid = get_int(pod_sc, "runAsGroup");
    const std::int64_t image_user = plan.root.runtime ? 1000 : 0;
    plan.uid = static_cast<std::uint32_t>(uid.value_or(image_user));
    plan.gid = static_cast<std::uint32_t>(gid.value_or(image_user));
    auto non_root = get_bool(sc, "runAsNonRoot");
    if (!non_root) non_root = get_bool(pod_sc, "runAsNonRoot");
    if (non_root.value_or(false) && plan.uid == 0) {
        result.error =
            PlanError{"CreateContainerConfigError", "container has runAsNonRoot and image will run as root (pod: \"" +
                                                        get_string(*get_object(pod, "metadata"), "name") +
                                                        "\", container: " + plan.name + ")"};
        return result;
    }
    plan.read_only_root = get_bool(sc, "readOnlyRootFilesystem").value_or(false);
    auto seccomp_type = [](const json::object* context) -> std::string {
        const json::object* profile = context ? get_object(*context, "seccompProfile") : nullptr;
        return profile ? get_string(*profile, "type") : std::string();
    };
    std::string profile = seccomp_type(sc);
    if (profile.empty()) profile = seccomp_type(pod_sc);
    plan.seccomp = profile != "Unconfined";
    if (sc) {
        if (auto* caps = get_object(*sc, "capabilities")) {
            if (auto* drop = get_array(*caps, "drop")) {
                for (const auto& d : *drop) {
                    if (d.is_string() && d.get_string() == "ALL") plan.drop_all_caps = true;
                }
            }
        }
    }

    if (auto* resources = get_object(container, "resources")) {
        if (auto* limits = get_object(*resources, "limits")) {
            struct Field {
                const char* name;
                bool milli;
                std::optional<std::int64_t>* into;
            };
            for (Field f :
                 {Field{"memory", false, &plan.limits.memory_bytes}, Field{"cpu", true, &plan.limits.cpu_millis},
                  Field{"ephemeral-storage", false, &plan.limits.ephemeral_storage_bytes}}) {
                auto* v = limits->if_contains(f.name);
                if (!v) continue;
                std::string text = v->is_string()   ? std::string(v->get_string())
                                   : v->is_number() ? json::serialize(*v)
                                                    : std::string();
                *f.into = parse_quantity(text, f.milli);
                if (!*f.into) {
                    result.error = PlanError{"CreateContainerConfigError",
                                             std::string("invalid resources.limits.") + f.name + " " + text};
                    return result;
                }
                if (f.into == &plan.limits.ephemeral_storage_bytes) plan.limits.ephemeral_storage_text = text;
            }
        }
    }

    // Environment: image defaults, then the container's values (valueFrom is not resolved).
    std::map<std::string, std::string> env_map;
    env_map["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    env_map["HOSTNAME"] = get_string(*get_object(pod, "metadata"), "name");
    env_map["HOME"] = plan.uid == 0 ? "/root" : "/";
    std::vector<std::string> order = {"PATH", "HOSTNAME", "HOME"};
    if (auto* env = get_array(container, "env")) {
        for (const auto& e : *env) {
            if (!e.is_object()) continue;
            std::string key = get_string(e.get_object(), "name");
            if (key.empty()) continue;
            if (e.get_object().contains("valueFrom")) {
                plan.warnings.push_back("env " + key +
                                        ": valueFrom is not supported by the local cluster; set to \"\"");
            }
            if (!env_map.count(key)) order.push_back(key);
            env_map[key] = get_string(e.get_object(), "value");
        }
    }
    for (const auto& key : order) plan.env.push_back(key + "=" + env_map[key]);

    plan.working_dir = get_string(container, "workingDir");
    if (plan.working_dir.empty() || plan.working_dir.front() != '/')
        plan.working_dir = plan.root.runtime ? "/app" : "/workspace";

    // Volumes: emptyDir becomes a private directory; other sources are not backed by anything
    // on a local node and mount as empty read-only directories (never host paths).
    std::map<std::string, bool> volume_is_empty_dir;
    if (auto* vols = get_array(*spec, "volumes")) {
        for (const auto& v : *vols) {
            if (!v.is_object()) continue;
            std::string name = get_string(v.get_object(), "name");
            auto* empty_dir = get_object(v.get_object(), "emptyDir");
            volume_is_empty_dir[name] = empty_dir != nullptr;
            auto* size = empty_dir ? empty_dir->if_contains("sizeLimit") : nullptr;
            if (!size) continue;
            std::string text = size->is_string()   ? std::string(size->get_string())
                               : size->is_number() ? json::serialize(*size)
                                                   : std::string();
            auto bytes = parse_quantity(text, false);
            if (!bytes) {
                result.error = PlanError{"CreateContainerConfigError",
                                         "invalid emptyDir.sizeLimit " + text + " of volume " + name};
                return result;
            }
            // As a kubelet: only a positive sizeLimit is enforced.
            if (*bytes > 0) plan.empty_dir_limits.push_back(EmptyDirLimit{name, *bytes, text});
        }
    }
    std::set<std::string> mounted_paths;
    if (auto* mounts = get_array(container, "volumeMounts")) {
        for (const auto& m : *mounts) {
            if (!m.is_object()) continue;
            MountPlan mp;
            mp.name = get_string(m.get_object(), "name");
            mp.path = get_string(m.get_object(), "mountPath");
            if (mp.path.empty() || mp.path.front() != '/') continue;
            while (mp.path.size() > 1 && mp.path.back() == '/') mp.path.pop_back();
            mp.read_only = get_bool(&m.get_object(), "readOnly").value_or(false);
            // The API server refuses other names; a name is part of a host path.
            if (!proto::validate_dns1123_label(mp.name).empty()) {
                result.error =
                    PlanError{"CreateContainerConfigError", "invalid volume name " + proto::go_quote(mp.name)};
                return result;
            }
            auto it = volume_is_empty_dir.find(mp.name);
            if (it == volume_is_empty_dir.end()) {
                result.error = PlanError{"CreateContainerConfigError",
                                         "volumeMount \"" + mp.name + "\" names no volume of the pod"};
                return result;
            }
            if (it->second) {
                mp.host_path = pod_dir / "volumes" / mp.name;
            } else {
                mp.host_path = pod_dir / "unsupported-volume";
                mp.read_only = true;
                plan.warnings.push_back("volume " + mp.name +
                                        ": only emptyDir volumes are backed by the local cluster");
            }
            mp.sub_path = get_string(m.get_object(), "subPath");
            mounted_paths.insert(mp.path);
            plan.mounts.push_back(std::move(mp));
        }
    }
    if (!mounted_paths.count(plan.working_dir)) {
        plan.mounts.push_back(MountPlan{"", pod_dir / "workspace", plan.working_dir, false, {}});
    }
    if (!mounted_paths.count("/tmp") && plan.working_dir != "/tmp") {
        plan.mounts.push_back(MountPlan{"", pod_dir / "tmp", "/tmp", false, {}});
    }
    // Parents before children so a nested mount is not hidden by its parent's bind.
    std::stable_sort(plan.mounts.begin(), plan.mounts.end(),
                     [](const MountPlan& a, const MountPlan& b) { return a.path.size() < b.path.size(); });
    result.plan = std::move(plan);
    return result;
}

std::vector<std::string> bwrap_argv(const ContainerPlan& plan, const HostLayout& layout, const std::string& hostname,
                                    int info_fd, int seccomp_fd,
                                    const std::vector<std::pair<std::string, std::string>>& root_entries) {
    // bwrap dies with the kubelet (stopped, crashed or SIGKILLed), and with it the pod's pid
    // namespace; setpriv sets the signal after changing uid, which would otherwise clear it.
    std::vector<std::string> a = {"setpriv", "--pdeathsig", "KILL"};
    if (layout.outer_uid) {
        auto id = std::to_string(*layout.outer_uid);
        a.insert(a.end(), {"--reuid=" + id, "--regid=" + id, "--clear-groups"});
    }
    a.push_back("--");
    // --disable-userns: no nested user namespaces in the pod, for exec'd commands as well (the
    // limit belongs to the namespace they join); it needs the user namespace asked for explicitly.
    a.insert(a.end(), {"bwrap", "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
                       "--new-session", "--info-fd", std::to_string(info_fd), "--hostname", hostname});
    if (plan.host_network) a.push_back("--share-net");
    if (plan.root.kind == ImageRoot::Kind::host) {
        a.insert(a.end(), {"--ro-bind", "/usr", "/usr"});
        for (const auto& [name, target] : layout.symlinks) a.insert(a.end(), {"--symlink", target, "/" + name});
        for (const auto& dir : layout.dirs) a.insert(a.end(), {"--ro-bind", "/" + dir, "/" + dir});
    } else {
        std::filesystem::path root =
            plan.root.kind == ImageRoot::Kind::busybox ? layout.busybox_root : plan.root.directory;
        for (const auto& [name, target] : root_entries) {
            if (name == "proc" || name == "dev" || name == "tmp") continue;
            if (!target.empty()) {
                a.insert(a.end(), {"--symlink", target, "/" + name});
            } else {
                a.insert(a.end(), {"--ro-bind", (root / name).string(), "/" + name});
            }
        }
    }
    a.insert(a.end(), {"--proc", "/proc", "--dev", "/dev"});
    if (plan.root.runtime) a.insert(a.end(), {"--ro-bind", layout.runtime_program.string(), runtime_path});
    for (const auto& m : plan.mounts) {
        a.insert(a.end(), {m.read_only ? "--ro-bind" : "--bind", m.host_path.string(), m.path});
    }
    a.insert(a.end(), {"--uid", std::to_string(plan.uid), "--gid", std::to_string(plan.gid)});
    if (plan.drop_all_caps) a.insert(a.end(), {"--cap-drop", "ALL"});
    if (plan.read_only_root) a.insert(a.end(), {"--remount-ro", "/"});
    if (plan.seccomp && seccomp_fd >= 0) a.insert(a.end(), {"--seccomp", std::to_string(seccomp_fd)});
    a.insert(a.end(), {"--chdir", plan.working_dir, "--"});
    a.insert(a.end(), plan.argv.begin(), plan.argv.end());
    return a;
}

namespace {
std::vector<std::string> enter_argv(const ContainerPlan& plan, const HostLayout& layout, int pod_pid, int pidfd_fd,
                                    const std::vector<std::string>& cgroup_procs) {
    std::vector<std::string> a = {
        layout.enter_program.string(), "--target", std::to_string(pod_pid), "--uid", std::to_string(plan.uid), "--gid",
        std::to_string(plan.gid),      "--cwd",    plan.working_dir};
    if (pidfd_fd >= 0) a.insert(a.end(), {"--target-pidfd", std::to_string(pidfd_fd)});
    for (const auto& f : cgroup_procs) a.insert(a.end(), {"--cgroup-procs", f});
    if (plan.seccomp) a.push_back("--seccomp");
    return a;
}
}  // namespace

std::vector<std::string> exec_argv(const ContainerPlan& plan, const HostLayout& layout, int pod_pid, int pidfd_fd,
                                   const std::vector<std::string>& cgroup_procs,
                                   const std::vector<std::string>& command) {
    std::vector<std::string> a = enter_argv(plan, layout, pod_pid, pidfd_fd, cgroup_procs);
    a.push_back("--");
    a.insert(a.end(), command.begin(), command.end());
    return a;
}

std::vector<std::string> spawner_argv(const ContainerPlan& plan, const HostLayout& layout, int pod_pid, int pidfd_fd,
                                      const std::vector<std::string>& cgroup_procs) {
    std::vector<std::string> a = enter_argv(plan, layout, pod_pid, pidfd_fd, cgroup_procs);
    a.insert(a.end(), {"--serve", "3"});
    return a;
}

int parse_child_pid(std::string_view info_json) {
    boost::system::error_code ec;
    json::value v = json::parse(info_json, ec);
    if (ec || !v.is_object()) return 0;
    auto pid = get_int(&v.get_object(), "child-pid");
    return pid ? static_cast<int>(*pid) : 0;
}

std::string format_time(std::int64_t unix_seconds) {
    std::time_t t = static_cast<std::time_t>(unix_seconds);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

}  // namespace kubesandbox::local
