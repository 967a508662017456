// What the local cluster's controllers share: a cache of one collection (namespace/name ->
// object) kept current from a ListWatch, with a callback after each change. Internal.
#pragma once

#include <kubesandbox/kube_client.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/json/object.hpp>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>

namespace kubesandbox::local {

using ObjectCache = std::map<std::string, boost::json::object>;

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
