// Raw mode's names and selectors: which pod and namespace a sandbox id maps to, and which label
// selectors find this provider's objects. Pure functions, unit-tested without a cluster.
#pragma once

#include <kubesandbox/error.hpp>
#include <kubesandbox/kube_types.hpp>
#include <kubesandbox/raw_provider.hpp>

#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace kubesandbox::raw {

// "ksb-" + 10 characters without vowels (no accidental words).
std::string random_pod_name();
bool is_random_pod_name(std::string_view name);
// "ksb-" + DNS-1123 form of the id, hashed when it had to change (see RawProvider::pod_name_for).
std::string pod_name_for(const std::string& id);

std::string network_policy_name(const std::string& pod);
std::string namespace_for(const RawProviderOptions& options, const std::string& pod);
const char* namespace_mode(const RawProviderOptions& options);  // per-sandbox | shared

ResourcePath pods_path(std::string namespace_name);
ResourcePath network_policies_path(std::string namespace_name);
ResourcePath namespaces_path();
ResourcePath core_path(std::string plural, std::string namespace_name);
// Where the caller-id bindings (ConfigMaps, shared-namespace mode) live.
ResourcePath bindings_path(std::string namespace_name);
// Where this provider's pods are listed: its namespace, or every namespace in per-sandbox mode.
ResourcePath list_path(const RawProviderOptions& options);

// Selects this provider's objects: ours, of its namespace mode only, with these user labels.
std::string selector_for(const RawProviderOptions& options, const std::map<std::string, std::string>& user_labels);
std::string selector_for(const RawProviderOptions& options);  // all of this provider's objects
// Warm pods of one configuration.
std::string warm_selector(const RawProviderOptions& options, const std::string& config_hash);

// Where a sandbox id points.
struct Target {
    std::string ns;
    std::string pod;
    std::optional<std::string> label;  // sandbox-id label of a caller id; nullopt for a pod reference
    std::string id;                    // canonical id: the caller id, or "<ns>/<pod>"
};

// Accepts a caller id, a sandbox's id() "<namespace>/<pod we named>", or a random pod name.
Result<Target> resolve_id(const RawProviderOptions& options, const std::string& id);

}  // namespace kubesandbox::raw
