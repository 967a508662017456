#include "proto/request.hpp"

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/network_v4.hpp>
#include <boost/asio/ip/network_v6.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <cctype>

namespace kubesandbox {

namespace {
void append_segment(std::string& out, std::string_view segment) {
    out += '/';
    out += proto::url_encode(segment);
}
}  // namespace

std::string ResourcePath::str() const {
    std::string out;
    if (group.empty()) {
        out = "/api/" + version;
    } else {
        out = "/apis/" + group + "/" + version;
    }
    if (!namespace_name.empty()) {
        out += "/namespaces";
        append_segment(out, namespace_name);
    }
    if (!plural.empty()) out += "/" + plural;
    if (!name.empty()) append_segment(out, name);
    if (!subresource.empty()) out += "/" + subresource;
    return out;
}

ResourcePath ResourcePath::with_name(std::string n) const {
    ResourcePath p = *this;
    p.name = std::move(n);
    return p;
}

}  // namespace kubesandbox

namespace kubesandbox::proto {
namespace json = boost::json;

std::string url_encode(std::string_view text) {
    static constexpr char hex[] = "0123456789ABCDEF";
    std::string out;
    out.reserve(text.size());
    for (unsigned char c : text) {
        if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
            out += static_cast<char>(c);
        } else {
            out += '%';
            out += hex[c >> 4];
            out += hex[c & 15];
        }
    }
    return out;
}

std::string query_string(const std::vector<std::pair<std::string, std::string>>& params) {
    std::string out;
    for (const auto& [k, v] : params) {
        out += out.empty() ? '?' : '&';
        out += url_encode(k);
        out += '=';
        out += url_encode(v);
    }
    return out;
}

std::string list_target(const ResourcePath& collection, const ListOptions& o) {
    std::vector<std::pair<std::string, std::string>> q;
    if (!o.label_selector.empty()) q.emplace_back("labelSelector", o.label_selector);
    if (!o.field_selector.empty()) q.emplace_back("fieldSelector", o.field_selector);
    if (o.limit) q.emplace_back("limit", std::to_string(*o.limit));
    if (!o.continue_token.empty()) q.emplace_back("continue", o.continue_token);
    if (!o.resource_version.empty()) q.emplace_back("resourceVersion", o.resource_version);
    if (o.timeout_seconds) q.emplace_back("timeoutSeconds", std::to_string(*o.timeout_seconds));
    return collection.str() + query_string(q);
}

std::string watch_target(const ResourcePath& collection, const WatchOptions& o) {
    std::vector<std::pair<std::string, std::string>> q;
    q.emplace_back("watch", "true");
    if (!o.label_selector.empty()) q.emplace_back("labelSelector", o.label_selector);
    if (!o.field_selector.empty()) q.emplace_back("fieldSelector", o.field_selector);
    if (!o.resource_version.empty()) q.emplace_back("resourceVersion", o.resource_version);
    if (o.allow_bookmarks) q.emplace_back("allowWatchBookmarks", "true");
    if (o.timeout_seconds) q.emplace_back("timeoutSeconds", std::to_string(*o.timeout_seconds));
    return collection.str() + query_string(q);
}

std::string delete_body(const DeleteOptions& o) {
    json::object body{{"kind", "DeleteOptions"}, {"apiVersion", "v1"}};
    if (o.grace_period_seconds) body["gracePeriodSeconds"] = *o.grace_period_seconds;
    if (!o.propagation_policy.empty()) body["propagationPolicy"] = o.propagation_policy;
    if (!o.precondition_uid.empty() || !o.precondition_resource_version.empty()) {
        json::object pre;
        if (!o.precondition_uid.empty()) pre["uid"] = o.precondition_uid;
        if (!o.precondition_resource_version.empty()) pre["resourceVersion"] = o.precondition_resource_version;
        body["preconditions"] = std::move(pre);
    }
    return json::serialize(body);
}

std::string_view patch_content_type(PatchType type) {
    switch (type) {
    case PatchType::merge: return "application/merge-patch+json";
    case PatchType::json: return "application/json-patch+json";
    case PatchType::strategic: return "application/strategic-merge-patch+json";
    }
    return "application/merge-patch+json";
}

Result<json::object> decode_object(std::string_view body) {
    boost::system::error_code ec;
    json::value v = json::parse(body, ec);
    if (ec) return fail(errc::invalid_response, "response body is not valid JSON: " + ec.message());
    if (!v.is_object()) return fail(errc::invalid_response, "response body is not a JSON object");
    return std::move(v.get_object());
}

Result<ListPage> decode_list(std::string_view body) {
    auto obj = decode_object(body);
    if (!obj) return fail(obj.error());
    ListPage page;
    auto* items = obj->if_contains("items");
    if (items && items->is_array()) {
        page.items = std::move(items->get_array());
    } else if (items && !items->is_null()) {
        return fail(errc::invalid_response, "list response has a non-array \"items\"");
    } else if (!obj->contains("metadata")) {
        return fail(errc::invalid_response, "response is not a list (no items, no metadata)");
    }
    if (auto* md = obj->if_contains("metadata"); md && md->is_object()) {
        const auto& m = md->get_object();
        if (auto* rv = m.if_contains("resourceVersion"); rv && rv->is_string())
            page.resource_version = std::string(rv->get_string());
        if (auto* c = m.if_contains("continue"); c && c->is_string())
            page.continue_token = std::string(c->get_string());
        if (auto* r = m.if_contains("remainingItemCount"); r && r->is_int64())
            page.remaining_item_count = r->get_int64();
    }
    return page;
}

Result<ServerUrl> parse_server_url(std::string_view server) {
    ServerUrl u;
    std::string_view rest;
    if (server.starts_with("https://")) {
        u.tls = true;
        rest = server.substr(8);
    } else if (server.starts_with("http://")) {
        u.tls = false;
        rest = server.substr(7);
    } else {
        return fail(errc::invalid_config, "server URL must start with https:// or http://: \"" +
                                              std::string(server.substr(0, 200)) + "\"");
    }
    auto slash = rest.find('/');
    std::string_view authority = rest.substr(0, slash);
    if (slash != std::string_view::npos) {
        std::string_view path = rest.substr(slash);
        while (!path.empty() && path.back() == '/') path.remove_suffix(1);
        u.base_path = std::string(path);
    }
    if (authority.empty()) return fail(errc::invalid_config, "server URL has no host");
    if (authority.front() == '[') {
        auto close = authority.find(']');
        if (close == std::string_view::npos) return fail(errc::invalid_config, "server URL has a bad IPv6 host");
        u.host = std::string(authority.substr(1, close - 1));
        std::string_view after = authority.substr(close + 1);
        if (after.starts_with(":")) u.port = std::string(after.substr(1));
    } else {
        auto colon = authority.rfind(':');
        if (colon != std::string_view::npos) {
            u.host = std::string(authority.substr(0, colon));
            u.port = std::string(authority.substr(colon + 1));
        } else {
            u.host = std::string(authority);
        }
    }
    if (u.port.empty()) u.port = u.tls ? "443" : "80";
    if (u.host.empty() || !std::all_of(u.port.begin(), u.port.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return fail(errc::invalid_config, "server URL has a bad host or port");
    return u;
}

namespace {
bool is_loopback_host(std::string_view host) {
    if (host == "localhost") return true;
    boost::system::error_code ec;
    auto addr = boost::asio::ip::make_address(std::string(host), ec);
    return !ec && addr.is_loopback();
}
std::string lower(std::string_view s) {
    std::string out(s);
    for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}
}  // namespace

bool no_proxy_matches(std::string_view no_proxy, std::string_view host_in) {
    if (is_loopback_host(host_in)) return true;
    const std::string host = lower(host_in);
    boost::system::error_code ec;
    auto host_addr = boost::asio::ip::make_address(host, ec);
    const bool host_is_ip = !ec;
    std::size_t pos = 0;
    while (pos <= no_proxy.size()) {
        auto comma = no_proxy.find(',', pos);
        std::string entry = lower(no_proxy.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos));
        pos = comma == std::string_view::npos ? no_proxy.size() + 1 : comma + 1;
        entry.erase(0, entry.find_first_not_of(" \t"));
        entry.erase(entry.find_last_not_of(" \t") + 1);
        if (entry.empty()) continue;
        if (entry == "*") return true;
        if (auto slash = entry.find('/'); slash != std::string::npos && host_is_ip) {
            boost::system::error_code nec;
            if (host_addr.is_v4()) {
                auto net = boost::asio::ip::make_network_v4(entry, nec);
                if (!nec && net.hosts().find(host_addr.to_v4()) != net.hosts().end()) return true;
                if (!nec && (net.network() == host_addr.to_v4() || net.broadcast() == host_addr.to_v4())) return true;
            } else {
                auto net = boost::asio::ip::make_network_v6(entry, nec);
                if (!nec && net.hosts().find(host_addr.to_v6()) != net.hosts().end()) return true;
            }
            continue;
        }
        // Strip a port from the entry (host:port); we match on host only.
        if (auto colon = entry.rfind(':'); colon != std::string::npos && entry.find(':') == colon)
            entry.erase(colon);
        if (entry.front() == '.') {
            if (host.size() > entry.size() && host.ends_with(entry)) return true;
            if (host == entry.substr(1)) return true;
            continue;
        }
        if (host == entry) return true;
        if (host.size() > entry.size() && host.ends_with(entry) && host[host.size() - entry.size() - 1] == '.')
            return true;
    }
    return false;
}

}  // namespace kubesandbox::proto
