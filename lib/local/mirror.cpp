#include "local/mirror.hpp"

#include "util/json_access.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <charconv>

namespace kubesandbox::local {

namespace asio = boost::asio;

std::string object_key(const boost::json::object& o) {
    const auto& md = util::metadata_of(o);
    return util::string_at(md, "namespace") + "/" + util::string_at(md, "name");
}

namespace {

// The emulator's resourceVersions are decimal counters; 0 when one is missing or not a number.
std::uint64_t version_of(const boost::json::object& o) {
    std::string rv = util::string_at(util::metadata_of(o), "resourceVersion");
    std::uint64_t v = 0;
    auto [end, ec] = std::from_chars(rv.data(), rv.data() + rv.size(), v);
    return ec == std::errc() && end == rv.data() + rv.size() ? v : 0;
}

// Deletions remembered at most; the oldest go first (a response that old is long answered).
constexpr std::size_t max_deletions = 4096;

}  // namespace

const boost::json::object* ObjectCache::remember(boost::json::object object, Clock::time_point now) {
    std::string key = object_key(object);
    const std::uint64_t version = version_of(object);
    if (auto gone = deleted_.find(key); gone != deleted_.end() && (version == 0 || version <= gone->second))
        return nullptr;
    auto [it, inserted] = try_emplace(key);
    if (inserted) unconfirmed_.emplace(key, now);
    if (inserted || version == 0 || version > version_of(it->second)) it->second = std::move(object);
    return &it->second;
}

void ObjectCache::forget_unconfirmed(Clock::time_point now, Clock::duration max_age) {
    for (auto it = unconfirmed_.begin(); it != unconfirmed_.end();) {
        if (now - it->second <= max_age) {
            ++it;
            continue;
        }
        erase(it->first);
        it = unconfirmed_.erase(it);
    }
}

void ObjectCache::apply(bool deleted, boost::json::object object) {
    std::string key = object_key(object);
    unconfirmed_.erase(key);
    if (!deleted) {
        deleted_.erase(key);
        insert_or_assign(key, std::move(object));
        return;
    }
    erase(key);
    const std::uint64_t version = version_of(object);
    deleted_[key] = version;
    deletion_order_.emplace_back(key, version);
    while (deletion_order_.size() > max_deletions) {
        const auto& [old_key, old_version] = deletion_order_.front();
        if (auto d = deleted_.find(old_key); d != deleted_.end() && d->second == old_version) deleted_.erase(d);
        deletion_order_.pop_front();
    }
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
        cache.apply(event->type == WatchEvent::Type::deleted, std::move(event->object));
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
