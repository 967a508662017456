// The local cluster's API server over real loopback sockets: discovery, auth, CRUD, error
// shapes, validation, custom resources, patches, selectors and fault injection.
#include "api_server_helpers.hpp"

namespace json = boost::json;
using kubesandbox::FaultRule;
using kubesandbox::LocalCluster;
using kubesandbox::LocalClusterOptions;
using kubesandbox::test::HttpClient;
using kubesandbox::test::HttpResult;
using kubesandbox::test::WatchStream;
using namespace kubesandbox::test::api;

TEST(LocalApi, DiscoveryOverTls) {
    auto c = start_cluster(true);
    ASSERT_TRUE(c);
    EXPECT_EQ(c->url().rfind("https://127.0.0.1:", 0), 0u);
    HttpClient h(*c);
    h.send_token = false;
    auto v = h.get("/version");
    ASSERT_EQ(v.status, 200u);
    EXPECT_EQ(str(v.obj().at("gitVersion")).rfind("v1.32.", 0), 0u);
    h.send_token = true;
    auto api = h.get("/api");
    ASSERT_EQ(api.status, 200u);
    EXPECT_EQ(str(api.obj().at("kind")), "APIVersions");
    auto core = h.get("/api/v1");
    ASSERT_EQ(core.status, 200u);
    std::set<std::string> res;
    for (auto& r : core.obj().at("resources").as_array()) res.insert(str(r.at("name")));
    for (auto n : {"pods", "pods/exec", "pods/log", "pods/portforward", "pods/status", "namespaces", "services",
                   "configmaps", "secrets", "events", "resourcequotas", "limitranges", "serviceaccounts"})
        EXPECT_TRUE(res.count(n)) << n;
    auto groups = h.get("/apis");
    ASSERT_EQ(groups.status, 200u);
    std::set<std::string> gs;
    for (auto& g : groups.obj().at("groups").as_array()) gs.insert(str(g.at("name")));
    EXPECT_TRUE(gs.count("extensions.agents.x-k8s.io"));
    EXPECT_TRUE(gs.count("networking.k8s.io"));
    for (auto v2 : {"v1beta1", "v1alpha1"}) {
        auto ext = h.get(std::string("/apis/extensions.agents.x-k8s.io/") + v2);
        ASSERT_EQ(ext.status, 200u) << v2;
        std::set<std::string> er;
        for (auto& r : ext.obj().at("resources").as_array()) er.insert(str(r.at("name")));
        EXPECT_TRUE(er.count("sandboxclaims") && er.count("sandboxclaims/status") && er.count("sandboxtemplates") &&
                    er.count("sandboxwarmpools"));
    }
    EXPECT_EQ(h.get("/apis/nope.example.com/v1").status, 404u);
}

TEST(LocalApi, Unauthorized) {
    auto c = start_cluster();
    ASSERT_TRUE(c);
    HttpClient h(*c);
    h.send_token = false;
    auto r = h.get(cms);
    ASSERT_EQ(r.status, 401u);
    auto o = r.obj();
    EXPECT_EQ(str(o.at("reason")), "Unauthorized");
    EXPECT_EQ(str(o.at("message")), "Unauthorized");
    EXPECT_EQ(o.at("code").to_number<int>(), 401);
    h.send_token = true;
    h.token_override = "wrong";
    EXPECT_EQ(h.get(cms).status, 401u);
}

TEST(LocalApi, CrudAndErrorShapes) {
    auto c = start_cluster();
    ASSERT_TRUE(c);
    HttpClient h(*c);
    auto created = h.post(cms, configmap("one"));
    ASSERT_EQ(created.status, 201u) << created.body;
    auto o = created.obj();
    EXPECT_FALSE(str(o.at("metadata").at("uid")).empty());
    EXPECT_FALSE(rv_of(o).empty());
    EXPECT_EQ(str(o.at("metadata").at("creationTimestamp")).size(), 20u);
    EXPECT_EQ(str(o.at("kind")), "ConfigMap");

    auto dup = h.post(cms, configmap("one"));
    ASSERT_EQ(dup.status, 409u);
    EXPECT_EQ(str(dup.obj().at("reason")), "AlreadyExists");
    EXPECT_EQ(str(dup.obj().at("message")), "configmaps \"one\" already exists");
    EXPECT_EQ(str(dup.obj().at("details").at("kind")), "configmaps");
    EXPECT_EQ(str(dup.obj().at("details").at("name")), "one");

    auto got = h.get(std::string(cms) + "/one");
    ASSERT_EQ(got.status, 200u);
    EXPECT_EQ(rv_of(got.obj()), rv_of(o));

    // Update with the current resourceVersion, then a stale one.
    auto upd = got.obj();
    upd["data"] = json::object{{"k", "v2"}};
    auto put = h.put(std::string(cms) + "/one", upd);
    ASSERT_EQ(put.status, 200u) << put.body;
    EXPECT_NE(rv_of(put.obj()), rv_of(o));
    auto stale = h.put(std::string(cms) + "/one", upd);
    ASSERT_EQ(stale.status, 409u);
    EXPECT_EQ(str(stale.obj().at("reason")), "Conflict");
    EXPECT_EQ(str(stale.obj().at("message")),
              "Operation cannot be fulfilled on configmaps \"one\": the object has been modified; please apply your "
              "changes to the latest version and try again");

    auto mismatch = upd;
    mismatch["metadata"].as_object()["name"] = "other";
    auto bad = h.put(std::string(cms) + "/one", mismatch);
    ASSERT_EQ(bad.status, 400u);
    EXPECT_EQ(str(bad.obj().at("message")), "the name of the object (other) does not match the name on the URL (one)");

    auto garbage = h.request("POST", cms, "{not json");
    EXPECT_EQ(garbage.status, 400u);
    EXPECT_EQ(str(garbage.obj().at("reason")), "BadRequest");
    EXPECT_EQ(h.request("POST", cms, "<xml/>", "application/xml").status, 415u);

    auto del = h.del(std::string(cms) + "/one");
    ASSERT_EQ(del.status, 200u);
    auto missing = h.get(std::string(cms) + "/one");
    ASSERT_EQ(missing.status, 404u);
    EXPECT_EQ(str(missing.obj().at("message")), "configmaps \"one\" not found");
    EXPECT_EQ(str(missing.obj().at("reason")), "NotFound");
    EXPECT_EQ(h.get("/api/v1/nothing").status, 404u);

    auto nons = h.post("/api/v1/namespaces/absent/configmaps", configmap("x"));
    ASSERT_EQ(nons.status, 404u);
    EXPECT_EQ(str(nons.obj().at("message")), "namespaces \"absent\" not found");

    std::string big(3 * 1024 * 1024 + 10, 'x');
    auto too_big = h.request("POST", cms, big);
    EXPECT_EQ(too_big.status, 413u);
}

TEST(LocalApi, ValidationAndGenerateName) {
    auto c = start_cluster();
    ASSERT_TRUE(c);
    HttpClient h(*c);
    auto bad = h.post(cms, configmap("Bad_Name"));
    ASSERT_EQ(bad.status, 422u);
    auto b = bad.obj();
    EXPECT_EQ(str(b.at("reason")), "Invalid");
    EXPECT_EQ(
        str(b.at("message")).rfind("ConfigMap \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\"", 0),
        0u)
        << str(b.at("message"));
    EXPECT_EQ(str(b.at("details").at("kind")), "ConfigMap");
    EXPECT_EQ(str(b.at("details").at("causes").at(0).at("field")), "metadata.name");

    auto p = pod("p");
    p["spec"].as_object()["containers"].as_array()[0].as_object().erase("image");
    auto noimg = h.post("/api/v1/namespaces/default/pods", p);
    ASSERT_EQ(noimg.status, 422u);
    EXPECT_EQ(str(noimg.obj().at("message")), "Pod \"p\" is invalid: spec.containers[0].image: Required value");

    auto svc = json::object{{"metadata", json::object{{"name", "1svc"}}}, {"spec", json::object{}}};
    EXPECT_EQ(h.post("/api/v1/namespaces/default/services", svc).status, 422u);

    auto nameless = h.post(cms, json::object{{"metadata", json::object{}}});
    ASSERT_EQ(nameless.status, 422u);
    EXPECT_NE(str(nameless.obj().at("message")).find("name or generateName is required"), std::string::npos);

    auto gen = h.post(cms, json::object{{"metadata", json::object{{"generateName", "sbx-"}}}});
    ASSERT_EQ(gen.status, 201u);
    std::string name = str(gen.obj().at("metadata").at("name"));
    EXPECT_EQ(name.size(), 9u);
    EXPECT_EQ(name.rfind("sbx-", 0), 0u);

    auto pd = h.post("/api/v1/namespaces/default/pods", pod("defaults"));
    ASSERT_EQ(pd.status, 201u) << pd.body;
    auto po = pd.obj();
    EXPECT_EQ(str(po.at("spec").at("restartPolicy")), "Always");
    EXPECT_EQ(po.at("spec").at("terminationGracePeriodSeconds").to_number<int>(), 30);
    EXPECT_EQ(str(po.at("spec").at("dnsPolicy")), "ClusterFirst");
    EXPECT_EQ(str(po.at("status").at("phase")).empty(), false);

    // Pod spec is immutable apart from images. The kubelet is starting the pod meanwhile, so a
    // status update may make the read stale: a 409 is read again and retried.
    HttpResult imm;
    for (int attempt = 0; attempt < 20; ++attempt) {
        auto cur = h.get("/api/v1/namespaces/default/pods/defaults").obj();
        cur["spec"].as_object()["restartPolicy"] = "Never";
        imm = h.put("/api/v1/namespaces/default/pods/defaults", cur);
        if (imm.status != 409u) break;
    }
    EXPECT_EQ(imm.status, 422u) << imm.body;
    EXPECT_NE(imm.body.find("pod updates may not change fields"), std::string::npos);
}

// fieldValidation: Strict rejects unknown fields naming each by path (in document order), Warn
// (the default) drops them with a Warning header per field, Ignore drops them silently.
TEST(LocalApi, UnknownFieldsPerFieldValidation) {
    auto c = start_cluster();
    ASSERT_TRUE(c);
    HttpClient h(*c);
    auto cm = configmap("strict");
    cm["datta"] = json::object{{"x", "y"}};
    cm["metadata"].as_object()["lables"] = json::object{};
    auto strict = h.post(std::string(cms) + "?fieldValidation=Strict", cm);
    ASSERT_EQ(strict.status, 400u) << strict.body;
    EXPECT_EQ(str(strict.obj().at("reason")), "BadRequest");
    EXPECT_EQ(str(strict.obj().at("message")),
              "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: "
              "unknown field \"metadata.lables\", unknown field \"datta\"");
    EXPECT_EQ(h.get(std::string(cms) + "/strict").status, 404u);

    // Absent = Warn: stored without the unknown fields, one warning each.
    auto warn = h.post(cms, cm);
    ASSERT_EQ(warn.status, 201u) << warn.body;
    EXPECT_EQ(warn.headers["Warning"],
              "299 - \"unknown field \\\"metadata.lables\\\"\", 299 - \"unknown field \\\"datta\\\"\"");
    EXPECT_FALSE(warn.obj().contains("datta"));
    EXPECT_FALSE(warn.obj().at("metadata").as_object().contains("lables"));
    auto stored = h.get(std::string(cms) + "/strict").obj();
    EXPECT_FALSE(stored.contains("datta"));
    EXPECT_EQ(str(stored.at("data").at("k")), "v");

    cm["metadata"].as_object()["name"] = "ignored";
    auto ignore = h.post(std::string(cms) + "?fieldValidation=Ignore", cm);
    ASSERT_EQ(ignore.status, 201u) << ignore.body;
    EXPECT_EQ(ignore.headers.count("Warning"), 0u);
    EXPECT_FALSE(ignore.obj().contains("datta"));

    auto bogus = h.post(std::string(cms) + "?fieldValidation=Bogus", configmap("bogus"));
    ASSERT_EQ(bogus.status, 422u);
    EXPECT_EQ(str(bogus.obj().at("message")),
              "CreateOptions.meta.k8s.io \"\" is invalid: fieldValidation: Unsupported value: \"Bogus\": "
              "supported values: \"\", \"Ignore\", \"Strict\", \"Warn\"");

    // Pod spec and container fields: known ones pass, a typo is named with its path.
    auto p = pod("typo");
    auto& ctr = p["spec"].as_object()["containers"].as_array()[0].as_object();
    ctr["command"] = json::array{"sleep", "1"};
    ctr["env"] = json::array{json::object{{"name", "A"}, {"value", "1"}}};
    ctr["securityContext"] = json::object{{"runAsUser", 1000}, {"allowPrivilegeEscalation", false}};
    ctr["resources"] = json::object{{"limits", json::object{{"cpu", "1"}}}};
    ctr["workingDir"] = "/workspace";
    p["spec"].as_object()["restartPolicy"] = "Never";
    p["spec"].as_object()["securityContext"] = json::object{{"runAsUser", 1000}, {"fsGroup", 1000}};
    auto ok = h.post("/api/v1/namespaces/default/pods?fieldValidation=Strict", p);
    ASSERT_EQ(ok.status, 201u) << ok.body;
    p["metadata"].as_object()["name"] = "typo2";
    p["spec"].as_object()["containers"].as_array()[0].as_object()["imagePullPolicyy"] = "Never";
    p["spec"].as_object()["containers"].as_array()[0].as_object()["env"].as_array()[0].as_object()["valu"] = "2";
    p["spec"].as_object()["restartPolicyy"] = "Never";
    auto typo = h.post("/api/v1/namespaces/default/pods?fieldValidation=Strict", p);
    ASSERT_EQ(typo.status, 400u);
    EXPECT_EQ(str(typo.obj().at("message")),
              "Pod in version \"v1\" cannot be handled as a Pod: strict decoding error: unknown field "
              "\"spec.containers[0].env[0].valu\", unknown field \"spec.containers[0].imagePullPolicyy\", "
              "unknown field \"spec.restartPolicyy\"");

    // PUT and PATCH validate the result the same way.
    auto cur = h.get(std::string(cms) + "/strict").obj();
    cur["extra"] = 1;
    auto put = h.put(std::string(cms) + "/strict?fieldValidation=Strict", cur);
    ASSERT_EQ(put.status, 400u);
    EXPECT_NE(str(put.obj().at("message")).find("unknown field \"extra\""), std::string::npos);
    auto patch = h.patch(std::string(cms) + "/strict?fieldValidation=Strict",
                         json::object{{"spec", json::object{{"a", 1}}}}, "application/merge-patch+json");
    ASSERT_EQ(patch.status, 400u);
    EXPECT_EQ(str(patch.obj().at("message")), "strict decoding error: unknown field \"spec\"");
    auto patch_warn = h.patch(std::string(cms) + "/strict", json::object{{"spec", json::object{{"a", 1}}}},
                              "application/merge-patch+json");
    ASSERT_EQ(patch_warn.status, 200u);
    EXPECT_EQ(patch_warn.headers["Warning"], "299 - \"unknown field \\\"spec\\\"\"");
    EXPECT_FALSE(patch_warn.obj().contains("spec"));

    // Custom resources: spec stays opaque, top-level and metadata fields are checked.
    auto cl = claim("cr");
    cl["spec"].as_object()["anything"] = json::object{{"goes", true}};
    ASSERT_EQ(h.post(std::string(claims) + "?fieldValidation=Strict", cl).status, 201u);
    cl["metadata"].as_object()["name"] = "cr2";
    cl["specc"] = json::object{};
    auto bad_cr = h.post(std::string(claims) + "?fieldValidation=Strict", cl);
    ASSERT_EQ(bad_cr.status, 400u);
    EXPECT_NE(str(bad_cr.obj().at("message")).find("unknown field \"specc\""), std::string::npos);
}

// Names and namespaces in the URL that are not one path segment never reach a lookup: 400 with
// a Status, never a 200 (e.g. an empty list for "namespaces/../configmaps").
TEST(LocalApi, PathTraversalInNamesAndNamespaces) {
    auto c = start_cluster();
    ASSERT_TRUE(c);
    HttpClient h(*c);
    ASSERT_EQ(h.post(cms, configmap("victim")).status, 201u);
    struct Case {
        std::string method, target, message;
    };
    std::vector<Case> cases{
        {"GET", "/api/v1/namespaces/../configmaps", "Namespace parameter invalid: \"..\": may not be '..'"},
        {"GET", "/api/v1/namespaces/./configmaps", "Namespace parameter invalid: \".\": may not be '.'"},
        {"GET", "/api/v1/namespaces/%2e%2e/configmaps", "Namespace parameter invalid: \"..\": may not be '..'"},
        {"GET", "/api/v1/namespaces/a%2Fb/configmaps", "Namespace parameter invalid: \"a/b\": may not contain '/'"},
        {"GET", "/api/v1/namespaces/a%00b/configmaps",
         "Namespace parameter invalid: \"a\\x00b\": may not contain control characters"},
        {"GET", "/api/v1/namespaces//configmaps", "Namespace parameter required."},
        {"GET", "/api/v1/namespaces/..", "Name parameter invalid: \"..\": may not be '..'"},
        {"GET", "/api/v1/namespaces/default/configmaps/..", "Name parameter invalid: \"..\": may not be '..'"},
        {"DELETE", "/api/v1/namespaces/default/configmaps/..", "Name parameter invalid: \"..\": may not be '..'"},
        {"GET", "/api/v1/namespaces/default/configmaps/..%2Fvictim",
         "Name parameter invalid: \"../victim\": may not contain '/'"},
        {"GET", "/api/v1/namespaces/default/configmaps/a%25b", "Name parameter invalid: \"a%b\": may not contain '%'"},
        {"GET", "/api/v1/namespaces/default/pods//status", "Name parameter required."},
        {"POST", "/api/v1/namespaces/default/pods/../exec?command=true",
         "Name parameter invalid: \"..\": may not be '..'"},
    };
    for (auto& k : cases) {
        auto r = h.request(k.method, k.target);
        EXPECT_EQ(r.status, 400u) << k.method << " " << k.target << ": " << r.body;
        ASSERT_TRUE(r.obj().contains("kind")) << k.target << ": " << r.body;
        EXPECT_EQ(str(r.obj().at("kind")), "Status");
        EXPECT_EQ(str(r.obj().at("reason")), "BadRequest") << k.target;
        EXPECT_EQ(str(r.obj().at("message")), k.message) << k.target;
    }
    // A NUL in a name is just a name nothing has: 404 with a well-formed Status.
    auto nul = h.get("/api/v1/namespaces/default/configmaps/a%00b");
    EXPECT_EQ(nul.status, 404u);
    EXPECT_EQ(str(nul.obj().at("reason")), "NotFound");
    // The object the traversal aimed at is untouched.
    EXPECT_EQ(h.get(std::string(cms) + "/victim").status, 200u);
}

TEST(LocalApi, CustomResources) {
    auto c = start_cluster();
    ASSERT_TRUE(c);
    HttpClient h(*c);
    auto cr = h.post(claims, claim("c1"));
    ASSERT_EQ(cr.status, 201u) << cr.body;
    EXPECT_EQ(cr.obj().at("metadata").at("generation").to_number<int>(), 1);
    // Same object, older version.
    auto alpha = h.get("/apis/extensions.agents.x-k8s.io/v1alpha1/namespaces/default/sandboxclaims/c1");
    ASSERT_EQ(alpha.status, 200u);
    EXPECT_EQ(str(alpha.obj().at("apiVersion")), "extensions.agents.x-k8s.io/v1alpha1");
    // PUT without resourceVersion.
    auto body = claim("c1");
    auto put = h.put(std::string(claims) + "/c1", body);
    ASSERT_EQ(put.status, 422u);
    EXPECT_EQ(str(put.obj().at("message")),
              "SandboxClaim.extensions.agents.x-k8s.io \"c1\" is invalid: metadata.resourceVersion: Invalid value: "
              "0x0: must be specified for an update");
    // Strategic merge patch is not for custom resources.
    auto smp = h.patch(std::string(claims) + "/c1", json::object{{"spec", json::object{}}},
                       "application/strategic-merge-patch+json");
    ASSERT_EQ(smp.status, 415u);
    EXPECT_EQ(str(smp.obj().at("message")),
              "the body of the request was in an unknown format - accepted media types include: "
              "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml");
    // A spec change bumps generation; a status change through /status does not.
    auto mp = h.patch(std::string(claims) + "/c1",
                      json::object{{"spec", json::object{{"warmPoolRef", json::object{{"name", "p2"}}}}}},
                      "application/merge-patch+json");
    ASSERT_EQ(mp.status, 200u);
    EXPECT_EQ(mp.obj().at("metadata").at("generation").to_number<int>(), 2);
    auto st = h.patch(std::string(claims) + "/c1/status",
                      json::object{{"status", json::object{{"sandbox", json::object{{"name", "s"}}}}}},
                      "application/merge-patch+json");
    ASSERT_EQ(st.status, 200u) << st.body;
    EXPECT_EQ(str(st.obj().at("status").at("sandbox").at("name")), "s");
    EXPECT_EQ(st.obj().at("metadata").at("generation").to_number<int>(), 2);
    // Status in a main-resource patch is ignored.
    auto ign = h.patch(std::string(claims) + "/c1", json::object{{"status", json::object{{"x", 1}}}},
                       "application/merge-patch+json");
    EXPECT_FALSE(ign.obj().at("status").as_object().contains("x"));
    auto del = h.del(std::string(claims) + "/c1");
    ASSERT_EQ(del.status, 200u);
    EXPECT_EQ(str(del.obj().at("status")), "Success");
}

TEST(LocalApi, Patches) {
    auto c = start_cluster();
    ASSERT_TRUE(c);
    HttpClient h(*c);
    ASSERT_EQ(h.post("/api/v1/namespaces/default/pods", pod("pp", {{"a", "1"}})).status, 201u);
    std::string p = "/api/v1/namespaces/default/pods/pp";
    auto merge =
        h.patch(p, json::object{{"metadata", json::object{{"labels", json::object{{"a", nullptr}, {"b", "2"}}}}}},
                "application/merge-patch+json");
    ASSERT_EQ(merge.status, 200u) << merge.body;
    EXPECT_EQ(merge.obj().at("metadata").at("labels").as_object(), (json::object{{"b", "2"}}));
    auto jp = h.patch(p,
                      json::array{json::object{
                          {"op", "add"}, {"path", "/metadata/annotations"}, {"value", json::object{{"x", "y"}}}}},
                      "application/json-patch+json");
    ASSERT_EQ(jp.status, 200u) << jp.body;
    EXPECT_EQ(str(jp.obj().at("metadata").at("annotations").at("x")), "y");
    auto failed_test =
        h.patch(p, json::array{json::object{{"op", "test"}, {"path", "/metadata/name"}, {"value", "zz"}}},
                "application/json-patch+json");
    EXPECT_EQ(failed_test.status, 422u);
    // Strategic merge: containers merge by name (image change is allowed).
    auto smp = h.patch(
        p,
        json::object{
            {"spec", json::object{{"containers", json::array{json::object{{"name", "c"}, {"image", "busybox:2"}}}}}}},
        "application/strategic-merge-patch+json");
    ASSERT_EQ(smp.status, 200u) << smp.body;
    auto smo = smp.obj();
    auto& cs = smo.at("spec").at("containers").as_array();
    ASSERT_EQ(cs.size(), 1u);
    EXPECT_EQ(str(cs[0].at("image")), "busybox:2");
    EXPECT_EQ(h.patch(p, json::object{}, "text/plain").status, 415u);
    EXPECT_EQ(h.patch("/api/v1/namespaces/default/pods/none", json::object{}, "application/merge-patch+json").status,
              404u);
}

TEST(LocalApi, Selectors) {
    auto c = start_cluster();
    ASSERT_TRUE(c);
    HttpClient h(*c);
    ASSERT_EQ(h.post(cms, configmap("a", {{"app", "x"}, {"tier", "web"}})).status, 201u);
    ASSERT_EQ(h.post(cms, configmap("b", {{"app", "y"}})).status, 201u);
    ASSERT_EQ(h.post(cms, configmap("c")).status, 201u);
    auto l1 = h.get(std::string(cms) + "?labelSelector=app%3Dx");
    ASSERT_EQ(l1.status, 200u);
    EXPECT_EQ(names(l1.obj()), (std::vector<std::string>{"a"}));
    auto l2 = h.get(std::string(cms) + "?labelSelector=app%20in%20(x%2Cy)");
    EXPECT_EQ(names(l2.obj()), (std::vector<std::string>{"a", "b"}));
    auto l3 = h.get(std::string(cms) + "?labelSelector=!app");
    EXPECT_EQ(names(l3.obj()), (std::vector<std::string>{"c"}));
    auto f1 = h.get(std::string(cms) + "?fieldSelector=metadata.name%3Db");
    EXPECT_EQ(names(f1.obj()), (std::vector<std::string>{"b"}));
    auto bad = h.get(std::string(cms) + "?fieldSelector=spec.foo%3Db");
    ASSERT_EQ(bad.status, 400u);
    EXPECT_EQ(str(bad.obj().at("message")), "field label not supported: spec.foo");
    EXPECT_EQ(h.get(std::string(cms) + "?labelSelector=a%20in%20(").status, 400u);
    // Pods support status.phase; cluster-wide lists see every namespace. An image the cluster
    // cannot pull keeps the pod Pending however late the list comes.
    auto pending = pod("p1");
    pending["spec"].as_object()["containers"].as_array()[0].as_object()["image"] = "example.invalid/none";
    ASSERT_EQ(h.post("/api/v1/namespaces/default/pods", pending).status, 201u);
    auto ph = h.get("/api/v1/pods?fieldSelector=status.phase%3DPending");
    ASSERT_EQ(ph.status, 200u);
    EXPECT_EQ(names(ph.obj()), (std::vector<std::string>{"p1"}));
    auto all = h.get("/api/v1/configmaps");
    EXPECT_EQ(names(all.obj()).size(), 3u);
}

TEST(LocalApi, FaultInjection) {
    auto c = start_cluster();
    ASSERT_TRUE(c);
    HttpClient h(*c);
    FaultRule tmr;
    tmr.path_contains = "/configmaps";
    tmr.status = 429;
    tmr.retry_after_seconds = 2;
    c->add_fault(tmr);
    auto r = h.get(cms);
    ASSERT_EQ(r.status, 429u);
    EXPECT_EQ(r.body, "Too many requests, please try again later.\n");
    EXPECT_EQ(r.content_type.rfind("text/plain", 0), 0u);
    EXPECT_EQ(r.headers["Retry-After"], "2");
    EXPECT_EQ(h.get(cms).status, 200u);  // count 1: used up

    FaultRule five;
    five.path_contains = "/configmaps";  // not the cluster's own controllers' requests
    five.status = 503;
    five.method = "POST";
    five.count = -1;
    c->add_fault(five);
    EXPECT_EQ(h.get(cms).status, 200u);
    auto p1 = h.post(cms, configmap("f"));
    EXPECT_EQ(p1.status, 503u);
    EXPECT_EQ(str(p1.obj().at("reason")), "ServiceUnavailable");
    EXPECT_EQ(h.post(cms, configmap("f")).status, 503u);
    c->clear_faults();
    EXPECT_EQ(h.post(cms, configmap("f")).status, 201u);

    FaultRule drop;
    drop.path_contains = "/configmaps";  // not the cluster's own controllers' requests
    drop.action = FaultRule::Action::drop_before_response;
    c->add_fault(drop);
    auto d = h.get(cms);
    EXPECT_TRUE(d.transport_error);
    EXPECT_EQ(d.status, 0u);

    FaultRule mid;
    mid.path_contains = "/configmaps";  // not the cluster's own controllers' requests
    mid.action = FaultRule::Action::drop_mid_body;
    c->add_fault(mid);
    auto m = h.get(cms);
    EXPECT_TRUE(m.transport_error);
    EXPECT_EQ(m.status, 200u);

    FaultRule slow;
    slow.path_contains = "/configmaps";  // not the cluster's own controllers' requests
    slow.action = FaultRule::Action::latency;
    slow.latency = std::chrono::milliseconds(300);
    c->add_fault(slow);
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(h.get(cms).status, 200u);
    EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(290));
}

TEST(LocalApi, KubeconfigFile) {
    LocalClusterOptions o;
    o.agent_sandbox = false;  // the API server alone: its tests count objects and requests
    o.router_objects = false;
    auto c = LocalCluster::start(o);
    ASSERT_TRUE(c);
    auto path = std::filesystem::temp_directory_path() / ("kubesandbox-kc-" + std::to_string(::getpid()));
    ASSERT_TRUE((*c)->write_kubeconfig(path));
    std::ifstream in(path);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("server: " + (*c)->url()), std::string::npos);
    EXPECT_NE(text.find("token: " + (*c)->token()), std::string::npos);
    EXPECT_NE(text.find("certificate-authority-data: "), std::string::npos);
    std::filesystem::remove(path);
    auto kc = (*c)->kube_config("ns1");
    EXPECT_EQ(kc.server, (*c)->url());
    EXPECT_EQ(kc.namespace_name, "ns1");
    EXPECT_EQ(kc.certificate_authority_pem, (*c)->ca_pem());
    (*c)->stop();
    (*c)->stop();  // idempotent
}
