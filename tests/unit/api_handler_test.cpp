// The local API server's request handling, called directly: no sockets, no kubelet.
#include "local/api_server_impl.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/json.hpp>

#include <gtest/gtest.h>

namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
namespace json = boost::json;
using namespace kubesandbox::local;

class ApiHandlerTest : public ::testing::Test {
protected:
    ApiHandlerTest() : impl_(io_.get_executor(), options(), faults_) {}

    static ApiServerOptions options() {
        ApiServerOptions o;
        o.token = "secret-token";
        return o;
    }

    Outcome call(http::verb method, std::string target, std::string body = {},
                 std::string content_type = "application/json", bool authorized = true) {
        Request req;
        req.msg.method(method);
        req.msg.target(target);
        req.msg.version(11);
        if (authorized) req.msg.set(http::field::authorization, "Bearer secret-token");
        if (!body.empty()) req.msg.set(http::field::content_type, content_type);
        req.msg.body() = std::move(body);
        req.msg.prepare_payload();
        return handle_request(impl_, req);
    }

    // The response of a request that must end in one; fails the test otherwise.
    Response respond(http::verb method, std::string target, std::string body = {},
                     std::string content_type = "application/json") {
        auto out = call(method, std::move(target), std::move(body), std::move(content_type));
        auto* r = std::get_if<Response>(&out);
        EXPECT_NE(r, nullptr) << "not a plain response";
        return r ? *r : Response{};
    }

    static json::object body_of(const Response& r) {
        auto v = json::parse(r.body);
        return v.is_object() ? v.as_object() : json::object{};
    }

    static std::string reason_of(const Response& r) {
        auto o = body_of(r);
        auto it = o.find("reason");
        return it != o.end() && it->value().is_string() ? std::string(it->value().as_string()) : "";
    }

    asio::io_context io_;
    FaultList faults_;
    ApiServer::Impl impl_;
};

const std::string pod_body = R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":"p1"},)"
                             R"("spec":{"containers":[{"name":"c","image":"busybox"}]}})";

TEST_F(ApiHandlerTest, RequiresTheBearerTokenExceptOnHealthAndVersion) {
    auto out = call(http::verb::get, "/api/v1/namespaces", {}, {}, false);
    ASSERT_TRUE(std::holds_alternative<Response>(out));
    EXPECT_EQ(std::get<Response>(out).status, 401u);
    out = call(http::verb::get, "/healthz", {}, {}, false);
    ASSERT_TRUE(std::holds_alternative<Response>(out));
    EXPECT_EQ(std::get<Response>(out).status, 200u);
    EXPECT_EQ(std::get<Response>(out).body, "ok");
    Request wrong;
    wrong.msg.method(http::verb::get);
    wrong.msg.target("/api/v1/namespaces");
    wrong.msg.set(http::field::authorization, "Bearer other");
    auto denied = handle_request(impl_, wrong);
    ASSERT_TRUE(std::holds_alternative<Response>(denied));
    EXPECT_EQ(std::get<Response>(denied).status, 401u);
}

TEST_F(ApiHandlerTest, CreateGetAndListAConfigMap) {
    auto created = respond(http::verb::post, "/api/v1/namespaces/default/configmaps",
                           R"({"metadata":{"name":"cm"},"data":{"k":"v"}})");
    ASSERT_EQ(created.status, 201u) << created.body;
    auto got = respond(http::verb::get, "/api/v1/namespaces/default/configmaps/cm");
    ASSERT_EQ(got.status, 200u);
    auto o = body_of(got);
    EXPECT_EQ(o["kind"], "ConfigMap");
    EXPECT_EQ(o["data"].as_object()["k"], "v");
    EXPECT_FALSE(o["metadata"].as_object()["uid"].as_string().empty());
    auto list = respond(http::verb::get, "/api/v1/configmaps");
    ASSERT_EQ(list.status, 200u);
    EXPECT_EQ(body_of(list)["items"].as_array().size(), 1u);
    auto again = respond(http::verb::post, "/api/v1/namespaces/default/configmaps", R"({"metadata":{"name":"cm"}})");
    EXPECT_EQ(again.status, 409u);
    EXPECT_EQ(reason_of(again), "AlreadyExists");
}

TEST_F(ApiHandlerTest, UnknownObjectsAndPathsAreNotFound) {
    auto missing = respond(http::verb::get, "/api/v1/namespaces/default/configmaps/none");
    EXPECT_EQ(missing.status, 404u);
    EXPECT_EQ(reason_of(missing), "NotFound");
    EXPECT_EQ(respond(http::verb::get, "/api/v1/widgets").status, 404u);
    EXPECT_EQ(respond(http::verb::get, "/nothing/here").status, 404u);
    EXPECT_EQ(
        respond(http::verb::post, "/api/v1/namespaces/no-such-ns/configmaps", R"({"metadata":{"name":"a"}})").status,
        404u);
}

TEST_F(ApiHandlerTest, TheRouteTableRefusesVerbsAResourceDoesNotServe) {
    auto across = respond(http::verb::post, "/api/v1/configmaps", R"({"metadata":{"name":"cm"}})");
    EXPECT_EQ(across.status, 405u);
    EXPECT_NE(across.body.find("create is not supported"), std::string::npos) << across.body;
    ASSERT_EQ(respond(http::verb::post, "/api/v1/namespaces/default/pods", pod_body).status, 201u);
    EXPECT_EQ(respond(http::verb::delete_, "/api/v1/namespaces/default/pods/p1/status").status, 405u);
    EXPECT_EQ(respond(http::verb::put, "/api/v1/namespaces/default/pods").status, 405u);
}

TEST_F(ApiHandlerTest, WatchesAndPodStreamsAreHandedToTheConnectionLoop) {
    auto watch = call(http::verb::get, "/api/v1/namespaces/default/pods?watch=true&resourceVersion=0");
    ASSERT_TRUE(std::holds_alternative<WatchStream>(watch));
    EXPECT_EQ(std::get<WatchStream>(watch).route.ns, "default");
    EXPECT_EQ(std::get<WatchStream>(watch).route.type->plural, "pods");
    // python-kubernetes spells it watch=True.
    EXPECT_TRUE(std::holds_alternative<WatchStream>(call(http::verb::get, "/api/v1/pods?watch=True")));
    EXPECT_TRUE(std::holds_alternative<Response>(call(http::verb::get, "/api/v1/pods?watch=false")));

    auto no_pod = respond(http::verb::get, "/api/v1/namespaces/default/pods/p1/exec?command=true");
    EXPECT_EQ(no_pod.status, 404u);
    ASSERT_EQ(respond(http::verb::post, "/api/v1/namespaces/default/pods", pod_body).status, 201u);
    // No kubelet here: a real server without its kubelet is unavailable, not broken.
    auto exec = respond(http::verb::get, "/api/v1/namespaces/default/pods/p1/exec?command=true");
    EXPECT_EQ(exec.status, 503u);
}

TEST_F(ApiHandlerTest, PodsGetDefaultsAndTheirSpecIsImmutable) {
    auto created = respond(http::verb::post, "/api/v1/namespaces/default/pods", pod_body);
    ASSERT_EQ(created.status, 201u) << created.body;
    auto pod = body_of(created);
    EXPECT_EQ(pod["spec"].as_object()["restartPolicy"], "Always");
    EXPECT_EQ(pod["spec"].as_object()["nodeName"], "local");
    EXPECT_EQ(pod["status"].as_object()["phase"], "Pending");
    auto change = respond(http::verb::patch, "/api/v1/namespaces/default/pods/p1",
                          R"({"spec":{"restartPolicy":"Never"}})", "application/merge-patch+json");
    EXPECT_EQ(change.status, 422u) << change.body;
    EXPECT_NE(change.body.find("pod updates may not change fields"), std::string::npos);
    auto image = respond(http::verb::patch, "/api/v1/namespaces/default/pods/p1",
                         R"({"spec":{"containers":[{"name":"c","image":"busybox:1"}]}})",
                         "application/strategic-merge-patch+json");
    EXPECT_EQ(image.status, 200u) << image.body;
    auto invalid = respond(http::verb::post, "/api/v1/namespaces/default/pods",
                           R"({"metadata":{"name":"p2"},"spec":{"containers":[]}})");
    EXPECT_EQ(invalid.status, 422u);
    EXPECT_NE(invalid.body.find("spec.containers"), std::string::npos);
}

// Volume names end up in the kubelet's host paths: anything but a DNS label is a 422, as in a
// real API server, and so are mounts of missing volumes and subPaths that leave the volume.
TEST_F(ApiHandlerTest, PodVolumeNamesAndSubPathsAreValidated) {
    auto pod_with = [](const std::string& volume, const std::string& mount) {
        return R"({"metadata":{"name":"v"},"spec":{"volumes":[{"name":")" + volume +
               R"(","emptyDir":{}}],"containers":[{"name":"c","image":"busybox","volumeMounts":[)" + mount + "]}]}}";
    };
    struct Case {
        std::string volume, mount, field, detail;
    };
    std::vector<Case> cases = {
        {"/srv/data", R"({"name":"/srv/data","mountPath":"/m"})", "spec.volumes[0].name", "RFC 1123 label"},
        {"../../etc", R"({"name":"../../etc","mountPath":"/m"})", "spec.volumes[0].name", "RFC 1123 label"},
        {"data", R"({"name":"other","mountPath":"/m"})", "spec.containers[0].volumeMounts[0].name",
         "Not found: \\\"other\\\""},
        {"data", R"({"name":"data","mountPath":"/m","subPath":"../x"})", "spec.containers[0].volumeMounts[0].subPath",
         "must not contain '..'"},
        {"data", R"({"name":"data","mountPath":"/m","subPath":"/etc"})", "spec.containers[0].volumeMounts[0].subPath",
         "must be a relative path"},
        {"data", R"({"name":"data"})", "spec.containers[0].volumeMounts[0].mountPath", "Required value"},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.volume + " " + c.mount);
        auto r = respond(http::verb::post, "/api/v1/namespaces/default/pods", pod_with(c.volume, c.mount));
        EXPECT_EQ(r.status, 422u) << r.body;
        EXPECT_EQ(reason_of(r), "Invalid");
        EXPECT_NE(r.body.find("\"field\":\"" + c.field + "\""), std::string::npos) << r.body;
        EXPECT_NE(r.body.find(c.detail), std::string::npos) << r.body;
    }
    auto ok = respond(http::verb::post, "/api/v1/namespaces/default/pods",
                      pod_with("data", R"({"name":"data","mountPath":"/m","subPath":"a/b"})"));
    EXPECT_EQ(ok.status, 201u) << ok.body;
    auto init = respond(http::verb::post, "/api/v1/namespaces/default/pods",
                        R"({"metadata":{"name":"i"},"spec":{"initContainers":[{"name":"c","image":"busybox"}],)"
                        R"("containers":[{"name":"c","image":"busybox"}]}})");
    EXPECT_EQ(init.status, 422u) << init.body;
    EXPECT_NE(init.body.find("spec.initContainers[0].name"), std::string::npos) << init.body;
}

TEST_F(ApiHandlerTest, NamespacesKeepTheirSpecAndTheBuiltInOnesCannotBeDeleted) {
    ASSERT_EQ(respond(http::verb::post, "/api/v1/namespaces", R"({"metadata":{"name":"team"}})").status, 201u);
    auto patched =
        respond(http::verb::patch, "/api/v1/namespaces/team",
                R"({"spec":{"finalizers":[]},"metadata":{"labels":{"a":"b"}}})", "application/merge-patch+json");
    ASSERT_EQ(patched.status, 200u) << patched.body;
    auto ns = body_of(patched);
    EXPECT_EQ(ns["spec"].as_object()["finalizers"].as_array().size(), 1u);
    EXPECT_EQ(ns["metadata"].as_object()["labels"].as_object()["a"], "b");
    EXPECT_EQ(respond(http::verb::delete_, "/api/v1/namespaces/default").status, 403u);

    ASSERT_EQ(respond(http::verb::post, "/api/v1/namespaces/team/configmaps", R"({"metadata":{"name":"cm"}})").status,
              201u);
    auto deleting = respond(http::verb::delete_, "/api/v1/namespaces/team");
    ASSERT_EQ(deleting.status, 200u);
    EXPECT_EQ(body_of(deleting)["status"].as_object()["phase"], "Terminating");
    auto refused = respond(http::verb::post, "/api/v1/namespaces/team/configmaps", R"({"metadata":{"name":"x"}})");
    EXPECT_EQ(refused.status, 403u);
    io_.poll();  // the namespace's content is purged asynchronously
    EXPECT_EQ(respond(http::verb::get, "/api/v1/namespaces/team/configmaps/cm").status, 404u);
    EXPECT_EQ(respond(http::verb::get, "/api/v1/namespaces/team").status, 404u);
}

TEST_F(ApiHandlerTest, ConflictsOnAStaleResourceVersion) {
    auto created = respond(http::verb::post, "/api/v1/namespaces/default/configmaps",
                           R"({"metadata":{"name":"cm"},"data":{"k":"1"}})");
    ASSERT_EQ(created.status, 201u);
    std::string rv(body_of(created)["metadata"].as_object()["resourceVersion"].as_string());
    auto put = [&](const std::string& version, const std::string& value) {
        return respond(
            http::verb::put, "/api/v1/namespaces/default/configmaps/cm",
            R"({"metadata":{"name":"cm","resourceVersion":")" + version + R"("},"data":{"k":")" + value + R"("}})");
    };
    EXPECT_EQ(put(rv, "2").status, 200u);
    auto stale = put(rv, "3");
    EXPECT_EQ(stale.status, 409u);
    EXPECT_EQ(reason_of(stale), "Conflict");
}

TEST_F(ApiHandlerTest, AUidInTheBodyMustNameTheStoredObject) {
    auto created = respond(http::verb::post, "/api/v1/namespaces/default/configmaps",
                           R"({"metadata":{"name":"cm"},"data":{"k":"1"}})");
    ASSERT_EQ(created.status, 201u);
    std::string uid(body_of(created)["metadata"].as_object()["uid"].as_string());
    auto put = [&](const std::string& with_uid, const std::string& value) {
        return respond(http::verb::put, "/api/v1/namespaces/default/configmaps/cm",
                       R"({"metadata":{"name":"cm","uid":")" + with_uid + R"("},"data":{"k":")" + value + R"("}})");
    };
    // An update read from an object that has since been replaced under the same name.
    auto other = put("0b3c1d2e-0000-4000-8000-000000000000", "2");
    EXPECT_EQ(other.status, 409u);
    EXPECT_EQ(reason_of(other), "Conflict");
    EXPECT_NE(std::string(body_of(other)["message"].as_string()).find("Precondition failed: UID in precondition"),
              std::string::npos);
    auto unchanged = respond(http::verb::get, "/api/v1/namespaces/default/configmaps/cm");
    EXPECT_EQ(body_of(unchanged)["data"].as_object()["k"], "1");
    EXPECT_EQ(put(uid, "3").status, 200u);

    auto patched =
        respond(http::verb::patch, "/api/v1/namespaces/default/configmaps/cm",
                R"({"metadata":{"uid":"0b3c1d2e-0000-4000-8000-000000000000"}})", "application/merge-patch+json");
    EXPECT_EQ(patched.status, 422u);
    EXPECT_EQ(reason_of(patched), "Invalid");
    auto after = respond(http::verb::get, "/api/v1/namespaces/default/configmaps/cm");
    EXPECT_EQ(body_of(after)["metadata"].as_object()["uid"], uid.c_str());
    EXPECT_EQ(body_of(after)["data"].as_object()["k"], "3");
}

TEST_F(ApiHandlerTest, UnknownFieldsBecomeWarningsOrErrors) {
    auto warned =
        respond(http::verb::post, "/api/v1/namespaces/default/configmaps", R"({"metadata":{"name":"cm"},"bogus":1})");
    ASSERT_EQ(warned.status, 201u);
    bool warning = false;
    for (auto& [k, v] : warned.headers)
        if (k == "Warning" && v.find("bogus") != std::string::npos) warning = true;
    EXPECT_TRUE(warning);
    auto strict = respond(http::verb::post, "/api/v1/namespaces/default/configmaps?fieldValidation=Strict",
                          R"({"metadata":{"name":"cm2"},"bogus":1})");
    EXPECT_EQ(strict.status, 400u);
    auto bad_json = respond(http::verb::post, "/api/v1/namespaces/default/configmaps", "{not json");
    EXPECT_EQ(bad_json.status, 400u);
}

TEST_F(ApiHandlerTest, FieldSelectorsFollowEachKindsRules) {
    EXPECT_EQ(respond(http::verb::get, "/api/v1/pods?fieldSelector=status.phase%3DRunning").status, 200u);
    EXPECT_EQ(respond(http::verb::get, "/api/v1/secrets?fieldSelector=type%3DOpaque").status, 200u);
    auto unsupported = respond(http::verb::get, "/api/v1/configmaps?fieldSelector=status.phase%3DRunning");
    EXPECT_EQ(unsupported.status, 400u);
}

TEST_F(ApiHandlerTest, DiscoveryListsCategoriesFromTheKindRules) {
    auto resources = respond(http::verb::get, "/api/v1");
    ASSERT_EQ(resources.status, 200u);
    std::map<std::string, bool> in_all;
    auto list = body_of(resources);
    for (auto& r : list["resources"].as_array()) {
        auto& o = r.as_object();
        in_all[std::string(o.at("name").as_string())] = o.contains("categories");
    }
    EXPECT_TRUE(in_all["pods"]);
    EXPECT_TRUE(in_all["services"]);
    EXPECT_FALSE(in_all["configmaps"]);
}

}  // namespace

TEST(StoreListRange, ANamespacedListReadsOnlyItsNamespaceAndResumesAfterTheToken) {
    ObjectMap objects;
    for (auto ns : {"a", "a-b", "ab", "b"})
        for (auto name : {"x", "y"}) objects[ObjectKey{ns, name}] = std::make_shared<const json::object>();
    auto keys = [&](std::string ns, const ObjectKey* after) {
        std::vector<std::string> out;
        auto [it, end] = list_range(objects, ns, after);
        for (; it != end; ++it) out.push_back(it->first.ns + "/" + it->first.name);
        return out;
    };
    using V = std::vector<std::string>;
    EXPECT_EQ(keys("a", nullptr), (V{"a/x", "a/y"}));  // not "a-b", whose name starts alike
    EXPECT_EQ(keys("ab", nullptr), (V{"ab/x", "ab/y"}));
    EXPECT_EQ(keys("none", nullptr), V{});
    EXPECT_EQ(keys("", nullptr).size(), 8u);
    ObjectKey ax{"a", "x"}, before{"0", "z"}, beyond{"b", "x"};
    EXPECT_EQ(keys("a", &ax), V{"a/y"});
    EXPECT_EQ(keys("", &ax).front(), "a/y");
    // Tokens from elsewhere never step outside the namespace.
    EXPECT_EQ(keys("ab", &before), (V{"ab/x", "ab/y"}));
    EXPECT_EQ(keys("ab", &beyond), V{});
}

TEST_F(ApiHandlerTest, PagesOfANamespacedListStayInTheNamespace) {
    for (auto ns : {"a", "a-b"}) {
        auto made =
            respond(http::verb::post, "/api/v1/namespaces", std::string(R"({"metadata":{"name":")") + ns + R"("}})");
        ASSERT_EQ(made.status, 201u) << made.body;
        for (auto name : {"c1", "c2", "c3"}) {
            auto cm = respond(http::verb::post, std::string("/api/v1/namespaces/") + ns + "/configmaps",
                              std::string(R"({"metadata":{"name":")") + name + R"("}})");
            ASSERT_EQ(cm.status, 201u) << cm.body;
        }
    }
    std::vector<std::string> seen;
    std::string token;
    for (int page = 0; page < 10; ++page) {
        auto r = respond(http::verb::get,
                         "/api/v1/namespaces/a/configmaps?limit=2" + (token.empty() ? "" : "&continue=" + token));
        ASSERT_EQ(r.status, 200u) << r.body;
        auto o = body_of(r);
        for (auto& item : o["items"].as_array())
            seen.push_back(std::string(item.at("metadata").at("namespace").as_string()) + "/" +
                           std::string(item.at("metadata").at("name").as_string()));
        auto& meta = o["metadata"].as_object();
        if (page == 0) {
            EXPECT_EQ(meta["remainingItemCount"], 1);
        }
        auto c = meta.find("continue");
        if (c == meta.end() || c->value().as_string().empty()) break;
        token = std::string(c->value().as_string());
    }
    EXPECT_EQ(seen, (std::vector<std::string>{"a/c1", "a/c2", "a/c3"}));
}

TEST(StoreIndexes, DependentsAndForegroundDeletionFollowEveryChange) {
    Store store;
    auto object = [](std::string name, std::vector<std::string> owners, bool foreground) {
        json::object meta{{"name", name}, {"namespace", "ns"}};
        json::array refs;
        for (auto& uid : owners) refs.push_back(json::object{{"uid", uid}, {"kind", "Pod"}, {"name", "p"}});
        if (!refs.empty()) meta["ownerReferences"] = refs;
        if (foreground) meta["finalizers"] = json::array{"foregroundDeletion"};
        return json::object{{"metadata", meta}};
    };
    auto names = [](const std::vector<ObjectRef>& refs) {
        std::vector<std::string> out;
        for (auto& r : refs) out.push_back(r.resource + ":" + r.key.name);
        return out;
    };
    using V = std::vector<std::string>;
    store.put("configmaps", object("a", {"u1"}, false));
    store.put("networkpolicies.networking.k8s.io", object("b", {"u1", "u2"}, true));
    EXPECT_EQ(names(store.dependents("u1")), (V{"configmaps:a", "networkpolicies.networking.k8s.io:b"}));
    EXPECT_EQ(names(store.dependents("u2")), V{"networkpolicies.networking.k8s.io:b"});
    EXPECT_EQ(names(store.foreground_deleting()), V{"networkpolicies.networking.k8s.io:b"});
    // An update that drops an owner and the finalizer drops both from the indexes.
    store.put("networkpolicies.networking.k8s.io", object("b", {"u2"}, false));
    EXPECT_EQ(names(store.dependents("u1")), V{"configmaps:a"});
    EXPECT_TRUE(store.foreground_deleting().empty());
    store.remove("configmaps", ObjectKey{"ns", "a"});
    store.remove("networkpolicies.networking.k8s.io", ObjectKey{"ns", "b"});
    EXPECT_TRUE(store.dependents("u1").empty());
    EXPECT_TRUE(store.dependents("u2").empty());
}

// Dependents written after their owner left (a controller acting on a stale cache) are collected
// once the write is out, as Kubernetes' garbage collector does; dependents with an owner left lose
// only the references to the gone ones.
TEST_F(ApiHandlerTest, DependentsWhoseOwnersAreGoneAreCollectedAfterTheWrite) {
    const std::string cms = "/api/v1/namespaces/default/configmaps";
    auto owner = respond(http::verb::post, cms, R"({"metadata":{"name":"owner"}})");
    ASSERT_EQ(owner.status, 201u) << owner.body;
    const std::string uid(body_of(owner)["metadata"].as_object()["uid"].as_string());
    auto ref = [](std::string api_version, std::string kind, std::string name, std::string uid) {
        return json::object{{"apiVersion", api_version}, {"kind", kind}, {"name", name}, {"uid", uid}};
    };
    auto dependent = [&](const std::string& name, json::array refs) {
        json::object body{{"metadata", json::object{{"name", name}, {"ownerReferences", std::move(refs)}}}};
        return respond(http::verb::post, cms, json::serialize(body)).status;
    };
    ASSERT_EQ(dependent("alive", {ref("v1", "ConfigMap", "owner", uid)}), 201u);
    ASSERT_EQ(dependent("gone", {ref("v1", "ConfigMap", "ghost", "no-such-uid")}), 201u);
    ASSERT_EQ(dependent("name-reused", {ref("v1", "ConfigMap", "owner", "an-earlier-uid")}), 201u);
    ASSERT_EQ(
        dependent("mixed", {ref("v1", "ConfigMap", "ghost", "no-such-uid"), ref("v1", "ConfigMap", "owner", uid)}),
        201u);
    ASSERT_EQ(dependent("unknown-kind", {ref("apps/v1", "Deployment", "d", "uid-d")}), 201u);
    // Written as asked: the collector acts after the write, not in it.
    for (const char* name : {"alive", "gone", "name-reused", "mixed", "unknown-kind"})
        EXPECT_EQ(respond(http::verb::get, cms + "/" + name).status, 200u) << name;
    io_.poll();
    EXPECT_EQ(respond(http::verb::get, cms + "/alive").status, 200u);
    EXPECT_EQ(respond(http::verb::get, cms + "/gone").status, 404u);
    EXPECT_EQ(respond(http::verb::get, cms + "/name-reused").status, 404u);
    EXPECT_EQ(respond(http::verb::get, cms + "/unknown-kind").status, 200u) << "an owner not served here is not gone";
    auto mixed = respond(http::verb::get, cms + "/mixed");
    ASSERT_EQ(mixed.status, 200u);
    auto refs = body_of(mixed)["metadata"].as_object()["ownerReferences"];
    ASSERT_TRUE(refs.is_array());
    ASSERT_EQ(refs.as_array().size(), 1u);
    EXPECT_EQ(refs.as_array()[0].as_object().at("uid"), json::value(uid));
    // The owner's own deletion still takes its dependents with it.
    EXPECT_EQ(respond(http::verb::delete_, cms + "/owner").status, 200u);
    EXPECT_EQ(respond(http::verb::get, cms + "/alive").status, 404u);
    EXPECT_EQ(respond(http::verb::get, cms + "/mixed").status, 404u);
}
