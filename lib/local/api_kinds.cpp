// What each built-in kind adds to the generic object handling: defaults, validation, update
// rules, how its deletion ends, and who hears of its changes. Pure but for the kubelet calls.
#include <algorithm>
#include <set>

#include "local/api_server_impl.hpp"
#include "local/kubelet.hpp"
#include "local/pod_security.hpp"
#include "proto/validation.hpp"
#include "util/json_access.hpp"
#include "util/time_format.hpp"

namespace kubesandbox::local {

namespace {

StatusCause invalid(const std::string& field, const std::string& value, const std::string& detail) {
    return {"FieldValueInvalid", "Invalid value: " + proto::go_quote(value) + ": " + detail, field};
}

// What apimachinery checks of a volume or volumeMount's names and paths: a name reaches the
// kubelet's host paths, so anything but a DNS label is refused here.
std::set<std::string> validate_volumes(const json::object* spec, std::vector<StatusCause>& causes) {
    std::set<std::string> names;
    const json::value* volumes = spec ? spec->if_contains("volumes") : nullptr;
    if (!volumes || !volumes->is_array()) return names;
    std::size_t i = 0;
    for (const auto& v : volumes->as_array()) {
        std::string field = "spec.volumes[" + std::to_string(i++) + "].name";
        std::string name = v.is_object() ? string_at(v.as_object(), "name") : "";
        if (name.empty()) {
            causes.push_back({"FieldValueRequired", "Required value", field});
            continue;
        }
        for (auto& m : proto::validate_dns1123_label(name)) causes.push_back(invalid(field, name, m));
        if (!names.insert(name).second)
            causes.push_back({"FieldValueDuplicate", "Duplicate value: " + proto::go_quote(name), field});
    }
    return names;
}

bool has_dotdot_segment(std::string_view path) {
    std::size_t start = 0;
    while (start <= path.size()) {
        auto end = path.find('/', start);
        if (end == std::string_view::npos) end = path.size();
        if (path.substr(start, end - start) == "..") return true;
        start = end + 1;
    }
    return false;
}

void validate_mounts(const json::object& container, const std::string& prefix, const std::set<std::string>& volumes,
                     std::vector<StatusCause>& causes) {
    const json::value* mounts = container.if_contains("volumeMounts");
    if (!mounts || !mounts->is_array()) return;
    std::size_t i = 0;
    for (const auto& m : mounts->as_array()) {
        std::string field = prefix + ".volumeMounts[" + std::to_string(i++) + "]";
        if (!m.is_object()) {
            causes.push_back({"FieldValueInvalid", "Invalid value: must be an object", field});
            continue;
        }
        const auto& mo = m.as_object();
        std::string name = string_at(mo, "name");
        if (name.empty()) causes.push_back({"FieldValueRequired", "Required value", field + ".name"});
        else if (!volumes.count(name))
            causes.push_back({"FieldValueNotFound", "Not found: " + proto::go_quote(name), field + ".name"});
        if (string_at(mo, "mountPath").empty())
            causes.push_back({"FieldValueRequired", "Required value", field + ".mountPath"});
        std::string sub = string_at(mo, "subPath");
        if (!sub.empty() && sub.front() == '/')
            causes.push_back(invalid(field + ".subPath", sub, "must be a relative path"));
        if (has_dotdot_segment(sub)) causes.push_back(invalid(field + ".subPath", sub, "must not contain '..'"));
    }
}

// Containers and init containers share one name space, as in the API server.
void validate_containers(const json::object& spec, const char* key, bool required, const std::set<std::string>& volumes,
                         std::set<std::string>& names, std::vector<StatusCause>& causes) {
    const json::value* containers = spec.if_contains(key);
    if (!containers || !containers->is_array() || containers->as_array().empty()) {
        if (required) causes.push_back({"FieldValueRequired", "Required value", std::string("spec.") + key});
        return;
    }
    std::size_t i = 0;
    for (const auto& c : containers->as_array()) {
        std::string prefix = std::string("spec.") + key + "[" + std::to_string(i++) + "]";
        if (!c.is_object()) {
            causes.push_back({"FieldValueInvalid", "Invalid value: must be an object", prefix});
            continue;
        }
        std::string name = string_at(c.as_object(), "name");
        if (name.empty()) causes.push_back({"FieldValueRequired", "Required value", prefix + ".name"});
        else {
            for (auto& m : proto::validate_dns1123_label(name)) causes.push_back(invalid(prefix + ".name", name, m));
            if (!names.insert(name).second)
                causes.push_back(
                    {"FieldValueDuplicate", "Duplicate value: " + proto::go_quote(name), prefix + ".name"});
        }
        if (string_at(c.as_object(), "image").empty())
            causes.push_back({"FieldValueRequired", "Required value", prefix + ".image"});
        validate_mounts(c.as_object(), prefix, volumes, causes);
    }
}

std::vector<StatusCause> validate_pod(const json::object& o) {
    std::vector<StatusCause> causes;
    auto spec = object_at(o, "spec");
    if (!spec) {
        causes.push_back({"FieldValueRequired", "Required value", "spec.containers"});
        return causes;
    }
    std::set<std::string> volumes = validate_volumes(spec, causes);
    std::set<std::string> names;
    validate_containers(*spec, "containers", true, volumes, names, causes);
    validate_containers(*spec, "initContainers", false, volumes, names, causes);
    return causes;
}

// Pod Security admission, enforced from the namespace's pod-security.kubernetes.io labels.
std::optional<Response> admit_pod(ApiServer::Impl& impl, const Route& r, const json::object& o) {
    auto ns = impl.store.get("namespaces", {"", r.ns});
    const json::object* labels = ns ? object_at(metadata_of(*ns), "labels") : nullptr;
    auto level = labels ? enforced_level(*labels) : std::nullopt;
    if (!level) return std::nullopt;
    auto violations = pod_security_violations(o, *level);
    if (violations.empty()) return std::nullopt;
    std::string name = string_at(metadata_of(o), "name");
    return status_response(
        403, "Forbidden",
        pod_security_message(name, *level, string_at(*labels, "pod-security.kubernetes.io/enforce-version"),
                             violations),
        res_details(*r.type, name));
}

void default_pod(ApiServer::Impl&, json::object& o) {
    auto& spec = o["spec"].as_object();
    if (!spec.contains("restartPolicy")) spec["restartPolicy"] = "Always";
    if (!spec.contains("terminationGracePeriodSeconds")) spec["terminationGracePeriodSeconds"] = 30;
    if (!spec.contains("dnsPolicy")) spec["dnsPolicy"] = "ClusterFirst";
    if (!spec.contains("schedulerName")) spec["schedulerName"] = "default-scheduler";
    if (!spec.contains("serviceAccountName")) spec["serviceAccountName"] = "default";
    if (!spec.contains("securityContext")) spec["securityContext"] = json::object{};
    if (!spec.contains("enableServiceLinks")) spec["enableServiceLinks"] = true;
    if (!spec.contains("priority")) spec["priority"] = 0;
    spec["nodeName"] = spec.contains("nodeName") ? spec["nodeName"] : json::value("local");
    if (auto cs = spec.if_contains("containers"); cs && cs->is_array())
        for (auto& c : cs->as_array()) {
            auto& co = c.as_object();
            if (!co.contains("imagePullPolicy")) {
                std::string image = string_at(co, "image");
                bool latest = image.find(':') == std::string::npos || image.ends_with(":latest");
                co["imagePullPolicy"] = latest ? "Always" : "IfNotPresent";
            }
            if (!co.contains("terminationMessagePath")) co["terminationMessagePath"] = "/dev/termination-log";
            if (!co.contains("terminationMessagePolicy")) co["terminationMessagePolicy"] = "File";
            if (!co.contains("resources")) co["resources"] = json::object{};
        }
    std::string now = util::now_rfc3339();
    json::object status{
        {"phase", "Pending"},
        {"qosClass", "BestEffort"},
        {"conditions",
         json::array{json::object{
             {"type", "PodScheduled"}, {"status", "True"}, {"lastProbeTime", nullptr}, {"lastTransitionTime", now}}}}};
    o["status"] = status;
}

// Pod specs are immutable but for a few fields, as in a real server.
std::optional<Response> check_pod_spec_update(const ResourceType& t, const std::string& name, const json::object& cur,
                                              const json::object& next) {
    auto cs = object_at(cur, "spec");
    auto ns = object_at(next, "spec");
    if (!cs || !ns) return std::nullopt;
    // Mutable: containers[*].image, initContainers[*].image, activeDeadlineSeconds, tolerations (additions).
    json::object a = *cs, b = *ns;
    for (auto key : {"containers", "initContainers"}) {
        auto ca = a.if_contains(key);
        auto cb = b.if_contains(key);
        if (ca && cb && ca->is_array() && cb->is_array() && ca->as_array().size() == cb->as_array().size()) {
            for (std::size_t i = 0; i < ca->as_array().size(); ++i) {
                auto& x = ca->as_array()[i];
                auto& y = cb->as_array()[i];
                if (x.is_object() && y.is_object()) {
                    x.as_object().erase("image");
                    y.as_object().erase("image");
                }
            }
        }
    }
    a.erase("activeDeadlineSeconds");
    b.erase("activeDeadlineSeconds");
    auto ta = a.if_contains("tolerations");
    auto tb = b.if_contains("tolerations");
    bool tolerations_ok = true;
    if (tb && tb->is_array()) {
        if (ta && ta->is_array()) {
            for (auto& x : ta->as_array())
                if (std::find(tb->as_array().begin(), tb->as_array().end(), x) == tb->as_array().end())
                    tolerations_ok = false;
        }
    } else if (ta && ta->is_array() && !ta->as_array().empty()) {
        tolerations_ok = false;
    }
    a.erase("tolerations");
    b.erase("tolerations");
    if (a == b && tolerations_ok) return std::nullopt;
    return invalid(t, name,
                   {{"FieldValueForbidden",
                     "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
                     "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
                     "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it "
                     "to be set to 1 if it was previously negative)",
                     "spec"}});
}

std::optional<Response> update_pod(const Route& r, const json::object& current, json::object& next) {
    if (r.sub == "status") return std::nullopt;
    auto causes = validate_pod(next);
    if (!causes.empty()) return invalid(*r.type, r.name, causes);
    return check_pod_spec_update(*r.type, r.name, current, next);
}

void pod_stored(ApiServer::Impl& impl, const json::object& pod) {
    if (impl.kubelet) impl.kubelet->pod_changed(pod);
}

void pod_removed(ApiServer::Impl& impl, const json::object& pod) {
    auto uid = string_at(metadata_of(pod), "uid");
    if (auto it = impl.pod_grace_timers.find(uid); it != impl.pod_grace_timers.end()) {
        it->second->cancel();
        impl.pod_grace_timers.erase(it);
    }
    if (impl.kubelet) impl.kubelet->pod_deleted(pod);
}

void default_namespace(ApiServer::Impl&, json::object& o) {
    o["spec"] = json::object{{"finalizers", json::array{"kubernetes"}}};
    o["status"] = json::object{{"phase", "Active"}};
    auto& m = o["metadata"].as_object();
    if (!m.contains("labels") || !m["labels"].is_object()) m["labels"] = json::object{};
    m["labels"].as_object()["kubernetes.io/metadata.name"] = m["name"];
}

// Spec (finalizers) and status belong to the namespace controller; status changes only
// through the status subresource.
std::optional<Response> update_namespace(const Route& r, const json::object& current, json::object& next) {
    if (auto s = current.if_contains("spec")) next["spec"] = *s;
    if (r.sub != "status") {
        if (auto s = current.if_contains("status")) next["status"] = *s;
    }
    return std::nullopt;
}

void default_service(ApiServer::Impl& impl, json::object& o) {
    if (!o.contains("spec") || !o["spec"].is_object()) o["spec"] = json::object{};
    auto& spec = o["spec"].as_object();
    if (!spec.contains("type")) spec["type"] = "ClusterIP";
    if (!spec.contains("clusterIP")) {
        std::uint64_t n = impl.store.resource_version();
        spec["clusterIP"] = "10.96." + std::to_string((n / 250) % 250) + "." + std::to_string(n % 250 + 1);
    }
    if (!spec.contains("sessionAffinity")) spec["sessionAffinity"] = "None";
    if (!o.contains("status")) o["status"] = json::object{{"loadBalancer", json::object{}}};
}

void default_secret(ApiServer::Impl&, json::object& o) {
    if (!o.contains("type")) o["type"] = "Opaque";
}

KindRules pod_rules() {
    KindRules k;
    k.defaults = default_pod;
    k.validate = validate_pod;
    k.admit = admit_pod;
    k.on_update = update_pod;
    k.stored = pod_stored;
    k.removed = pod_removed;
    k.deletion = Deletion::graceful;
    k.selectable_fields = {"spec.nodeName",    "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
                           "spec.hostNetwork", "status.phase",       "status.podIP",       "status.nominatedNodeName"};
    k.categories = {"all"};
    return k;
}

KindRules namespace_rules() {
    KindRules k;
    k.defaults = default_namespace;
    k.on_update = update_namespace;
    k.deletion = Deletion::namespace_lifecycle;
    k.selectable_fields = {"status.phase"};
    k.undeletable_names = {"default", "kube-system", "kube-public"};
    return k;
}

KindRules service_rules() {
    KindRules k;
    k.defaults = default_service;
    k.categories = {"all"};
    return k;
}

KindRules secret_rules() {
    KindRules k;
    k.defaults = default_secret;
    k.selectable_fields = {"type"};
    return k;
}

KindRules event_rules() {
    KindRules k;
    k.selectable_fields = {"involvedObject.kind",
                           "involvedObject.namespace",
                           "involvedObject.name",
                           "involvedObject.uid",
                           "involvedObject.apiVersion",
                           "involvedObject.resourceVersion",
                           "involvedObject.fieldPath",
                           "reason",
                           "reportingComponent",
                           "source",
                           "type"};
    return k;
}

}  // namespace

const KindRules& rules_for(const ResourceType& t) {
    static const KindRules none;
    static const KindRules custom = [] {
        KindRules k;
        k.categories = {"all"};
        return k;
    }();
    static const std::map<std::string, KindRules, std::less<>> core{{"pods", pod_rules()},
                                                                    {"namespaces", namespace_rules()},
                                                                    {"services", service_rules()},
                                                                    {"secrets", secret_rules()},
                                                                    {"events", event_rules()}};
    if (t.custom || !t.group.empty()) return custom;
    auto it = core.find(t.plural);
    return it == core.end() ? none : it->second;
}

}  // namespace kubesandbox::local
