#include "connection/service_endpoints.hpp"

#include "util/json_access.hpp"

namespace kubesandbox {

namespace json = boost::json;
using util::array_at;
using util::metadata_of;
using util::object_at;
using util::string_at;

namespace {

const json::array& array_or_empty(const json::array* a) {
    static const json::array empty;
    return a ? *a : empty;
}

}  // namespace

Result<std::vector<ServiceEndpoint>> ready_endpoints(const json::object& service, const json::array& slices,
                                                     std::uint16_t service_port) {
    const std::string name = string_at(metadata_of(service), "name");
    const json::object* spec = object_at(service, "spec");
    const json::array* ports = spec ? array_at(*spec, "ports") : nullptr;
    const json::object* chosen = nullptr;
    for (const auto& p : array_or_empty(ports)) {
        if (p.is_object() && util::int_at(&p.get_object(), "port") == std::int64_t(service_port))
            chosen = &p.get_object();
    }
    if (!chosen)
        return fail(errc::invalid_config,
                    "service " + name + " has no port " + std::to_string(service_port) + " to tunnel to");
    const std::string port_name = string_at(*chosen, "name");
    std::vector<ServiceEndpoint> out;
    for (const auto& item : slices) {
        if (!item.is_object()) continue;
        const json::object& slice = item.get_object();
        std::optional<std::int64_t> target;
        for (const auto& sp : array_or_empty(array_at(slice, "ports"))) {
            if (sp.is_object() && string_at(sp.get_object(), "name") == port_name)
                target = util::int_at(&sp.get_object(), "port");
        }
        if (!target || *target <= 0 || *target > 65535) continue;
        for (const auto& e : array_or_empty(array_at(slice, "endpoints"))) {
            if (!e.is_object()) continue;
            const json::object* conditions = object_at(e.get_object(), "conditions");
            const json::value* ready = conditions ? conditions->if_contains("ready") : nullptr;
            if (ready && ready->is_bool() && !ready->get_bool()) continue;
            const json::object* ref = object_at(e.get_object(), "targetRef");
            if (!ref || string_at(*ref, "kind") != "Pod" || string_at(*ref, "name").empty()) continue;
            out.push_back(ServiceEndpoint{string_at(*ref, "name"), static_cast<std::uint16_t>(*target)});
        }
    }
    if (out.empty())
        return fail(errc::service_unavailable,
                    "service " + name + " has no ready endpoint for port " + std::to_string(service_port));
    return out;
}

}  // namespace kubesandbox
