// What the local cluster's controllers share: a cache of one collection (namespace/name ->
// object) kept current from a ListWatch, with a callback after each change. Internal.
#pragma once

#include <kubesandbox/kube_client.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/json/object.hpp>

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

}  // namespace kubesandbox::local
