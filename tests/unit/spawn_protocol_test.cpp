// The messages between the local kubelet and a pod's spawner, without sockets, and when a
// failed spawner start is tried again.
#include "local/spawn_protocol.hpp"
#include "local/pod_spawner.hpp"

#include <gtest/gtest.h>

namespace {

namespace spawn = kubesandbox::local::spawn_protocol;
using namespace std::string_literals;

TEST(SpawnProtocol, ACommandRoundTripsWithEmptyAndHostileArguments) {
    const std::vector<std::string> argv{"/bin/sh", "-c", "echo \"$1\" '\n' $HOME `id`", "", "sh", "\xff\xfe"};
    auto message = spawn::encode_request(42, argv);
    ASSERT_TRUE(message);
    auto request = spawn::decode_request(*message);
    ASSERT_TRUE(request);
    EXPECT_EQ(request->id, 42u);
    ASSERT_EQ(request->argv.size(), argv.size());
    for (std::size_t i = 0; i < argv.size(); ++i) EXPECT_EQ(request->argv[i], argv[i]) << i;
    // Every element ends in a NUL inside the message, so the spawner can exec the views as they are.
    for (auto a : request->argv) EXPECT_EQ(a.data()[a.size()], '\0');
}

TEST(SpawnProtocol, WhatCannotTravelIsRefusedBeforeSending) {
    EXPECT_FALSE(spawn::encode_request(1, {}));
    EXPECT_FALSE(spawn::encode_request(1, {"echo", "cut\0short"s}));
    const std::string fits(spawn::kMaxRequest - spawn::kRequestHeader - 1, 'x');
    EXPECT_TRUE(spawn::encode_request(1, {fits}));
    EXPECT_FALSE(spawn::encode_request(1, {fits + "x"}));
    EXPECT_FALSE(spawn::encode_request(1, {"a", fits}));
}

TEST(SpawnProtocol, MalformedRequestsAreRejected) {
    const std::string good = *spawn::encode_request(7, {"true"});
    EXPECT_TRUE(spawn::decode_request(good));
    EXPECT_FALSE(spawn::decode_request(""));
    EXPECT_FALSE(spawn::decode_request(good.substr(0, spawn::kRequestHeader)));  // no argv
    EXPECT_FALSE(spawn::decode_request(good.substr(0, good.size() - 1)));        // last element not ended
    std::string other_version = good;
    other_version[0] = static_cast<char>(other_version[0] + 1);
    EXPECT_FALSE(spawn::decode_request(other_version));
    EXPECT_FALSE(spawn::decode_request(*spawn::encode_request(0, {"true"})));  // id 0 is the ready message's
    EXPECT_FALSE(spawn::decode_request(good + std::string(spawn::kMaxRequest, '\0')));
    // The id of a malformed message can still be answered.
    EXPECT_EQ(spawn::request_id(other_version), 7u);
    EXPECT_EQ(spawn::request_id(good.substr(0, good.size() - 1)), 7u);
    EXPECT_FALSE(spawn::request_id(good.substr(0, spawn::kRequestHeader - 1)));
    // The largest message decodes.
    const std::string fits(spawn::kMaxRequest - spawn::kRequestHeader - 1, 'x');
    auto largest = spawn::decode_request(*spawn::encode_request(9, {fits}));
    EXPECT_TRUE(largest && largest->argv.size() == 1 && largest->argv[0].size() == fits.size());
}

TEST(SpawnProtocol, RepliesCarryTheIdAndTheWaitStatus) {
    for (int status : {0, 3 << 8, 9, 126 << 8, 0x7f}) {
        auto reply = spawn::decode_reply(spawn::encode_reply(0xfedcba9876543210ull, status));
        ASSERT_TRUE(reply);
        EXPECT_EQ(reply->id, 0xfedcba9876543210ull);
        EXPECT_EQ(reply->wait_status, status);
    }
    EXPECT_FALSE(spawn::decode_reply(spawn::encode_reply(1, 0).substr(1)));
    EXPECT_FALSE(spawn::decode_reply(spawn::encode_reply(1, 0) + "x"));
}

}  // namespace

// A pod whose spawner failed to start tries again later, sooner for a new container.
TEST(SpawnerBackoff, TriesAgainAfterADelayThatDoublesUpToFiveMinutes) {
    using namespace std::chrono_literals;
    using kubesandbox::local::SpawnerBackoff;
    EXPECT_EQ(SpawnerBackoff::delay(1), 10s);
    EXPECT_EQ(SpawnerBackoff::delay(2), 20s);
    EXPECT_EQ(SpawnerBackoff::delay(5), 160s);
    EXPECT_EQ(SpawnerBackoff::delay(6), 300s);
    EXPECT_EQ(SpawnerBackoff::delay(1000), 300s);

    const auto t0 = SpawnerBackoff::Clock::time_point{} + 1h;
    SpawnerBackoff b;
    EXPECT_TRUE(b.may_try(1, t0));
    b.failed(1, t0);
    EXPECT_FALSE(b.may_try(1, t0 + 9s));
    EXPECT_TRUE(b.may_try(1, t0 + 10s));
    EXPECT_TRUE(b.may_try(2, t0 + 1s)) << "a restarted container starts afresh";
    b.failed(1, t0 + 10s);
    EXPECT_FALSE(b.may_try(1, t0 + 29s));
    EXPECT_TRUE(b.may_try(1, t0 + 30s));
    b.failed(2, t0 + 30s);  // the new container's first failure: 10 s again
    EXPECT_EQ(b.failures(), 1);
    EXPECT_TRUE(b.may_try(2, t0 + 40s));
    b.succeeded();
    EXPECT_TRUE(b.may_try(2, t0 + 40s));
}
