// What the local cluster's controllers share: a cache of one collection (namespace/name ->
// object) kept current from a ListWatch, with a callback after each change. Internal.
#pragma once

#include <kubesandbox/kube_client.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/json/object.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>

namespace kubesandbox::local {

// One collection (namespace/name -> object) as a controller sees it. Its watch keeps it current;
// what a controller's own requests return is stored too, so it reads its writes at once, but
// never over a newer state the watch delivered, nor after the watch saw the object deleted: the
// watch would not delete it a second time, and the entry would stay a ghost. An object known
// from a response alone is dropped if the watch has not shown it within a while: made and
// deleted while the watch was away, it is in no re-list and no event would ever remove it.
class ObjectCache : public std::map<std::string, boost::json::object> {
public:
    using Clock = std::chrono::steady_clock;
    // Stores an object a request returned, unless the watch has shown a newer state or its
    // deletion; returns what the cache now holds under its key (nullptr when deleted).
    const boost::json::object* remember(boost::json::object object, Clock::time_point now = Clock::now());
    // A watch event: ADDED and MODIFIED store the object, DELETED erases it.
    void apply(bool deleted, boost::json::object object);
    // Drops the objects known from responses alone for longer than `max_age`.
    void forget_unconfirmed(Clock::time_point now, Clock::duration max_age);

private:
    std::map<std::string, Clock::time_point> unconfirmed_;  // key -> when a response first stored it
    std::map<std::string, std::uint64_t> deleted_;          // key -> resourceVersion of its deletion
    // The deletions in the order they came (about resourceVersion order): the oldest are
    // forgotten first. Entries a later ADDED or deletion made stale are skipped then.
    std::deque<std::pair<std::string, std::uint64_t>> deletion_order_;
};

// How long an object known from a response alone waits for its watch to show it (milliseconds,
// normally) before the cache forgets it.
inline constexpr std::chrono::seconds unconfirmed_max_age{30};

// "namespace/name" of an object.
std::string object_key(const boost::json::object& o);

// Runs until `stopped` is set (and the watch closed): ADDED/MODIFIED store the object, DELETED
// erases it, errors back off 200 ms; `changed` follows every change. `owner` keeps the cache's
// owner alive while this runs.
boost::asio::awaitable<void> mirror(std::shared_ptr<void> owner, std::shared_ptr<ListWatch> watch, ObjectCache& cache,
                                    const bool& stopped, std::function<void()> changed);

// A controller's loop: `reconcile` each time `dirty` was set (cancel `wake` to be seen at once)
// and at least every `period`, until `stopped`. `owner` keeps the controller alive meanwhile.
boost::asio::awaitable<void> reconcile_loop(std::shared_ptr<void> owner, boost::asio::steady_timer& wake, bool& dirty,
                                            const bool& stopped, std::chrono::milliseconds period,
                                            std::function<boost::asio::awaitable<void>()> reconcile);

}  // namespace kubesandbox::local
