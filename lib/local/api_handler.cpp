// The API server's request handling: authentication, discovery, routing and one handler per
// verb. No I/O: the connection loop writes what this returns, and tests call it directly.
#include <array>

#include "local/api_server_impl.hpp"
#include "proto/validation.hpp"
#include "util/json_access.hpp"

namespace kubesandbox::local {

namespace {

using Handler = Response (*)(ApiServer::Impl&, const Request&, const Route&);

Response get_item(ApiServer::Impl& impl, const Request& req, const Route& r) {
    const ResourceType& t = *r.type;
    auto obj = impl.store.get(t.id(), {r.ns, r.name});
    if (!obj) return not_found(t, r.name);
    if (wants_table(req.msg) && r.sub.empty()) {
        auto io = req.query.find("includeObject");
        return json_response(
            200, to_table(t, {impl.present(t, r.version, *obj)}, io != req.query.end() && io->second == "Object",
                          json::object{{"resourceVersion", string_at(metadata_of(*obj), "resourceVersion")}}));
    }
    return json_response(200, impl.present(t, r.version, *obj));
}

// The route table: which verb on a collection or an item runs which handler.
struct VerbRoute {
    std::string_view method;
    bool item;            // a named object, else the collection
    bool on_subresource;  // also serves .../NAME/status
    Handler handler;
};

constexpr std::array<VerbRoute, 7> verb_routes{{
    {"GET", false, false, [](ApiServer::Impl& i, const Request& q, const Route& r) { return i.list(q, r); }},
    {"POST", false, false, [](ApiServer::Impl& i, const Request& q, const Route& r) { return i.create(q, r); }},
    {"DELETE", false, false,
     [](ApiServer::Impl& i, const Request& q, const Route& r) { return i.delete_collection(q, r); }},
    {"GET", true, true, get_item},
    {"PUT", true, true, [](ApiServer::Impl& i, const Request& q, const Route& r) { return i.replace(q, r); }},
    {"PATCH", true, true, [](ApiServer::Impl& i, const Request& q, const Route& r) { return i.patch(q, r); }},
    {"DELETE", true, false, [](ApiServer::Impl& i, const Request& q, const Route& r) { return i.delete_item(q, r); }},
}};

Response method_not_allowed(const ResourceType& t, const std::string& method) {
    std::string verb = method == "POST" ? "create" : method;
    return status_response(405, "MethodNotAllowed",
                           verb + " is not supported on resources of kind \"" + t.plural + "\"");
}

bool is_public(const std::vector<std::string>& segments) {
    if (segments.size() != 1) return false;
    const auto& s = segments[0];
    return s == "healthz" || s == "livez" || s == "readyz" || s == "version";
}

Outcome resource_request(ApiServer::Impl& impl, const Request& req, const Route& route) {
    const ResourceType& t = *route.type;
    const std::string& m = req.method;
    if (route.sub == "exec" || route.sub == "portforward" || route.sub == "log") {
        auto pod = impl.store.get(t.id(), {route.ns, route.name});
        if (!pod) return not_found(t, route.name);
        if (!impl.kubelet) return status_response(503, "ServiceUnavailable", "the kubelet is not running");
        return PodStream{route, pod};
    }
    bool item = !route.name.empty();
    if (!item) {
        // Namespaced kinds are read across namespaces, never written there.
        if (t.namespaced && !route.namespaced_path && m != "GET") return method_not_allowed(t, m);
        auto watch = req.query.find("watch");
        if (m == "GET" && watch != req.query.end() && parse_bool(watch->second)) return WatchStream{route};
    }
    for (const auto& v : verb_routes)
        if (v.method == m && v.item == item && (route.sub.empty() || v.on_subresource))
            return v.handler(impl, req, route);
    return method_not_allowed(t, m);
}

}  // namespace

Outcome handle_request(ApiServer::Impl& impl, Request& req) {
    if (req.method.empty()) req.method = std::string(req.msg.method_string());
    if (!parse_target(req.msg.target(), req)) return bad_request("malformed request target");
    if (!is_public(req.segments)) {
        std::string_view auth = req.msg[http::field::authorization];
        bool anonymous = auth.empty() && impl.options.allow_anonymous;
        if (!anonymous && auth != "Bearer " + impl.options.token)
            return status_response(401, "Unauthorized", "Unauthorized");
    }
    Outcome out = server_not_found();
    bool known_gv = false;
    std::optional<Route> route;
    if (req.method == "GET") {
        if (auto resp = discovery(impl, req)) out = std::move(*resp);
        else if (req.segments.size() >= 2 && req.segments[0] == "openapi") out = openapi(req.segments);
        else route = route_of(req.segments, known_gv);
    } else {
        route = route_of(req.segments, known_gv);
    }
    if (route) {
        if (auto bad_path = path_names_error(*route)) out = std::move(*bad_path);
        else out = resource_request(impl, req, *route);
    }
    if (auto* resp = std::get_if<Response>(&out))
        for (const auto& w : req.warnings) resp->headers.emplace_back("Warning", "299 - " + proto::go_quote(w));
    return out;
}

}  // namespace kubesandbox::local
