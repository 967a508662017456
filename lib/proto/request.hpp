// Request building and response decoding for the Kubernetes REST API. Sans-IO.
#pragma once

#include <kubesandbox/error.hpp>
#include <kubesandbox/kube_types.hpp>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kubesandbox::proto {

// Percent-encodes a query component (RFC 3986 unreserved characters pass through).
std::string url_encode(std::string_view text);

// "?a=1&b=2" from pairs (values encoded); "" when empty.
std::string query_string(const std::vector<std::pair<std::string, std::string>>& params);

std::string list_target(const ResourcePath& collection, const ListOptions& options);
std::string watch_target(const ResourcePath& collection, const WatchOptions& options);
std::string delete_body(const DeleteOptions& options);  // a DeleteOptions JSON document
std::string_view patch_content_type(PatchType type);

// Parses a *List body into a ListPage; errc::invalid_response when it is not one.
Result<ListPage> decode_list(std::string_view body);
// Parses a JSON object body; errc::invalid_response otherwise.
Result<boost::json::object> decode_object(std::string_view body);

// Parsed server URL of a kubeconfig cluster (or of a proxy-url).
struct ServerUrl {
    bool tls = true;
    std::string host;  // without brackets for IPv6
    std::string port;
    std::string base_path;  // "" or "/prefix" without trailing slash
    // user:password@ of the authority, percent-decoded (proxy credentials). Never logged.
    std::string username;
    std::string password;
    bool has_userinfo = false;
};
// Error messages never repeat the userinfo (it may hold a password).
Result<ServerUrl> parse_server_url(std::string_view server);

// Whether a request to `host` (and `port`, when known) must bypass the proxy under a NO_PROXY
// value (Go's rules: comma-separated names, ".suffix" or "suffix" domain matches, "*" matches
// all, IPs and CIDRs, an entry with ":port" only for that port; loopback hosts always bypass).
bool no_proxy_matches(std::string_view no_proxy, std::string_view host, std::string_view port = {});

// "localhost", 127.0.0.0/8 and ::1.
bool is_loopback_host(std::string_view host);

// "Basic base64(user:password)" for Authorization / Proxy-Authorization.
std::string basic_authorization(std::string_view username, std::string_view password);

}  // namespace kubesandbox::proto
