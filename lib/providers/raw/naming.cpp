#include "providers/raw/naming.hpp"

#include "proto/label_selector.hpp"
#include "proto/validation.hpp"
#include "util/random.hpp"

#include <cctype>

namespace kubesandbox::raw {

namespace {

constexpr std::string_view random_alphabet = "bcdfghjklmnpqrstvwxz2456789";

// The part after "ksb-" of a random name.
bool is_random_tail(std::string_view s) {
    if (s.size() != 10) return false;
    for (char c : s)
        if (random_alphabet.find(c) == std::string_view::npos) return false;
    return true;
}

// Ends like a hashed name: 10 hex digits, alone or after a '-'.
bool looks_hashed(std::string_view s) {
    if (s.size() < 10) return false;
    for (char c : s.substr(s.size() - 10))
        if (!std::isxdigit(static_cast<unsigned char>(c)) || std::isupper(static_cast<unsigned char>(c))) return false;
    return s.size() == 10 || s[s.size() - 11] == '-';
}

// Ours, and of this namespace mode only (a per-sandbox provider lists cluster-wide and must
// not touch shared-namespace sandboxes).
std::string scope_selector(const RawProviderOptions& options, std::map<std::string, std::string> sel) {
    sel[keys::managed_by] = keys::managed_by_value;
    if (options.namespace_per_sandbox) sel[keys::namespace_mode] = "per-sandbox";
    std::string s = proto::format_label_selector(sel);
    // Shared mode: also objects from before the mode label existed.
    if (!options.namespace_per_sandbox) s += std::string(",") + keys::namespace_mode + "!=per-sandbox";
    return s;
}

}  // namespace

std::string random_pod_name() { return "ksb-" + util::random_string(random_alphabet, 10); }

bool is_random_pod_name(std::string_view name) { return name.substr(0, 4) == "ksb-" && is_random_tail(name.substr(4)); }

std::string pod_name_for(const std::string& id) {
    if (is_random_pod_name(id)) return id;  // a random sandbox's own name
    std::string s;
    for (char c : id) {
        unsigned char u = static_cast<unsigned char>(c);
        if (std::isalnum(u) && u < 128) s.push_back(static_cast<char>(std::tolower(u)));
        else if (!s.empty() && s.back() != '-') s.push_back('-');
    }
    while (!s.empty() && s.back() == '-') s.pop_back();
    // Kept verbatim only when nothing changed and it cannot pass for a hashed name (-<10 hex>)
    // or a random one: then "ksb-" + id is unique to the id, and hashed names are too.
    bool changed = s != id || s.size() > 47 || looks_hashed(s) || is_random_tail(s);
    if (s.size() > 47) s.resize(47);
    while (!s.empty() && s.back() == '-') s.pop_back();
    std::string name = "ksb-" + s;
    if (changed || s.empty()) name += (s.empty() ? "" : "-") + util::sha256_hex(id, 10);
    return name;
}

std::string network_policy_name(const std::string& pod) { return pod + "-deny-all"; }

std::string namespace_for(const RawProviderOptions& options, const std::string& pod) {
    return options.namespace_per_sandbox ? pod : options.namespace_name;
}

const char* namespace_mode(const RawProviderOptions& options) {
    return options.namespace_per_sandbox ? "per-sandbox" : "shared";
}

ResourcePath pods_path(std::string namespace_name) { return core_path("pods", std::move(namespace_name)); }

ResourcePath network_policies_path(std::string namespace_name) {
    ResourcePath p;
    p.group = "networking.k8s.io";
    p.plural = "networkpolicies";
    p.namespace_name = std::move(namespace_name);
    return p;
}

ResourcePath namespaces_path() { return core_path("namespaces", std::string()); }

ResourcePath core_path(std::string plural, std::string namespace_name) {
    ResourcePath p;
    p.plural = std::move(plural);
    p.namespace_name = std::move(namespace_name);
    return p;
}

ResourcePath bindings_path(std::string namespace_name) { return core_path("configmaps", std::move(namespace_name)); }

ResourcePath list_path(const RawProviderOptions& options) {
    return pods_path(options.namespace_per_sandbox ? std::string() : options.namespace_name);
}

std::string selector_for(const RawProviderOptions& options, const std::map<std::string, std::string>& user_labels) {
    std::map<std::string, std::string> sel;
    for (const auto& [k, v] : user_labels) sel[std::string(keys::prefix) + k] = proto::sanitize_label_value(v);
    return scope_selector(options, sel);
}

std::string selector_for(const RawProviderOptions& options) { return scope_selector(options, {}); }

std::string warm_selector(const RawProviderOptions& options, const std::string& config_hash) {
    return scope_selector(options, {{keys::pool_status, "warm"}, {keys::config_hash, config_hash}});
}

Result<Target> resolve_id(const RawProviderOptions& options, const std::string& id) {
    if (id.empty()) return fail(errc::invalid_argument, "sandbox id must not be empty");
    // A sandbox's id(): "<namespace>/<pod we named>".
    if (auto slash = id.find('/'); slash != std::string::npos) {
        std::string ns = id.substr(0, slash);
        std::string pod = id.substr(slash + 1);
        if (pod.rfind("ksb-", 0) == 0 && proto::validate_dns1123_label(pod).empty() &&
            proto::validate_dns1123_label(ns).empty()) {
            std::string want = namespace_for(options, pod);
            if (ns != want)
                return fail(
                    errc::invalid_argument,
                    "sandbox " + id + " is in namespace " + ns + ", but this provider's sandboxes live in " +
                        (options.namespace_per_sandbox ? std::string("their own namespaces") : "namespace " + want));
            return Target{ns, pod, std::nullopt, id};
        }
    }
    // A random sandbox's bare pod name.
    if (is_random_pod_name(id)) {
        std::string ns = namespace_for(options, id);
        return Target{ns, id, std::nullopt, ns + "/" + id};
    }
    std::string pod = pod_name_for(id);
    return Target{namespace_for(options, pod), pod, proto::sanitize_label_value(id), id};
}

}  // namespace kubesandbox::raw
