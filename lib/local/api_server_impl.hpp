// The local API server's internals, shared by its files: request and response types, the
// helpers every handler uses, and ApiServer::Impl (the store, watches, and the handlers).
//   api_responses.cpp  Status responses and small helpers
//   api_tables.cpp     server-side printing (Table) for kubectl
//   api_discovery.cpp  /version, /api, /apis, openapi
//   api_routing.cpp    URL -> resource route (pure)
//   api_kinds.cpp      what pods, namespaces, services... add (KindRules)
//   api_objects.cpp    create, update, patch, validation, defaulting, watch fan-out
//   api_delete.cpp     delete, garbage collection, namespace termination
//   api_list.cpp       list, delete collection, pod status, the ApiServer methods
//   api_server.cpp     the connection loop: faults, routing to handlers, watch streams
#pragma once

#include "local/api_server.hpp"
#include "local/known_fields.hpp"
#include "local/store.hpp"
#include "proto/label_selector.hpp"
#include "proto/status.hpp"
#include "proto/validation.hpp"
#include "util/json_access.hpp"

#include <boost/asio/steady_timer.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>

#include <deque>
#include <list>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace kubesandbox::local {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using boost::system::error_code;
using namespace std::chrono_literals;

inline constexpr std::size_t body_limit = 3 * 1024 * 1024;
inline constexpr const char* unsupported_patch_message =
    "the body of the request was in an unknown format - accepted media types include: "
    "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml";

struct Response {
    unsigned status = 200;
    std::string content_type = "application/json";
    std::string body;
    std::vector<std::pair<std::string, std::string>> headers;
};

using util::metadata_of;
using util::object_at;
using util::string_at;

struct DeleteOptions {
    std::optional<std::int64_t> grace;
    std::string propagation;  // "" = default
    std::string precondition_uid, precondition_rv;
    bool dry_run = false;
};

struct Watcher {
    const ResourceType* type = nullptr;
    std::string version;
    std::string ns;  // "" = all
    proto::LabelSelector labels;
    proto::FieldSelector fields;
    std::deque<std::string> queue;
    asio::steady_timer signal;
    bool expired = false;
    bool table = false;         // events carry one-row Tables (kubectl get -w)
    bool columns_sent = false;  // column definitions go only with the first Table
    bool include_object = false;
    explicit Watcher(asio::any_io_executor ex) : signal(ex) {}
};

struct Request {
    http::request<http::string_body> msg;
    std::string method;
    std::vector<std::string> segments;
    std::map<std::string, std::string> query;
    // Warning headers for the response (fieldValidation=Warn), added by the handlers.
    mutable std::vector<std::string> warnings;
};

struct Route {
    const ResourceType* type = nullptr;
    std::string version;
    std::string ns;
    std::string name;
    std::string sub;
    bool namespaced_path = false;
    bool name_in_path = false;  // the URL has a name segment (possibly empty: "configmaps//status")
};

Response json_response(unsigned status, const json::value& v);
Response status_response(unsigned code, std::string_view reason, std::string_view message,
                         std::optional<proto::StatusDetails> details = std::nullopt);
// "pods", "sandboxclaims.extensions.agents.x-k8s.io"
std::string qualified_plural(const ResourceType& t);
std::string qualified_kind(const ResourceType& t);
proto::StatusDetails res_details(const ResourceType& t, std::string name);
Response not_found(const ResourceType& t, const std::string& name);
Response bad_request(std::string_view message);
Response invalid(const ResourceType& t, const std::string& name, std::vector<StatusCause> causes);
Response conflict(const ResourceType& t, const std::string& name, std::string_view detail);
Response server_not_found();
proto::NameRule name_rule(const ResourceType& t);
std::string status_reason(unsigned code);
std::optional<std::int64_t> int_param(const std::map<std::string, std::string>& q, const std::string& key);
json::object version_json();
json::array verbs_for(const ResourceType&);
json::object resource_list(const std::string& group_version, const std::string& group, const std::string& version);
json::object api_group(const std::string& group);
std::vector<std::string> api_groups();
// Which fields a field selector may use on this resource.
std::vector<std::string_view> selectable_fields(const ResourceType& t);
bool has_finalizer(const json::object& o, std::string_view f);
bool has_finalizers(const json::object& o);
void remove_finalizer(json::object& o, std::string_view f);
json::object column(std::string name, std::string type, int priority = 0, std::string format = "");
// Server-side printing (kubectl asks for as=Table): the columns a real server shows.
json::object to_table(const ResourceType& t, const std::vector<json::object>& objects, bool include_object,
                      json::object list_meta);
// Go's strconv.ParseBool (python-kubernetes sends watch=True).
bool parse_bool(std::string_view v);
bool wants_table(const http::request<http::string_body>& msg);

// api_discovery.cpp
// GET of /version, /healthz, /api, /apis...; nullopt when the path is not one of them.
std::optional<Response> discovery(ApiServer::Impl& impl, const Request& req);
Response openapi(const std::vector<std::string>& segments);

// api_routing.cpp
bool parse_target(std::string_view target, Request& req);
// Maps /api/v1/... and /apis/G/V/... onto a resource route. nullopt = not a resource path.
std::optional<Route> route_of(const std::vector<std::string>& segs, bool& known_group_version);
// A 400 for names in the path a real server rejects ("..", "/", "%"), or nullopt.
std::optional<Response> path_names_error(const Route& r);

// How an object's deletion ends once it has started.
enum class Deletion {
    immediate,            // removed when no finalizer is left
    graceful,             // pods: the kubelet stops the containers, then the object goes
    namespace_lifecycle,  // namespaces: content is purged first
};

// What a built-in kind adds to the generic object handling (api_kinds.cpp).
struct KindRules {
    // Defaults a real server fills in on create.
    void (*defaults)(ApiServer::Impl&, json::object& o) = nullptr;
    // Validation beyond metadata, on create.
    std::vector<StatusCause> (*validate)(const json::object& o) = nullptr;
    // On update: may reject the change or restore server-owned fields in `next`.
    std::optional<Response> (*on_update)(const Route& r, const json::object& current, json::object& next) = nullptr;
    // Admission after validation, on create (e.g. Pod Security): a response refuses the object.
    std::optional<Response> (*admit)(ApiServer::Impl&, const Route& r, const json::object& o) = nullptr;
    // The object was stored by a create or a spec update (not a status write).
    void (*stored)(ApiServer::Impl&, const json::object& o) = nullptr;
    // The object left the store.
    void (*removed)(ApiServer::Impl&, const json::object& o) = nullptr;
    Deletion deletion = Deletion::immediate;
    std::vector<std::string_view> selectable_fields;  // beyond metadata.name and metadata.namespace
    std::vector<std::string_view> undeletable_names;
    std::vector<std::string_view> categories;
};

const KindRules& rules_for(const ResourceType& t);

struct ApiServer::Impl {
    asio::any_io_executor executor;
    ApiServerOptions options;
    FaultList& faults;
    Kubelet* kubelet = nullptr;
    Store store;
    SnapshotCache snapshots;
    std::list<std::shared_ptr<Watcher>> watchers;
    std::map<std::string, std::shared_ptr<asio::steady_timer>> pod_grace_timers;  // uid -> timer
    std::set<std::string> terminating_namespaces;
    bool stopping = false;
    // Objects written with owner references, checked for owners that are gone once the write is
    // out (a controller acting on a stale cache creates dependents of a deleted owner).
    std::set<ObjectRef> owner_checks;
    asio::steady_timer owner_check_timer;
    bool owner_check_armed = false;
    // Open connections still served here. Shared: connection coroutines suspended at shutdown are
    // destroyed with the io_context, possibly after this Impl, and must still find the set.
    std::shared_ptr<std::set<net::AnyStream*>> connections = std::make_shared<std::set<net::AnyStream*>>();

    Impl(asio::any_io_executor ex, ApiServerOptions opts, FaultList& f);

    void stamp_new(json::object& o);

    const ResourceType& ns_type() const { return *find_resource_by_id("namespaces"); }

    // Rewrites apiVersion/kind for the version the client asked for.
    json::object present(const ResourceType& t, const std::string& version, const json::object& o) const;

    // ------------------------------------------------------------------ watch fan-out

    bool in_scope(const Watcher& w, const json::object& o) const;

    std::string event_line(Watcher& w, std::string_view type, const json::object& o) const;

    void feed(Watcher& w, const StoreEvent& ev);

    void dispatch_event(const StoreEvent& ev);

    // ------------------------------------------------------------------ helpers

    std::optional<Response> check_namespace_for_create(const ResourceType& t, const std::string& ns,
                                                       const std::string& name);

    // Parses a JSON object body; a Response on failure.
    std::variant<json::object, Response> parse_body(const Request& req, bool allow_yaml = false);

    bool dry_run(const Request& req) const;

    // ------------------------------------------------------------------ fieldValidation

    // The request's fieldValidation directive ("Strict", "Warn" or "Ignore"; absent = Warn), or
    // the 422 a real server gives for an unsupported value. `options_kind`: CreateOptions etc.
    std::variant<std::string, Response> field_validation(const Request& req, std::string_view options_kind) const;

    // Drops the fields the kind does not know. Strict: 400 naming every one; Warn: one Warning
    // header each; Ignore: silent. `decode_prefix`: the text a real decoder puts before the
    // strict error for a request body ("ConfigMap in version \"v1\" cannot be handled as a
    // ConfigMap: "); empty for patches.
    std::optional<Response> drop_unknown_fields(const Request& req, const ResourceType& t, const std::string& directive,
                                                json::object& o, const std::string& decode_prefix) const;

    static std::string decode_prefix(const ResourceType& t, const std::string& version);

    // ------------------------------------------------------------------ create

    // The body's namespace must match the URL's (or be empty, then filled in); cluster-scoped
    // objects carry none.
    static std::optional<Response> bind_namespace(const ResourceType& t, const Route& r, json::object& meta);

    Response create(const Request& req, const Route& r);

    // ------------------------------------------------------------------ update

    // Applies `incoming` as the new state of `current` (PUT or the result of a PATCH).
    Response update_object(const Request& req, const Route& r, const json::object& current, json::object incoming,
                           bool require_rv);

    Response replace(const Request& req, const Route& r);

    Response patch(const Request& req, const Route& r);

    // ------------------------------------------------------------------ delete

    // Removes the object from the store now and runs the garbage collector for its dependents.
    ObjectPtr remove_now(const ResourceType& t, const ObjectKey& key);

    struct Dependent {
        const ResourceType* type;
        ObjectKey key;
    };

    std::vector<Dependent> dependents_of(const std::string& uid, const std::string& owner_ns);

    void collect_dependents(const json::object& owner_meta, const std::string& policy);

    // Owners waiting in foreground deletion whose dependents are all gone are removed.
    void finish_foreground_owners();

    // The shared delete path (API, namespace cascade, GC). Returns the object's state afterwards
    // (null when removed) and the removed object's last state.
    struct DeleteResult {
        ObjectPtr remaining;
        ObjectPtr removed;
    };

    DeleteResult delete_object(const ResourceType& t, const ObjectKey& key, const DeleteOptions& opts);

    ObjectPtr begin_namespace_deletion(const std::string& name);

    void purge_namespace(const std::string& name);

    // The collector's other half: an object whose owners are all gone (absent, or the name now
    // held by another uid) is deleted in the background; one with some owners left loses the
    // references to the gone ones. Owners of kinds not served here count as present.
    void notice_owners(const StoreEvent& ev);
    void check_owners();

    std::variant<DeleteOptions, Response> delete_options(const Request& req);

    Response delete_item(const Request& req, const Route& r);

    // ------------------------------------------------------------------ list

    struct Selectors {
        proto::LabelSelector labels;
        proto::FieldSelector fields;
    };

    std::variant<Selectors, Response> selectors(const Request& req, const ResourceType& t);

    bool matches(const Selectors& s, const std::string& ns, const json::object& o) const;

    Response list(const Request& req, const Route& r);

    Response delete_collection(const Request& req, const Route& r);

    // ------------------------------------------------------------------ pod status from the kubelet

    void write_pod_status(const std::string& ns, const std::string& name, const std::string& uid, json::object status);
};

// What a request becomes: a response, a watch stream, or a pod stream (exec, attach-like log,
// port-forward) the connection loop hands to the kubelet with the connection.
struct WatchStream {
    Route route;
};
struct PodStream {
    Route route;
    ObjectPtr pod;
};
using Outcome = std::variant<Response, WatchStream, PodStream>;

// api_handler.cpp: authentication, discovery, routing and the verb handlers. No I/O.
Outcome handle_request(ApiServer::Impl& impl, Request& req);

}  // namespace kubesandbox::local
