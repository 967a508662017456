#include "proto/request.hpp"

#include <boost/asio/ip/address.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>

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
        case PatchType::merge:
            return "application/merge-patch+json";
        case PatchType::json:
            return "application/json-patch+json";
        case PatchType::strategic:
            return "application/strategic-merge-patch+json";
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

namespace {

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

std::string percent_decode(std::string_view text) {
    std::string out;
    for (std::size_t i = 0; i < text.size(); ++i) {
        if (text[i] == '%' && i + 2 < text.size() && hex_value(text[i + 1]) >= 0 && hex_value(text[i + 2]) >= 0) {
            out += static_cast<char>(hex_value(text[i + 1]) * 16 + hex_value(text[i + 2]));
            i += 2;
        } else {
            out += text[i];
        }
    }
    return out;
}

// The URL with any "user:password@" replaced by "***@", for error messages.
std::string redact_userinfo(std::string_view url) {
    std::string out(url.substr(0, 200));
    auto scheme = out.find("://");
    const std::size_t start = scheme == std::string::npos ? 0 : scheme + 3;
    const std::size_t end = std::min(out.find('/', start), out.size());
    auto at = out.rfind('@', end == 0 ? 0 : end - 1);
    if (at != std::string::npos && at >= start && at < end) out.replace(start, at - start, "***");
    return out;
}

}  // namespace

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
        return fail(errc::invalid_config,
                    "server URL must start with https:// or http://: \"" + redact_userinfo(server) + "\"");
    }
    auto slash = rest.find('/');
    std::string_view authority = rest.substr(0, slash);
    if (auto at = authority.rfind('@'); at != std::string_view::npos) {
        std::string_view userinfo = authority.substr(0, at);
        authority.remove_prefix(at + 1);
        auto colon = userinfo.find(':');
        u.username = percent_decode(userinfo.substr(0, colon));
        if (colon != std::string_view::npos) u.password = percent_decode(userinfo.substr(colon + 1));
        u.has_userinfo = true;
    }
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

bool is_loopback_host(std::string_view host) {
    if (host == "localhost") return true;
    boost::system::error_code ec;
    auto addr = boost::asio::ip::make_address(std::string(host), ec);
    return !ec && addr.is_loopback();
}

std::string basic_authorization(std::string_view username, std::string_view password) {
    static constexpr char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string plain = std::string(username) + ":" + std::string(password);
    std::string out = "Basic ";
    for (std::size_t i = 0; i < plain.size(); i += 3) {
        const std::size_t n = std::min<std::size_t>(3, plain.size() - i);
        unsigned v = static_cast<unsigned char>(plain[i]) << 16;
        if (n > 1) v |= static_cast<unsigned char>(plain[i + 1]) << 8;
        if (n > 2) v |= static_cast<unsigned char>(plain[i + 2]);
        out += alphabet[(v >> 18) & 63];
        out += alphabet[(v >> 12) & 63];
        out += n > 1 ? alphabet[(v >> 6) & 63] : '=';
        out += n > 2 ? alphabet[v & 63] : '=';
    }
    return out;
}

namespace {
std::string lower(std::string_view s) {
    std::string out(s);
    for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

bool in_network(const boost::asio::ip::address& host, std::string_view cidr) {
    auto slash = cidr.find('/');
    boost::system::error_code ec;
    auto base = boost::asio::ip::make_address(std::string(cidr.substr(0, slash)), ec);
    if (ec || base.is_v4() != host.is_v4()) return false;
    int bits = 0;
    auto [end, fec] = std::from_chars(cidr.data() + slash + 1, cidr.data() + cidr.size(), bits);
    if (fec != std::errc{} || end != cidr.data() + cidr.size()) return false;
    auto compare = [bits](const auto& a, const auto& b) {
        if (bits < 0 || static_cast<std::size_t>(bits) > a.size() * 8) return false;
        for (int i = 0; i < bits; ++i) {
            const unsigned bit = 0x80u >> (i % 8);
            if ((a[static_cast<std::size_t>(i / 8)] & bit) != (b[static_cast<std::size_t>(i / 8)] & bit)) return false;
        }
        return true;
    };
    if (host.is_v4()) return compare(host.to_v4().to_bytes(), base.to_v4().to_bytes());
    return compare(host.to_v6().to_bytes(), base.to_v6().to_bytes());
}

}  // namespace

bool no_proxy_matches(std::string_view no_proxy, std::string_view host_in, std::string_view port) {
    if (is_loopback_host(host_in)) return true;
    const std::string host = lower(host_in);
    boost::system::error_code ec;
    auto host_addr = boost::asio::ip::make_address(host, ec);
    const bool host_is_ip = !ec;
    std::size_t pos = 0;
    while (pos <= no_proxy.size()) {
        auto comma = no_proxy.find(',', pos);
        std::string entry =
            lower(no_proxy.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos));
        pos = comma == std::string_view::npos ? no_proxy.size() + 1 : comma + 1;
        entry.erase(0, entry.find_first_not_of(" \t"));
        entry.erase(entry.find_last_not_of(" \t") + 1);
        if (entry.empty()) continue;
        if (entry == "*") return true;
        if (entry.find('/') != std::string::npos) {
            if (host_is_ip && in_network(host_addr, entry)) return true;
            continue;
        }
        // An optional port: "host:port", "[v6]:port"; a bare IPv6 literal has several colons.
        std::string entry_port;
        if (entry.front() == '[') {
            auto close = entry.find(']');
            if (close == std::string::npos) continue;
            if (entry.size() > close + 1 && entry[close + 1] == ':') entry_port = entry.substr(close + 2);
            entry = entry.substr(1, close - 1);
        } else if (auto colon = entry.rfind(':'); colon != std::string::npos && entry.find(':') == colon) {
            entry_port = entry.substr(colon + 1);
            entry.erase(colon);
        }
        if (!entry_port.empty() && !port.empty() && entry_port != port) continue;
        if (entry.empty()) continue;
        boost::system::error_code eec;
        auto entry_addr = boost::asio::ip::make_address(entry, eec);
        if (!eec) {
            if (host_is_ip && entry_addr == host_addr) return true;
            continue;
        }
        if (entry.starts_with("*.")) entry.erase(0, 1);
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
