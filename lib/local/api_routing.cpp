// From a request target to a resource route: pure, no I/O.
#include <algorithm>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <boost/url/parse.hpp>
#include "local/api_server_impl.hpp"
#include "local/store.hpp"
#include "proto/validation.hpp"
#include "util/json_access.hpp"

namespace kubesandbox::local {

bool parse_target(std::string_view target, Request& req) {
    auto u = boost::urls::parse_origin_form(target);
    if (!u) return false;
    for (auto seg : u->segments()) req.segments.push_back(std::string(seg));
    while (!req.segments.empty() && req.segments.back().empty()) req.segments.pop_back();
    for (auto p : u->params()) req.query[std::string(p.key)] = p.has_value ? std::string(p.value) : std::string();
    return true;
}

// Maps /api/v1/... and /apis/G/V/... onto a resource route. nullopt = not a resource path.
std::optional<Route> route_of(const std::vector<std::string>& segs, bool& known_group_version) {
    known_group_version = false;
    std::string group, version;
    std::size_t i = 0;
    if (segs.size() >= 2 && segs[0] == "api") {
        version = segs[1];
        i = 2;
    } else if (segs.size() >= 3 && segs[0] == "apis") {
        group = segs[1];
        version = segs[2];
        i = 3;
    } else {
        return std::nullopt;
    }
    std::vector<std::string> rest(segs.begin() + static_cast<std::ptrdiff_t>(i), segs.end());
    Route r;
    r.version = version;
    if (rest.size() >= 3 && rest[0] == "namespaces" && rest[2] != "status" && rest[2] != "finalize") {
        r.ns = rest[1];
        r.namespaced_path = true;
        rest.erase(rest.begin(), rest.begin() + 2);
    }
    if (rest.empty() || rest.size() > 3) return std::nullopt;
    r.type = find_resource(group, version, rest[0]);
    for (const auto& t : resource_types())
        if (t.group == group && std::find(t.versions.begin(), t.versions.end(), version) != t.versions.end())
            known_group_version = true;
    if (!r.type) return std::nullopt;
    if (r.namespaced_path && !r.type->namespaced) return std::nullopt;
    if (rest.size() >= 2) r.name = rest[1];
    if (rest.size() == 3) r.sub = rest[2];
    if (!r.sub.empty() &&
        std::find(r.type->subresources.begin(), r.type->subresources.end(), r.sub) == r.type->subresources.end())
        return std::nullopt;
    r.name_in_path = rest.size() >= 2;
    return r;
}

// Why `v` cannot be one path segment of a storage key ("" = it can), worded as a real server's
// IsValidPathSegmentName. Path traversal ("..", "%2F" decoded to '/') ends here, never in a lookup.
namespace {

std::string path_segment_problems(const std::string& v) {
    if (v == "." || v == "..") return "may not be '" + v + "'";
    std::string out;
    for (const char* bad : {"/", "%"})
        if (v.find(bad) != std::string::npos)
            out += (out.empty() ? "" : ";") + std::string("may not contain '") + bad + "'";
    return out;
}

// 400 for a namespace or name in the URL that cannot address an object: empty, ".", "..", with
// '/' or '%' (also percent-encoded), or (namespace) with control characters such as NUL.
}  // namespace

std::optional<Response> path_names_error(const Route& r) {
    if (r.namespaced_path) {
        if (r.ns.empty()) return bad_request("Namespace parameter required.");
        std::string why = path_segment_problems(r.ns);
        if (why.empty() && std::any_of(r.ns.begin(), r.ns.end(), [](char c) {
                auto u = static_cast<unsigned char>(c);
                return u < 0x20 || u == 0x7f;
            }))
            why = "may not contain control characters";
        if (!why.empty()) return bad_request("Namespace parameter invalid: " + proto::go_quote(r.ns) + ": " + why);
    }
    if (r.name_in_path) {
        if (r.name.empty()) return bad_request("Name parameter required.");
        std::string why = path_segment_problems(r.name);
        if (!why.empty()) return bad_request("Name parameter invalid: " + proto::go_quote(r.name) + ": " + why);
    }
    return std::nullopt;
}

}  // namespace kubesandbox::local
