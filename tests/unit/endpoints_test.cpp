// EndpointSlices without a cluster: the slice the local controller keeps for a Service, and the
// endpoint a tunnel picks from slices (the same rules a real cluster's slices follow).
#include "connection/service_endpoints.hpp"
#include "local/endpoints_core.hpp"

#include <boost/json/parse.hpp>

#include <gtest/gtest.h>

namespace {
namespace json = boost::json;
using namespace kubesandbox;

json::object parse(const char* text) { return json::parse(text).as_object(); }

const char* service_text = R"({"metadata":{"name":"router","namespace":"ns","uid":"u1"},
  "spec":{"selector":{"app":"router"},"ports":[{"name":"http","port":8080,"targetPort":"web"},
                                               {"name":"admin","port":9000,"targetPort":9001}]}})";

json::object pod(const char* name, const char* ip, bool ready, const char* app = "router", bool deleting = false) {
    json::object p = parse(R"({"metadata":{"namespace":"ns","labels":{}},"spec":{"containers":[
        {"name":"c","ports":[{"name":"web","containerPort":8888}]}]},"status":{"phase":"Running"}})");
    p["metadata"].as_object()["name"] = name;
    p["metadata"].as_object()["uid"] = std::string("uid-") + name;
    p["metadata"].as_object()["labels"].as_object()["app"] = app;
    if (deleting) p["metadata"].as_object()["deletionTimestamp"] = "2026-11-25T00:00:00Z";
    if (*ip) p["status"].as_object()["podIP"] = ip;
    p["status"].as_object()["conditions"] =
        json::array{json::object{{"type", "Ready"}, {"status", ready ? "True" : "False"}}};
    return p;
}

TEST(EndpointSlices, TheLocalControllerSelectsReadyPodsAndResolvesNamedPorts) {
    auto service = parse(service_text);
    auto a = pod("b-pod", "10.0.0.2", true), b = pod("a-pod", "10.0.0.1", false),
         other = pod("x", "10.0.0.3", true, "db"), no_ip = pod("y", "", true),
         going = pod("c-pod", "10.0.0.4", true, "router", true);
    auto slice = local::endpoints::endpoint_slice_for(service, {&a, &b, &other, &no_ip, &going});
    ASSERT_TRUE(slice);
    EXPECT_EQ((*slice)["metadata"].at("name"), "router-local");
    EXPECT_EQ((*slice)["metadata"].at("labels").at("kubernetes.io/service-name"), "router");
    const auto& endpoints = (*slice)["endpoints"].as_array();
    ASSERT_EQ(endpoints.size(), 3u);  // sorted by pod name; the other app and the pod without an IP left out
    EXPECT_EQ(endpoints[0].at("targetRef").at("name"), "a-pod");
    EXPECT_EQ(endpoints[0].at("conditions").at("ready"), false);
    EXPECT_EQ(endpoints[1].at("addresses").at(0), "10.0.0.2");
    EXPECT_EQ(endpoints[1].at("conditions").at("ready"), true);
    EXPECT_EQ(endpoints[2].at("conditions").at("terminating"), true);
    EXPECT_EQ(endpoints[2].at("conditions").at("ready"), false);
    EXPECT_EQ((*slice)["ports"], json::parse(R"([{"port":8888,"protocol":"TCP","name":"http"},
                                                  {"port":9001,"protocol":"TCP","name":"admin"}])"));
    auto headless = parse(R"({"metadata":{"name":"ext","namespace":"ns"},"spec":{"ports":[{"port":80}]}})");
    EXPECT_FALSE(local::endpoints::endpoint_slice_for(headless, {&a}));

    // A tunnel to the service's port 8080 picks the ready pods, on the resolved port.
    json::array slices{*slice};
    auto picked = ready_endpoints(service, slices, 8080);
    ASSERT_TRUE(picked) << picked.error().describe();
    ASSERT_EQ(picked->size(), 1u);
    EXPECT_EQ((*picked)[0].pod, "b-pod");
    EXPECT_EQ((*picked)[0].port, 8888);
    auto admin = ready_endpoints(service, slices, 9000);
    EXPECT_TRUE(admin && (*admin)[0].port == 9001);
    auto wrong_port = ready_endpoints(service, slices, 1234);
    EXPECT_TRUE(!wrong_port && wrong_port.error().code == errc::invalid_config);
    auto none = ready_endpoints(service, json::array{}, 8080);
    EXPECT_TRUE(!none && none.error().code == errc::service_unavailable);
}

TEST(EndpointSlices, ChangesAreNoticedAndReadyUnsetCountsAsReady) {
    auto service = parse(service_text);
    auto a = pod("a", "10.0.0.1", true);
    auto before = local::endpoints::endpoint_slice_for(service, {&a});
    a["status"].as_object()["conditions"] = json::array{json::object{{"type", "Ready"}, {"status", "False"}}};
    auto after = local::endpoints::endpoint_slice_for(service, {&a});
    EXPECT_FALSE(local::endpoints::same_endpoints(*before, *after));
    EXPECT_TRUE(local::endpoints::same_endpoints(*after, *local::endpoints::endpoint_slice_for(service, {&a})));
    auto unknown = json::array{parse(R"({"ports":[{"name":"http","port":8888}],
        "endpoints":[{"addresses":["10.0.0.9"],"targetRef":{"kind":"Pod","name":"z"}}]})")};
    auto picked = ready_endpoints(service, unknown, 8080);
    EXPECT_TRUE(picked && (*picked)[0].pod == "z");
}

}  // namespace
