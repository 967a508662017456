#include "local/mirror.hpp"

#include "util/json_access.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace kubesandbox::local {

namespace asio = boost::asio;

std::string object_key(const boost::json::object& o) {
    const auto& md = util::metadata_of(o);
    return util::string_at(md, "namespace") + "/" + util::string_at(md, "name");
}

asio::awaitable<void> mirror(std::shared_ptr<void> owner, std::shared_ptr<ListWatch> watch, ObjectCache& cache,
                             const bool& stopped, std::function<void()> changed) {
    asio::steady_timer backoff(co_await asio::this_coro::executor);
    while (!stopped) {
        auto event = co_await watch->next();
        if (stopped) break;
        if (!event) {
            backoff.expires_after(std::chrono::milliseconds(200));
            co_await backoff.async_wait(asio::as_tuple(asio::use_awaitable));
            continue;
        }
        if (event->type == WatchEvent::Type::bookmark || event->type == WatchEvent::Type::error) continue;
        std::string key = object_key(event->object);
        if (event->type == WatchEvent::Type::deleted) {
            cache.erase(key);
        } else {
            cache[key] = std::move(event->object);
        }
        changed();
    }
    (void)owner;
}

asio::awaitable<void> reconcile_loop(std::shared_ptr<void> owner, asio::steady_timer& wake, bool& dirty,
                                     const bool& stopped, std::chrono::milliseconds period,
                                     std::function<asio::awaitable<void>()> reconcile) {
    while (!stopped) {
        if (!dirty) {
            wake.expires_after(period);
            co_await wake.async_wait(asio::as_tuple(asio::use_awaitable));
            if (stopped) break;
        }
        dirty = false;
        co_await reconcile();
    }
    (void)owner;
}

}  // namespace kubesandbox::local
