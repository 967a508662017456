#include "providers/agent_sandbox/claim_shape.hpp"

#include "util/json_access.hpp"

#include <algorithm>

namespace kubesandbox::agent_sandbox {

namespace json = boost::json;
using util::metadata_of;
using util::object_at;
using util::string_at;

namespace {

constexpr const char* v1beta1 = "v1beta1";
constexpr const char* v1alpha1 = "v1alpha1";

bool has(const std::vector<std::string>& served, const char* version) {
    return std::find(served.begin(), served.end(), version) != served.end();
}

std::string template_of(const json::object& pool) {
    const json::object* spec = object_at(pool, "spec");
    return string_at(spec ? object_at(*spec, "sandboxTemplateRef") : nullptr, "name");
}

}  // namespace

std::vector<std::string> served_versions(const json::object& api_group) {
    std::vector<std::string> out;
    if (const json::array* versions = util::array_at(api_group, "versions")) {
        for (const auto& v : *versions) {
            if (!v.is_object()) continue;
            std::string name = string_at(v.get_object(), "version");
            if (!name.empty()) out.push_back(std::move(name));
        }
    }
    return out;
}

Result<std::string> choose_claim_version(const AgentSandboxProviderOptions& options,
                                         const std::vector<std::string>& served) {
    if (!options.claim_api_version.empty()) return options.claim_api_version;
    if (served.empty())
        return fail(errc::invalid_config,
                    std::string("the cluster does not serve ") + claims_group + " (is agent-sandbox installed?)");
    if (has(served, v1beta1)) return std::string(v1beta1);
    if (has(served, v1alpha1)) return std::string(v1alpha1);
    std::string listed;
    for (const auto& v : served) listed += (listed.empty() ? "" : ", ") + v;
    return fail(errc::invalid_config,
                std::string(claims_group) + " serves " + listed + "; this client speaks v1beta1 and v1alpha1");
}

bool shape_needs_pools(const AgentSandboxProviderOptions& options, const std::string& version) {
    if (version == v1alpha1) return options.template_name.empty();
    return !options.template_name.empty();
}

Result<ClaimShape> complete_claim_shape(const AgentSandboxProviderOptions& options, const std::string& version,
                                        const json::array& pools) {
    ClaimShape shape;
    shape.api_version = version;
    auto find_pool = [&](const std::string& name) -> const json::object* {
        for (const auto& p : pools) {
            if (p.is_object() && string_at(metadata_of(p.get_object()), "name") == name) return &p.get_object();
        }
        return nullptr;
    };
    if (version == v1alpha1) {
        if (!options.template_name.empty()) {
            shape.template_name = options.template_name;
            shape.cold = options.warm_pool.empty();
            return shape;
        }
        if (options.warm_pool.empty())
            return fail(errc::invalid_config, "a v1alpha1 claim names a template: set a template or a warm pool");
        const json::object* pool = find_pool(options.warm_pool);
        std::string tmpl = pool ? template_of(*pool) : std::string();
        if (tmpl.empty())
            return fail(errc::invalid_config, "no SandboxWarmPool " + options.warm_pool + " with a template in " +
                                                  options.namespace_name + " (a v1alpha1 claim names the template)");
        shape.template_name = std::move(tmpl);
        shape.warm_pool = options.warm_pool;
        return shape;
    }
    if (options.template_name.empty()) {
        if (options.warm_pool.empty())
            return fail(errc::invalid_config, "a " + version + " claim names a warm pool: set a warm pool");
        shape.warm_pool = options.warm_pool;
        return shape;
    }
    const json::object* named = options.warm_pool.empty() ? nullptr : find_pool(options.warm_pool);
    if (named && template_of(*named) == options.template_name) {
        shape.warm_pool = options.warm_pool;
        return shape;
    }
    std::vector<std::string> serving;
    for (const auto& p : pools) {
        if (p.is_object() && template_of(p.get_object()) == options.template_name)
            serving.push_back(string_at(metadata_of(p.get_object()), "name"));
    }
    std::sort(serving.begin(), serving.end());
    if (serving.empty() || serving.front().empty())
        return fail(errc::invalid_config, "no SandboxWarmPool in " + options.namespace_name + " serves template " +
                                              options.template_name + " (a " + version + " claim names a pool)");
    shape.warm_pool = serving.front();
    return shape;
}

}  // namespace kubesandbox::agent_sandbox
