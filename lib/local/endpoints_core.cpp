#include "local/endpoints_core.hpp"

#include "util/json_access.hpp"

#include <boost/json/array.hpp>

#include <algorithm>
#include <map>

namespace kubesandbox::local::endpoints {

using util::array_at;
using util::metadata_of;
using util::object_at;
using util::string_at;

namespace {

bool selects(const json::object& selector, const json::object& pod) {
    const json::object* labels = object_at(metadata_of(pod), "labels");
    for (const auto& [key, want] : selector) {
        if (!want.is_string()) return false;
        const json::value* have = labels ? labels->if_contains(key) : nullptr;
        if (!have || !have->is_string() || have->get_string() != want.get_string()) return false;
    }
    return true;
}

bool pod_ready(const json::object& pod) {
    const json::object* status = object_at(pod, "status");
    const json::array* conditions = status ? array_at(*status, "conditions") : nullptr;
    if (!conditions) return false;
    for (const auto& c : *conditions) {
        if (c.is_object() && string_at(c.get_object(), "type") == "Ready")
            return string_at(c.get_object(), "status") == "True";
    }
    return false;
}

// A named targetPort: the container port of that name in `pod`, if any.
std::optional<std::int64_t> named_container_port(const json::object& pod, std::string_view name) {
    const json::object* spec = object_at(pod, "spec");
    const json::array* containers = spec ? array_at(*spec, "containers") : nullptr;
    if (!containers) return std::nullopt;
    for (const auto& c : *containers) {
        const json::array* ports = c.is_object() ? array_at(c.get_object(), "ports") : nullptr;
        if (!ports) continue;
        for (const auto& p : *ports) {
            if (!p.is_object() || string_at(p.get_object(), "name") != name) continue;
            if (auto n = util::int_at(&p.get_object(), "containerPort")) return n;
        }
    }
    return std::nullopt;
}

}  // namespace

std::string slice_name(std::string_view service) { return std::string(service) + "-local"; }

std::optional<json::object> endpoint_slice_for(const json::object& service,
                                               const std::vector<const json::object*>& pods) {
    const json::object* spec = object_at(service, "spec");
    const json::object* selector = spec ? object_at(*spec, "selector") : nullptr;
    if (!selector || selector->empty()) return std::nullopt;
    const auto& md = metadata_of(service);
    const std::string ns = string_at(md, "namespace"), name = string_at(md, "name");

    std::vector<const json::object*> chosen;
    for (const json::object* pod : pods) {
        if (!pod || string_at(metadata_of(*pod), "namespace") != ns || !selects(*selector, *pod)) continue;
        const json::object* status = object_at(*pod, "status");
        if (!status || string_at(*status, "podIP").empty()) continue;
        const std::string phase = string_at(*status, "phase");
        if (phase == "Succeeded" || phase == "Failed") continue;
        chosen.push_back(pod);
    }
    std::sort(chosen.begin(), chosen.end(), [](const json::object* a, const json::object* b) {
        return string_at(metadata_of(*a), "name") < string_at(metadata_of(*b), "name");
    });

    json::array endpoints;
    for (const json::object* pod : chosen) {
        const auto& pmd = metadata_of(*pod);
        const bool terminating = pmd.contains("deletionTimestamp");
        const bool ready = pod_ready(*pod) && !terminating;
        endpoints.push_back(json::object{
            {"addresses", json::array{json::value(string_at(*object_at(*pod, "status"), "podIP"))}},
            {"conditions", json::object{{"ready", ready}, {"serving", pod_ready(*pod)}, {"terminating", terminating}}},
            {"targetRef", json::object{{"kind", "Pod"},
                                       {"namespace", ns},
                                       {"name", string_at(pmd, "name")},
                                       {"uid", string_at(pmd, "uid")}}}});
    }
    json::array ports;
    if (const json::array* service_ports = spec ? array_at(*spec, "ports") : nullptr) {
        for (const auto& sp : *service_ports) {
            if (!sp.is_object()) continue;
            const json::object& p = sp.get_object();
            std::optional<std::int64_t> target = util::int_at(&p, "port");
            if (const json::value* t = p.if_contains("targetPort")) {
                if (t->is_int64()) target = t->get_int64();
                if (t->is_string()) {
                    target.reset();
                    for (const json::object* pod : chosen) {
                        if ((target = named_container_port(*pod, t->get_string()))) break;
                    }
                }
            }
            if (!target) continue;
            json::object port{{"port", *target},
                              {"protocol", p.contains("protocol") ? string_at(p, "protocol") : "TCP"}};
            port["name"] = string_at(p, "name");
            ports.push_back(std::move(port));
        }
    }
    return json::object{
        {"apiVersion", "discovery.k8s.io/v1"},
        {"kind", "EndpointSlice"},
        {"metadata", json::object{{"name", slice_name(name)},
                                  {"namespace", ns},
                                  {"labels", json::object{{service_name_label, name}, {managed_by_label, managed_by}}},
                                  {"ownerReferences", json::array{json::object{{"apiVersion", "v1"},
                                                                               {"kind", "Service"},
                                                                               {"name", name},
                                                                               {"uid", string_at(md, "uid")},
                                                                               {"controller", true},
                                                                               {"blockOwnerDeletion", true}}}}}},
        {"addressType", "IPv4"},
        {"endpoints", std::move(endpoints)},
        {"ports", std::move(ports)}};
}

bool same_endpoints(const json::object& a, const json::object& b) {
    auto field = [](const json::object& o, const char* key) {
        const json::value* v = o.if_contains(key);
        return v ? *v : json::value(json::array{});
    };
    return field(a, "endpoints") == field(b, "endpoints") && field(a, "ports") == field(b, "ports");
}

}  // namespace kubesandbox::local::endpoints
