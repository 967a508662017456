// An asynchronous Kubernetes API client: keep-alive connection pool, TLS, rate limiting,
// retries of idempotent requests, pagination and watch. All operations are awaitables that
// return Result<T>; none throws for I/O or remote failures.
#pragma once

#include <kubesandbox/error.hpp>
#include <kubesandbox/kube_config.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kubesandbox {

struct KubeClientOptions {
    std::size_t max_connections = 32;  // keep-alive connections to the API server
    double qps = 50;                   // client-side rate limit (token bucket); <= 0 disables
    int burst = 100;
    std::chrono::milliseconds connect_timeout{10'000};
    std::chrono::milliseconds request_timeout{30'000};  // whole exchange, per attempt
    int max_retries = 5;                                 // idempotent requests only
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
    bool found = true;         // false: the object did not exist (404), delete is idempotent
    boost::json::value body{};   // the Status or the object being deleted
};

class KubeClient;

// A stream of watch events. next() yields the next event, nullopt when the server ended the
// watch normally (timeoutSeconds), or an error: HTTP 410 and an ERROR event with code 410 become
// errc::expired, other ERROR events the typed error of their Status, silence longer than
// WatchOptions::idle_timeout errc::timeout. ERROR events are never yielded as events.
class WatchStream {
public:
    WatchStream();
    WatchStream(WatchStream&&) noexcept;
    WatchStream& operator=(WatchStream&&) noexcept;
    ~WatchStream();

    boost::asio::awaitable<Result<std::optional<WatchEvent>>> next();
    void close();

    struct Impl;
    explicit WatchStream(std::unique_ptr<Impl> impl);

private:
    std::unique_ptr<Impl> impl_{};
};

// A raw response, for paths the typed operations do not cover (discovery, logs).
struct HttpResponse {
    unsigned status = 0;
    std::string content_type{};
    std::string body{};
};

class KubeClient {
public:
    // Safe to use from many coroutines at once, also on a multi-threaded io_context.
    KubeClient(boost::asio::any_io_executor executor, KubeConfig config, KubeClientOptions options = {});
    // Copies share one connection pool, rate limiter and credential cache.
    KubeClient(const KubeClient&) = default;
    KubeClient& operator=(const KubeClient&) = default;
    KubeClient(KubeClient&&) noexcept;
    KubeClient& operator=(KubeClient&&) noexcept;
    ~KubeClient();

    const KubeConfig& config() const;
    const KubeClientOptions& options() const;
    boost::asio::any_io_executor get_executor() const;

    // Operations with options come in two overloads instead of default arguments: g++ 12
    // destroys class-type default arguments of coroutines twice.
    boost::asio::awaitable<Result<boost::json::object>> get(const ResourcePath& path);
    boost::asio::awaitable<Result<boost::json::object>> create(const ResourcePath& collection,
                                                               boost::json::object body, CreateOptions options);
    boost::asio::awaitable<Result<boost::json::object>> create(const ResourcePath& collection,
                                                               boost::json::object body) {
        return create(collection, std::move(body), CreateOptions());
    }
    boost::asio::awaitable<Result<boost::json::object>> replace(const ResourcePath& path,
                                                                boost::json::object body);
    boost::asio::awaitable<Result<boost::json::object>> patch(const ResourcePath& path,
                                                              boost::json::value body, PatchType type);
    boost::asio::awaitable<Result<boost::json::object>> patch(const ResourcePath& path, boost::json::value body) {
        return patch(path, std::move(body), PatchType::merge);
    }
    boost::asio::awaitable<Result<DeleteResult>> remove(const ResourcePath& path, DeleteOptions options);
    boost::asio::awaitable<Result<DeleteResult>> remove(const ResourcePath& path) {
        return remove(path, DeleteOptions());
    }
    boost::asio::awaitable<Result<ListPage>> list(const ResourcePath& collection, ListOptions options);
    boost::asio::awaitable<Result<ListPage>> list(const ResourcePath& collection) {
        return list(collection, ListOptions());
    }
    boost::asio::awaitable<Result<WatchStream>> watch(const ResourcePath& collection, WatchOptions options);
    boost::asio::awaitable<Result<WatchStream>> watch(const ResourcePath& collection) {
        return watch(collection, WatchOptions());
    }

    // Any request; `target` is path plus query. Non-2xx is returned as a response, not an error.
    boost::asio::awaitable<Result<HttpResponse>> request(std::string method, std::string target, std::string body,
                                                         std::string content_type);
    boost::asio::awaitable<Result<HttpResponse>> request(std::string method, std::string target) {
        return request(std::move(method), std::move(target), std::string(), std::string());
    }

    struct Impl;
    // For kubesandbox's own components (exec sessions, tunnels); opaque to users.
    const std::shared_ptr<Impl>& impl() const noexcept { return impl_; }

private:
    std::shared_ptr<Impl> impl_{};
};

// Lists a collection, then watches it from the list's resourceVersion (client-go's reflector):
// a normal end of the watch resumes from the last resourceVersion seen, a 410 Expired (HTTP
// status or ERROR event) makes it list again. The first list yields its objects as ADDED; a
// re-list yields only the differences to what was yielded before (ADDED, MODIFIED, DELETED).
// Bookmarks are consumed. Other failures are returned; calling next() again resumes.
class ListWatch {
public:
    ListWatch(KubeClient client, ResourcePath collection, WatchOptions options);
    ListWatch(KubeClient client, ResourcePath collection)
        : ListWatch(std::move(client), std::move(collection), WatchOptions()) {}
    ListWatch(ListWatch&&) noexcept;
    ListWatch& operator=(ListWatch&&) noexcept;
    ~ListWatch();

    boost::asio::awaitable<Result<WatchEvent>> next();
    void close();
    int lists_made() const noexcept;  // how often the collection was listed

    struct State;

private:
    std::unique_ptr<State> state_{};
};

}  // namespace kubesandbox
