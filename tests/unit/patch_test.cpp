#include "proto/patch.hpp"

#include <gtest/gtest.h>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

namespace ks = kubesandbox;
namespace proto = ks::proto;
namespace json = boost::json;
using ks::errc;

namespace {
json::value j(std::string_view s) { return json::parse(s); }

struct Case {
    const char* target;
    const char* patch;
    const char* expected;
};
}  // namespace

#define EXPECT_JSON_EQ(actual, expected_text)                  \
    EXPECT_TRUE(proto::json_equal((actual), j(expected_text))) \
        << "got " << json::serialize(actual) << " want " << (expected_text)

TEST(MergePatch, Rfc7386AppendixA) {
    const std::vector<Case> cases = {
        {R"({"a":"b"})", R"({"a":"c"})", R"({"a":"c"})"},
        {R"({"a":"b"})", R"({"b":"c"})", R"({"a":"b","b":"c"})"},
        {R"({"a":"b"})", R"({"a":null})", R"({})"},
        {R"({"a":"b","b":"c"})", R"({"a":null})", R"({"b":"c"})"},
        {R"({"a":["b"]})", R"({"a":"c"})", R"({"a":"c"})"},
        {R"({"a":"c"})", R"({"a":["b"]})", R"({"a":["b"]})"},
        {R"({"a":{"b":"c"}})", R"({"a":{"b":"d","c":null}})", R"({"a":{"b":"d"}})"},
        {R"({"a":[{"b":"c"}]})", R"({"a":[1]})", R"({"a":[1]})"},
        {R"(["a","b"])", R"(["c","d"])", R"(["c","d"])"},
        {R"({"a":"b"})", R"(["c"])", R"(["c"])"},
        {R"({"a":"foo"})", R"(null)", R"(null)"},
        {R"({"a":"foo"})", R"("bar")", R"("bar")"},
        {R"({"e":null})", R"({"a":1})", R"({"e":null,"a":1})"},
        {R"([1,2])", R"({"a":"b","c":null})", R"({"a":"b"})"},
        {R"({})", R"({"a":{"bb":{"ccc":null}}})", R"({"a":{"bb":{}}})"},
    };
    for (const auto& c : cases) {
        auto out = proto::apply_merge_patch(j(c.target), j(c.patch));
        EXPECT_JSON_EQ(out, c.expected);
    }
}

// The patch between two documents, applied to the first, gives the second; unchanged keys stay
// out of it, removed ones are null (a status that loses a field must lose it on the server).
TEST(MergePatch, BetweenTwoDocumentsGivesTheSecondFromTheFirst) {
    const std::vector<Case> cases = {
        {R"({"a":1,"b":{"c":2,"d":3}})", R"({"a":1,"b":{"c":2}})", R"({"b":{"d":null}})"},
        {R"({"sandbox":{"name":"x","serviceFQDN":"x.svc"},"conditions":[1]})", R"({"conditions":[2]})",
         R"({"sandbox":null,"conditions":[2]})"},
        {R"({"a":"b"})", R"({"a":{"c":1}})", R"({"a":{"c":1}})"},
        {R"({})", R"({"a":[1,2]})", R"({"a":[1,2]})"},
        {R"({"a":1})", R"({"a":1})", R"({})"},
        {R"([1])", R"({"a":1})", R"({"a":1})"},
    };
    for (const auto& c : cases) {
        auto patch = proto::merge_patch_between(j(c.target), j(c.patch));
        EXPECT_JSON_EQ(patch, c.expected);
        EXPECT_JSON_EQ(proto::apply_merge_patch(j(c.target), patch), c.patch);
    }
}

TEST(JsonPatch, Rfc6902AppendixA) {
    const std::vector<Case> ok = {
        {R"({"foo":"bar"})", R"([{"op":"add","path":"/baz","value":"qux"}])", R"({"baz":"qux","foo":"bar"})"},
        {R"({"foo":["bar","baz"]})", R"([{"op":"add","path":"/foo/1","value":"qux"}])",
         R"({"foo":["bar","qux","baz"]})"},
        {R"({"baz":"qux","foo":"bar"})", R"([{"op":"remove","path":"/baz"}])", R"({"foo":"bar"})"},
        {R"({"foo":["bar","qux","baz"]})", R"([{"op":"remove","path":"/foo/1"}])", R"({"foo":["bar","baz"]})"},
        {R"({"baz":"qux","foo":"bar"})", R"([{"op":"replace","path":"/baz","value":"boo"}])",
         R"({"baz":"boo","foo":"bar"})"},
        {R"({"foo":{"bar":"baz","waldo":"fred"},"qux":{"corge":"grault"}})",
         R"([{"op":"move","from":"/foo/waldo","path":"/qux/thud"}])",
         R"({"foo":{"bar":"baz"},"qux":{"corge":"grault","thud":"fred"}})"},
        {R"({"foo":["all","grass","cows","eat"]})", R"([{"op":"move","from":"/foo/1","path":"/foo/3"}])",
         R"({"foo":["all","cows","eat","grass"]})"},
        {R"({"baz":"qux","foo":["a",2,"c"]})",
         R"([{"op":"test","path":"/baz","value":"qux"},{"op":"test","path":"/foo/1","value":2}])",
         R"({"baz":"qux","foo":["a",2,"c"]})"},
        {R"({"foo":"bar"})", R"([{"op":"add","path":"/child","value":{"grandchild":{}}}])",
         R"({"foo":"bar","child":{"grandchild":{}}})"},
        {R"({"foo":"bar"})", R"([{"op":"add","path":"/baz","value":"qux","xyz":123}])", R"({"foo":"bar","baz":"qux"})"},
        {R"({"/":9,"~1":10})", R"([{"op":"test","path":"/~01","value":10}])", R"({"/":9,"~1":10})"},
        {R"({"foo":["bar"]})", R"([{"op":"add","path":"/foo/-","value":["abc","def"]}])",
         R"({"foo":["bar",["abc","def"]]})"},
        // Kubernetes idioms: escaped label keys, compare-and-swap on resourceVersion, copy, root.
        {R"({"metadata":{"labels":{},"resourceVersion":"12"}})",
         R"([{"op":"test","path":"/metadata/resourceVersion","value":"12"},
             {"op":"add","path":"/metadata/labels/app.kubernetes.io~1name","value":"x"}])",
         R"({"metadata":{"labels":{"app.kubernetes.io/name":"x"},"resourceVersion":"12"}})"},
        {R"({"a":{"b":1}})", R"([{"op":"copy","from":"/a","path":"/c"}])", R"({"a":{"b":1},"c":{"b":1}})"},
        {R"({"a":1})", R"([{"op":"replace","path":"","value":[1]}])", R"([1])"},
        {R"({"a":1.0})", R"([{"op":"test","path":"/a","value":1}])", R"({"a":1.0})"},
        {R"({"a":1})", R"([])", R"({"a":1})"},
        {R"({"a":1})", R"([{"op":"move","from":"/a","path":"/a"}])", R"({"a":1})"},
    };
    for (const auto& c : ok) {
        auto out = proto::apply_json_patch(j(c.target), j(c.patch));
        ASSERT_TRUE(out) << c.patch << ": " << out.error().message;
        EXPECT_JSON_EQ(*out, c.expected);
    }
}

TEST(JsonPatch, FailuresAreInvalidOrBadRequest) {
    struct ErrCase {
        const char* target;
        const char* patch;
        errc code;
    };
    const std::vector<ErrCase> cases = {
        {R"({"baz":"qux"})", R"([{"op":"test","path":"/baz","value":"bar"}])", errc::invalid},
        {R"({"foo":"bar"})", R"([{"op":"add","path":"/baz/bat","value":"qux"}])", errc::invalid},
        {R"({"/":9,"~1":10})", R"([{"op":"test","path":"/~01","value":"10"}])", errc::invalid},
        {R"({"a":1})", R"([{"op":"remove","path":"/b"}])", errc::invalid},
        {R"({"a":1})", R"([{"op":"replace","path":"/b","value":2}])", errc::invalid},
        {R"({"a":[1]})", R"([{"op":"add","path":"/a/5","value":2}])", errc::invalid},
        {R"({"a":[1]})", R"([{"op":"add","path":"/a/01","value":2}])", errc::invalid},
        {R"({"a":[1]})", R"([{"op":"remove","path":"/a/-"}])", errc::invalid},
        {R"({"a":{"b":1}})", R"([{"op":"move","from":"/a","path":"/a/b/c"}])", errc::invalid},
        {R"({"a":1})", R"([{"op":"copy","from":"/x","path":"/y"}])", errc::invalid},
        {R"({"a":1})", R"({"op":"add","path":"/b","value":1})", errc::bad_request},
        {R"({"a":1})", R"([1])", errc::bad_request},
        {R"({"a":1})", R"([{"path":"/b","value":1}])", errc::bad_request},
        {R"({"a":1})", R"([{"op":"frob","path":"/b"}])", errc::bad_request},
        {R"({"a":1})", R"([{"op":"add","path":"/b"}])", errc::bad_request},
        {R"({"a":1})", R"([{"op":"add","path":"b","value":1}])", errc::bad_request},
        {R"({"a":1})", R"([{"op":"add","path":"/~2","value":1}])", errc::bad_request},
        {R"({"a":1})", R"([{"op":"move","path":"/b"}])", errc::bad_request},
    };
    for (const auto& c : cases) {
        auto out = proto::apply_json_patch(j(c.target), j(c.patch));
        ASSERT_FALSE(out) << c.patch;
        EXPECT_TRUE(out.error().is(c.code)) << c.patch << ": " << out.error().describe();
    }
    auto failed = proto::apply_json_patch(j(R"({"metadata":{"resourceVersion":"5"}})"),
                                          j(R"([{"op":"test","path":"/metadata/resourceVersion","value":"4"}])"));
    ASSERT_FALSE(failed);
    EXPECT_EQ(failed.error().message, "the server rejected our request due to an error in our request");
    EXPECT_EQ(failed.error().http_status, 422u);
    EXPECT_EQ(failed.error().reason, "Invalid");
    ASSERT_EQ(failed.error().causes.size(), 1u);
    EXPECT_EQ(failed.error().causes[0].reason, "UnexpectedServerResponse");
    EXPECT_NE(failed.error().causes[0].message.find("/metadata/resourceVersion"), std::string::npos);
}

TEST(JsonPatch, FailureLeavesNoPartialResult) {
    // The first op applies, the second fails: the caller only ever sees the error.
    auto target = j(R"({"a":1})");
    auto out = proto::apply_json_patch(target, j(R"([{"op":"add","path":"/b","value":2},
                                                     {"op":"remove","path":"/zzz"}])"));
    EXPECT_FALSE(out);
    EXPECT_JSON_EQ(target, R"({"a":1})");
}

TEST(StrategicMergePatch, MergesContainersByName) {
    auto pod = j(R"({"metadata":{"name":"p","labels":{"a":"1","b":"2"},"finalizers":["x"]},
        "spec":{"containers":[
            {"name":"main","image":"busybox:1","env":[{"name":"A","value":"1"},{"name":"B","value":"2"}],
             "ports":[{"containerPort":80,"protocol":"TCP"}],
             "volumeMounts":[{"name":"v","mountPath":"/data"}]},
            {"name":"sidecar","image":"envoy:1"}],
          "tolerations":[{"key":"k1"}],
          "volumes":[{"name":"v","emptyDir":{}}]}})");
    auto patch = j(R"({"metadata":{"labels":{"b":null,"c":"3"},"finalizers":["y"]},
        "spec":{"containers":[
            {"name":"main","image":"busybox:2","env":[{"name":"B","value":"22"},{"name":"C","value":"3"}],
             "ports":[{"containerPort":80,"name":"http"}],
             "volumeMounts":[{"mountPath":"/data","readOnly":true}]},
            {"name":"sidecar","$patch":"delete"},
            {"name":"extra","image":"alpine"}],
          "$setElementOrder/containers":[{"name":"main"},{"name":"extra"}],
          "$retainKeys":["containers","tolerations","volumes"],
          "tolerations":[{"key":"k2"}]}})");
    auto out = proto::apply_strategic_merge_patch(pod, patch);
    ASSERT_TRUE(out) << out.error().message;
    EXPECT_JSON_EQ(*out, R"({"metadata":{"name":"p","labels":{"a":"1","c":"3"},"finalizers":["x","y"]},
        "spec":{"containers":[
            {"name":"main","image":"busybox:2",
             "env":[{"name":"A","value":"1"},{"name":"B","value":"22"},{"name":"C","value":"3"}],
             "ports":[{"containerPort":80,"protocol":"TCP","name":"http"}],
             "volumeMounts":[{"name":"v","mountPath":"/data","readOnly":true}]},
            {"name":"extra","image":"alpine"}],
          "tolerations":[{"key":"k2"}],
          "volumes":[{"name":"v","emptyDir":{}}]}})");
}

TEST(StrategicMergePatch, Directives) {
    const std::vector<Case> cases = {
        // $patch: replace on a map replaces it wholesale.
        {R"({"spec":{"a":1,"b":2}})", R"({"spec":{"$patch":"replace","c":3}})", R"({"spec":{"c":3}})"},
        // $patch: delete on a map removes it.
        {R"({"spec":{"a":1},"x":1})", R"({"spec":{"$patch":"delete"}})", R"({"x":1})"},
        // {"$patch":"replace"} in a keyed list replaces the list.
        {R"({"spec":{"containers":[{"name":"a"},{"name":"b"}]}})",
         R"({"spec":{"containers":[{"name":"c"},{"$patch":"replace"}]}})", R"({"spec":{"containers":[{"name":"c"}]}})"},
        // Conditions merge by type.
        {R"({"status":{"conditions":[{"type":"Ready","status":"False"},{"type":"X","status":"True"}]}})",
         R"({"status":{"conditions":[{"type":"Ready","status":"True"}]}})",
         R"({"status":{"conditions":[{"type":"Ready","status":"True"},{"type":"X","status":"True"}]}})"},
        // Service ports merge by port.
        {R"({"spec":{"ports":[{"port":80,"targetPort":8080}]}})", R"({"spec":{"ports":[{"port":80,"name":"h"}]}})",
         R"({"spec":{"ports":[{"port":80,"targetPort":8080,"name":"h"}]}})"},
        // Primitive list deletion.
        {R"({"metadata":{"finalizers":["a","b","c"]}})",
         R"({"metadata":{"$deleteFromPrimitiveList/finalizers":["b"]}})", R"({"metadata":{"finalizers":["a","c"]}})"},
        // Unknown lists replace; nulls inside new maps vanish.
        {R"({"spec":{"args":["a","b"]}})", R"({"spec":{"args":["c"],"new":{"k":null,"v":1}}})",
         R"({"spec":{"args":["c"],"new":{"v":1}}})"},
        // New keyed list where none existed.
        {R"({"spec":{}})", R"({"spec":{"volumes":[{"name":"v","emptyDir":{}}]}})",
         R"({"spec":{"volumes":[{"name":"v","emptyDir":{}}]}})"},
    };
    for (const auto& c : cases) {
        auto out = proto::apply_strategic_merge_patch(j(c.target), j(c.patch));
        ASSERT_TRUE(out) << c.patch << ": " << out.error().message;
        EXPECT_JSON_EQ(*out, c.expected);
    }
}

TEST(StrategicMergePatch, Errors) {
    const std::vector<std::pair<const char*, const char*>> cases = {
        {R"({"spec":{"containers":[{"name":"a"}]}})", R"({"spec":{"containers":[{"image":"x"}]}})"},
        {R"({"spec":{"containers":[{"name":"a"}]}})", R"({"spec":{"containers":["a"]}})"},
        {R"({"spec":{}})", R"({"spec":{"$patch":"explode"}})"},
        {R"({"spec":{}})", R"([1,2])"},
    };
    for (auto& [target, patch] : cases) {
        auto out = proto::apply_strategic_merge_patch(j(target), j(patch));
        ASSERT_FALSE(out) << patch;
        EXPECT_TRUE(out.error().is(errc::bad_request)) << patch;
    }
}

namespace {

// Each copy can double the document: the growth copies add is bounded, and so is the number of
// operations, both as request_entity_too_large (413 from the API server).
TEST(JsonPatch, CopiesCannotDoubleTheDocumentWithoutBound) {
    json::array ops;
    ops.push_back(json::object{{"op", "add"}, {"path", "/a"}, {"value", json::array{std::string(1000, 'x')}}});
    // Appending /a to itself doubles it: 40 times would be a terabyte.
    for (int i = 0; i < 40; ++i) ops.push_back(json::object{{"op", "copy"}, {"from", "/a"}, {"path", "/a/-"}});
    auto r = proto::apply_json_patch(j(R"({})"), ops);
    ASSERT_FALSE(r);
    EXPECT_TRUE(r.error().is(errc::request_entity_too_large)) << r.error().message;
    json::array few{json::object{{"op", "copy"}, {"from", "/a"}, {"path", "/b"}}};
    auto fine = proto::apply_json_patch(j(R"({"a":[1,2]})"), few);
    ASSERT_TRUE(fine);
    EXPECT_EQ(*fine, j(R"({"a":[1,2],"b":[1,2]})"));
    json::array too_many;
    for (std::size_t i = 0; i <= proto::max_json_patch_operations; ++i)
        too_many.push_back(json::object{{"op", "test"}, {"path", ""}, {"value", json::object{}}});
    auto counted = proto::apply_json_patch(j(R"({})"), too_many);
    ASSERT_FALSE(counted);
    EXPECT_TRUE(counted.error().is(errc::request_entity_too_large));
}

}  // namespace
