// The local controllers' cache: writes from responses never bring back what the watch deleted.
#include "local/mirror.hpp"

#include <boost/json.hpp>

#include <gtest/gtest.h>

namespace {

namespace json = boost::json;
using kubesandbox::local::ObjectCache;

json::object object(const std::string& name, const std::string& rv, const std::string& value = "") {
    return json::object{{"metadata", json::object{{"namespace", "ns"}, {"name", name}, {"resourceVersion", rv}}},
                        {"data", value}};
}

std::string data_of(const json::object* o) { return o ? std::string(o->at("data").as_string()) : "<none>"; }

TEST(ObjectCache, AResponseIsReadBackAtOnce) {
    ObjectCache cache;
    const json::object* stored = cache.remember(object("a", "5", "created"));
    EXPECT_EQ(data_of(stored), "created");
    EXPECT_EQ(cache.count("ns/a"), 1u);
}

TEST(ObjectCache, AResponseOlderThanTheWatchesStateDoesNotReplaceIt) {
    ObjectCache cache;
    cache.apply(false, object("a", "7", "from the watch"));
    EXPECT_EQ(data_of(cache.remember(object("a", "6", "stale response"))), "from the watch");
    EXPECT_EQ(data_of(cache.remember(object("a", "8", "newer response"))), "newer response");
}

TEST(ObjectCache, AResponseArrivingAfterTheDeletionLeavesNoGhost) {
    ObjectCache cache;
    cache.apply(false, object("a", "5"));
    cache.apply(true, object("a", "9"));
    EXPECT_EQ(cache.remember(object("a", "5", "late response")), nullptr);
    EXPECT_EQ(cache.remember(object("a", "9", "late response")), nullptr);
    EXPECT_EQ(cache.count("ns/a"), 0u);
    // The name made again later is a new object, newer than the deletion.
    EXPECT_EQ(data_of(cache.remember(object("a", "12", "made again"))), "made again");
}

TEST(ObjectCache, TheWatchAddingTheNameAgainClearsTheDeletion) {
    ObjectCache cache;
    cache.apply(true, object("a", "9"));
    cache.apply(false, object("a", "10", "added"));
    cache.apply(false, object("a", "11", "modified"));
    EXPECT_EQ(data_of(cache.remember(object("a", "11", "response"))), "modified");
}

TEST(ObjectCache, AnObjectTheWatchNeverShowsIsForgottenAfterAWhile) {
    using namespace std::chrono_literals;
    ObjectCache cache;
    const auto t0 = ObjectCache::Clock::now();
    // Made by the controller, then deleted while its watch was away: no event will ever come.
    cache.remember(object("gone", "5", "made"), t0);
    // Made by the controller and shown by the watch since.
    cache.remember(object("kept", "6", "made"), t0);
    cache.apply(false, object("kept", "6", "made"));
    cache.forget_unconfirmed(t0 + 10s, 30s);
    EXPECT_EQ(cache.count("ns/gone"), 1u);
    cache.forget_unconfirmed(t0 + 31s, 30s);
    EXPECT_EQ(cache.count("ns/gone"), 0u);
    EXPECT_EQ(cache.count("ns/kept"), 1u);
    // A response for an object the watch already shows does not make it unconfirmed again.
    cache.remember(object("kept", "7", "patched"), t0 + 40s);
    cache.forget_unconfirmed(t0 + 100s, 30s);
    EXPECT_EQ(data_of(cache.remember(object("kept", "7"), t0 + 100s)), "patched");
}

TEST(ObjectCache, DeletionsAreRememberedUpToABound) {
    ObjectCache cache;
    for (int i = 1; i <= 5000; ++i) cache.apply(true, object("o" + std::to_string(i), std::to_string(i)));
    // The most recent deletions are still known; the oldest were dropped.
    EXPECT_EQ(cache.remember(object("o5000", "4999")), nullptr);
    EXPECT_NE(cache.remember(object("o1", "2")), nullptr);
}

}  // namespace
