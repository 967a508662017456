// Value types of the Kubernetes API client: resource paths, options and results. No I/O, so
// codecs and tests use them without the client.
#pragma once

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace kubesandbox {

struct KubeClientOptions {
    std::size_t max_connections = 32;  // keep-alive connections to the API server
    // TLS connections being opened at once (0 = no bound). Every exec, attach and port-forward
    // opens one; a handshake holds ~60 KiB until it ends, so a burst of 1,000 executes waits
    // here (as a few KiB of coroutine frames) instead. Each opening takes about one round trip
    // to the API server: raise this for a distant server and large bursts.
    std::size_t max_concurrent_connects = 8;
    double qps = 50;  // client-side rate limit (token bucket); <= 0 disables
    int burst = 100;
    std::chrono::milliseconds connect_timeout{10'000};
    std::chrono::milliseconds request_timeout{30'000};  // whole exchange, per attempt
    int max_retries = 5;                                // idempotent requests only
    std::chrono::milliseconds retry_initial_backoff{200};
    std::chrono::milliseconds retry_max_backoff{5'000};
    std::chrono::seconds token_file_reload_interval{60};
    std::string user_agent = "kubesandbox/0.1";
};

// API path of a resource collection or object. Empty group = core ("/api/v1").
struct ResourcePath {
    std::string group{};
    std::string version = "v1";
    std::string plural{};
    std::string namespace_name{};  // empty = cluster-scoped or all namespaces
    std::string name{};
    std::string subresource{};

    std::string str() const;  // e.g. /apis/networking.k8s.io/v1/namespaces/ns/networkpolicies/np
    ResourcePath with_name(std::string n) const;
};

struct ListOptions {
    std::string label_selector{};
    std::string field_selector{};
    std::optional<std::int64_t> limit{};
    std::string continue_token{};
    std::string resource_version{};
    std::optional<int> timeout_seconds{};
};

struct ListPage {
    boost::json::array items{};
    std::string resource_version{};
    std::string continue_token{};  // empty on the last page
    std::optional<std::int64_t> remaining_item_count{};
};

struct WatchOptions {
    std::string label_selector{};
    std::string field_selector{};
    std::string resource_version{};  // empty = synthetic ADDED for current objects first
    bool allow_bookmarks = true;
    std::optional<int> timeout_seconds{};
    // next() fails with errc::timeout when no byte (not even a bookmark) arrives for this long,
    // so a silent server or a dead network path cannot hang a watcher forever.
    std::chrono::milliseconds idle_timeout{std::chrono::minutes(5)};
};

struct WatchEvent {
    enum class Type { added, modified, deleted, bookmark, error };
    Type type{};
    boost::json::object object{};  // for error: the Status
};

struct CreateOptions {
    // Retry the create on connection failures and 5xx: only safe with a fixed name, where a
    // 409 AlreadyExists after a lost response means our own earlier attempt succeeded.
    bool idempotent = false;
    std::string field_manager{};
};

struct DeleteOptions {
    std::optional<std::int64_t> grace_period_seconds{};
    std::string propagation_policy{};  // Orphan | Background | Foreground
    std::string precondition_uid{};
    std::string precondition_resource_version{};
};

enum class PatchType { merge, json, strategic };

struct DeleteResult {
    bool found = true;          // false: the object did not exist (404), delete is idempotent
    boost::json::value body{};  // the Status or the object being deleted
};

// A raw response, for paths the typed operations do not cover (discovery, logs).
struct HttpResponse {
    unsigned status = 0;
    std::string content_type{};
    std::string body{};
};

}  // namespace kubesandbox
