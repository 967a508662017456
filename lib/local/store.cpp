#include "local/store.hpp"
#include "util/random.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <cstring>
#include <ctime>

namespace json = boost::json;

namespace kubesandbox::local {

namespace {

ResourceType core(std::string plural, std::string singular, std::string kind, bool namespaced,
                  std::vector<std::string> short_names, NameKind nk = NameKind::subdomain,
                  std::vector<std::string> sub = {}) {
    ResourceType t;
    t.versions = {"v1"};
    t.plural = std::move(plural);
    t.singular = std::move(singular);
    t.kind = std::move(kind);
    t.namespaced = namespaced;
    t.short_names = std::move(short_names);
    t.name_kind = nk;
    t.subresources = std::move(sub);
    return t;
}

ResourceType grouped(std::string group, std::vector<std::string> versions, std::string plural, std::string singular,
                     std::string kind, std::vector<std::string> short_names, bool custom,
                     std::vector<std::string> sub = {}) {
    ResourceType t;
    t.group = std::move(group);
    t.versions = std::move(versions);
    t.plural = std::move(plural);
    t.singular = std::move(singular);
    t.kind = std::move(kind);
    t.short_names = std::move(short_names);
    t.custom = custom;
    t.subresources = std::move(sub);
    return t;
}

std::vector<ResourceType> build_types() {
    std::vector<ResourceType> v;
    v.push_back(core("namespaces", "namespace", "Namespace", false, {"ns"}, NameKind::label, {"status"}));
    v.push_back(
        core("pods", "pod", "Pod", true, {"po"}, NameKind::subdomain, {"status", "exec", "log", "portforward"}));
    v.push_back(core("services", "service", "Service", true, {"svc"}, NameKind::dns1035, {"status"}));
    v.push_back(core("events", "event", "Event", true, {"ev"}));
    v.push_back(
        core("resourcequotas", "resourcequota", "ResourceQuota", true, {"quota"}, NameKind::subdomain, {"status"}));
    v.push_back(core("limitranges", "limitrange", "LimitRange", true, {"limits"}));
    v.push_back(core("configmaps", "configmap", "ConfigMap", true, {"cm"}));
    v.push_back(core("secrets", "secret", "Secret", true, {}));
    v.push_back(core("serviceaccounts", "serviceaccount", "ServiceAccount", true, {"sa"}));
    v.push_back(
        grouped("networking.k8s.io", {"v1"}, "networkpolicies", "networkpolicy", "NetworkPolicy", {"netpol"}, false));
    v.push_back(grouped("discovery.k8s.io", {"v1"}, "endpointslices", "endpointslice", "EndpointSlice", {}, false));
    v.push_back(
        grouped("gateway.networking.k8s.io", {"v1"}, "gateways", "gateway", "Gateway", {"gtw"}, true, {"status"}));
    v.push_back(grouped("agents.x-k8s.io", {"v1beta1", "v1alpha1"}, "sandboxes", "sandbox", "Sandbox", {"sandbox"},
                        true, {"status"}));
    v.push_back(grouped("extensions.agents.x-k8s.io", {"v1beta1", "v1alpha1"}, "sandboxtemplates", "sandboxtemplate",
                        "SandboxTemplate", {"sandboxtemplate"}, true));
    v.push_back(grouped("extensions.agents.x-k8s.io", {"v1beta1", "v1alpha1"}, "sandboxclaims", "sandboxclaim",
                        "SandboxClaim", {"sandboxclaim"}, true, {"status"}));
    v.push_back(grouped("extensions.agents.x-k8s.io", {"v1beta1", "v1alpha1"}, "sandboxwarmpools", "sandboxwarmpool",
                        "SandboxWarmPool", {"swp"}, true, {"status"}));
    return v;
}

const char* b64url = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

std::string b64url_encode(std::string_view in) {
    std::string out;
    unsigned val = 0;
    int bits = -6;
    for (unsigned char c : in) {
        val = (val << 8) | c;
        bits += 8;
        while (bits >= 0) {
            out.push_back(b64url[(val >> bits) & 0x3f]);
            bits -= 6;
        }
    }
    if (bits > -6) out.push_back(b64url[((val << 8) >> (bits + 8)) & 0x3f]);
    return out;
}

std::optional<std::string> b64url_decode(std::string_view in) {
    std::string out;
    unsigned val = 0;
    int bits = -8;
    for (char c : in) {
        const char* p = std::strchr(b64url, c);
        if (c == '=') break;
        if (!p || c == 0) return std::nullopt;
        val = (val << 6) | static_cast<unsigned>(p - b64url);
        bits += 6;
        if (bits >= 0) {
            out.push_back(static_cast<char>((val >> bits) & 0xff));
            bits -= 8;
        }
    }
    return out;
}

}  // namespace

const std::vector<ResourceType>& resource_types() {
    static const std::vector<ResourceType> types = build_types();
    return types;
}

const ResourceType* find_resource(const std::string& group, const std::string& version, const std::string& plural) {
    for (const auto& t : resource_types())
        if (t.group == group && t.plural == plural &&
            std::find(t.versions.begin(), t.versions.end(), version) != t.versions.end())
            return &t;
    return nullptr;
}

const ResourceType* find_resource_by_id(const std::string& id) {
    for (const auto& t : resource_types())
        if (t.id() == id) return &t;
    return nullptr;
}

ObjectPtr Store::get(const std::string& resource, const ObjectKey& key) const {
    auto c = collections_.find(resource);
    if (c == collections_.end()) return nullptr;
    auto it = c->second.find(key);
    return it == c->second.end() ? nullptr : it->second;
}

const ObjectMap& Store::objects(const std::string& resource) const {
    static const ObjectMap empty;
    auto c = collections_.find(resource);
    return c == collections_.end() ? empty : c->second;
}

ObjectPtr Store::put(const std::string& resource, json::object object) {
    ++rv_;
    json::object& meta = object["metadata"].as_object();
    meta["resourceVersion"] = std::to_string(rv_);
    ObjectKey key{meta.contains("namespace") ? std::string(meta["namespace"].as_string()) : std::string(),
                  std::string(meta["name"].as_string())};
    auto ptr = std::make_shared<const json::object>(std::move(object));
    auto& slot = collections_[resource][key];
    reindex(ObjectRef{resource, key}, slot.get(), ptr.get());
    StoreEvent ev{rv_, resource, slot ? "MODIFIED" : "ADDED", ptr, slot};
    slot = ptr;
    record(std::move(ev));
    return ptr;
}

ObjectPtr Store::remove(const std::string& resource, const ObjectKey& key) {
    auto c = collections_.find(resource);
    if (c == collections_.end()) return nullptr;
    auto it = c->second.find(key);
    if (it == c->second.end()) return nullptr;
    ++rv_;
    json::object last = *it->second;
    last["metadata"].as_object()["resourceVersion"] = std::to_string(rv_);
    auto ptr = std::make_shared<const json::object>(std::move(last));
    StoreEvent ev{rv_, resource, "DELETED", ptr, it->second};
    reindex(ObjectRef{resource, key}, it->second.get(), nullptr);
    c->second.erase(it);
    record(std::move(ev));
    return ptr;
}

namespace {

bool deleting_in_foreground(const json::object* o) {
    if (!o) return false;
    auto m = o->if_contains("metadata");
    auto f = m && m->is_object() ? m->as_object().if_contains("finalizers") : nullptr;
    if (!f || !f->is_array()) return false;
    return std::any_of(f->as_array().begin(), f->as_array().end(),
                       [](const json::value& v) { return v.is_string() && v.as_string() == "foregroundDeletion"; });
}

}  // namespace

std::vector<std::string> owner_uids(const json::object& o) {
    std::vector<std::string> out;
    auto m = o.if_contains("metadata");
    auto refs = m && m->is_object() ? m->as_object().if_contains("ownerReferences") : nullptr;
    if (!refs || !refs->is_array()) return out;
    for (const auto& r : refs->as_array())
        if (auto uid = r.is_object() ? r.as_object().if_contains("uid") : nullptr; uid && uid->is_string())
            out.emplace_back(uid->as_string());
    return out;
}

void Store::reindex(const ObjectRef& ref, const json::object* before, const json::object* after) {
    for (const auto& uid : before ? owner_uids(*before) : std::vector<std::string>{}) {
        auto it = by_owner_.find(uid);
        if (it == by_owner_.end()) continue;
        it->second.erase(ref);
        if (it->second.empty()) by_owner_.erase(it);
    }
    if (after)
        for (const auto& uid : owner_uids(*after)) by_owner_[uid].insert(ref);
    if (deleting_in_foreground(after)) foreground_.insert(ref);
    else foreground_.erase(ref);
}

std::vector<ObjectRef> Store::dependents(const std::string& owner_uid) const {
    auto it = by_owner_.find(owner_uid);
    if (it == by_owner_.end()) return {};
    return {it->second.begin(), it->second.end()};
}

void Store::record(StoreEvent ev) {
    history_.push_back(std::move(ev));
    while (history_.size() > history_limit_) {
        oldest_rv_ = history_.front().rv;
        history_.pop_front();
    }
    if (on_event) on_event(history_.back());
}

std::optional<std::vector<const StoreEvent*>> Store::events_since(std::uint64_t rv) const {
    if (rv < oldest_rv_) return std::nullopt;
    std::vector<const StoreEvent*> out;
    auto it = std::upper_bound(history_.begin(), history_.end(), rv,
                               [](std::uint64_t v, const StoreEvent& e) { return v < e.rv; });
    for (; it != history_.end(); ++it) out.push_back(&*it);
    return out;
}

std::uint64_t SnapshotCache::add(std::uint64_t rv, std::string resource, ObjectMap objects) {
    auto now = std::chrono::steady_clock::now();
    // Bound memory: drop snapshots older than an hour.
    for (auto it = snapshots_.begin(); it != snapshots_.end();)
        it = now - it->second.created > std::chrono::hours(1) ? snapshots_.erase(it) : std::next(it);
    std::uint64_t id = next_id_++;
    snapshots_.emplace(id, Snapshot{rv, std::move(resource), std::move(objects), now});
    return id;
}

const SnapshotCache::Snapshot* SnapshotCache::find(std::uint64_t id, std::chrono::seconds ttl) {
    auto it = snapshots_.find(id);
    if (it == snapshots_.end()) return nullptr;
    if (std::chrono::steady_clock::now() - it->second.created > ttl) {
        snapshots_.erase(it);
        return nullptr;
    }
    return &it->second;
}

std::string encode_continue(const ContinueToken& token) {
    json::object o;
    o["rv"] = token.rv;
    o["id"] = token.id;
    o["ns"] = token.after.ns;
    o["start"] = token.after.name;
    return b64url_encode(json::serialize(o));
}

std::optional<ContinueToken> decode_continue(std::string_view text) {
    auto raw = b64url_decode(text);
    if (!raw) return std::nullopt;
    boost::system::error_code ec;
    json::value v = json::parse(*raw, ec);
    if (ec || !v.is_object()) return std::nullopt;
    const auto& o = v.as_object();
    auto rv = o.if_contains("rv");
    auto id = o.if_contains("id");
    auto ns = o.if_contains("ns");
    auto start = o.if_contains("start");
    if (!rv || !id || !ns || !start || !ns->is_string() || !start->is_string()) return std::nullopt;
    ContinueToken t;
    if (auto r = rv->if_uint64()) t.rv = *r;
    else if (auto r2 = rv->if_int64(); r2 && *r2 >= 0) t.rv = static_cast<std::uint64_t>(*r2);
    else return std::nullopt;
    if (auto r = id->if_uint64()) t.id = *r;
    else if (auto r2 = id->if_int64(); r2 && *r2 >= 0) t.id = static_cast<std::uint64_t>(*r2);
    else return std::nullopt;
    t.after = {std::string(ns->as_string()), std::string(start->as_string())};
    return t;
}

std::pair<ObjectMap::const_iterator, ObjectMap::const_iterator> list_range(const ObjectMap& objects,
                                                                           const std::string& ns,
                                                                           const ObjectKey* after) {
    if (ns.empty()) return {after ? objects.upper_bound(*after) : objects.begin(), objects.end()};
    // ns + '\0' is the least name greater than ns: the next namespace starts there.
    const ObjectKey next_namespace{ns + '\0', ""};
    auto end = objects.lower_bound(next_namespace);
    if (after && !(*after < next_namespace)) return {end, end};
    if (after && !(*after < ObjectKey{ns, ""})) return {objects.upper_bound(*after), end};
    return {objects.lower_bound(ObjectKey{ns, ""}), end};
}

std::string new_uid() {
    std::string h = util::random_hex(16);
    h[12] = '4';
    h[16] = "89ab"[h[16] % 4];
    return h.substr(0, 8) + "-" + h.substr(8, 4) + "-" + h.substr(12, 4) + "-" + h.substr(16, 4) + "-" +
           h.substr(20, 12);
}

}  // namespace kubesandbox::local
