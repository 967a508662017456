#include "providers/raw/manifests.hpp"

#include "proto/patch.hpp"
#include "proto/validation.hpp"
#include "providers/raw/naming.hpp"
#include "util/json_access.hpp"
#include "util/random.hpp"

#include <boost/json/serialize.hpp>

#include <algorithm>
#include <optional>

namespace kubesandbox::raw {

namespace json = boost::json;

namespace {

std::optional<bool> bool_at(const json::object* o, std::string_view key) {
    auto* v = o ? o->if_contains(key) : nullptr;
    return v && v->is_bool() ? std::optional<bool>(v->get_bool()) : std::nullopt;
}

std::optional<std::int64_t> ttl_of(const json::object& annotations) {
    std::string v = util::string_at(annotations, keys::ttl_seconds);
    if (v.empty() || v.size() > 12 || v.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
    std::int64_t ttl = std::stoll(v);
    // activeDeadlineSeconds is validated to at most 2^32-1 by the API server.
    return ttl > 0 ? std::optional<std::int64_t>(std::min<std::int64_t>(ttl, 4294967295)) : std::nullopt;
}

json::object resource_map(const std::string& cpu, const std::string& mem, const std::string& eph) {
    json::object o;
    if (!cpu.empty()) o["cpu"] = cpu;
    if (!mem.empty()) o["memory"] = mem;
    if (!eph.empty()) o["ephemeral-storage"] = eph;
    return o;
}

json::object seccomp(const std::string& profile) {
    json::object o;
    if (profile.rfind("localhost/", 0) == 0 || profile.rfind("Localhost/", 0) == 0) {
        o["type"] = "Localhost";
        o["localhostProfile"] = profile.substr(10);
    } else {
        o["type"] = profile;
    }
    return o;
}

json::object base_labels(const std::string& sandbox_label) {
    json::object l;
    l[keys::managed_by] = keys::managed_by_value;
    l[keys::sandbox_id] = sandbox_label;
    return l;
}

json::object owner_reference(const std::string& pod, const std::string& uid) {
    json::object ref;
    ref["apiVersion"] = "v1";
    ref["kind"] = "Pod";
    ref["name"] = pod;
    ref["uid"] = uid;
    return ref;
}

json::object named(const char* api_version, const char* kind, const std::string& name, json::object labels) {
    json::object metadata;
    metadata["name"] = name;
    metadata["labels"] = std::move(labels);
    json::object o;
    o["apiVersion"] = api_version;
    o["kind"] = kind;
    o["metadata"] = std::move(metadata);
    return o;
}

// Every container of a sandbox pod, the user's init containers included, runs as the sandbox
// user with no privileges, no capabilities and the seccomp profile; a weaker securityContext
// given for an init container is overwritten (runAsUser/runAsGroup are kept when not root).
void harden(json::object& container, const RawProviderOptions& cfg) {
    json::object csc;
    if (auto* given = container.if_contains("securityContext"); given && given->is_object()) csc = given->get_object();
    csc["allowPrivilegeEscalation"] = false;
    csc["privileged"] = false;
    csc["runAsNonRoot"] = true;
    auto keep_id = [&](const char* key, std::int64_t fallback) {
        auto* v = csc.if_contains(key);
        if (!v || !v->is_int64() || v->get_int64() <= 0) csc[key] = fallback;
    };
    keep_id("runAsUser", cfg.run_as_user);
    keep_id("runAsGroup", cfg.run_as_group);
    json::object caps;
    caps["drop"] = json::array{"ALL"};
    csc["capabilities"] = std::move(caps);
    if (!cfg.seccomp_profile.empty()) csc["seccompProfile"] = seccomp(cfg.seccomp_profile);
    if (cfg.read_only_root_filesystem) csc["readOnlyRootFilesystem"] = true;
    container["securityContext"] = std::move(csc);
}

json::object container_of(const RawProviderOptions& cfg) {
    json::object container;
    container["name"] = "sandbox";
    container["image"] = cfg.image;
    if (!cfg.image_pull_policy.empty()) container["imagePullPolicy"] = cfg.image_pull_policy;
    json::array command;
    for (const auto& c : cfg.command) command.emplace_back(c);
    if (!command.empty()) container["command"] = std::move(command);
    container["workingDir"] = cfg.workdir;
    if (!cfg.env.empty()) {
        json::array env;
        for (const auto& [k, v] : cfg.env) {
            json::object e;
            e["name"] = k;
            e["value"] = v;
            env.push_back(std::move(e));
        }
        container["env"] = std::move(env);
    }
    json::object resources;
    auto req = resource_map(cfg.cpu_request, cfg.memory_request, cfg.ephemeral_storage_request);
    auto lim = resource_map(cfg.cpu_limit, cfg.memory_limit, cfg.ephemeral_storage_limit);
    if (!req.empty()) resources["requests"] = std::move(req);
    if (!lim.empty()) resources["limits"] = std::move(lim);
    container["resources"] = std::move(resources);
    harden(container, cfg);
    return container;
}

}  // namespace

Result<Identity> make_identity(const RawProviderOptions& cfg, const std::string& id,
                               const std::map<std::string, std::string>& user_labels, std::optional<std::int64_t> ttl,
                               std::optional<std::int64_t> ttl_idle, const std::string& created_at) {
    Identity idt;
    idt.id = id;
    idt.label = proto::sanitize_label_value(id);
    json::object labels;
    for (const auto& [k, v] : cfg.extra_labels) labels[k] = v;
    json::object originals;
    std::map<std::string, std::string> all = cfg.default_labels;
    for (const auto& [k, v] : user_labels) all[k] = v;
    for (const auto& [k, v] : all) {
        if (k == "managed-by" || k == "sandbox-id" || k == "pool-status" || k == "namespace-mode" || k == "config-hash")
            return fail(errc::invalid_argument, "label key \"" + k + "\" is reserved by kubesandbox");
        std::string key = std::string(keys::prefix) + k;
        if (auto problems = proto::validate_qualified_name(key); !problems.empty())
            return fail(errc::invalid_argument, "invalid label key \"" + k + "\": " + problems[0]);
        std::string value = proto::sanitize_label_value(v);
        if (value != v) originals[k] = v;
        labels[key] = value;
    }
    labels[keys::managed_by] = keys::managed_by_value;
    labels[keys::sandbox_id] = idt.label;
    json::object ann;
    for (const auto& [k, v] : cfg.extra_annotations) ann[k] = v;
    ann[keys::created_at] = created_at;
    if (!ttl) ttl = cfg.default_ttl_seconds;
    if (!ttl_idle) ttl_idle = cfg.default_ttl_idle_seconds;
    if (ttl) ann[keys::ttl_seconds] = std::to_string(*ttl);
    if (ttl_idle) ann[keys::ttl_idle_seconds] = std::to_string(*ttl_idle);
    if (idt.label != id) ann[keys::id_original] = id;
    if (!originals.empty()) ann[keys::labels_original] = json::serialize(originals);
    idt.labels = std::move(labels);
    idt.annotations = std::move(ann);
    return idt;
}

Identity bound_identity(Identity caller, const std::string& pod) {
    caller.annotations[keys::id_original] = caller.id;
    caller.label = proto::sanitize_label_value(pod);
    caller.labels[keys::sandbox_id] = caller.label;
    return caller;
}

json::object build_binding(const RawProviderOptions& cfg, const std::string& name, const std::string& sandbox_label,
                           const std::string& pod, const std::string& pod_uid, const std::string& token,
                           const std::string& created_at) {
    json::object labels = base_labels(sandbox_label);
    labels[keys::namespace_mode] = namespace_mode(cfg);
    json::object cm = named("v1", "ConfigMap", name, std::move(labels));
    auto& metadata = cm["metadata"].as_object();
    json::object ann;
    ann[keys::created_at] = created_at;  // orphan sweeps spare bindings of creations in flight
    ann[keys::creation_token] = token;
    metadata["annotations"] = std::move(ann);
    if (!pod_uid.empty()) metadata["ownerReferences"] = json::array{owner_reference(pod, pod_uid)};
    cm["data"] = json::object{{"pod", pod}};
    return cm;
}

std::string bound_pod(const json::object& binding) {
    const json::object* data = util::object_at(binding, "data");
    std::string pod = data ? util::string_at(*data, "pod") : std::string();
    if (pod.rfind("ksb-", 0) != 0 || !proto::validate_dns1123_label(pod).empty()) return {};
    return pod;
}

json::object build_pod(const RawProviderOptions& cfg, const std::string& name, json::object labels,
                       json::object annotations) {
    json::object container = container_of(cfg);

    // The workdir is always a writable emptyDir (an image rarely has it, and a runtime-created
    // one is root-owned); /tmp too with a read-only root. User mounts at those paths win.
    json::array mounts = cfg.volume_mounts;
    json::array volumes = cfg.volumes;
    auto mounted = [&](const std::string& path) {
        for (const auto& m : mounts)
            if (m.is_object() && util::string_at(m.get_object(), "mountPath") == path) return true;
        return false;
    };
    auto add_empty_dir = [&](const std::string& vname, const std::string& path) {
        if (mounted(path)) return;
        json::object v;
        v["name"] = vname;
        v["emptyDir"] = json::object{};
        volumes.push_back(std::move(v));
        json::object m;
        m["name"] = vname;
        m["mountPath"] = path;
        mounts.push_back(std::move(m));
    };
    add_empty_dir("ksb-workdir", cfg.workdir);
    if (cfg.read_only_root_filesystem) add_empty_dir("ksb-tmp", "/tmp");
    container["volumeMounts"] = std::move(mounts);

    json::object spec;
    spec["restartPolicy"] = "Never";
    spec["automountServiceAccountToken"] = false;
    spec["enableServiceLinks"] = false;
    spec["terminationGracePeriodSeconds"] = 5;
    json::object psc;
    psc["runAsNonRoot"] = true;
    psc["runAsUser"] = cfg.run_as_user;
    psc["runAsGroup"] = cfg.run_as_group;
    psc["fsGroup"] = cfg.run_as_group;
    if (!cfg.seccomp_profile.empty()) psc["seccompProfile"] = seccomp(cfg.seccomp_profile);
    spec["securityContext"] = std::move(psc);
    if (!cfg.service_account.empty()) spec["serviceAccountName"] = cfg.service_account;
    if (!cfg.runtime_class_name.empty()) spec["runtimeClassName"] = cfg.runtime_class_name;
    // The absolute TTL also bounds the pod where it runs, reaper or not (a warm pod gets it when
    // claimed, counted from its start).
    std::optional<std::int64_t> deadline = cfg.active_deadline_seconds;
    if (auto ttl = ttl_of(annotations); ttl && util::string_at(labels, keys::pool_status) != "warm")
        deadline = deadline ? std::min(*deadline, *ttl) : *ttl;
    if (deadline) spec["activeDeadlineSeconds"] = *deadline;
    if (!cfg.node_selector.empty()) spec["nodeSelector"] = util::to_json_object(cfg.node_selector);
    if (!cfg.tolerations.empty()) spec["tolerations"] = cfg.tolerations;
    if (!cfg.image_pull_secrets.empty()) {
        json::array secrets;
        for (const auto& s : cfg.image_pull_secrets) {
            json::object o;
            o["name"] = s;
            secrets.push_back(std::move(o));
        }
        spec["imagePullSecrets"] = std::move(secrets);
    }
    if (!cfg.init_containers.empty()) {
        json::array init = cfg.init_containers;
        for (auto& c : init)
            if (c.is_object()) harden(c.get_object(), cfg);
        spec["initContainers"] = std::move(init);
    }
    spec["volumes"] = std::move(volumes);
    spec["containers"] = json::array{std::move(container)};
    json::value merged = spec;
    if (!cfg.pod_template_overrides.empty()) merged = proto::apply_merge_patch(merged, cfg.pod_template_overrides);

    json::object metadata;
    metadata["name"] = name;
    metadata["labels"] = std::move(labels);
    metadata["annotations"] = std::move(annotations);
    json::object pod;
    pod["apiVersion"] = "v1";
    pod["kind"] = "Pod";
    pod["metadata"] = std::move(metadata);
    pod["spec"] = merged.is_object() ? merged.get_object() : json::object{};
    return pod;
}

json::object build_network_policy(const RawProviderOptions& cfg, const std::string& pod,
                                  const std::string& sandbox_label, const std::string& token,
                                  const std::string& owner_uid, const std::string& created_at) {
    json::object selector;
    json::object match;
    match[keys::sandbox_id] = sandbox_label;
    selector["matchLabels"] = std::move(match);
    json::object spec;
    spec["podSelector"] = std::move(selector);
    spec["policyTypes"] = json::array{"Ingress", "Egress"};
    spec["ingress"] = json::array{};
    spec["egress"] = json::array{};
    json::object labels = base_labels(sandbox_label);
    labels[keys::namespace_mode] = namespace_mode(cfg);
    json::object np = named("networking.k8s.io/v1", "NetworkPolicy", network_policy_name(pod), std::move(labels));
    auto& metadata = np["metadata"].as_object();
    json::object ann;
    ann[keys::created_at] = created_at;  // orphan sweeps spare policies of creations in flight
    ann[keys::creation_token] = token;
    metadata["annotations"] = std::move(ann);
    if (!owner_uid.empty()) metadata["ownerReferences"] = json::array{owner_reference(pod, owner_uid)};
    np["spec"] = std::move(spec);
    return np;
}

json::object owner_patch(const std::string& pod, const std::string& uid) {
    json::object md;
    md["ownerReferences"] = json::array{owner_reference(pod, uid)};
    json::object body;
    body["metadata"] = std::move(md);
    return body;
}

json::object build_namespace(const std::string& name, const std::string& sandbox_label, const std::string& token,
                             const std::string& created_at) {
    json::object labels = base_labels(sandbox_label);
    labels[keys::namespace_mode] = "per-sandbox";
    json::object ns = named("v1", "Namespace", name, std::move(labels));
    json::object ann;
    ann[keys::created_at] = created_at;
    ann[keys::creation_token] = token;
    ns["metadata"].as_object()["annotations"] = std::move(ann);
    return ns;
}

json::object build_resource_quota(const RawProviderOptions& cfg, const std::string& sandbox_label) {
    json::object quota = named("v1", "ResourceQuota", "ksb-quota", base_labels(sandbox_label));
    json::object hard;
    hard["pods"] = "1";
    if (!cfg.cpu_request.empty()) hard["requests.cpu"] = cfg.cpu_request;
    if (!cfg.cpu_limit.empty()) hard["limits.cpu"] = cfg.cpu_limit;
    if (!cfg.memory_request.empty()) hard["requests.memory"] = cfg.memory_request;
    if (!cfg.memory_limit.empty()) hard["limits.memory"] = cfg.memory_limit;
    if (!cfg.ephemeral_storage_request.empty()) hard["requests.ephemeral-storage"] = cfg.ephemeral_storage_request;
    if (!cfg.ephemeral_storage_limit.empty()) hard["limits.ephemeral-storage"] = cfg.ephemeral_storage_limit;
    json::object spec;
    spec["hard"] = std::move(hard);
    quota["spec"] = std::move(spec);
    return quota;
}

json::object build_limit_range(const RawProviderOptions& cfg, const std::string& sandbox_label) {
    json::object limit;
    limit["type"] = "Container";
    auto dl = resource_map(cfg.cpu_limit, cfg.memory_limit, cfg.ephemeral_storage_limit);
    auto dr = resource_map(cfg.cpu_request, cfg.memory_request, cfg.ephemeral_storage_request);
    if (!dl.empty()) limit["default"] = std::move(dl);
    if (!dr.empty()) limit["defaultRequest"] = std::move(dr);
    json::object spec;
    spec["limits"] = json::array{std::move(limit)};
    json::object lr = named("v1", "LimitRange", "ksb-limits", base_labels(sandbox_label));
    lr["spec"] = std::move(spec);
    return lr;
}

std::optional<std::string> hardening_problem(const json::object& spec) {
    for (const char* host : {"hostNetwork", "hostPID", "hostIPC"})
        if (auto* v = spec.if_contains(host); v && v->is_bool() && v->get_bool())
            return std::string("spec.") + host + " is true";
    if (auto* v = spec.if_contains("automountServiceAccountToken"); !v || !v->is_bool() || v->get_bool())
        return std::string("spec.automountServiceAccountToken is not false");
    const json::object* psc = util::object_at(spec, "securityContext");
    bool pod_non_root = psc && bool_at(psc, "runAsNonRoot").value_or(false);
    if (auto* sp = psc ? util::object_at(*psc, "seccompProfile") : nullptr;
        sp && util::string_at(*sp, "type") == "Unconfined")
        return std::string("spec.securityContext.seccompProfile is Unconfined");
    if (auto* v = spec.if_contains("volumes"); v && v->is_array())
        for (const auto& vol : v->as_array())
            if (vol.is_object() && vol.as_object().contains("hostPath"))
                return "volume " + util::string_at(vol.as_object(), "name") + " is a hostPath";
    bool has_sandbox = false;
    for (const char* key : {"initContainers", "containers", "ephemeralContainers"}) {
        auto* list = spec.if_contains(key);
        if (!list || !list->is_array()) continue;
        std::size_t i = 0;
        for (const auto& c : list->as_array()) {
            std::string where = std::string("spec.") + key + "[" + std::to_string(i++) + "].securityContext";
            if (!c.is_object()) continue;
            if (std::string(key) == "containers" && util::string_at(c.as_object(), "name") == "sandbox")
                has_sandbox = true;
            const json::object* csc = util::object_at(c.as_object(), "securityContext");
            if (!csc) return where + " is missing";
            if (bool_at(csc, "privileged").value_or(false)) return where + ".privileged is true";
            if (bool_at(csc, "allowPrivilegeEscalation").value_or(true))
                return where + ".allowPrivilegeEscalation is not false";
            if (!bool_at(csc, "runAsNonRoot").value_or(pod_non_root)) return where + ".runAsNonRoot is not true";
            if (auto* uid = csc->if_contains("runAsUser"); uid && uid->is_int64() && uid->get_int64() == 0)
                return where + ".runAsUser is 0";
            if (auto* sp = util::object_at(*csc, "seccompProfile"); sp && util::string_at(*sp, "type") == "Unconfined")
                return where + ".seccompProfile is Unconfined";
            if (util::string_at(*csc, "procMount") == "Unmasked") return where + ".procMount is Unmasked";
            const json::object* caps = util::object_at(*csc, "capabilities");
            bool drops_all = false;
            if (auto* drop = caps ? caps->if_contains("drop") : nullptr; drop && drop->is_array())
                for (const auto& d : drop->as_array())
                    drops_all = drops_all || (d.is_string() && d.get_string() == "ALL");
            if (!drops_all) return where + ".capabilities.drop does not hold ALL";
            if (auto* add = caps->if_contains("add"); add && add->is_array() && !add->as_array().empty())
                return where + ".capabilities.add is not empty";
        }
    }
    if (!has_sandbox) return std::string("no container named sandbox");
    return std::nullopt;
}

json::object warm_claim_patch(const Identity& identity, const std::string& resource_version, const std::string& token,
                              const std::string& now, std::optional<std::int64_t> active_deadline) {
    json::object labels = identity.labels;
    labels[keys::pool_status] = "active";
    json::object annotations = identity.annotations;
    annotations[keys::last_activity] = now;
    annotations[keys::claim_token] = token;
    json::object metadata;
    metadata["resourceVersion"] = resource_version;
    metadata["labels"] = std::move(labels);
    metadata["annotations"] = std::move(annotations);
    json::object body;
    body["metadata"] = std::move(metadata);
    if (active_deadline) body["spec"] = json::object{{"activeDeadlineSeconds", *active_deadline}};
    return body;
}

std::optional<std::int64_t> claimed_deadline(const Identity& identity, std::optional<std::int64_t> configured,
                                             std::int64_t running_for) {
    auto ttl = ttl_of(identity.annotations);
    if (!ttl) return std::nullopt;  // the configured deadline is already in the pod's spec
    std::int64_t deadline = std::min<std::int64_t>(std::max<std::int64_t>(running_for, 0) + *ttl, 4294967295);
    return configured ? std::min(*configured, deadline) : deadline;
}

json::object annotations_patch(json::object annotations) {
    json::object metadata;
    metadata["annotations"] = std::move(annotations);
    json::object body;
    body["metadata"] = std::move(metadata);
    return body;
}

std::string config_hash(const RawProviderOptions& cfg) {
    json::object pod = build_pod(cfg, "ksb-x", json::object{}, json::object{});
    std::string material = json::serialize(pod["spec"]);
    material += "|namespace-mode=";
    material += namespace_mode(cfg);
    material += "|block-network=";
    material += cfg.block_network ? "1" : "0";
    material += "|setup=" + cfg.setup_script;
    return util::sha256_hex(material, 16);
}

}  // namespace kubesandbox::raw
