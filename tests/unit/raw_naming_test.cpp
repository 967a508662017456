// Raw mode's names and id resolution, without a cluster.
#include "providers/raw/naming.hpp"

#include <gtest/gtest.h>

#include <set>

namespace {
using namespace kubesandbox;

TEST(RawNaming, CallerIdsMapToStableDnsNames) {
    EXPECT_EQ(raw::pod_name_for("thread-1"), "ksb-thread-1");
    EXPECT_EQ(raw::pod_name_for("thread-1"), RawProvider::pod_name_for("thread-1"));
    // Changed ids get a hash, so ids that sanitise alike never share a pod.
    std::string a = raw::pod_name_for("Thread/ABC 1");
    std::string b = raw::pod_name_for("thread-abc-1");
    EXPECT_NE(a, b);
    EXPECT_EQ(a.rfind("ksb-thread-abc-1-", 0), 0u) << a;
    EXPECT_EQ(a.size(), std::string("ksb-thread-abc-1-").size() + 10);
    // An id that already looks hashed or random is hashed too.
    EXPECT_NE(raw::pod_name_for("x-0123456789"), "ksb-x-0123456789");
    EXPECT_NE(raw::pod_name_for("bcdfghjklm"), "ksb-bcdfghjklm");
    // Long and empty-after-sanitising ids stay valid DNS labels.
    std::string long_name = raw::pod_name_for(std::string(200, 'a'));
    EXPECT_LE(long_name.size(), 63u);
    std::string symbols = raw::pod_name_for("///");
    EXPECT_EQ(symbols.rfind("ksb-", 0), 0u);
    EXPECT_EQ(symbols.size(), 14u) << symbols;
}

TEST(RawNaming, RandomNamesAreRecognisedAndDistinct) {
    std::set<std::string> seen;
    for (int i = 0; i < 200; ++i) {
        std::string n = raw::random_pod_name();
        EXPECT_TRUE(raw::is_random_pod_name(n)) << n;
        EXPECT_EQ(raw::pod_name_for(n), n);
        seen.insert(n);
    }
    EXPECT_EQ(seen.size(), 200u);
    EXPECT_FALSE(raw::is_random_pod_name("ksb-aaaaaaaaaa"));  // vowels never appear
    EXPECT_FALSE(raw::is_random_pod_name("ksb-bcd"));
}

TEST(RawNaming, ResolveAcceptsCallerIdsSandboxIdsAndRandomNames) {
    RawProviderOptions o;
    o.namespace_name = "sandboxes";
    auto caller = raw::resolve_id(o, "Thread 7");
    ASSERT_TRUE(caller);
    EXPECT_EQ(caller->ns, "sandboxes");
    EXPECT_EQ(caller->pod, raw::pod_name_for("Thread 7"));
    EXPECT_EQ(caller->id, "Thread 7");
    ASSERT_TRUE(caller->label);

    auto qualified = raw::resolve_id(o, "sandboxes/ksb-thread-1");
    ASSERT_TRUE(qualified);
    EXPECT_EQ(qualified->pod, "ksb-thread-1");
    EXPECT_FALSE(qualified->label);

    auto wrong_ns = raw::resolve_id(o, "other/ksb-thread-1");
    ASSERT_FALSE(wrong_ns);
    EXPECT_TRUE(wrong_ns.error().is(errc::invalid_argument));

    std::string random = raw::random_pod_name();
    auto bare = raw::resolve_id(o, random);
    ASSERT_TRUE(bare);
    EXPECT_EQ(bare->id, "sandboxes/" + random);

    auto empty = raw::resolve_id(o, "");
    ASSERT_FALSE(empty);
    EXPECT_TRUE(empty.error().is(errc::invalid_argument));
}

TEST(RawNaming, PerSandboxNamespacesAndSelectors) {
    RawProviderOptions o;
    o.namespace_per_sandbox = true;
    EXPECT_EQ(raw::namespace_for(o, "ksb-a"), "ksb-a");
    EXPECT_EQ(raw::list_path(o).str(), "/api/v1/pods");
    EXPECT_NE(raw::selector_for(o).find("kubesandbox.io/namespace-mode=per-sandbox"), std::string::npos);

    RawProviderOptions shared;
    shared.namespace_name = "ns1";
    EXPECT_EQ(raw::list_path(shared).str(), "/api/v1/namespaces/ns1/pods");
    std::string sel = raw::selector_for(shared, {{"team", "a b"}});
    EXPECT_NE(sel.find("kubesandbox.io/managed-by=kubesandbox"), std::string::npos) << sel;
    EXPECT_NE(sel.find("kubesandbox.io/namespace-mode!=per-sandbox"), std::string::npos) << sel;
    EXPECT_NE(sel.find("kubesandbox.io/team="), std::string::npos) << sel;
    EXPECT_NE(raw::warm_selector(shared, "abc").find("kubesandbox.io/config-hash=abc"), std::string::npos);
    EXPECT_EQ(raw::network_policies_path("ns1").with_name(raw::network_policy_name("ksb-a")).str(),
              "/apis/networking.k8s.io/v1/namespaces/ns1/networkpolicies/ksb-a-deny-all");
}

}  // namespace
