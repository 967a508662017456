// What a pod's JSON says about a sandbox, without a cluster.
#include "providers/raw/pod_state.hpp"

#include "util/time_format.hpp"

#include <gtest/gtest.h>
#include <boost/json/parse.hpp>

namespace {
using namespace kubesandbox;
namespace json = boost::json;
using namespace std::chrono_literals;

json::object pod(std::string_view text) { return json::parse(text).as_object(); }

const char* ready_pod = R"({"metadata":{"name":"ksb-a","namespace":"ns",
  "labels":{"kubesandbox.io/managed-by":"kubesandbox","kubesandbox.io/sandbox-id":"a","kubesandbox.io/team":"x"},
  "annotations":{"kubesandbox.io/created-at":"2026-01-01T00:00:00.000Z"}},
  "status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}]}})";

TEST(RawPodState, ReadyWaitingAndFailed) {
    EXPECT_EQ(raw::evaluate_pod(pod(ready_pod)).state, raw::PodState::ready);
    EXPECT_EQ(raw::status_of(pod(ready_pod)), "running");
    EXPECT_EQ(raw::evaluate_pod(pod(R"({"metadata":{"name":"p"},"status":{"phase":"Pending"}})")).state,
              raw::PodState::waiting);

    auto pull = raw::evaluate_pod(pod(R"({"metadata":{"name":"p"},"status":{"phase":"Pending","containerStatuses":[
        {"name":"sandbox","state":{"waiting":{"reason":"ImagePullBackOff","message":"nope"}}}]}})"));
    EXPECT_EQ(pull.state, raw::PodState::failed);
    EXPECT_FALSE(pull.dead);
    EXPECT_TRUE(pull.error.is(errc::image_pull_failed));
    EXPECT_EQ(pull.error.reason, "ImagePullBackOff");

    auto crashed = raw::evaluate_pod(pod(R"({"metadata":{"name":"p"},"status":{"phase":"Running","containerStatuses":[
        {"name":"sandbox","state":{"terminated":{"exitCode":137,"reason":"OOMKilled"}}}]}})"));
    EXPECT_TRUE(crashed.dead);
    EXPECT_TRUE(crashed.error.is(errc::pod_failed));
    EXPECT_NE(crashed.error.message.find("exit 137"), std::string::npos) << crashed.error.message;

    // A finished init container is progress, not failure.
    auto init_done =
        raw::evaluate_pod(pod(R"({"metadata":{"name":"p"},"status":{"phase":"Pending","initContainerStatuses":[
        {"name":"i","state":{"terminated":{"exitCode":0}}}]}})"));
    EXPECT_EQ(init_done.state, raw::PodState::waiting);

    auto deleting = pod(ready_pod);
    deleting["metadata"].as_object()["deletionTimestamp"] = "2026-01-01T00:00:01Z";
    EXPECT_TRUE(raw::evaluate_pod(deleting).dead);
    EXPECT_EQ(raw::status_of(deleting), "terminated");
    EXPECT_TRUE(raw::being_deleted(deleting));
}

TEST(RawPodState, SetupGatesReadinessForOthers) {
    auto p = pod(ready_pod);
    p["metadata"].as_object()["annotations"].as_object()["kubesandbox.io/setup"] = "pending";
    EXPECT_EQ(raw::evaluate_sandbox(p, false).state, raw::PodState::ready);
    EXPECT_EQ(raw::evaluate_sandbox(p, true).state, raw::PodState::waiting);
    EXPECT_FALSE(raw::is_ready(p));
    p["metadata"].as_object()["annotations"].as_object()["kubesandbox.io/setup"] = "failed";
    EXPECT_EQ(raw::evaluate_sandbox(p, true).state, raw::PodState::failed);
    EXPECT_EQ(raw::status_of(p), "failed");
}

TEST(RawPodState, InfoStripsReservedLabelsAndRestoresOriginals) {
    auto p = pod(ready_pod);
    auto& ann = p["metadata"].as_object()["annotations"].as_object();
    ann["kubesandbox.io/thread-id-original"] = "Thread A";
    ann["kubesandbox.io/labels-original"] = R"({"team":"X Y"})";
    auto info = raw::info_of(p);
    EXPECT_EQ(info.id, "Thread A");
    EXPECT_EQ(info.pod_name, "ksb-a");
    EXPECT_EQ(info.namespace_name, "ns");
    EXPECT_EQ(info.status, "running");
    ASSERT_EQ(info.labels.size(), 1u);
    EXPECT_EQ(info.labels["team"], "X Y");
    // Malformed originals are ignored, not fatal.
    ann["kubesandbox.io/labels-original"] = "{not json";
    EXPECT_EQ(raw::info_of(p).labels["team"], "x");
}

TEST(RawPodState, ReapingFollowsTtlsActivityAndDeath) {
    RawProviderOptions o;
    auto created = *util::parse_rfc3339("2026-01-01T00:00:00.000Z");
    auto p = pod(ready_pod);
    EXPECT_FALSE(raw::should_reap(p, o, std::nullopt, created + 24h));
    auto& ann = p["metadata"].as_object()["annotations"].as_object();
    ann["kubesandbox.io/ttl-seconds"] = "60";
    EXPECT_FALSE(raw::should_reap(p, o, std::nullopt, created + 59s));
    EXPECT_TRUE(raw::should_reap(p, o, std::nullopt, created + 61s));
    ann.erase("kubesandbox.io/ttl-seconds");
    ann["kubesandbox.io/ttl-idle-seconds"] = "30";
    ann["kubesandbox.io/last-activity"] = "2026-01-01T00:10:00.000Z";
    EXPECT_FALSE(raw::should_reap(p, o, std::nullopt, created + 10min + 29s));
    EXPECT_TRUE(raw::should_reap(p, o, std::nullopt, created + 10min + 31s));
    EXPECT_TRUE(raw::is_idle(p, created + 10min + 31s));
    // max_idle overrides for active pods, never for warm ones.
    EXPECT_TRUE(raw::should_reap(p, o, 5s, created + 10min + 6s));
    p["metadata"].as_object()["labels"].as_object()["kubesandbox.io/pool-status"] = "warm";
    ann.erase("kubesandbox.io/ttl-idle-seconds");
    EXPECT_FALSE(raw::should_reap(p, o, 5s, created + 10min + 6s));
    // A garbage TTL is ignored rather than reaping.
    ann["kubesandbox.io/ttl-seconds"] = "soon";
    EXPECT_FALSE(raw::should_reap(p, o, std::nullopt, created + 1000h));
    // Abandoned setup: pending long past what its creator could take.
    ann["kubesandbox.io/setup"] = "pending";
    EXPECT_FALSE(raw::should_reap(p, o, std::nullopt, created + 2 * o.startup_timeout));
    EXPECT_TRUE(raw::should_reap(p, o, std::nullopt, created + 2 * o.startup_timeout + 61s));
}

}  // namespace
