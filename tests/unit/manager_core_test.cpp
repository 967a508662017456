// The SandboxManager's pure decisions: ids, the acquisition verdicts, the reaping veto, back-off.
#include "manager/manager_core.hpp"
#include "util/time_format.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace {

using namespace kubesandbox;
using namespace kubesandbox::manager;
using namespace std::chrono_literals;
using std::chrono::steady_clock;

TEST(ManagerCore, ScopesAreShortDnsLabels) {
    EXPECT_TRUE(validate_scope("thread"));
    EXPECT_TRUE(validate_scope("app-1"));
    EXPECT_TRUE(validate_scope(std::string(32, 'a')));
    for (std::string bad : std::vector<std::string>{"", "-a", "a-", "A", "a_b", "a:b", "a/b", std::string(33, 'a')}) {
        auto r = validate_scope(bad);
        ASSERT_FALSE(r) << bad;
        EXPECT_TRUE(r.error().is(errc::invalid_config));
    }
}

TEST(ManagerCore, ThreadIdsAreAnyBytesButNul) {
    EXPECT_TRUE(validate_thread_id("0f9c2a4e-7d1b-4c55-9a0e-2b7f6c3d8e11"));
    EXPECT_TRUE(validate_thread_id("user@example.com/chat 7 $HOME 'q' \"x\"\n"));
    EXPECT_TRUE(validate_thread_id(std::string(1024, 'x')));
    EXPECT_FALSE(validate_thread_id(""));
    EXPECT_FALSE(validate_thread_id(std::string(1025, 'x')));
    auto nul = validate_thread_id(std::string("a\0b", 3));
    ASSERT_FALSE(nul);
    EXPECT_TRUE(nul.error().is(errc::invalid_argument));
}

TEST(ManagerCore, SandboxIdsRoundTripAndStayInTheirScope) {
    for (std::string thread :
         std::vector<std::string>{"t", "default/ksb-bcdfghjklm", "ksb-bcdfghjklm", "a:b:c", "ü/é"}) {
        std::string id = sandbox_id_for("thread", thread);
        EXPECT_EQ(id, "thread:" + thread);
        EXPECT_EQ(thread_of("thread", id), thread);
        EXPECT_EQ(thread_of("other", id), std::nullopt);
    }
    EXPECT_EQ(thread_of("thread", "thread:"), std::nullopt);
    EXPECT_EQ(thread_of("thread", "threadx:y"), std::nullopt);
    EXPECT_EQ(thread_of("thread", "default/ksb-abc"), std::nullopt);
}

TEST(ManagerCore, AFirstAcquisitionIsCreatedAdoptedOrReconnected) {
    EXPECT_EQ(classify(SandboxOrigin::created, "", "u1", false).kind, AcquireKind::created);
    EXPECT_EQ(classify(SandboxOrigin::claimed_warm, "", "", false).kind, AcquireKind::created);
    EXPECT_EQ(classify(SandboxOrigin::adopted, "", "u1", false).kind, AcquireKind::adopted);
    EXPECT_EQ(classify(SandboxOrigin::existing, "", "u1", false).kind, AcquireKind::reconnected);
    EXPECT_FALSE(classify(SandboxOrigin::created, "", "u1", false).lost);
    EXPECT_FALSE(classify(SandboxOrigin::existing, "", "u1", true).lost);
}

TEST(ManagerCore, ANewSandboxForAThreadWithHistoryIsALoss) {
    for (auto origin : {SandboxOrigin::created, SandboxOrigin::adopted, SandboxOrigin::claimed_warm}) {
        auto v = classify(origin, "u1", "u2", false);
        EXPECT_EQ(v.kind, AcquireKind::recreated);
        EXPECT_TRUE(v.lost);
        // The host's word is history too.
        EXPECT_TRUE(classify(origin, "", "u2", true).lost);
    }
    auto replaced = classify(SandboxOrigin::replaced, "", "u2", false);
    EXPECT_EQ(replaced.kind, AcquireKind::recreated);
    EXPECT_TRUE(replaced.lost);
    // Someone else re-created it under the same id: another incarnation.
    auto other = classify(SandboxOrigin::existing, "u1", "u2", false);
    EXPECT_EQ(other.kind, AcquireKind::recreated);
    EXPECT_TRUE(other.lost);
    auto same = classify(SandboxOrigin::existing, "u1", "u1", false);
    EXPECT_EQ(same.kind, AcquireKind::cached);
    EXPECT_FALSE(same.lost);
}

TEST(ManagerCore, OnlyTheErrorPolicyWithHistoryRefusesToCreate) {
    EXPECT_TRUE(reconnect_only(OnLost::error, true));
    EXPECT_FALSE(reconnect_only(OnLost::error, false));
    EXPECT_FALSE(reconnect_only(OnLost::recreate, true));
}

TEST(ManagerCore, BusyOrRecentlyUsedSandboxesAreNotReaped) {
    auto now = steady_clock::now();
    EXPECT_TRUE(veto_reaping(1, now - 10h, now, 60s, false));
    EXPECT_TRUE(veto_reaping(1, now - 10h, now, std::nullopt, false));
    EXPECT_TRUE(veto_reaping(0, now - 59s, now, 60s, false));
    EXPECT_FALSE(veto_reaping(0, now - 61s, now, 60s, false));
    EXPECT_FALSE(veto_reaping(0, now, now, std::nullopt, false));
    // Past the absolute TTL recent use no longer protects; a command in flight still does.
    EXPECT_FALSE(veto_reaping(0, now - 1s, now, 60s, true));
    EXPECT_TRUE(veto_reaping(1, now - 1s, now, 60s, true));
}

TEST(ManagerCore, TheAbsoluteTtlCountsFromCreation) {
    auto now = std::chrono::system_clock::now();
    auto created = kubesandbox::util::format_rfc3339(now - 90s);
    EXPECT_TRUE(past_absolute_ttl(created, 60s, now));
    EXPECT_FALSE(past_absolute_ttl(created, 120s, now));
    EXPECT_FALSE(past_absolute_ttl(created, std::nullopt, now));
    EXPECT_FALSE(past_absolute_ttl("", 60s, now));
    EXPECT_FALSE(past_absolute_ttl("not a time", 60s, now));
}

TEST(ManagerCore, TheReaperBacksOffExponentiallyWithJitterAndACap) {
    EXPECT_EQ(next_pass_in(60s, 0, 1s, 60s, 0.7), 60s);
    EXPECT_EQ(next_pass_in(60s, 1, 1s, 60s, 1.0), 1s);
    EXPECT_EQ(next_pass_in(60s, 1, 1s, 60s, 0.0), 500ms);
    EXPECT_EQ(next_pass_in(60s, 3, 1s, 60s, 1.0), 4s);
    EXPECT_EQ(next_pass_in(60s, 40, 1s, 60s, 1.0), 60s);
    EXPECT_EQ(next_pass_in(60s, 40, 1s, 60s, 0.0), 30s);
    std::set<std::chrono::milliseconds::rep> spread;
    for (double j : {0.0, 0.25, 0.5, 0.75, 0.99}) spread.insert(next_pass_in(60s, 2, 1s, 60s, j).count());
    EXPECT_EQ(spread.size(), 5u);
}

}  // namespace
