// The agent-sandbox provider's claims, without a cluster.
#include "providers/agent_sandbox/claims.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <gtest/gtest.h>

namespace as = kubesandbox::agent_sandbox;
namespace json = boost::json;
using Kind = as::ClaimState::Kind;

TEST(AgentClaims, BuildsTheV1beta1ClaimWithLifecycleAndPodMetadata) {
    kubesandbox::AgentSandboxProviderOptions o;
    o.warm_pool = "pool";
    o.pod_labels = {{"team", "a"}};
    o.env = {{"A", "1"}};
    auto now = std::chrono::system_clock::time_point(std::chrono::seconds(1787392800));  // 2026-08-22T10:00:00Z
    auto c = as::build_claim(o, "ksb-x", json::object{{"k", "v"}}, json::object{{"n", "m"}}, 3600, now);
    EXPECT_EQ(c.at("apiVersion"), "extensions.agents.x-k8s.io/v1beta1");
    EXPECT_EQ(c.at("metadata").at("labels").at("k"), "v");
    EXPECT_EQ(c.at("metadata").at("labels").at("agents.x-k8s.io/created-by"), "kubesandbox");
    EXPECT_EQ(json::serialize(c.at("spec").at("warmPoolRef")), R"({"name":"pool"})");
    EXPECT_EQ(c.at("spec").at("lifecycle").at("shutdownTime"), "2026-08-22T11:00:00Z");
    EXPECT_EQ(c.at("spec").at("lifecycle").at("shutdownPolicy"), "Delete");
    EXPECT_EQ(c.at("spec").at("additionalPodMetadata").at("labels").at("team"), "a");
    EXPECT_EQ(json::serialize(c.at("spec").at("env")), R"([{"name":"A","value":"1"}])");
    // A TTL is never cut short by the timestamp's whole seconds: 1 s from 10:00:00.9 ends at 10:00:02.
    auto late = as::build_claim(o, "ksb-x", {}, {}, 1, now + std::chrono::milliseconds(900));
    EXPECT_EQ(late.at("spec").at("lifecycle").at("shutdownTime"), "2026-08-22T10:00:02Z");
    o.template_name = "tmpl";
    o.claim_api_version = "v1alpha1";
    auto old = as::build_claim(o, "ksb-x", {}, {}, std::nullopt, now);
    EXPECT_EQ(old.at("apiVersion"), "extensions.agents.x-k8s.io/v1alpha1");
    EXPECT_EQ(json::serialize(old.at("spec").at("sandboxTemplateRef")), R"({"name":"tmpl"})");
    EXPECT_FALSE(old.at("spec").as_object().contains("lifecycle"));
}

TEST(AgentClaims, ReadsReadinessAndTerminalReasons) {
    auto state = [](std::string_view text) { return as::evaluate_claim(json::parse(text).as_object()); };
    auto s = state(R"({"metadata":{},"status":{"sandbox":{"name":"pool-x","podIPs":["fd00::1","10.0.0.2"]},
        "conditions":[{"type":"Ready","status":"True","reason":"DependenciesReady"}]}})");
    EXPECT_EQ(s.kind, Kind::ready);
    EXPECT_EQ(s.sandbox_name, "pool-x");
    EXPECT_EQ(s.pod_ip, "10.0.0.2");  // IPv4 preferred
    s = state(R"({"metadata":{},"status":{"sandbox":{"Name":"old"},"conditions":[{"type":"Ready","status":"True"}]}})");
    EXPECT_EQ(s.kind, Kind::ready);
    EXPECT_EQ(s.sandbox_name, "old");  // controllers before PR #440
    s = state(
        R"({"metadata":{},"status":{"sandbox":{"name":"x"},"conditions":[{"type":"Ready","status":"False","reason":"SandboxNotReady"}]}})");
    EXPECT_EQ(s.kind, Kind::pending);
    s = state(R"({"metadata":{},"status":{"conditions":[{"type":"Ready","status":"True"}]}})");
    EXPECT_EQ(s.kind, Kind::pending);  // ready but no sandbox name yet
    for (const char* reason : {"InvalidMetadata", "EnvVarsInjectionRejected", "VolumeClaimTemplatesError",
                               "ClaimExpired", "SandboxExpired", "TemplateNotFound", "WarmPoolNotFound", "PodFailed"}) {
        std::string text =
            std::string(R"({"metadata":{},"status":{"conditions":[{"type":"Ready","status":"False","reason":")") +
            reason + R"("}]}})";
        EXPECT_EQ(state(text).kind, Kind::failed) << reason;
    }
    s = state(R"({"metadata":{"deletionTimestamp":"2026-01-01T00:00:00Z"}})");
    EXPECT_EQ(s.kind, Kind::failed);
    EXPECT_EQ(s.reason, "ClaimDeleted");
    EXPECT_EQ(state(R"({"metadata":{}})").kind, Kind::pending);
}

TEST(AgentClaims, InfoUsesOurLabelsAndTheBoundSandbox) {
    auto claim = json::parse(R"({"metadata":{"name":"ksb-t1","namespace":"default","uid":"u1",
        "labels":{"kubesandbox.io/managed-by":"kubesandbox","kubesandbox.io/sandbox-id":"t1","kubesandbox.io/team":"a"},
        "annotations":{"kubesandbox.io/created-at":"2026-01-01T00:00:00Z"}},
      "status":{"sandbox":{"name":"pool-q"},"conditions":[{"type":"Ready","status":"False","reason":"ClaimExpired"}]}})")
                     .as_object();
    auto info = as::claim_info(claim);
    EXPECT_EQ(info.id, "t1");
    EXPECT_EQ(info.pod_name, "pool-q");
    EXPECT_EQ(info.status, "terminated");
    EXPECT_EQ(info.instance, "u1");
    EXPECT_EQ(info.labels.at("team"), "a");
}

TEST(AgentClaims, InClusterAddressPrefersTheServiceThenThePodIpThenTheSandboxName) {
    auto state = [](std::string_view text) { return as::evaluate_claim(json::parse(text).as_object()); };
    auto s = state(R"({"metadata":{},"status":{"sandbox":{"name":"pool-x","podIPs":["10.0.0.2"],
        "serviceFQDN":"pool-x.team.svc.cluster.local"},"conditions":[{"type":"Ready","status":"True"}]}})");
    EXPECT_EQ(s.service_fqdn, "pool-x.team.svc.cluster.local");
    EXPECT_EQ(as::in_cluster_url(s, "team", 8888), "http://pool-x.team.svc.cluster.local:8888");
    s.service_fqdn.clear();
    EXPECT_EQ(as::in_cluster_url(s, "team", 8888), "http://10.0.0.2:8888");
    s.pod_ip = "fd00::7";
    EXPECT_EQ(as::in_cluster_url(s, "team", 9000), "http://[fd00::7]:9000");
    s.pod_ip.clear();
    EXPECT_EQ(as::in_cluster_url(s, "team", 8888), "http://pool-x.team.svc.cluster.local:8888");
    // What a status says is not trusted blindly: a value that is not a plain host is skipped.
    s.service_fqdn = "evil.example/x?";
    s.pod_ip = "10.0.0.3@attacker";
    EXPECT_EQ(as::in_cluster_url(s, "team", 8888), "http://pool-x.team.svc.cluster.local:8888");
}
