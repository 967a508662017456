// The local agent-sandbox controller's rules, without a cluster.
#include "local/agent_controller_core.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <gtest/gtest.h>

namespace ag = kubesandbox::local::agents;
namespace json = boost::json;

namespace {

json::object obj(std::string_view text) { return json::parse(text).as_object(); }

const char* pool_json = R"({"apiVersion":"extensions.agents.x-k8s.io/v1beta1","kind":"SandboxWarmPool",
  "metadata":{"name":"pool","namespace":"ns","uid":"pool-uid"},
  "spec":{"replicas":2,"sandboxTemplateRef":{"name":"tmpl"}}})";
const char* template_json = R"({"apiVersion":"extensions.agents.x-k8s.io/v1beta1","kind":"SandboxTemplate",
  "metadata":{"name":"tmpl","namespace":"ns"},
  "spec":{"podTemplate":{"metadata":{"labels":{"app":"x"}},"spec":{"containers":[{"name":"a","image":"busybox-runtime"},{"name":"b","image":"busybox"}]}},
          "envVarsInjectionPolicy":"Allowed"}})";

}  // namespace

TEST(AgentController, NameHashIsFnv1a32) {
    EXPECT_EQ(ag::name_hash(""), "811c9dc5");
    EXPECT_EQ(ag::name_hash("a"), "e40c292c");
    EXPECT_EQ(ag::name_hash("foobar"), "bf9cf968");
}

TEST(AgentController, WarmSandboxesComeFromThePoolsTemplate) {
    auto sb = ag::warm_sandbox(obj(pool_json), obj(template_json));
    EXPECT_EQ(sb.at("metadata").at("generateName"), "pool-");
    EXPECT_EQ(sb.at("metadata").at("labels").at(ag::warm_pool_label).as_string(), ag::name_hash("pool"));
    EXPECT_TRUE(ag::controlled_by(sb, "pool-uid"));
    EXPECT_EQ(sb.at("spec").at("podTemplate").at("spec").at("automountServiceAccountToken"), false);
}

TEST(AgentController, ClaimFailuresNameTheTerminalReason) {
    auto pool = obj(pool_json);
    auto tmpl = obj(template_json);
    auto claim = obj(R"({"metadata":{"name":"c","namespace":"ns","uid":"cu"},"spec":{"warmPoolRef":{"name":"pool"}}})");
    EXPECT_FALSE(ag::claim_failure(claim, &pool, &tmpl));
    EXPECT_EQ(ag::claim_failure(claim, nullptr, nullptr)->reason, "WarmPoolNotFound");
    EXPECT_EQ(ag::claim_failure(claim, &pool, nullptr)->reason, "TemplateNotFound");
    auto strict = tmpl;
    strict["spec"].as_object().erase("envVarsInjectionPolicy");
    auto with_env = obj(
        R"({"metadata":{"name":"c","namespace":"ns"},"spec":{"warmPoolRef":{"name":"pool"},"env":[{"name":"A","value":"1"}]}})");
    EXPECT_EQ(ag::claim_failure(with_env, &pool, &strict)->reason, "EnvVarsInjectionRejected");
    EXPECT_FALSE(ag::claim_failure(with_env, &pool, &tmpl));
    EXPECT_TRUE(ag::claim_forces_cold(with_env));
    auto bad_md = obj(
        R"({"metadata":{"name":"c"},"spec":{"warmPoolRef":{"name":"pool"},"additionalPodMetadata":{"labels":{"agents.x-k8s.io/x":"y"}}}})");
    EXPECT_EQ(ag::claim_failure(bad_md, &pool, &tmpl)->reason, "InvalidMetadata");
    auto v1alpha1 = obj(R"({"metadata":{"name":"c"},"spec":{"sandboxTemplateRef":{"name":"tmpl"},"warmpool":"none"}})");
    std::string template_name;
    EXPECT_EQ(ag::claim_pool_name(v1alpha1, template_name), "");
    EXPECT_EQ(template_name, "tmpl");
    EXPECT_TRUE(ag::claim_forces_cold(v1alpha1));
}

TEST(AgentController, ColdSandboxCarriesTheClaimsEnvAndMetadata) {
    auto claim = obj(R"({"apiVersion":"extensions.agents.x-k8s.io/v1beta1","kind":"SandboxClaim",
      "metadata":{"name":"c","namespace":"ns","uid":"cu"},
      "spec":{"warmPoolRef":{"name":"pool"},"env":[{"name":"A","value":"1"},{"name":"B","value":"2","containerName":"b"}],
              "additionalPodMetadata":{"labels":{"team":"x"}}}})");
    auto sb = ag::cold_sandbox(claim, obj(template_json));
    EXPECT_EQ(sb.at("metadata").at("name"), "c");
    EXPECT_EQ(sb.at("metadata").at("labels").at(ag::launch_type_label), "cold");
    EXPECT_TRUE(ag::controlled_by(sb, "cu"));
    const auto& pt = sb.at("spec").at("podTemplate");
    EXPECT_EQ(pt.at("metadata").at("labels").at("team"), "x");
    EXPECT_EQ(pt.at("metadata").at("labels").at("app"), "x");
    const auto& containers = pt.at("spec").at("containers").as_array();
    EXPECT_EQ(json::serialize(containers[0].at("env")), R"([{"name":"A","value":"1"}])");
    EXPECT_EQ(json::serialize(containers[1].at("env")), R"([{"name":"B","value":"2"}])");
    auto pod = ag::pod_for_sandbox(sb);
    EXPECT_EQ(pod.at("metadata").at("name"), "c");
    EXPECT_EQ(pod.at("metadata").at("labels").at(ag::name_hash_label).as_string(), ag::name_hash("c"));
}

TEST(AgentController, AdoptionHandsTheSandboxToTheClaim) {
    auto sb = obj(
        R"({"metadata":{"name":"pool-abcde","resourceVersion":"7","labels":{"agents.x-k8s.io/warm-pool-sandbox":"h"}}})");
    auto claim = obj(
        R"({"apiVersion":"extensions.agents.x-k8s.io/v1beta1","kind":"SandboxClaim","metadata":{"name":"c","uid":"cu"},
      "spec":{"additionalPodMetadata":{"annotations":{"owner":"t"}}}})");
    auto patch = ag::adoption_patch(sb, claim);
    const auto& md = patch.at("metadata");
    EXPECT_TRUE(md.at("labels").at(ag::warm_pool_label).is_null());
    EXPECT_EQ(md.at("labels").at(ag::launch_type_label), "warm");
    EXPECT_EQ(md.at("annotations").at(ag::pod_name_annotation), "pool-abcde");
    EXPECT_EQ(md.at("resourceVersion"), "7");
    EXPECT_EQ(md.at("ownerReferences").as_array()[0].at("uid"), "cu");
    EXPECT_EQ(patch.at("spec").at("podTemplate").at("metadata").at("annotations").at("owner"), "t");
}

TEST(AgentController, StatusFollowsThePodAndForwardsToTheClaim) {
    auto sb = obj(R"({"metadata":{"name":"s","generation":3}})");
    auto pending = ag::sandbox_status(sb, nullptr, false, "2026-01-01T00:00:00Z");
    EXPECT_EQ(pending.at("conditions").as_array()[0].at("message"), "Pod does not exist");
    auto pod = obj(
        R"({"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}],"podIPs":[{"ip":"10.0.0.9"}]}})");
    auto ready = ag::sandbox_status(sb, &pod, false, "2026-01-01T00:00:05Z");
    const auto& cond = ready.at("conditions").as_array()[0];
    EXPECT_EQ(cond.at("status"), "True");
    EXPECT_EQ(cond.at("reason"), "DependenciesReady");
    EXPECT_EQ(cond.at("observedGeneration"), 3);
    EXPECT_EQ(json::serialize(ready.at("podIPs")), R"(["10.0.0.9"])");
    sb["status"] = ready;
    EXPECT_TRUE(ag::sandbox_ready(sb));
    // The transition time stays while the status does not change.
    auto again = ag::sandbox_status(sb, &pod, false, "2026-01-01T00:09:00Z");
    EXPECT_EQ(again.at("conditions").as_array()[0].at("lastTransitionTime"), "2026-01-01T00:00:05Z");
    auto expired = ag::sandbox_status(sb, &pod, true, "2026-01-01T00:10:00Z");
    EXPECT_EQ(expired.at("conditions").as_array()[0].at("reason"), "SandboxExpired");

    auto claim = obj(R"({"metadata":{"name":"c","generation":1}})");
    auto forwarded = ag::claim_status(claim, &sb, "", "", "2026-01-01T00:00:06Z");
    EXPECT_EQ(forwarded.at("sandbox").at("name"), "s");
    EXPECT_EQ(forwarded.at("conditions").as_array()[0].at("reason"), "DependenciesReady");
    auto failed = ag::claim_status(claim, nullptr, "WarmPoolNotFound", "no pool", "2026-01-01T00:00:06Z");
    EXPECT_FALSE(failed.contains("sandbox"));
    EXPECT_EQ(failed.at("conditions").as_array()[0].at("status"), "False");
}

TEST(AgentController, ShutdownTimes) {
    auto claim = obj(R"({"spec":{"lifecycle":{"shutdownTime":"2026-08-22T11:00:00Z"}}})");
    EXPECT_EQ(ag::shutdown_time(claim, true), 1787396400);
    EXPECT_FALSE(ag::shutdown_time(claim, false));
    EXPECT_FALSE(ag::shutdown_time(obj(R"({"spec":{"shutdownTime":"soon"}})"), false));
}

TEST(AgentController, ASandboxThatWantsAServiceIsReadyWithItAndTheClaimCarriesItsName) {
    auto sb = obj(R"({"apiVersion":"agents.x-k8s.io/v1beta1","kind":"Sandbox",
        "metadata":{"name":"s1","namespace":"team","uid":"su","generation":1},
        "spec":{"service":true,"podTemplate":{"spec":{"containers":[
            {"name":"rt","ports":[{"containerPort":8888},{"name":"grpc","containerPort":9090,"protocol":"TCP"}]}]}}}})");
    EXPECT_EQ(ag::sandbox_wants_service(sb), true);
    EXPECT_EQ(ag::sandbox_wants_service(obj(R"({"spec":{}})")), std::nullopt);
    EXPECT_EQ(ag::sandbox_wants_service(obj(R"({"spec":{"service":false}})")), false);
    auto service = ag::service_for_sandbox(sb);
    EXPECT_EQ(service.at("metadata").at("name"), "s1");
    EXPECT_EQ(service.at("metadata").at("namespace"), "team");
    EXPECT_EQ(service.at("metadata").at("ownerReferences").as_array()[0].at("uid"), "su");
    EXPECT_EQ(service.at("spec").at("clusterIP"), "None");
    EXPECT_EQ(service.at("spec").at("selector").at(ag::name_hash_label).as_string(), ag::name_hash("s1"));
    EXPECT_EQ(json::serialize(service.at("spec").at("ports")),
              R"([{"name":"p-8888-tcp","port":8888,"targetPort":8888,"protocol":"TCP"},)"
              R"({"name":"grpc","port":9090,"targetPort":9090,"protocol":"TCP"}])");
    auto pod = obj(
        R"({"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}],"podIPs":[{"ip":"10.0.0.9"}]}})");
    // Not Ready until the Service exists.
    auto waiting = ag::sandbox_status(sb, &pod, false, "2026-01-01T00:00:05Z");
    EXPECT_EQ(waiting.at("conditions").as_array()[0].at("status"), "False");
    EXPECT_EQ(waiting.at("conditions").as_array()[0].at("message"), "Pod is Ready; Service does not exist yet");
    EXPECT_FALSE(waiting.contains("serviceFQDN"));
    auto ready = ag::sandbox_status(sb, &pod, false, "2026-01-01T00:00:06Z", &service);
    EXPECT_EQ(ready.at("conditions").as_array()[0].at("message"), "Pod is Ready; Service Exists");
    EXPECT_EQ(ready.at("service"), "s1");
    EXPECT_EQ(ready.at("serviceFQDN"), "s1.team.svc.cluster.local");
    sb["status"] = ready;
    auto claim = obj(R"({"metadata":{"name":"c","generation":1}})");
    auto forwarded = ag::claim_status(claim, &sb, "", "", "2026-01-01T00:00:07Z");
    EXPECT_EQ(forwarded.at("sandbox").at("serviceFQDN"), "s1.team.svc.cluster.local");
}
