// The local API server over loopback: delete preconditions and pod grace, namespace cascade,
// garbage collection through owner references, deletecollection.
#include "api_server_helpers.hpp"

namespace json = boost::json;
using kubesandbox::FaultRule;
using kubesandbox::LocalCluster;
using kubesandbox::LocalClusterOptions;
using kubesandbox::test::HttpClient;
using kubesandbox::test::HttpResult;
using kubesandbox::test::WatchStream;
using namespace kubesandbox::test::api;

TEST(LocalApi, DeletePreconditionsAndPodGrace) {
    auto c = start_cluster();
    ASSERT_TRUE(c);
    HttpClient h(*c);
    auto o = h.post(cms, configmap("d")).obj();
    std::string uid = str(o.at("metadata").at("uid"));
    auto wrong = h.del(std::string(cms) + "/d", R"({"preconditions":{"uid":"nope"}})");
    ASSERT_EQ(wrong.status, 409u);
    EXPECT_EQ(
        str(wrong.obj().at("message")),
        "Operation cannot be fulfilled on configmaps \"d\": Precondition failed: UID in precondition: nope, UID in "
        "object meta: " +
            uid);
    auto wrong_rv = h.del(std::string(cms) + "/d", R"({"preconditions":{"resourceVersion":"1"}})");
    EXPECT_EQ(wrong_rv.status, 409u);
    auto ok = h.del(std::string(cms) + "/d", "{\"preconditions\":{\"uid\":\"" + uid + "\"}}");
    EXPECT_EQ(ok.status, 200u);
    EXPECT_EQ(h.get(std::string(cms) + "/d").status, 404u);

    // gracePeriodSeconds=0 removes a pod at once.
    ASSERT_EQ(h.post("/api/v1/namespaces/default/pods", pod("g0")).status, 201u);
    auto g0 = h.del("/api/v1/namespaces/default/pods/g0?gracePeriodSeconds=0");
    EXPECT_EQ(g0.status, 200u);
    EXPECT_EQ(h.get("/api/v1/namespaces/default/pods/g0").status, 404u);
    // A graceful delete sets deletionTimestamp first.
    ASSERT_EQ(h.post("/api/v1/namespaces/default/pods", pod("g1")).status, 201u);
    auto g1 = h.del("/api/v1/namespaces/default/pods/g1", R"({"gracePeriodSeconds":1})");
    ASSERT_EQ(g1.status, 200u);
    auto after = h.get("/api/v1/namespaces/default/pods/g1");
    if (after.status == 200u) {
        EXPECT_TRUE(after.obj().at("metadata").as_object().contains("deletionTimestamp"));
        for (int i = 0; i < 40 && after.status == 200u; ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            after = h.get("/api/v1/namespaces/default/pods/g1");
        }
    }
    EXPECT_EQ(after.status, 404u);
}

TEST(LocalApi, NamespaceCascade) {
    auto c = start_cluster();
    ASSERT_TRUE(c);
    HttpClient h(*c);
    auto bad = h.post("/api/v1/namespaces", json::object{{"metadata", json::object{{"name", "a.b"}}}});
    EXPECT_EQ(bad.status, 422u);
    ASSERT_EQ(h.post("/api/v1/namespaces", json::object{{"metadata", json::object{{"name", "team"}}}}).status, 201u);
    ASSERT_EQ(h.post("/api/v1/namespaces/team/configmaps", configmap("x")).status, 201u);
    ASSERT_EQ(h.post("/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/team/sandboxclaims", claim("cl")).status,
              201u);
    auto del = h.del("/api/v1/namespaces/team");
    ASSERT_EQ(del.status, 200u);
    EXPECT_EQ(str(del.obj().at("status").at("phase")), "Terminating");
    auto deny = h.post("/api/v1/namespaces/team/configmaps", configmap("y"));
    if (deny.status != 404u) {  // the namespace may already be gone
        ASSERT_EQ(deny.status, 403u);
        EXPECT_EQ(str(deny.obj().at("message")),
                  "configmaps \"y\" is forbidden: unable to create new content in namespace team because it is being "
                  "terminated");
        EXPECT_EQ(str(deny.obj().at("details").at("causes").at(0).at("reason")), "NamespaceTerminating");
    }
    HttpResult ns;
    for (int i = 0; i < 50; ++i) {
        ns = h.get("/api/v1/namespaces/team");
        if (ns.status == 404u) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_EQ(ns.status, 404u);
    EXPECT_EQ(h.get("/api/v1/namespaces/team/configmaps/x").status, 404u);
    EXPECT_EQ(names(h.get("/apis/extensions.agents.x-k8s.io/v1beta1/sandboxclaims").obj()).size(), 0u);
    EXPECT_EQ(h.del("/api/v1/namespaces/default").status, 403u);
}

TEST(LocalApi, OwnerReferenceGarbageCollection) {
    auto c = start_cluster();
    ASSERT_TRUE(c);
    HttpClient h(*c);
    auto owner_of = [&](const std::string& name) {
        auto o = h.post(claims, claim(name)).obj();
        return json::object{{"apiVersion", "extensions.agents.x-k8s.io/v1beta1"},
                            {"kind", "SandboxClaim"},
                            {"name", name},
                            {"uid", o.at("metadata").at("uid")}};
    };
    auto dependent = [&](const std::string& name, const json::object& ref) {
        auto cm = configmap(name);
        cm["metadata"].as_object()["ownerReferences"] = json::array{ref};
        return h.post(cms, cm).status;
    };
    // Background: dependents go with the owner.
    auto r1 = owner_of("o1");
    ASSERT_EQ(dependent("dep1", r1), 201u);
    ASSERT_EQ(h.del(std::string(claims) + "/o1", R"({"propagationPolicy":"Background"})").status, 200u);
    EXPECT_EQ(h.get(std::string(cms) + "/dep1").status, 404u);
    // Orphan: dependents stay without the reference.
    auto r2 = owner_of("o2");
    ASSERT_EQ(dependent("dep2", r2), 201u);
    ASSERT_EQ(h.del(std::string(claims) + "/o2", R"({"propagationPolicy":"Orphan"})").status, 200u);
    auto d2 = h.get(std::string(cms) + "/dep2");
    ASSERT_EQ(d2.status, 200u);
    EXPECT_FALSE(d2.obj().at("metadata").as_object().contains("ownerReferences"));
    // The deprecated query form, with any spelling of true Go's ParseBool takes.
    auto r4 = owner_of("o4");
    ASSERT_EQ(dependent("dep4", r4), 201u);
    ASSERT_EQ(h.del(std::string(claims) + "/o4?orphanDependents=1").status, 200u);
    EXPECT_EQ(h.get(std::string(cms) + "/dep4").status, 200u);
    // Foreground: dependent with its own finalizer keeps the owner around.
    auto r3 = owner_of("o3");
    auto cm = configmap("dep3");
    cm["metadata"].as_object()["ownerReferences"] = json::array{r3};
    cm["metadata"].as_object()["finalizers"] = json::array{"example.com/hold"};
    ASSERT_EQ(h.post(cms, cm).status, 201u);
    ASSERT_EQ(h.del(std::string(claims) + "/o3", R"({"propagationPolicy":"Foreground"})").status, 200u);
    auto o3 = h.get(std::string(claims) + "/o3");
    ASSERT_EQ(o3.status, 200u);
    EXPECT_NE(o3.body.find("foregroundDeletion"), std::string::npos);
    // Releasing the dependent's finalizer lets both go.
    ASSERT_EQ(h.patch(std::string(cms) + "/dep3", json::object{{"metadata", json::object{{"finalizers", nullptr}}}},
                      "application/merge-patch+json")
                  .status,
              200u);
    EXPECT_EQ(h.get(std::string(cms) + "/dep3").status, 404u);
    EXPECT_EQ(h.get(std::string(claims) + "/o3").status, 404u);
}

TEST(LocalApi, DeleteCollectionWithSelector) {
    auto c = start_cluster();
    ASSERT_TRUE(c);
    HttpClient h(*c);
    ASSERT_EQ(h.post(cms, configmap("k1", {{"x", "1"}})).status, 201u);
    ASSERT_EQ(h.post(cms, configmap("k2", {{"x", "1"}})).status, 201u);
    ASSERT_EQ(h.post(cms, configmap("k3")).status, 201u);
    auto r = h.del(std::string(cms) + "?labelSelector=x%3D1");
    ASSERT_EQ(r.status, 200u);
    EXPECT_EQ(names(h.get(cms).obj()), (std::vector<std::string>{"k3"}));
}
