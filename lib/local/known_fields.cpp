#include "local/known_fields.hpp"

#include <boost/json.hpp>

#include <deque>
#include <initializer_list>
#include <map>
#include <string_view>
#include <utility>

namespace kubesandbox::local {

namespace json = boost::json;

namespace {

// A node of the known-field tree. Opaque = any value, kept whole (nullptr means the same).
struct Schema {
    enum class Kind { object, array } kind = Kind::object;
    std::map<std::string, const Schema*, std::less<>> fields;  // object: known keys
    const Schema* item = nullptr;                              // array: element schema
};

using Nested = std::initializer_list<std::pair<std::string_view, const Schema*>>;

class Schemas {
public:
    Schemas() { build(); }

    const Schema* for_type(const ResourceType& t) const {
        if (!t.custom) {
            if (auto it = kinds_.find(t.id()); it != kinds_.end()) return it->second;
        }
        return custom_;
    }

private:
    std::deque<Schema> nodes_;  // stable addresses
    std::map<std::string, const Schema*> kinds_;
    const Schema* custom_ = nullptr;

    Schema* object(std::initializer_list<std::string_view> leaves, Nested nested = {}) {
        Schema s;
        for (auto l : leaves) s.fields.emplace(std::string(l), nullptr);
        for (auto& [k, v] : nested) s.fields.emplace(std::string(k), v);
        nodes_.push_back(std::move(s));
        return &nodes_.back();
    }
    const Schema* array(const Schema* item) {
        Schema s;
        s.kind = Schema::Kind::array;
        s.item = item;
        nodes_.push_back(std::move(s));
        return &nodes_.back();
    }
    // apiVersion, kind, metadata plus the kind's own top-level fields.
    const Schema* top(const Schema* meta, std::initializer_list<std::string_view> leaves, Nested nested = {}) {
        Schema* s = object(leaves, nested);
        s->fields.emplace("apiVersion", nullptr);
        s->fields.emplace("kind", nullptr);
        s->fields.emplace("metadata", meta);
        return s;
    }

    void build() {
        // core/v1 and networking/v1 as of Kubernetes 1.32.
        const Schema* owner_ref = object({"apiVersion", "kind", "name", "uid", "controller", "blockOwnerDeletion"});
        const Schema* meta =
            object({"name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
                    "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations",
                    "finalizers", "managedFields"},
                   {{"ownerReferences", array(owner_ref)}});

        const Schema* env_var = object({"name", "value", "valueFrom"});
        const Schema* port = object({"name", "hostPort", "containerPort", "protocol", "hostIP"});
        const Schema* mount = object(
            {"name", "readOnly", "recursiveReadOnly", "mountPath", "subPath", "mountPropagation", "subPathExpr"});
        const Schema* resources = object({"limits", "requests", "claims"});
        const Schema* container_security =
            object({"capabilities", "privileged", "seLinuxOptions", "windowsOptions", "runAsUser", "runAsGroup",
                    "runAsNonRoot", "readOnlyRootFilesystem", "allowPrivilegeEscalation", "procMount", "seccompProfile",
                    "appArmorProfile"});
        const Schema* container = object(
            {"name", "image", "command", "args", "workingDir", "envFrom", "resizePolicy", "restartPolicy",
             "volumeDevices", "livenessProbe", "readinessProbe", "startupProbe", "lifecycle", "terminationMessagePath",
             "terminationMessagePolicy", "imagePullPolicy", "stdin", "stdinOnce", "tty"},
            {{"env", array(env_var)},
             {"ports", array(port)},
             {"volumeMounts", array(mount)},
             {"resources", resources},
             {"securityContext", container_security}});
        const Schema* pod_security =
            object({"seLinuxOptions", "windowsOptions", "runAsUser", "runAsGroup", "runAsNonRoot", "supplementalGroups",
                    "supplementalGroupsPolicy", "fsGroup", "sysctls", "fsGroupChangePolicy", "seccompProfile",
                    "appArmorProfile", "seLinuxChangePolicy"});
        const Schema* pod_spec = object({"volumes",
                                         "ephemeralContainers",
                                         "restartPolicy",
                                         "terminationGracePeriodSeconds",
                                         "activeDeadlineSeconds",
                                         "dnsPolicy",
                                         "nodeSelector",
                                         "serviceAccountName",
                                         "serviceAccount",
                                         "automountServiceAccountToken",
                                         "nodeName",
                                         "hostNetwork",
                                         "hostPID",
                                         "hostIPC",
                                         "shareProcessNamespace",
                                         "imagePullSecrets",
                                         "hostname",
                                         "subdomain",
                                         "affinity",
                                         "schedulerName",
                                         "tolerations",
                                         "hostAliases",
                                         "priorityClassName",
                                         "priority",
                                         "dnsConfig",
                                         "readinessGates",
                                         "runtimeClassName",
                                         "enableServiceLinks",
                                         "preemptionPolicy",
                                         "overhead",
                                         "topologySpreadConstraints",
                                         "setHostnameAsFQDN",
                                         "os",
                                         "hostUsers",
                                         "schedulingGates",
                                         "resourceClaims",
                                         "resources"},
                                        {{"containers", array(container)},
                                         {"initContainers", array(container)},
                                         {"securityContext", pod_security}});
        kinds_["pods"] = top(meta, {"status"}, {{"spec", pod_spec}});

        kinds_["namespaces"] = top(meta, {"status"}, {{"spec", object({"finalizers"})}});
        const Schema* service_spec = object({"ports",
                                             "selector",
                                             "clusterIP",
                                             "clusterIPs",
                                             "type",
                                             "externalIPs",
                                             "sessionAffinity",
                                             "loadBalancerIP",
                                             "loadBalancerSourceRanges",
                                             "externalName",
                                             "externalTrafficPolicy",
                                             "healthCheckNodePort",
                                             "publishNotReadyAddresses",
                                             "sessionAffinityConfig",
                                             "ipFamilies",
                                             "ipFamilyPolicy",
                                             "allocateLoadBalancerNodePorts",
                                             "loadBalancerClass",
                                             "internalTrafficPolicy",
                                             "trafficDistribution"});
        kinds_["services"] = top(meta, {"status"}, {{"spec", service_spec}});
        kinds_["configmaps"] = top(meta, {"data", "binaryData", "immutable"});
        kinds_["secrets"] = top(meta, {"data", "stringData", "type", "immutable"});
        kinds_["serviceaccounts"] = top(meta, {"secrets", "imagePullSecrets", "automountServiceAccountToken"});
        kinds_["events"] =
            top(meta, {"involvedObject", "reason", "message", "source", "firstTimestamp", "lastTimestamp", "count",
                       "type", "eventTime", "series", "action", "related", "reportingComponent", "reportingInstance"});
        kinds_["resourcequotas"] = top(meta, {"status"}, {{"spec", object({"hard", "scopes", "scopeSelector"})}});
        const Schema* limit_item = object({"type", "max", "min", "default", "defaultRequest", "maxLimitRequestRatio"});
        kinds_["limitranges"] = top(meta, {}, {{"spec", object({}, {{"limits", array(limit_item)}})}});
        kinds_["networkpolicies.networking.k8s.io"] =
            top(meta, {}, {{"spec", object({"podSelector", "ingress", "egress", "policyTypes"})}});
        kinds_["endpointslices.discovery.k8s.io"] = top(meta, {"addressType", "endpoints", "ports"});
        // Custom resources: their schemas are not stored here, so spec and status stay opaque.
        custom_ = top(meta, {"spec", "status"});
    }
};

void prune(json::value& v, const Schema* s, const std::string& path, std::vector<std::string>& unknown) {
    if (!s) return;
    if (s->kind == Schema::Kind::array) {
        if (!v.is_array()) return;
        auto& a = v.as_array();
        for (std::size_t i = 0; i < a.size(); ++i) prune(a[i], s->item, path + "[" + std::to_string(i) + "]", unknown);
        return;
    }
    if (!v.is_object()) return;
    auto& o = v.as_object();
    bool dropped = false;
    for (auto& kv : o) {
        std::string p = path.empty() ? std::string(kv.key()) : path + "." + std::string(kv.key());
        auto f = s->fields.find(kv.key());
        if (f == s->fields.end()) {
            unknown.push_back(std::move(p));
            dropped = true;
            continue;
        }
        prune(kv.value(), f->second, p, unknown);
    }
    if (!dropped) return;
    // Rebuild rather than erase: json::object::erase does not keep the order of the rest.
    json::object kept(o.storage());
    for (auto& kv : o)
        if (s->fields.count(kv.key())) kept.emplace(kv.key(), std::move(kv.value()));
    o = std::move(kept);
}

}  // namespace

std::vector<std::string> prune_unknown_fields(const ResourceType& t, json::object& object) {
    static const Schemas schemas;
    std::vector<std::string> unknown;
    json::value v(std::move(object));
    prune(v, schemas.for_type(t), "", unknown);
    object = std::move(v.as_object());
    return unknown;
}

}  // namespace kubesandbox::local
