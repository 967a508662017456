#include "local/agent_controller_core.hpp"

#include "util/json_access.hpp"
#include "util/time_format.hpp"

#include <cctype>
#include <cstdio>

namespace kubesandbox::local::agents {

using util::array_at;
using util::metadata_of;
using util::object_at;
using util::string_at;

namespace {

json::object copy_object(const json::object* o) { return o ? *o : json::object{}; }

// Label/annotation keys a claim may not set on pods (the system's and the controller's own).
bool restricted_key(std::string_view key) {
    auto slash = key.find('/');
    if (slash == std::string_view::npos) return false;
    std::string_view domain = key.substr(0, slash);
    for (std::string_view d : {"kubernetes.io", "k8s.io", "x-k8s.io"}) {
        if (domain == d) return true;
        if (domain.size() > d.size() && domain.substr(domain.size() - d.size() - 1) == "." + std::string(d))
            return true;
    }
    return false;
}

}  // namespace

std::string name_hash(std::string_view name) {
    std::uint32_t h = 2166136261u;
    for (unsigned char c : name) {
        h ^= c;
        h *= 16777619u;
    }
    char buf[9];
    std::snprintf(buf, sizeof buf, "%08x", h);
    return buf;
}

json::object controller_ref(const json::object& owner) {
    const auto& md = metadata_of(owner);
    return json::object{{"apiVersion", string_at(owner, "apiVersion")},
                        {"kind", string_at(owner, "kind")},
                        {"name", string_at(md, "name")},
                        {"uid", string_at(md, "uid")},
                        {"controller", true},
                        {"blockOwnerDeletion", true}};
}

bool controlled_by(const json::object& object, std::string_view owner_uid) {
    const auto* refs = array_at(metadata_of(object), "ownerReferences");
    if (!refs) return false;
    for (const auto& r : *refs) {
        if (!r.is_object()) continue;
        const auto* controller = r.get_object().if_contains("controller");
        if (string_at(r.get_object(), "uid") == owner_uid && controller && controller->is_bool() &&
            controller->get_bool())
            return true;
    }
    return false;
}

json::object pod_for_sandbox(const json::object& sandbox) {
    const auto& md = metadata_of(sandbox);
    const json::object* spec = object_at(sandbox, "spec");
    const json::object* pod_template = spec ? object_at(*spec, "podTemplate") : nullptr;
    const json::object* template_md = pod_template ? object_at(*pod_template, "metadata") : nullptr;
    json::object labels = copy_object(template_md ? object_at(*template_md, "labels") : nullptr);
    labels[name_hash_label] = name_hash(string_at(md, "name"));
    json::object metadata{{"name", string_at(md, "name")},
                          {"namespace", string_at(md, "namespace")},
                          {"labels", std::move(labels)},
                          {"ownerReferences", json::array{controller_ref(sandbox)}}};
    if (const json::object* annotations = template_md ? object_at(*template_md, "annotations") : nullptr)
        metadata["annotations"] = *annotations;
    json::object pod_spec = copy_object(pod_template ? object_at(*pod_template, "spec") : nullptr);
    return json::object{{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", std::move(metadata)}, {"spec", pod_spec}};
}

json::array set_condition(const json::array& conditions, std::string_view type, bool status, std::string_view reason,
                          std::string_view message, std::int64_t generation, const std::string& now) {
    json::array out;
    std::string transition = now;
    for (const auto& c : conditions) {
        if (!c.is_object()) continue;
        if (string_at(c.get_object(), "type") == type) {
            if (string_at(c.get_object(), "status") == (status ? "True" : "False"))
                transition = string_at(c.get_object(), "lastTransitionTime");
            continue;
        }
        out.push_back(c);
    }
    out.push_back(json::object{{"type", type},
                               {"status", status ? "True" : "False"},
                               {"reason", reason},
                               {"message", message},
                               {"observedGeneration", generation},
                               {"lastTransitionTime", transition.empty() ? now : transition}});
    return out;
}

json::object sandbox_status(const json::object& sandbox, const json::object* pod, bool expired, const std::string& now,
                            const json::object* service) {
    const auto& md = metadata_of(sandbox);
    const json::object* old_status = object_at(sandbox, "status");
    const json::array* old_conditions = old_status ? array_at(*old_status, "conditions") : nullptr;
    static const json::array none;
    const std::int64_t generation = util::int_at(&md, "generation").value_or(1);
    json::object status{{"selector", std::string(name_hash_label) + "=" + name_hash(string_at(md, "name"))}};
    bool ready = false;
    std::string reason = "DependenciesNotReady", message = "Pod does not exist";
    json::array ips;
    if (expired) {
        reason = "SandboxExpired";
        message = "Sandbox has expired";
    } else if (pod) {
        const json::object* pod_status = object_at(*pod, "status");
        std::string phase = string_at(pod_status, "phase");
        bool pod_ready = false;
        if (const json::array* conds = pod_status ? array_at(*pod_status, "conditions") : nullptr) {
            for (const auto& c : *conds) {
                if (c.is_object() && string_at(c.get_object(), "type") == "Ready" &&
                    string_at(c.get_object(), "status") == "True")
                    pod_ready = true;
            }
        }
        if (const json::array* pod_ips = pod_status ? array_at(*pod_status, "podIPs") : nullptr) {
            for (const auto& ip : *pod_ips) {
                if (ip.is_object() && !string_at(ip.get_object(), "ip").empty())
                    ips.push_back(json::string(string_at(ip.get_object(), "ip")));
            }
        }
        if (phase == "Succeeded" || phase == "Failed") {
            reason = phase == "Succeeded" ? "PodSucceeded" : "PodFailed";
            message = "Pod has " + std::string(phase == "Succeeded" ? "succeeded" : "failed");
        } else if (phase != "Running") {
            message = "Pod exists with phase: " + (phase.empty() ? std::string("Pending") : phase);
            // Why it waits, when the kubelet says (an image it cannot run, say): saves a user
            // from waiting out a readiness timeout to learn nothing.
            if (const json::array* cs = pod_status ? array_at(*pod_status, "containerStatuses") : nullptr) {
                for (const auto& c : *cs) {
                    const json::object* state = c.is_object() ? object_at(c.get_object(), "state") : nullptr;
                    const json::object* waiting = state ? object_at(*state, "waiting") : nullptr;
                    std::string why = string_at(waiting, "reason");
                    if (!why.empty() && why != "ContainerCreating")
                        message += " (" + why + ": " + string_at(waiting, "message") + ")";
                }
            }
        } else if (!pod_ready) {
            message = "Pod is Running but not Ready";
        } else if (ips.empty()) {
            message = "Pod is Ready but has no podIPs yet";
        } else if (sandbox_wants_service(sandbox).value_or(false) && !service) {
            message = "Pod is Ready; Service does not exist yet";
        } else {
            ready = true;
            reason = "DependenciesReady";
            message = service ? "Pod is Ready; Service Exists" : "Pod is Ready";
        }
        status["nodeName"] = string_at(object_at(*pod, "spec"), "nodeName");
    }
    if (!ips.empty()) status["podIPs"] = std::move(ips);
    if (service && !expired) {
        const auto& smd = metadata_of(*service);
        status["service"] = string_at(smd, "name");
        status["serviceFQDN"] = string_at(smd, "name") + "." + string_at(smd, "namespace") + ".svc.cluster.local";
    }
    status["conditions"] =
        set_condition(old_conditions ? *old_conditions : none, "Ready", ready, reason, message, generation, now);
    return status;
}

bool sandbox_ready(const json::object& sandbox) {
    const json::object* status = object_at(sandbox, "status");
    const json::array* conds = status ? array_at(*status, "conditions") : nullptr;
    if (!conds) return false;
    for (const auto& c : *conds) {
        if (c.is_object() && string_at(c.get_object(), "type") == "Ready")
            return string_at(c.get_object(), "status") == "True";
    }
    return false;
}

std::optional<bool> sandbox_wants_service(const json::object& sandbox) {
    const json::object* spec = object_at(sandbox, "spec");
    const json::value* v = spec ? spec->if_contains("service") : nullptr;
    if (!v || !v->is_bool()) return std::nullopt;
    return v->get_bool();
}

json::object service_for_sandbox(const json::object& sandbox) {
    const auto& md = metadata_of(sandbox);
    const std::string name = string_at(md, "name");
    json::array ports;
    const json::object* spec = object_at(sandbox, "spec");
    const json::object* pod_template = spec ? object_at(*spec, "podTemplate") : nullptr;
    const json::object* pod_spec = pod_template ? object_at(*pod_template, "spec") : nullptr;
    if (const json::array* containers = pod_spec ? array_at(*pod_spec, "containers") : nullptr) {
        for (const auto& c : *containers) {
            const json::array* cports = c.is_object() ? array_at(c.get_object(), "ports") : nullptr;
            if (!cports) continue;
            for (const auto& p : *cports) {
                if (!p.is_object()) continue;
                auto number = util::int_at(&p.get_object(), "containerPort");
                if (!number) continue;
                std::string protocol = string_at(p.get_object(), "protocol");
                if (protocol.empty()) protocol = "TCP";
                std::string port_name = string_at(p.get_object(), "name");
                if (port_name.empty()) {
                    std::string lower = protocol;
                    for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
                    port_name = "p-" + std::to_string(*number) + "-" + lower;
                }
                ports.push_back(json::object{
                    {"name", port_name}, {"port", *number}, {"targetPort", *number}, {"protocol", protocol}});
            }
        }
    }
    return json::object{{"apiVersion", "v1"},
                        {"kind", "Service"},
                        {"metadata", json::object{{"name", name},
                                                  {"namespace", string_at(md, "namespace")},
                                                  {"ownerReferences", json::array{controller_ref(sandbox)}}}},
                        {"spec", json::object{{"clusterIP", "None"},
                                              {"selector", json::object{{name_hash_label, name_hash(name)}}},
                                              {"ports", std::move(ports)}}}};
}

json::array sandbox_pod_ips(const json::object& sandbox) {
    const json::object* status = object_at(sandbox, "status");
    const json::array* ips = status ? array_at(*status, "podIPs") : nullptr;
    return ips ? *ips : json::array{};
}

namespace {

// The Sandbox spec from a template: its blueprint (podTemplate, volumeClaimTemplates, service).
json::object blueprint(const json::object& sandbox_template) {
    const json::object* spec = object_at(sandbox_template, "spec");
    json::object out;
    if (!spec) return out;
    for (const char* key : {"podTemplate", "volumeClaimTemplates", "service"}) {
        if (auto* v = spec->if_contains(key)) out[key] = *v;
    }
    // Secure default of templates: no service account token unless the template asks.
    if (auto* pt = object_at(out, "podTemplate")) {
        json::object& pod_spec =
            (*pt)["spec"].is_object() ? (*pt)["spec"].as_object() : ((*pt)["spec"] = json::object{}).as_object();
        if (!pod_spec.contains("automountServiceAccountToken")) pod_spec["automountServiceAccountToken"] = false;
    }
    return out;
}

}  // namespace

json::object warm_sandbox(const json::object& pool, const json::object& sandbox_template) {
    const auto& md = metadata_of(pool);
    std::string template_name = string_at(metadata_of(sandbox_template), "name");
    json::object metadata{{"generateName", string_at(md, "name") + "-"},
                          {"namespace", string_at(md, "namespace")},
                          {"labels", json::object{{warm_pool_label, name_hash(string_at(md, "name"))},
                                                  {template_ref_hash_label, name_hash(template_name)},
                                                  {created_by_label, "controller"}}},
                          {"annotations", json::object{{template_ref_annotation, template_name}}},
                          {"ownerReferences", json::array{controller_ref(pool)}}};
    return json::object{{"apiVersion", sandbox_api},
                        {"kind", "Sandbox"},
                        {"metadata", std::move(metadata)},
                        {"spec", blueprint(sandbox_template)}};
}

std::string claim_pool_name(const json::object& claim, std::string& template_name) {
    const json::object* spec = object_at(claim, "spec");
    template_name.clear();
    if (!spec) return {};
    if (const json::object* ref = object_at(*spec, "warmPoolRef")) return string_at(*ref, "name");
    if (const json::object* ref = object_at(*spec, "sandboxTemplateRef")) template_name = string_at(*ref, "name");
    return {};
}

bool claim_forces_cold(const json::object& claim) {
    const json::object* spec = object_at(claim, "spec");
    if (!spec) return false;
    for (const char* key : {"env", "volumeClaimTemplates"}) {
        const json::array* a = array_at(*spec, key);
        if (a && !a->empty()) return true;
    }
    std::string template_name;
    claim_pool_name(claim, template_name);
    // v1alpha1 claims with warmpool "none" always start cold.
    return !template_name.empty() && string_at(*spec, "warmpool") == "none";
}

std::optional<ClaimFailure> claim_failure(const json::object& claim, const json::object* pool,
                                          const json::object* sandbox_template) {
    std::string template_name;
    std::string pool_name = claim_pool_name(claim, template_name);
    if (!pool_name.empty() && !pool)
        return ClaimFailure{"WarmPoolNotFound", "SandboxWarmPool \"" + pool_name + "\" not found"};
    if (pool_name.empty() && template_name.empty())
        return ClaimFailure{"WarmPoolNotFound", "spec.warmPoolRef.name is required"};
    if (pool && template_name.empty()) {
        const json::object* pool_spec = object_at(*pool, "spec");
        const json::object* ref = pool_spec ? object_at(*pool_spec, "sandboxTemplateRef") : nullptr;
        template_name = string_at(ref, "name");
    }
    if (!sandbox_template)
        return ClaimFailure{"TemplateNotFound", "SandboxTemplate \"" + template_name + "\" not found"};
    const json::object* spec = object_at(claim, "spec");
    const json::array* env = spec ? array_at(*spec, "env") : nullptr;
    if (env && !env->empty()) {
        std::string policy = string_at(object_at(*sandbox_template, "spec"), "envVarsInjectionPolicy");
        if (policy != "Allowed" && policy != "Overrides")
            return ClaimFailure{"EnvVarsInjectionRejected",
                                "template \"" + template_name + "\" does not allow environment variable injection"};
    }
    const json::object* extra = spec ? object_at(*spec, "additionalPodMetadata") : nullptr;
    for (const char* kind : {"labels", "annotations"}) {
        const json::object* m = extra ? object_at(*extra, kind) : nullptr;
        if (!m) continue;
        for (const auto& [key, value] : *m) {
            if (restricted_key(key) || !value.is_string())
                return ClaimFailure{"InvalidMetadata", "additionalPodMetadata." + std::string(kind) + " key \"" +
                                                           std::string(key) + "\" is not allowed"};
        }
    }
    return std::nullopt;
}

namespace {

// additionalPodMetadata merged into a pod template's metadata.
void merge_pod_metadata(json::object& pod_template, const json::object& claim) {
    const json::object* spec = object_at(claim, "spec");
    const json::object* extra = spec ? object_at(*spec, "additionalPodMetadata") : nullptr;
    if (!extra) return;
    json::value& md = pod_template["metadata"];
    if (!md.is_object()) md = json::object{};
    for (const char* kind : {"labels", "annotations"}) {
        const json::object* m = object_at(*extra, kind);
        if (!m) continue;
        json::value& target = md.as_object()[kind];
        if (!target.is_object()) target = json::object{};
        for (const auto& [key, value] : *m) target.as_object()[key] = value;
    }
}

}  // namespace

json::object cold_sandbox(const json::object& claim, const json::object& sandbox_template) {
    const auto& md = metadata_of(claim);
    json::object spec = blueprint(sandbox_template);
    json::value& pt = spec["podTemplate"];
    if (!pt.is_object()) pt = json::object{};
    merge_pod_metadata(pt.as_object(), claim);
    // env: to the named container, or the first one.
    const json::object* claim_spec = object_at(claim, "spec");
    const json::array* env = claim_spec ? array_at(*claim_spec, "env") : nullptr;
    json::value& pod_spec = pt.as_object()["spec"];
    if (env && pod_spec.is_object()) {
        if (auto* containers = pod_spec.as_object().if_contains("containers"); containers && containers->is_array()) {
            for (const auto& e : *env) {
                if (!e.is_object()) continue;
                std::string target = string_at(e.get_object(), "containerName");
                for (auto& c : containers->as_array()) {
                    if (!c.is_object()) continue;
                    if (!target.empty() && string_at(c.get_object(), "name") != target) continue;
                    json::value& list = c.as_object()["env"];
                    if (!list.is_array()) list = json::array{};
                    list.as_array().push_back(json::object{{"name", string_at(e.get_object(), "name")},
                                                           {"value", string_at(e.get_object(), "value")}});
                    break;
                }
            }
        }
    }
    if (const json::array* vcts = claim_spec ? array_at(*claim_spec, "volumeClaimTemplates") : nullptr)
        spec["volumeClaimTemplates"] = *vcts;
    std::string created_by = util::label_of(claim, created_by_label);
    json::object metadata{
        {"name", string_at(md, "name")},
        {"namespace", string_at(md, "namespace")},
        {"labels", json::object{{launch_type_label, "cold"},
                                {claim_uid_label, string_at(md, "uid")},
                                {created_by_label, created_by.empty() ? "controller" : created_by}}},
        {"annotations", json::object{{template_ref_annotation, string_at(metadata_of(sandbox_template), "name")},
                                     {pod_name_annotation, string_at(md, "name")}}},
        {"ownerReferences", json::array{controller_ref(claim)}}};
    return json::object{
        {"apiVersion", sandbox_api}, {"kind", "Sandbox"}, {"metadata", std::move(metadata)}, {"spec", std::move(spec)}};
}

json::object adoption_patch(const json::object& sandbox, const json::object& claim) {
    const auto& claim_md = metadata_of(claim);
    std::string created_by = util::label_of(claim, created_by_label);
    json::object labels{{warm_pool_label, nullptr},
                        {template_ref_hash_label, nullptr},
                        {launch_type_label, "warm"},
                        {claim_uid_label, string_at(claim_md, "uid")},
                        {created_by_label, created_by.empty() ? "controller" : created_by}};
    json::object patch{
        {"metadata",
         json::object{{"labels", std::move(labels)},
                      {"annotations", json::object{{pod_name_annotation, string_at(metadata_of(sandbox), "name")}}},
                      {"ownerReferences", json::array{controller_ref(claim)}},
                      {"resourceVersion", string_at(metadata_of(sandbox), "resourceVersion")}}}};
    const json::object* spec = object_at(claim, "spec");
    if (spec && object_at(*spec, "additionalPodMetadata")) {
        json::object pt;
        merge_pod_metadata(pt, claim);
        patch["spec"] = json::object{{"podTemplate", std::move(pt)}};
    }
    return patch;
}

json::object claim_status(const json::object& claim, const json::object* sandbox, std::string_view reason,
                          std::string_view message, const std::string& now) {
    const auto& md = metadata_of(claim);
    const json::object* old_status = object_at(claim, "status");
    const json::array* old_conditions = old_status ? array_at(*old_status, "conditions") : nullptr;
    static const json::array none;
    const std::int64_t generation = util::int_at(&md, "generation").value_or(1);
    json::object status;
    if (!sandbox) {
        status["conditions"] =
            set_condition(old_conditions ? *old_conditions : none, "Ready", false, reason, message, generation, now);
        return status;
    }
    json::object bound{{"name", string_at(metadata_of(*sandbox), "name")}};
    json::array ips = sandbox_pod_ips(*sandbox);
    if (!ips.empty()) bound["podIPs"] = std::move(ips);
    const json::object* sb_status = object_at(*sandbox, "status");
    // As controllers from v1.0 do: clients inside the cluster reach the sandbox by this name.
    if (std::string fqdn = string_at(sb_status, "serviceFQDN"); !fqdn.empty()) bound["serviceFQDN"] = fqdn;
    status["sandbox"] = std::move(bound);
    // The Sandbox's Ready condition, forwarded.
    bool ready = false;
    std::string r = "SandboxNotReady", m = "Sandbox is not ready";
    if (const json::array* conds = sb_status ? array_at(*sb_status, "conditions") : nullptr) {
        for (const auto& c : *conds) {
            if (!c.is_object() || string_at(c.get_object(), "type") != "Ready") continue;
            ready = string_at(c.get_object(), "status") == "True";
            r = string_at(c.get_object(), "reason");
            m = string_at(c.get_object(), "message");
        }
    }
    status["conditions"] =
        set_condition(old_conditions ? *old_conditions : none, "Ready", ready, r, m, generation, now);
    return status;
}

std::optional<std::int64_t> shutdown_time(const json::object& object, bool claim) {
    const json::object* spec = object_at(object, "spec");
    if (!spec) return std::nullopt;
    const json::object* holder = claim ? object_at(*spec, "lifecycle") : spec;
    std::string text = string_at(holder, "shutdownTime");
    if (text.empty()) return std::nullopt;
    auto tp = util::parse_rfc3339(text);
    if (!tp) return std::nullopt;
    return std::chrono::duration_cast<std::chrono::seconds>(tp->time_since_epoch()).count();
}

json::object pool_status(const json::object& pool, int replicas, int ready) {
    const auto& md = metadata_of(pool);
    return json::object{{"replicas", replicas},
                        {"readyReplicas", ready},
                        {"selector", std::string(warm_pool_label) + "=" + name_hash(string_at(md, "name"))},
                        {"observedGeneration", util::int_at(&md, "generation").value_or(1)}};
}

}  // namespace kubesandbox::local::agents
