// The local cluster's object store: one global resourceVersion counter, objects per resource
// keyed by namespace/name, a bounded history of changes for watches, and list snapshots for
// consistent pagination. Single-threaded (the cluster's executor); sans-IO.
#pragma once

#include <boost/json/object.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace kubesandbox::local {

enum class NameKind { subdomain, label, dns1035 };

// One served resource (all versions of it share one storage).
struct ResourceType {
    std::string group;                  // "" for core
    std::vector<std::string> versions;  // served versions; the first is preferred
    std::string plural, singular, kind;
    bool namespaced = true;
    bool custom = false;  // a CRD: no strategic merge patch, resourceVersion required on PUT
    std::vector<std::string> short_names;
    std::vector<std::string> subresources;  // "status", "exec", "log", "portforward"
    NameKind name_kind = NameKind::subdomain;

    std::string id() const { return group.empty() ? plural : plural + "." + group; }
    std::string api_version(const std::string& version) const {
        return group.empty() ? version : group + "/" + version;
    }
};

// The resources the local cluster serves, in discovery order.
const std::vector<ResourceType>& resource_types();
const ResourceType* find_resource(const std::string& group, const std::string& version, const std::string& plural);
const ResourceType* find_resource_by_id(const std::string& id);

struct ObjectKey {
    std::string ns, name;
    friend auto operator<=>(const ObjectKey&, const ObjectKey&) = default;
};

using ObjectPtr = std::shared_ptr<const boost::json::object>;
using ObjectMap = std::map<ObjectKey, ObjectPtr>;

// The objects a list reads, in key order: those of namespace `ns` ("" = every namespace), after
// `after` when given. Keys sort by namespace first, so a namespaced list never walks the others.
std::pair<ObjectMap::const_iterator, ObjectMap::const_iterator> list_range(const ObjectMap& objects,
                                                                           const std::string& ns,
                                                                           const ObjectKey* after);

struct StoreEvent {
    std::uint64_t rv = 0;
    std::string resource;  // ResourceType::id()
    std::string type;      // ADDED, MODIFIED, DELETED
    ObjectPtr object;      // new state (for DELETED: last state with the deletion's resourceVersion)
    ObjectPtr previous;    // state before (null for ADDED)
};

// One object of one resource (ResourceType::id()).
struct ObjectRef {
    std::string resource;
    ObjectKey key;
    friend auto operator<=>(const ObjectRef&, const ObjectRef&) = default;
};

// The uids an object's metadata.ownerReferences name, in order; entries without one are skipped.
std::vector<std::string> owner_uids(const boost::json::object& object);

class Store {
public:
    explicit Store(std::size_t history_limit = 20000) : history_limit_(history_limit) {}

    std::uint64_t resource_version() const { return rv_; }

    ObjectPtr get(const std::string& resource, const ObjectKey& key) const;
    const ObjectMap& objects(const std::string& resource) const;

    // Stores `object` (create when absent, else replace), stamping metadata.resourceVersion.
    ObjectPtr put(const std::string& resource, boost::json::object object);
    // Removes the object; returns its last state stamped with the deletion's resourceVersion.
    ObjectPtr remove(const std::string& resource, const ObjectKey& key);

    // Changes after `rv` in order; nullopt when `rv` is older than the retained history.
    std::optional<std::vector<const StoreEvent*>> events_since(std::uint64_t rv) const;

    // Called after every committed change.
    std::function<void(const StoreEvent&)> on_event;

    // Objects naming `owner_uid` in their ownerReferences, and objects carrying the
    // foregroundDeletion finalizer. Indexed on every change, so garbage collection after a
    // delete costs the dependents found, not a walk over the whole store.
    std::vector<ObjectRef> dependents(const std::string& owner_uid) const;
    std::vector<ObjectRef> foreground_deleting() const { return {foreground_.begin(), foreground_.end()}; }

private:
    void reindex(const ObjectRef& ref, const boost::json::object* before, const boost::json::object* after);
    std::map<std::string, std::set<ObjectRef>> by_owner_;
    std::set<ObjectRef> foreground_;
    std::uint64_t rv_ = 1;
    std::size_t history_limit_;
    std::uint64_t oldest_rv_ = 1;  // history holds every event with rv > oldest_rv_
    std::map<std::string, ObjectMap> collections_;
    std::deque<StoreEvent> history_;
    void record(StoreEvent ev);
};

// Snapshots of collections behind continue tokens.
class SnapshotCache {
public:
    struct Snapshot {
        std::uint64_t rv;
        std::string resource;
        ObjectMap objects;
        std::chrono::steady_clock::time_point created;
    };
    std::uint64_t add(std::uint64_t rv, std::string resource, ObjectMap objects);
    // Null when expired or unknown.
    const Snapshot* find(std::uint64_t id, std::chrono::seconds ttl);
    void expire_all() { snapshots_.clear(); }

private:
    std::uint64_t next_id_ = 1;
    std::map<std::uint64_t, Snapshot> snapshots_;
};

// Continue tokens: base64url of {"rv":N,"id":N,"start":"ns/name"}; id 0 = list from live data.
struct ContinueToken {
    std::uint64_t rv = 0;
    std::uint64_t id = 0;
    ObjectKey after;  // last key already returned
};
std::string encode_continue(const ContinueToken& token);
std::optional<ContinueToken> decode_continue(std::string_view text);

std::string new_uid();

}  // namespace kubesandbox::local
