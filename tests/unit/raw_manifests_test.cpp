// The objects raw mode creates, checked field by field without a cluster.
#include "providers/raw/manifests.hpp"

#include <gtest/gtest.h>
#include <boost/json/serialize.hpp>

namespace {
using namespace kubesandbox;
namespace json = boost::json;

TEST(RawManifests, PodIsHardened) {
    RawProviderOptions o;
    o.read_only_root_filesystem = true;
    o.env["A"] = "1";
    json::object p = raw::build_pod(o, "ksb-a", json::object{{"l", "v"}}, json::object{{"a", "w"}});
    const auto& spec = p.at("spec").as_object();
    EXPECT_EQ(spec.at("restartPolicy"), "Never");
    EXPECT_EQ(spec.at("automountServiceAccountToken"), false);
    EXPECT_EQ(spec.at("enableServiceLinks"), false);
    const auto& c = spec.at("containers").as_array().at(0).as_object();
    EXPECT_EQ(c.at("name"), "sandbox");
    const auto& sc = c.at("securityContext").as_object();
    EXPECT_EQ(sc.at("allowPrivilegeEscalation"), false);
    EXPECT_EQ(sc.at("runAsNonRoot"), true);
    EXPECT_EQ(sc.at("readOnlyRootFilesystem"), true);
    EXPECT_EQ(sc.at("capabilities").at("drop").as_array().at(0), "ALL");
    EXPECT_EQ(sc.at("seccompProfile").at("type"), "RuntimeDefault");
    // Workdir and /tmp are writable emptyDirs with a read-only root.
    std::string mounts = json::serialize(c.at("volumeMounts"));
    EXPECT_NE(mounts.find("\"/workspace\""), std::string::npos) << mounts;
    EXPECT_NE(mounts.find("\"/tmp\""), std::string::npos) << mounts;
    EXPECT_EQ(p.at("metadata").at("labels").at("l"), "v");
}

TEST(RawManifests, OverridesMergeAndUserMountsWin) {
    RawProviderOptions o;
    o.pod_template_overrides["hostname"] = "box";
    o.pod_template_overrides["enableServiceLinks"] = nullptr;  // null deletes
    json::object m;
    m["name"] = "mine";
    m["mountPath"] = "/workspace";
    o.volume_mounts.push_back(m);
    json::object p = raw::build_pod(o, "ksb-a", {}, {});
    const auto& spec = p.at("spec").as_object();
    EXPECT_EQ(spec.at("hostname"), "box");
    EXPECT_FALSE(spec.contains("enableServiceLinks"));
    const auto& mounts = spec.at("containers").as_array().at(0).at("volumeMounts").as_array();
    ASSERT_EQ(mounts.size(), 1u);
    EXPECT_EQ(mounts.at(0).at("name"), "mine");
}

TEST(RawManifests, IdentityValidatesAndRecordsOriginals) {
    RawProviderOptions o;
    o.default_ttl_seconds = 600;
    auto idt = raw::make_identity(o, "Thread A", {{"team", "A B"}}, std::nullopt, 30, "T");
    ASSERT_TRUE(idt) << idt.error().describe();
    std::string team(idt->labels.at("kubesandbox.io/team").as_string());
    EXPECT_EQ(team.rfind("A-B-", 0), 0u) << team;  // sanitised (with a hash: no two values collide)
    EXPECT_EQ(std::string(idt->labels.at("kubesandbox.io/sandbox-id").as_string()), idt->label);
    EXPECT_EQ(idt->annotations.at("kubesandbox.io/ttl-seconds"), "600");
    EXPECT_EQ(idt->annotations.at("kubesandbox.io/ttl-idle-seconds"), "30");
    EXPECT_EQ(idt->annotations.at("kubesandbox.io/thread-id-original"), "Thread A");
    EXPECT_EQ(idt->annotations.at("kubesandbox.io/created-at"), "T");
    EXPECT_NE(idt->annotations.at("kubesandbox.io/labels-original").as_string().find("A B"), std::string::npos);

    auto reserved = raw::make_identity(o, "x", {{"managed-by", "me"}}, std::nullopt, std::nullopt, "T");
    ASSERT_FALSE(reserved);
    EXPECT_TRUE(reserved.error().is(errc::invalid_argument));
    auto invalid = raw::make_identity(o, "x", {{"bad key!", "v"}}, std::nullopt, std::nullopt, "T");
    ASSERT_FALSE(invalid);
    EXPECT_TRUE(invalid.error().is(errc::invalid_argument));
}

TEST(RawManifests, NetworkPolicyDeniesAllAndIsOwned) {
    RawProviderOptions o;
    json::object np = raw::build_network_policy(o, "ksb-a", "a", "tok", "uid-1", "T");
    EXPECT_EQ(np.at("metadata").at("name"), "ksb-a-deny-all");
    EXPECT_EQ(np.at("spec").at("podSelector").at("matchLabels").at("kubesandbox.io/sandbox-id"), "a");
    EXPECT_TRUE(np.at("spec").at("ingress").as_array().empty());
    EXPECT_TRUE(np.at("spec").at("egress").as_array().empty());
    EXPECT_EQ(np.at("metadata").at("ownerReferences").as_array().at(0).at("uid"), "uid-1");
    EXPECT_EQ(np.at("metadata").at("annotations").at("kubesandbox.io/creation-token"), "tok");
    json::object unowned = raw::build_network_policy(o, "ksb-a", "a", "tok", "", "T");
    EXPECT_FALSE(unowned.at("metadata").as_object().contains("ownerReferences"));
}

TEST(RawManifests, ConfigHashSeparatesConfigurations) {
    RawProviderOptions a;
    RawProviderOptions b;
    EXPECT_EQ(raw::config_hash(a), raw::config_hash(b));
    EXPECT_EQ(raw::config_hash(a).size(), 16u);
    b.image = "other";
    EXPECT_NE(raw::config_hash(a), raw::config_hash(b));
    RawProviderOptions c;
    c.setup_script = "true";
    EXPECT_NE(raw::config_hash(a), raw::config_hash(c));
    RawProviderOptions d;
    d.block_network = false;
    EXPECT_NE(raw::config_hash(a), raw::config_hash(d));
}

TEST(RawManifests, WarmClaimIsPreconditioned) {
    RawProviderOptions o;
    auto idt = raw::make_identity(o, "ksb-x", {}, std::nullopt, std::nullopt, "T");
    ASSERT_TRUE(idt);
    json::object patch = raw::warm_claim_patch(*idt, "42", "tok", "NOW", std::nullopt);
    EXPECT_FALSE(patch.contains("spec"));
    const auto& md = patch.at("metadata").as_object();
    EXPECT_EQ(md.at("resourceVersion"), "42");
    EXPECT_EQ(md.at("labels").at("kubesandbox.io/pool-status"), "active");
    EXPECT_EQ(md.at("annotations").at("kubesandbox.io/claim-token"), "tok");
    EXPECT_EQ(md.at("annotations").at("kubesandbox.io/last-activity"), "NOW");
}

TEST(RawManifests, AWarmPodBoundToACallerIdKeepsItsPolicysLabel) {
    RawProviderOptions o;
    auto idt = raw::make_identity(o, "Conversation 7", {{"team", "a"}}, 600, std::nullopt, "T");
    ASSERT_TRUE(idt);
    raw::Identity bound = raw::bound_identity(*idt, "ksb-bcdfghjklm");
    // The deny-all policy made with the warm pod selects its own name: that label stays.
    EXPECT_EQ(bound.labels.at("kubesandbox.io/sandbox-id"), "ksb-bcdfghjklm");
    EXPECT_EQ(bound.label, "ksb-bcdfghjklm");
    EXPECT_EQ(bound.annotations.at("kubesandbox.io/thread-id-original"), "Conversation 7");
    EXPECT_EQ(bound.labels.at("kubesandbox.io/team"), "a");
    EXPECT_EQ(bound.annotations.at("kubesandbox.io/ttl-seconds"), "600");
    // An id that is its own label still gets the annotation: it is how a bound pod names its id.
    auto plain = raw::make_identity(o, "plain", {}, std::nullopt, std::nullopt, "T");
    ASSERT_TRUE(plain);
    EXPECT_EQ(raw::bound_identity(*plain, "ksb-bcdfghjklm").annotations.at("kubesandbox.io/thread-id-original"),
              "plain");
}

TEST(RawManifests, BindingNamesItsPodAndIsOwnedByAClaimedOne) {
    RawProviderOptions o;
    json::object b = raw::build_binding(o, "ksb-conv-1", "conv-1", "ksb-bcdfghjklm", "uid-1", "tok", "T");
    EXPECT_EQ(b.at("kind"), "ConfigMap");
    const auto& md = b.at("metadata").as_object();
    EXPECT_EQ(md.at("name"), "ksb-conv-1");
    EXPECT_EQ(md.at("labels").at("kubesandbox.io/managed-by"), "kubesandbox");
    EXPECT_EQ(md.at("labels").at("kubesandbox.io/sandbox-id"), "conv-1");
    EXPECT_EQ(md.at("labels").at("kubesandbox.io/namespace-mode"), "shared");
    EXPECT_EQ(md.at("annotations").at("kubesandbox.io/creation-token"), "tok");
    EXPECT_EQ(md.at("annotations").at("kubesandbox.io/created-at"), "T");
    const auto& ref = md.at("ownerReferences").as_array().at(0).as_object();
    EXPECT_EQ(ref.at("kind"), "Pod");
    EXPECT_EQ(ref.at("name"), "ksb-bcdfghjklm");
    EXPECT_EQ(ref.at("uid"), "uid-1");
    EXPECT_EQ(raw::bound_pod(b), "ksb-bcdfghjklm");
    // Bound to the id's own (not yet created) pod: no owner.
    json::object cold = raw::build_binding(o, "ksb-conv-1", "conv-1", "ksb-conv-1", "", "tok", "T");
    EXPECT_FALSE(cold.at("metadata").as_object().contains("ownerReferences"));
    EXPECT_EQ(raw::bound_pod(cold), "ksb-conv-1");
    // A binding naming no pod, or something that is not one of our pod names, names none.
    for (json::value data : {json::value(json::object{}), json::value(json::object{{"pod", "../etc"}}),
                             json::value(json::object{{"pod", "kube-apiserver"}}),
                             json::value(json::object{{"pod", 7}}), json::value("x")}) {
        json::object bad = cold;
        bad["data"] = data;
        EXPECT_EQ(raw::bound_pod(bad), "") << json::serialize(data);
    }
}

TEST(RawManifests, InitContainersAreHardenedToo) {
    RawProviderOptions o;
    o.init_containers.push_back(json::object{
        {"name", "setup"},
        {"image", "busybox"},
        {"securityContext", json::object{{"privileged", true},
                                         {"runAsUser", 0},
                                         {"capabilities", json::object{{"add", json::array{"SYS_ADMIN"}}}}}}});
    json::object p = raw::build_pod(o, "ksb-a", {}, {});
    const auto& sc = p.at("spec").at("initContainers").as_array().at(0).at("securityContext").as_object();
    EXPECT_EQ(sc.at("privileged"), false);
    EXPECT_EQ(sc.at("allowPrivilegeEscalation"), false);
    EXPECT_EQ(sc.at("runAsUser"), 1000);
    EXPECT_EQ(json::serialize(sc.at("capabilities")), R"({"drop":["ALL"]})");
    EXPECT_EQ(raw::hardening_problem(p.at("spec").as_object()), std::nullopt);
}

TEST(RawManifests, OverridesThatWeakenTheHardeningAreNamed) {
    struct Case {
        json::object overrides;
        std::string problem;
    };
    std::vector<Case> cases;
    cases.push_back({json::object{{"hostPID", true}}, "spec.hostPID is true"});
    cases.push_back({json::object{{"automountServiceAccountToken", true}}, "automountServiceAccountToken"});
    cases.push_back(
        {json::object{{"volumes", json::array{json::object{{"name", "h"}, {"hostPath", json::object{{"path", "/"}}}}}}},
         "volume h is a hostPath"});
    // A merge patch replaces arrays whole: a containers list without a securityContext.
    cases.push_back({json::object{{"containers", json::array{json::object{{"name", "sandbox"}, {"image", "x"}}}}},
                     "spec.containers[0].securityContext is missing"});
    cases.push_back(
        {json::object{{"containers",
                       json::array{json::object{{"name", "other"}, {"image", "x"}, {"securityContext", nullptr}}}}},
         "securityContext is missing"});
    cases.push_back({json::object{{"securityContext", nullptr}}, ""});  // containers still say runAsNonRoot
    cases.push_back(
        {json::object{{"securityContext", json::object{{"seccompProfile", json::object{{"type", "Unconfined"}}}}}},
         "spec.securityContext.seccompProfile is Unconfined"});
    for (auto& c : cases) {
        RawProviderOptions o;
        o.pod_template_overrides = c.overrides;
        json::object p = raw::build_pod(o, "ksb-a", {}, {});
        auto problem = raw::hardening_problem(p.at("spec").as_object());
        SCOPED_TRACE(json::serialize(c.overrides));
        if (c.problem.empty()) {
            EXPECT_EQ(problem, std::nullopt);
        } else {
            ASSERT_TRUE(problem);
            EXPECT_NE(problem->find(c.problem), std::string::npos) << *problem;
        }
    }
    RawProviderOptions plain;
    EXPECT_EQ(raw::hardening_problem(raw::build_pod(plain, "ksb-a", {}, {}).at("spec").as_object()), std::nullopt);
}

TEST(RawManifests, TheAbsoluteTtlBecomesTheActiveDeadline) {
    RawProviderOptions o;
    auto idt = raw::make_identity(o, "a", {}, 600, std::nullopt, "T");
    ASSERT_TRUE(idt);
    json::object active{{"kubesandbox.io/pool-status", "active"}};
    auto p = raw::build_pod(o, "ksb-a", active, idt->annotations);
    EXPECT_EQ(p.at("spec").at("activeDeadlineSeconds"), 600);
    o.active_deadline_seconds = 300;  // the smaller one wins
    EXPECT_EQ(raw::build_pod(o, "ksb-a", active, idt->annotations).at("spec").at("activeDeadlineSeconds"), 300);
    // A warm pod has no TTL yet: it gets one when claimed, counted from the claim.
    json::object warm{{"kubesandbox.io/pool-status", "warm"}};
    o.active_deadline_seconds.reset();
    EXPECT_FALSE(
        raw::build_pod(o, "ksb-a", warm, idt->annotations).at("spec").as_object().contains("activeDeadlineSeconds"));
    EXPECT_EQ(raw::claimed_deadline(*idt, std::nullopt, 120), 720);
    EXPECT_EQ(raw::claimed_deadline(*idt, 500, 120), 500);
    auto no_ttl = raw::make_identity(o, "b", {}, std::nullopt, std::nullopt, "T");
    ASSERT_TRUE(no_ttl);
    EXPECT_EQ(raw::claimed_deadline(*no_ttl, std::nullopt, 120), std::nullopt);
    json::object patch = raw::warm_claim_patch(*idt, "1", "t", "NOW", 720);
    EXPECT_EQ(patch.at("spec").at("activeDeadlineSeconds"), 720);
}

TEST(RawManifests, PerSandboxNamespaceQuotaAndLimits) {
    RawProviderOptions o;
    json::object ns = raw::build_namespace("ksb-a", "a", "tok", "T");
    EXPECT_EQ(ns.at("metadata").at("labels").at("kubesandbox.io/namespace-mode"), "per-sandbox");
    json::object q = raw::build_resource_quota(o, "a");
    EXPECT_EQ(q.at("spec").at("hard").at("pods"), "1");
    EXPECT_EQ(q.at("spec").at("hard").at("limits.memory"), "1Gi");
    json::object lr = raw::build_limit_range(o, "a");
    EXPECT_EQ(lr.at("spec").at("limits").as_array().at(0).at("default").at("cpu"), "1000m");
}

}  // namespace
