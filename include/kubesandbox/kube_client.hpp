// An asynchronous Kubernetes API client: keep-alive connection pool, TLS, rate limiting,
// retries of idempotent requests, pagination and watch. All operations are awaitables that
// return Result<T>; none throws for I/O or remote failures.
#pragma once

#include <kubesandbox/error.hpp>
#include <kubesandbox/kube_config.hpp>
#include <kubesandbox/kube_types.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
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

    // Parameters are taken by value so temporaries are safe inside co_await. Operations with
    // options come in two overloads instead of default arguments: g++ 12 destroys class-type
    // default arguments of coroutines twice.
    boost::asio::awaitable<Result<boost::json::object>> get(ResourcePath path);
    boost::asio::awaitable<Result<boost::json::object>> create(ResourcePath collection, boost::json::object body,
                                                               CreateOptions options);
    boost::asio::awaitable<Result<boost::json::object>> create(ResourcePath collection, boost::json::object body) {
        return create(std::move(collection), std::move(body), CreateOptions());
    }
    boost::asio::awaitable<Result<boost::json::object>> replace(ResourcePath path, boost::json::object body);
    boost::asio::awaitable<Result<boost::json::object>> patch(ResourcePath path, boost::json::value body,
                                                              PatchType type);
    boost::asio::awaitable<Result<boost::json::object>> patch(ResourcePath path, boost::json::value body) {
        return patch(std::move(path), std::move(body), PatchType::merge);
    }
    boost::asio::awaitable<Result<DeleteResult>> remove(ResourcePath path, DeleteOptions options);
    boost::asio::awaitable<Result<DeleteResult>> remove(ResourcePath path) {
        return remove(std::move(path), DeleteOptions());
    }
    boost::asio::awaitable<Result<ListPage>> list(ResourcePath collection, ListOptions options);
    boost::asio::awaitable<Result<ListPage>> list(ResourcePath collection) {
        return list(std::move(collection), ListOptions());
    }
    boost::asio::awaitable<Result<WatchStream>> watch(ResourcePath collection, WatchOptions options);
    boost::asio::awaitable<Result<WatchStream>> watch(ResourcePath collection) {
        return watch(std::move(collection), WatchOptions());
    }

    // Any request; `target` is path plus query. Non-2xx is returned as a response, not an error.
    boost::asio::awaitable<Result<HttpResponse>> request(std::string method, std::string target, std::string body,
                                                         std::string content_type);
    boost::asio::awaitable<Result<HttpResponse>> request(std::string method, std::string target) {
        return request(std::move(method), std::move(target), std::string(), std::string());
    }

    struct Impl;

private:
    friend struct KubeClientAccess;  // kubesandbox's own components (exec sessions, tunnels)
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
