// Runs many awaitable steps with a bound on how many are in flight: a reaper deleting thousands
// of objects overlaps their round trips instead of paying them one after the other.
#pragma once

#include <boost/asio/awaitable.hpp>

#include <cstddef>
#include <functional>

namespace kubesandbox::util {

using BoundedStep = std::function<boost::asio::awaitable<void>(std::size_t index)>;

// Runs step(i) for every i in [0, count), at most `limit` (at least 1) at a time, and returns
// once all have finished. The steps run on one strand of the caller's executor (so on the
// caller's strand when it has one): they may share state without locks. The first exception a
// step throws is rethrown after the others have finished.
boost::asio::awaitable<void> bounded_for_each(std::size_t count, std::size_t limit, BoundedStep step);

}  // namespace kubesandbox::util
