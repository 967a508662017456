// agent-sandbox mode's claims against the local cluster: the shape a template is claimed in, a
// claim deleted mid-command, a claim not ours, pages and counts, and pod metadata on warm and
// cold sandboxes.
#include <kubesandbox/agent_sandbox_provider.hpp>

#include "agent_sandbox_fixture.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/json/serialize.hpp>

#include <gtest/gtest.h>

#include <mutex>
#include <set>

namespace {
namespace asio = boost::asio;
namespace json = boost::json;
using namespace kubesandbox;
using namespace std::chrono_literals;
using test::agent::AgentSandboxTest;

// A template goes through the pool that serves it (v1beta1), or by name in a v1alpha1 claim when
// that version is pinned (the local API server serves both and stores each as sent; a real 0.5
// converts v1alpha1 claims to a pool named after the template).
TEST_F(AgentSandboxTest, ATemplateIsClaimedInTheShapeTheClusterTakes) {
    run([&]() -> asio::awaitable<void> {
        auto kube = client();
        auto spec_of = [&](const std::string& version, const std::string& claim) -> asio::awaitable<std::string> {
            ResourcePath p{"extensions.agents.x-k8s.io", version, "sandboxclaims", "default", claim};
            auto got = co_await kube.get(p);
            const json::value* spec = got ? got->if_contains("spec") : nullptr;
            co_return spec ? json::serialize(*spec) : "none";
        };
        GetOrCreateOptions o;
        auto by_template = busybox();
        by_template.template_name = "busybox-runtime";
        by_template.warm_pool = "python-runtime";  // serves another template
        auto through_pool = provider(by_template);
        o.sandbox_id = "through-pool";
        auto a = co_await through_pool->acquire(o);
        EXPECT_TRUE(a.has_value()) << (a ? "" : a.error().describe());
        EXPECT_EQ(co_await spec_of("v1beta1", AgentSandboxProvider::claim_name_for("through-pool")),
                  R"({"warmPoolRef":{"name":"busybox-runtime"}})");
        if (a) {
            auto r = co_await a->sandbox->execute("echo pooled");
            EXPECT_TRUE(r && r->output == "pooled\n") << (r ? r->output : r.error().describe());
        }
        auto ps = co_await through_pool->pool_status();
        EXPECT_TRUE(ps && ps->target == 2) << (ps ? "" : ps.error().describe());  // busybox-runtime's
        EXPECT_TRUE(co_await through_pool->delete_sandbox("through-pool"));

        // Pinned to v1alpha1, with no pool: always cold.
        by_template.claim_api_version = "v1alpha1";
        by_template.warm_pool.clear();
        auto cold = provider(by_template);
        o.sandbox_id = "by-template";
        a = co_await cold->acquire(o);
        EXPECT_TRUE(a && a->origin == SandboxOrigin::created) << (a ? "" : a.error().describe());
        EXPECT_EQ(co_await spec_of("v1alpha1", AgentSandboxProvider::claim_name_for("by-template")),
                  R"({"sandboxTemplateRef":{"name":"busybox-runtime"},"warmpool":"none"})");
        if (a) {
            auto r = co_await a->sandbox->execute("echo $((6*7))");
            EXPECT_TRUE(r && r->output == "42\n") << (r ? r->output : r.error().describe());
        }
        // Reconnecting needs only the claim, not a pool for the template.
        auto stranger = busybox();
        stranger.template_name = "no-such-template";
        auto again = co_await provider(stranger)->reconnect("by-template");
        EXPECT_TRUE(again.has_value()) << (again ? "" : again.error().describe());
        EXPECT_TRUE(co_await cold->delete_sandbox("by-template"));

        // No pool serves the template: refused before any claim is made. As a v1alpha1 claim the
        // controller answers TemplateNotFound, and the claim is deleted.
        by_template.template_name = "no-such-template";
        o.sandbox_id = "no-template";
        a = co_await provider(by_template)->acquire(o);
        EXPECT_TRUE(!a && a.error().code == errc::invalid_config &&
                    a.error().message.find("TemplateNotFound") != std::string::npos)
            << (a ? "acquired" : a.error().describe());
        by_template.claim_api_version.clear();
        a = co_await provider(by_template)->acquire(o);
        EXPECT_TRUE(!a && a.error().code == errc::invalid_config &&
                    a.error().message.find("no SandboxWarmPool in default serves template no-such-template") !=
                        std::string::npos)
            << (a ? "acquired" : a.error().describe());
        EXPECT_EQ(co_await claims_named(AgentSandboxProvider::claim_name_for("no-template")), 0u);
    });
}

// The claim deleted while a command runs: the controller takes the Sandbox and its pod, and the
// command ends with a typed error long before it would have finished.
TEST_F(AgentSandboxTest, AClaimDeletedMidCommandEndsTheCommandWithATypedError) {
    using namespace boost::asio::experimental::awaitable_operators;
    auto p = provider(busybox());
    run([&]() -> asio::awaitable<void> {
        GetOrCreateOptions o;
        o.sandbox_id = "deleted-mid-command";
        auto a = co_await p->acquire(o);
        EXPECT_TRUE(a.has_value()) << (a ? "" : a.error().describe());
        if (!a) co_return;
        Sandbox& sb = *a->sandbox;
        auto long_command = [&]() -> asio::awaitable<Result<ExecuteResponse>> {
            co_return co_await sb.execute("sleep 47; echo finished", std::chrono::seconds(90));
        };
        auto delete_when_running = [&]() -> asio::awaitable<void> {
            for (int i = 0; i < 200; ++i) {
                auto ps = co_await sb.execute("ps | grep -c '[s]leep 47'");
                if (ps && ps->output == "1\n") break;
                co_await test::sleep_for(50ms);
            }
            EXPECT_TRUE(co_await p->delete_sandbox("deleted-mid-command"));
        };
        auto begun = std::chrono::steady_clock::now();
        auto r = co_await (long_command() && delete_when_running());
        EXPECT_FALSE(r.has_value()) << (r ? r->output : "");
        if (!r) {
            const auto code = r.error().code;
            EXPECT_TRUE(code == errc::service_unavailable || code == errc::connection_closed) << r.error().describe();
        }
        EXPECT_LT(std::chrono::steady_clock::now() - begun, 30s);
        auto after = co_await sb.execute("true");
        EXPECT_FALSE(after.has_value());
        auto gone = co_await p->describe("deleted-mid-command");  // gone, or on its way out
        EXPECT_TRUE(gone ? gone->status == "terminated" : gone.error().code == errc::not_found)
            << (gone ? gone->status : gone.error().describe());
    });
}

// A claim under our name that we did not make is refused, and left alone.
TEST_F(AgentSandboxTest, AClaimNotOursIsRefusedAndLeftAlone) {
    auto p = provider(busybox());
    run([&]() -> asio::awaitable<void> {
        auto kube = client();
        const std::string name = AgentSandboxProvider::claim_name_for("foreign");
        ResourcePath claims{"extensions.agents.x-k8s.io", "v1beta1", "sandboxclaims", "default", ""};
        json::object foreign{{"apiVersion", "extensions.agents.x-k8s.io/v1beta1"},
                             {"kind", "SandboxClaim"},
                             {"metadata", json::object{{"name", name}}},
                             {"spec", json::object{{"warmPoolRef", json::object{{"name", "busybox-runtime"}}}}}};
        EXPECT_TRUE(co_await kube.create(claims, foreign));
        GetOrCreateOptions o;
        o.sandbox_id = "foreign";
        auto a = co_await p->acquire(o);
        EXPECT_TRUE(!a && a.error().code == errc::conflict) << (a ? "acquired" : a.error().describe());
        auto gone = co_await p->delete_sandbox("foreign");
        EXPECT_TRUE(!gone && gone.error().code == errc::conflict) << (gone ? "deleted" : gone.error().describe());
        auto still = co_await kube.get(claims.with_name(name));
        EXPECT_TRUE(still.has_value());
        co_await kube.remove(claims.with_name(name));
    });
}

// Which claim version to use is read once from discovery. A 403 there (claims allowed, discovery
// not) means v1beta1, with a warning; a 401 is an error and nothing is kept; a 404 means
// agent-sandbox is not installed.
TEST_F(AgentSandboxTest, DiscoveryRefusedMeansV1beta1AndOtherAnswersAreErrors) {
    std::vector<std::string> warnings;
    std::mutex warnings_mutex;
    auto refused_with = [&](unsigned status) {
        FaultRule discovery;
        discovery.path_contains = "/apis/extensions.agents.x-k8s.io";  // the first GET is discovery
        discovery.method = "GET";
        discovery.status = status;
        cluster_->add_fault(discovery);
        auto options = busybox();
        options.logger = Logger(LogLevel::warning, [&](LogLevel, std::string_view line) {
            std::lock_guard lock(warnings_mutex);
            warnings.emplace_back(line);
        });
        return provider(options);
    };
    run([&]() -> asio::awaitable<void> {
        auto forbidden = refused_with(403);
        auto listed = co_await forbidden->list();
        EXPECT_TRUE(listed) << (listed ? "" : listed.error().describe());
        {
            std::lock_guard lock(warnings_mutex);
            EXPECT_EQ(warnings.size(), 1u);
            EXPECT_TRUE(!warnings.empty() &&
                        warnings[0].find("refused (HTTP 403); using v1beta1") != std::string::npos);
        }
        auto unauthorized = refused_with(401);
        listed = co_await unauthorized->list();
        EXPECT_TRUE(!listed && listed.error().code == errc::unauthorized)
            << (listed ? "listed" : listed.error().describe());
        listed = co_await unauthorized->list();  // the fault is spent: discovery is read again
        EXPECT_TRUE(listed) << (listed ? "" : listed.error().describe());
        auto missing = refused_with(404);
        listed = co_await missing->list();
        EXPECT_TRUE(!listed && listed.error().code == errc::invalid_config)
            << (listed ? "listed" : listed.error().describe());
        cluster_->clear_faults();
    });
}

// list() walks its pages with a cursor; stats() counts; additionalPodMetadata reaches the pod of
// a warm sandbox and of a cold one.
TEST_F(AgentSandboxTest, ClaimsListInPagesAndTheirPodsCarryTheMetadataAsked) {
    auto warm_options = busybox();
    warm_options.pod_labels = {{"team", "blue"}};
    warm_options.pod_annotations = {{"note", "warm"}};
    auto cold_options = warm_options;
    cold_options.env = {{"GREETING", "hi"}};  // forces a cold start
    auto warm = provider(warm_options);
    auto cold = provider(cold_options);
    run([&]() -> asio::awaitable<void> {
        auto kube = client();
        co_await pool_filled(*warm);
        std::vector<std::unique_ptr<Sandbox>> kept;
        for (int i = 0; i < 3; ++i) {
            GetOrCreateOptions o;
            o.sandbox_id = "paged-" + std::to_string(i);
            o.labels = {{"suite", "pages"}};
            auto a = co_await (i == 2 ? cold : warm)->acquire(o);
            EXPECT_TRUE(a.has_value()) << (a ? "" : a.error().describe());
            if (!a) co_return;
            if (i == 0) {
                EXPECT_EQ(a->origin, SandboxOrigin::claimed_warm);
            }
            if (i == 2) {
                EXPECT_EQ(a->origin, SandboxOrigin::created);
                auto env = co_await a->sandbox->execute("echo $GREETING");
                EXPECT_TRUE(env && env->output == "hi\n") << (env ? env->output : env.error().describe());
            }
            kept.push_back(std::move(a->sandbox));
        }
        std::set<std::string> seen;
        std::string cursor;
        int pages = 0;
        do {
            ListSandboxesOptions lo;
            lo.labels = {{"suite", "pages"}};
            lo.limit = 1;
            lo.cursor = cursor;
            auto page = co_await warm->list(lo);
            EXPECT_TRUE(page && page->items.size() <= 1) << (page ? "" : page.error().describe());
            if (!page) break;
            for (const auto& info : page->items) {
                seen.insert(info.id);
                // The pod behind the claim carries the metadata asked for.
                ResourcePath pod{"", "v1", "pods", "default", info.pod_name};
                auto got = co_await kube.get(pod);
                EXPECT_TRUE(got.has_value()) << info.pod_name;
                if (got) {
                    const auto& md = got->at("metadata").as_object();
                    EXPECT_EQ(json::serialize(md.at("labels").at("team")), "\"blue\"") << info.id;
                    EXPECT_EQ(json::serialize(md.at("annotations").at("note")), "\"warm\"") << info.id;
                }
            }
            cursor = page->next_cursor;
            ++pages;
        } while (!cursor.empty() && pages < 10);
        EXPECT_EQ(seen, (std::set<std::string>{"paged-0", "paged-1", "paged-2"}));
        EXPECT_GE(pages, 3);
        auto stats = co_await warm->stats();
        EXPECT_TRUE(stats && stats->total >= 3 && stats->running >= 3) << (stats ? "" : stats.error().describe());
        for (int i = 0; i < 3; ++i) EXPECT_TRUE(co_await warm->delete_sandbox("paged-" + std::to_string(i)));
    });
}

}  // namespace
