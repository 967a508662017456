#include "providers/agent_sandbox/claims.hpp"

#include "connection/gateway_address.hpp"

#include "providers/raw/pod_state.hpp"
#include "util/json_access.hpp"
#include "util/time_format.hpp"

#include <boost/json/array.hpp>

namespace kubesandbox::agent_sandbox {

namespace json = boost::json;
using util::array_at;
using util::metadata_of;
using util::object_at;
using util::string_at;

ResourcePath claims_path(const std::string& namespace_name, const std::string& api_version) {
    return ResourcePath{claims_group, api_version, "sandboxclaims", namespace_name, ""};
}

json::object build_claim(const AgentSandboxProviderOptions& options, const ClaimShape& shape, const std::string& name,
                         json::object labels, json::object annotations, std::optional<std::int64_t> ttl_seconds,
                         std::chrono::system_clock::time_point now) {
    labels["agents.x-k8s.io/created-by"] = "kubesandbox";
    json::object spec;
    if (shape.template_name.empty()) {
        spec["warmPoolRef"] = json::object{{"name", shape.warm_pool}};
    } else {
        spec["sandboxTemplateRef"] = json::object{{"name", shape.template_name}};
        spec["warmpool"] = shape.cold ? "none" : shape.warm_pool.empty() ? "default" : shape.warm_pool;
    }
    if (ttl_seconds && *ttl_seconds > 0) {
        // Rounded up to the second the timestamp can carry: truncating made a TTL of 1 s anything
        // from 0 to 1 s, so a claim could expire before it was bound.
        auto shutdown = std::chrono::ceil<std::chrono::seconds>(now + std::chrono::seconds(*ttl_seconds));
        spec["lifecycle"] =
            json::object{{"shutdownTime", util::format_rfc3339(shutdown)}, {"shutdownPolicy", "Delete"}};
    }
    if (!options.pod_labels.empty() || !options.pod_annotations.empty()) {
        json::object extra;
        if (!options.pod_labels.empty()) extra["labels"] = util::to_json_object(options.pod_labels);
        if (!options.pod_annotations.empty()) extra["annotations"] = util::to_json_object(options.pod_annotations);
        spec["additionalPodMetadata"] = std::move(extra);
    }
    if (!options.env.empty()) {
        json::array env;
        for (const auto& [k, v] : options.env) env.push_back(json::object{{"name", k}, {"value", v}});
        spec["env"] = std::move(env);
    }
    return json::object{
        {"apiVersion", std::string(claims_group) + "/" + shape.api_version},
        {"kind", "SandboxClaim"},
        {"metadata",
         json::object{{"name", name}, {"labels", std::move(labels)}, {"annotations", std::move(annotations)}}},
        {"spec", std::move(spec)}};
}

ClaimState evaluate_claim(const json::object& claim) {
    ClaimState s;
    const json::object* status = object_at(claim, "status");
    const json::object* bound = status ? object_at(*status, "sandbox") : nullptr;
    s.sandbox_name = string_at(bound, "name");
    if (s.sandbox_name.empty()) s.sandbox_name = string_at(bound, "Name");
    if (const json::array* ips = bound ? array_at(*bound, "podIPs") : nullptr) {
        for (const auto& ip : *ips) {
            if (!ip.is_string()) continue;
            std::string v(ip.get_string());
            if (s.pod_ip.empty() || (v.find(':') == std::string::npos && s.pod_ip.find(':') != std::string::npos))
                s.pod_ip = v;
        }
    }
    s.service_fqdn = string_at(bound, "serviceFQDN");
    bool ready = false;
    if (const json::array* conds = status ? array_at(*status, "conditions") : nullptr) {
        for (const auto& c : *conds) {
            if (!c.is_object() || string_at(c.get_object(), "type") != "Ready") continue;
            ready = string_at(c.get_object(), "status") == "True";
            s.reason = string_at(c.get_object(), "reason");
            s.message = string_at(c.get_object(), "message");
        }
    }
    static const char* terminal[] = {
        "InvalidMetadata", "EnvVarsInjectionRejected", "VolumeClaimTemplatesError", "ClaimExpired",
        "SandboxExpired",  "TemplateNotFound",         "WarmPoolNotFound",          "PodFailed",
        "PodSucceeded"};
    if (metadata_of(claim).contains("deletionTimestamp")) {
        s.kind = ClaimState::Kind::failed;
        s.reason = "ClaimDeleted";
        s.message = "the claim is being deleted";
        return s;
    }
    if (ready && !s.sandbox_name.empty()) {
        s.kind = ClaimState::Kind::ready;
        return s;
    }
    for (const char* t : terminal) {
        if (!ready && s.reason == t) s.kind = ClaimState::Kind::failed;
    }
    return s;
}

std::string in_cluster_url(const ClaimState& state, const std::string& namespace_name, std::uint16_t port) {
    std::string host;
    if (usable_host(state.service_fqdn)) host = state.service_fqdn;
    else if (usable_host(state.pod_ip)) host = state.pod_ip;
    else host = state.sandbox_name + "." + namespace_name + ".svc.cluster.local";
    if (host.find(':') != std::string::npos) host = "[" + host + "]";
    return "http://" + host + ":" + std::to_string(port);
}

SandboxInfo claim_info(const json::object& claim) {
    SandboxInfo info = raw::info_of(claim);  // id, labels, created_at, last_activity from our keys
    ClaimState state = evaluate_claim(claim);
    info.pod_name = state.sandbox_name;
    info.instance = string_at(metadata_of(claim), "uid");
    switch (state.kind) {
        case ClaimState::Kind::ready:
            info.status = "running";
            break;
        case ClaimState::Kind::failed:
            info.status = state.reason == "ClaimExpired" || state.reason == "SandboxExpired" ||
                                  state.reason == "PodSucceeded" || state.reason == "ClaimDeleted"
                              ? "terminated"
                              : "failed";
            break;
        default:
            info.status = "pending";
    }
    return info;
}

}  // namespace kubesandbox::agent_sandbox
