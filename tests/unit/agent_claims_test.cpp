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
    as::ClaimShape pool{"v1beta1", "pool", "", false};
    auto c = as::build_claim(o, pool, "ksb-x", json::object{{"k", "v"}}, json::object{{"n", "m"}}, 3600, now);
    EXPECT_EQ(c.at("apiVersion"), "extensions.agents.x-k8s.io/v1beta1");
    EXPECT_EQ(c.at("metadata").at("labels").at("k"), "v");
    EXPECT_EQ(c.at("metadata").at("labels").at("agents.x-k8s.io/created-by"), "kubesandbox");
    EXPECT_EQ(json::serialize(c.at("spec").at("warmPoolRef")), R"({"name":"pool"})");
    EXPECT_EQ(c.at("spec").at("lifecycle").at("shutdownTime"), "2026-08-22T11:00:00Z");
    EXPECT_EQ(c.at("spec").at("lifecycle").at("shutdownPolicy"), "Delete");
    EXPECT_EQ(c.at("spec").at("additionalPodMetadata").at("labels").at("team"), "a");
    EXPECT_EQ(json::serialize(c.at("spec").at("env")), R"([{"name":"A","value":"1"}])");
    // A TTL is never cut short by the timestamp's whole seconds: 1 s from 10:00:00.9 ends at 10:00:02.
    auto late = as::build_claim(o, pool, "ksb-x", {}, {}, 1, now + std::chrono::milliseconds(900));
    EXPECT_EQ(late.at("spec").at("lifecycle").at("shutdownTime"), "2026-08-22T10:00:02Z");
    auto old = as::build_claim(o, as::ClaimShape{"v1alpha1", "", "tmpl", false}, "ksb-x", {}, {}, std::nullopt, now);
    EXPECT_EQ(old.at("apiVersion"), "extensions.agents.x-k8s.io/v1alpha1");
    EXPECT_EQ(json::serialize(old.at("spec").at("sandboxTemplateRef")), R"({"name":"tmpl"})");
    EXPECT_EQ(old.at("spec").at("warmpool"), "default");
    EXPECT_FALSE(old.at("spec").as_object().contains("warmPoolRef"));
    EXPECT_FALSE(old.at("spec").as_object().contains("lifecycle"));
    auto cold = as::build_claim(o, as::ClaimShape{"v1alpha1", "", "tmpl", true}, "ksb-x", {}, {}, std::nullopt, now);
    EXPECT_EQ(cold.at("spec").at("warmpool"), "none");
    auto named = as::build_claim(o, as::ClaimShape{"v1alpha1", "p", "tmpl", false}, "ksb-x", {}, {}, std::nullopt, now);
    EXPECT_EQ(named.at("spec").at("warmpool"), "p");
}

// Which claim a cluster takes: v1beta1 names a pool, v1alpha1 a template (agent-sandbox.md §0).
TEST(AgentClaims, ChoosesTheClaimShapeFromWhatTheClusterServes) {
    kubesandbox::AgentSandboxProviderOptions o;
    o.warm_pool = "python-runtime";
    auto group = json::parse(R"({"kind":"APIGroup","name":"extensions.agents.x-k8s.io","versions":[
        {"groupVersion":"extensions.agents.x-k8s.io/v1beta1","version":"v1beta1"},
        {"groupVersion":"extensions.agents.x-k8s.io/v1alpha1","version":"v1alpha1"}, 7]})");
    const std::vector<std::string> both = as::served_versions(group.as_object());
    EXPECT_EQ(both, (std::vector<std::string>{"v1beta1", "v1alpha1"}));
    const std::vector<std::string> beta{"v1beta1"}, alpha{"v1alpha1"}, future{"v2"};
    auto version = [&](const std::vector<std::string>& served) {
        auto v = as::choose_claim_version(o, served);
        return v ? *v : "error: " + v.error().describe();
    };
    EXPECT_EQ(version(both), "v1beta1");
    EXPECT_EQ(version(beta), "v1beta1");
    EXPECT_EQ(version(alpha), "v1alpha1");  // controllers before 0.5
    EXPECT_NE(version({}).find("is agent-sandbox installed"), std::string::npos);
    EXPECT_NE(version(future).find("serves v2"), std::string::npos);
    o.template_name = "tmpl";
    EXPECT_EQ(version(both), "v1beta1");    // 0.5: through a pool of that template, not a conversion
    EXPECT_EQ(version(alpha), "v1alpha1");  // before 0.5: the template by name
    o.claim_api_version = "v1beta1";
    EXPECT_EQ(version(alpha), "v1beta1");  // the option wins

    // The pools of a namespace: which serves the template, which template a pool serves.
    auto pools = json::parse(R"([
        {"metadata":{"name":"z-pool"},"spec":{"sandboxTemplateRef":{"name":"tmpl"}}},
        {"metadata":{"name":"a-pool"},"spec":{"sandboxTemplateRef":{"name":"tmpl"}}},
        {"metadata":{"name":"python-runtime"},"spec":{"sandboxTemplateRef":{"name":"python"}}},
        {"metadata":{"name":"broken"}}, "junk"])")
                     .as_array();
    auto shape = [&](const kubesandbox::AgentSandboxProviderOptions& opts, const std::string& v) {
        EXPECT_EQ(as::shape_needs_pools(opts, v), (v == "v1alpha1") == opts.template_name.empty());
        auto s = as::complete_claim_shape(opts, v, pools);
        if (!s) return "error: " + s.error().describe();
        return s->api_version + " pool=" + s->warm_pool + " template=" + s->template_name + (s->cold ? " cold" : "");
    };
    EXPECT_EQ(shape(o, "v1beta1"), "v1beta1 pool=a-pool template=");  // the first by name
    o.warm_pool = "z-pool";
    EXPECT_EQ(shape(o, "v1beta1"), "v1beta1 pool=z-pool template=");  // the one asked for
    o.template_name = "nobody-serves-this";
    EXPECT_NE(shape(o, "v1beta1").find("no SandboxWarmPool in default serves template nobody-serves-this"),
              std::string::npos);
    EXPECT_EQ(shape(o, "v1alpha1"), "v1alpha1 pool= template=nobody-serves-this");
    o.warm_pool.clear();
    EXPECT_EQ(shape(o, "v1alpha1"), "v1alpha1 pool= template=nobody-serves-this cold");
    o.template_name.clear();
    EXPECT_NE(shape(o, "v1beta1").find("set a warm pool"), std::string::npos);
    EXPECT_NE(shape(o, "v1alpha1").find("set a template or a warm pool"), std::string::npos);
    o.warm_pool = "python-runtime";
    EXPECT_EQ(shape(o, "v1beta1"), "v1beta1 pool=python-runtime template=");
    EXPECT_EQ(shape(o, "v1alpha1"), "v1alpha1 pool=python-runtime template=python");
    o.warm_pool = "broken";
    EXPECT_NE(shape(o, "v1alpha1").find("no SandboxWarmPool broken with a template"), std::string::npos);
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
