#include "local/pod_security.hpp"

#include "util/json_access.hpp"

#include <algorithm>
#include <set>
#include <string_view>

namespace kubesandbox::local {

namespace json = boost::json;
using util::object_at;
using util::string_at;

namespace {

struct Container {
    std::string name;
    const json::object* context;  // securityContext, may be null
    const json::object* spec;
};

std::vector<Container> containers_of(const json::object& spec) {
    std::vector<Container> out;
    for (const char* key : {"initContainers", "containers", "ephemeralContainers"}) {
        auto* list = spec.if_contains(key);
        if (!list || !list->is_array()) continue;
        for (const auto& c : list->as_array())
            if (c.is_object())
                out.push_back(
                    {string_at(c.as_object(), "name"), object_at(c.as_object(), "securityContext"), &c.as_object()});
    }
    return out;
}

std::optional<bool> bool_at(const json::object* o, std::string_view key) {
    auto* v = o ? o->if_contains(key) : nullptr;
    return v && v->is_bool() ? std::optional<bool>(v->get_bool()) : std::nullopt;
}

std::optional<std::int64_t> int_at(const json::object* o, std::string_view key) {
    auto* v = o ? o->if_contains(key) : nullptr;
    return v && v->is_int64() ? std::optional<std::int64_t>(v->get_int64()) : std::nullopt;
}

std::string seccomp_type(const json::object* context) {
    auto* profile = context ? object_at(*context, "seccompProfile") : nullptr;
    return profile ? string_at(*profile, "type") : std::string();
}

// `container "a"` or `containers "a", "b"`.
std::string who(std::string_view noun, const std::vector<std::string>& names) {
    std::string out(noun);
    if (names.size() > 1) out += "s";
    for (std::size_t i = 0; i < names.size(); ++i) out += (i ? ", \"" : " \"") + names[i] + "\"";
    return out;
}

std::vector<std::string> capabilities(const json::object* context, const char* list) {
    std::vector<std::string> out;
    auto* caps = context ? object_at(*context, "capabilities") : nullptr;
    auto* v = caps ? caps->if_contains(list) : nullptr;
    if (v && v->is_array())
        for (const auto& c : v->as_array())
            if (c.is_string()) out.emplace_back(c.get_string());
    return out;
}

void baseline(const json::object& spec, const std::vector<Container>& cs, std::vector<std::string>& out) {
    std::vector<std::string> hosts;
    for (const char* h : {"hostNetwork", "hostPID", "hostIPC"})
        if (bool_at(&spec, h).value_or(false)) hosts.push_back(std::string(h) + "=true");
    if (!hosts.empty()) {
        std::string s = "host namespaces (";
        for (std::size_t i = 0; i < hosts.size(); ++i) s += (i ? ", " : "") + hosts[i];
        out.push_back(s + ")");
    }
    std::vector<std::string> privileged;
    for (const auto& c : cs)
        if (bool_at(c.context, "privileged").value_or(false)) privileged.push_back(c.name);
    if (!privileged.empty())
        out.push_back("privileged (" + who("container", privileged) + " must not set securityContext.privileged=true)");
    static const std::set<std::string> allowed = {"AUDIT_WRITE", "CHOWN",  "DAC_OVERRIDE",     "FOWNER",  "FSETID",
                                                  "KILL",        "MKNOD",  "NET_BIND_SERVICE", "SETFCAP", "SETGID",
                                                  "SETPCAP",     "SETUID", "SYS_CHROOT"};
    std::vector<std::string> added;
    for (const auto& c : cs)
        for (const auto& cap : capabilities(c.context, "add"))
            if (!allowed.count(cap))
                added.push_back("container \"" + c.name + "\" must not include \"" + cap +
                                "\" in securityContext.capabilities.add");
    if (!added.empty()) {
        std::string s = "non-default capabilities (";
        for (std::size_t i = 0; i < added.size(); ++i) s += (i ? "; " : "") + added[i];
        out.push_back(s + ")");
    }
    std::vector<std::string> host_paths;
    if (auto* vols = spec.if_contains("volumes"); vols && vols->is_array())
        for (const auto& v : vols->as_array())
            if (v.is_object() && v.as_object().contains("hostPath"))
                host_paths.push_back(string_at(v.as_object(), "name"));
    if (!host_paths.empty()) out.push_back("hostPath volumes (" + who("volume", host_paths) + ")");
    std::vector<std::string> ports;
    for (const auto& c : cs)
        if (auto* ps = c.spec->if_contains("ports"); ps && ps->is_array())
            for (const auto& p : ps->as_array())
                if (auto port = p.is_object() ? int_at(&p.as_object(), "hostPort") : std::nullopt; port && *port)
                    ports.push_back("container \"" + c.name + "\" uses hostPort " + std::to_string(*port));
    if (!ports.empty()) {
        std::string s = "hostPort (";
        for (std::size_t i = 0; i < ports.size(); ++i) s += (i ? ", " : "") + ports[i];
        out.push_back(s + ")");
    }
    std::vector<std::string> unmasked;
    for (const auto& c : cs) {
        std::string mount = c.context ? string_at(*c.context, "procMount") : std::string();
        if (!mount.empty() && mount != "Default") unmasked.push_back(c.name);
    }
    if (!unmasked.empty())
        out.push_back("procMount (" + who("container", unmasked) +
                      " must not set securityContext.procMount to \"Unmasked\")");
    static const std::set<std::string> safe_sysctls = {
        "kernel.shm_rmid_forced",       "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",      "net.ipv4.ping_group_range",    "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",  "net.ipv4.tcp_fin_timeout",     "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes"};
    std::vector<std::string> sysctls;
    if (auto* psc = object_at(spec, "securityContext"))
        if (auto* list = psc->if_contains("sysctls"); list && list->is_array())
            for (const auto& sc : list->as_array())
                if (sc.is_object() && !safe_sysctls.count(string_at(sc.as_object(), "name")))
                    sysctls.push_back(string_at(sc.as_object(), "name"));
    if (!sysctls.empty()) {
        std::string s = "forbidden sysctls (";
        for (std::size_t i = 0; i < sysctls.size(); ++i) s += (i ? ", " : "") + sysctls[i];
        out.push_back(s + ")");
    }
    auto selinux_bad = [](const json::object* context) {
        auto* se = context ? object_at(*context, "seLinuxOptions") : nullptr;
        if (!se) return false;
        std::string type = string_at(*se, "type");
        bool type_ok = type.empty() || type == "container_t" || type == "container_init_t" ||
                       type == "container_kvm_t" || type == "container_engine_t";
        return !type_ok || !string_at(*se, "user").empty() || !string_at(*se, "role").empty();
    };
    std::vector<std::string> selinux;
    if (selinux_bad(object_at(spec, "securityContext")))
        out.push_back("seLinuxOptions (pod set forbidden securityContext.seLinuxOptions)");
    for (const auto& c : cs)
        if (selinux_bad(c.context)) selinux.push_back(c.name);
    if (!selinux.empty())
        out.push_back("seLinuxOptions (" + who("container", selinux) +
                      " set forbidden securityContext.seLinuxOptions)");
    auto apparmor_bad = [](const json::object* context) {
        auto* profile = context ? object_at(*context, "appArmorProfile") : nullptr;
        return profile && string_at(*profile, "type") == "Unconfined";
    };
    std::vector<std::string> apparmor;
    for (const auto& c : cs)
        if (apparmor_bad(c.context)) apparmor.push_back(c.name);
    if (apparmor_bad(object_at(spec, "securityContext")) || !apparmor.empty())
        out.push_back("forbidden AppArmor profile (" +
                      (apparmor.empty() ? std::string("pod") : who("container", apparmor)) +
                      " must not set appArmorProfile.type to \"Unconfined\")");
    std::vector<std::string> host_process;
    for (const auto& c : cs) {
        auto* win = c.context ? object_at(*c.context, "windowsOptions") : nullptr;
        if (win && bool_at(win, "hostProcess").value_or(false)) host_process.push_back(c.name);
    }
    if (!host_process.empty())
        out.push_back("hostProcess (" + who("container", host_process) +
                      " must not set securityContext.windowsOptions.hostProcess=true)");
    std::vector<std::string> unconfined;
    if (seccomp_type(object_at(spec, "securityContext")) == "Unconfined")
        out.push_back("seccompProfile (pod must not set securityContext.seccompProfile.type to \"Unconfined\")");
    for (const auto& c : cs)
        if (seccomp_type(c.context) == "Unconfined") unconfined.push_back(c.name);
    if (!unconfined.empty())
        out.push_back("seccompProfile (" + who("container", unconfined) +
                      " must not set securityContext.seccompProfile.type to \"Unconfined\")");
}

void restricted(const json::object& spec, const std::vector<Container>& cs, std::vector<std::string>& out) {
    static const std::set<std::string> allowed_volumes = {"configMap", "csi",       "downwardAPI",           "emptyDir",
                                                          "ephemeral", "projected", "persistentVolumeClaim", "secret"};
    std::vector<std::string> volumes;
    if (auto* vols = spec.if_contains("volumes"); vols && vols->is_array())
        for (const auto& v : vols->as_array()) {
            if (!v.is_object()) continue;
            for (const auto& [key, value] : v.as_object()) {
                (void)value;
                if (key == "name" || allowed_volumes.count(std::string(key))) continue;
                volumes.push_back("volume \"" + string_at(v.as_object(), "name") + "\" uses restricted volume type \"" +
                                  std::string(key) + "\"");
            }
        }
    if (!volumes.empty()) {
        std::string s = "restricted volume types (";
        for (std::size_t i = 0; i < volumes.size(); ++i) s += (i ? ", " : "") + volumes[i];
        out.push_back(s + ")");
    }
    std::vector<std::string> escalating;
    for (const auto& c : cs)
        if (bool_at(c.context, "allowPrivilegeEscalation").value_or(true)) escalating.push_back(c.name);
    if (!escalating.empty())
        out.push_back("allowPrivilegeEscalation != false (" + who("container", escalating) +
                      " must set securityContext.allowPrivilegeEscalation=false)");
    std::vector<std::string> no_drop, caps;
    for (const auto& c : cs) {
        auto drop = capabilities(c.context, "drop");
        if (std::find(drop.begin(), drop.end(), "ALL") == drop.end()) no_drop.push_back(c.name);
        for (const auto& cap : capabilities(c.context, "add"))
            if (cap != "NET_BIND_SERVICE")
                caps.push_back("container \"" + c.name + "\" must not include \"" + cap +
                               "\" in securityContext.capabilities.add");
    }
    if (!no_drop.empty() || !caps.empty()) {
        std::string s = "unrestricted capabilities (";
        if (!no_drop.empty()) s += who("container", no_drop) + " must set securityContext.capabilities.drop=[\"ALL\"]";
        for (std::size_t i = 0; i < caps.size(); ++i) s += (i || !no_drop.empty() ? "; " : "") + caps[i];
        out.push_back(s + ")");
    }
    const json::object* pod_context = object_at(spec, "securityContext");
    auto pod_non_root = bool_at(pod_context, "runAsNonRoot");
    if (pod_non_root == false) {
        out.push_back("runAsNonRoot != true (pod must not set securityContext.runAsNonRoot=false)");
    } else {
        std::vector<std::string> unset, explicitly_false;
        for (const auto& c : cs) {
            auto v = bool_at(c.context, "runAsNonRoot");
            if (v == false) explicitly_false.push_back(c.name);
            else if (!v && !pod_non_root) unset.push_back(c.name);
        }
        if (!explicitly_false.empty())
            out.push_back("runAsNonRoot != true (" + who("container", explicitly_false) +
                          " must not set securityContext.runAsNonRoot=false)");
        else if (!unset.empty())
            out.push_back("runAsNonRoot != true (pod or " + who("container", unset) +
                          " must set securityContext.runAsNonRoot=true)");
    }
    std::vector<std::string> root;
    if (int_at(pod_context, "runAsUser") == 0) out.push_back("runAsUser=0 (pod must not set runAsUser=0)");
    for (const auto& c : cs)
        if (int_at(c.context, "runAsUser") == 0) root.push_back(c.name);
    if (!root.empty()) out.push_back("runAsUser=0 (" + who("container", root) + " must not set runAsUser=0)");
    auto confined = [](const std::string& type) { return type == "RuntimeDefault" || type == "Localhost"; };
    bool pod_confined = confined(seccomp_type(pod_context));
    std::vector<std::string> unconfined;
    for (const auto& c : cs) {
        std::string type = seccomp_type(c.context);
        if (type.empty() ? !pod_confined : !confined(type)) unconfined.push_back(c.name);
    }
    if (!unconfined.empty())
        out.push_back("seccompProfile (pod or " + who("container", unconfined) +
                      " must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")");
}

}  // namespace

std::optional<PodSecurityLevel> enforced_level(const json::object& labels) {
    auto* v = labels.if_contains("pod-security.kubernetes.io/enforce");
    if (!v) return std::nullopt;
    std::string level = v->is_string() ? std::string(v->get_string()) : std::string();
    if (level == "privileged") return PodSecurityLevel::privileged;
    if (level == "baseline") return PodSecurityLevel::baseline;
    return PodSecurityLevel::restricted;  // an invalid value enforces the strictest level, as upstream
}

std::vector<std::string> pod_security_violations(const json::object& pod, PodSecurityLevel level) {
    std::vector<std::string> out;
    if (level == PodSecurityLevel::privileged) return out;
    const json::object* spec = object_at(pod, "spec");
    if (!spec) return out;
    auto cs = containers_of(*spec);
    baseline(*spec, cs, out);
    // The AppArmor annotations (before the appArmorProfile field): only the runtime default or
    // a localhost profile.
    std::vector<std::string> apparmor;
    if (auto* annotations = object_at(util::metadata_of(pod), "annotations"))
        for (const auto& [key, value] : *annotations) {
            constexpr std::string_view prefix = "container.apparmor.security.beta.kubernetes.io/";
            if (!key.starts_with(prefix) || !value.is_string()) continue;
            std::string_view v = value.get_string();
            if (v != "runtime/default" && !v.starts_with("localhost/"))
                apparmor.push_back(std::string(key) + "=" + "\"" + std::string(v) + "\"");
        }
    if (!apparmor.empty()) {
        std::string s = "forbidden AppArmor profiles (";
        for (std::size_t i = 0; i < apparmor.size(); ++i) s += (i ? ", " : "") + apparmor[i];
        out.push_back(s + ")");
    }
    if (level == PodSecurityLevel::restricted) restricted(*spec, cs, out);
    return out;
}

std::string pod_security_message(const std::string& pod_name, PodSecurityLevel level, const std::string& version,
                                 const std::vector<std::string>& violations) {
    std::string s = "pods \"" + pod_name + "\" is forbidden: violates PodSecurity \"";
    s += level == PodSecurityLevel::restricted ? "restricted"
         : level == PodSecurityLevel::baseline ? "baseline"
                                               : "privileged";
    s += ":" + (version.empty() ? std::string("latest") : version) + "\": ";
    for (std::size_t i = 0; i < violations.size(); ++i) s += (i ? ", " : "") + violations[i];
    return s;
}

}  // namespace kubesandbox::local
