// The raw provider's integration tests share one suite, RawProviderTest, split by responsibility
// across raw_provider_test.cpp (one sandbox's lifecycle), raw_cleanup_test.cpp,
// raw_warm_pool_test.cpp and raw_isolation_test.cpp: real pods (bubblewrap processes), real API
// server, real watches on one local cluster. Every test removes what it created; the suite checks
// nothing is left.
#pragma once

#include <kubesandbox/local_cluster.hpp>
#include <kubesandbox/raw_provider.hpp>

#include "../support/local_cluster_fixture.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/serialize.hpp>

#include <gtest/gtest.h>

#include <unistd.h>

#include <array>
#include <chrono>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace kubesandbox::test::raw {

namespace asio = boost::asio;
namespace json = boost::json;
using namespace std::chrono_literals;

inline ResourcePath pods(std::string ns) {
    ResourcePath p;
    p.plural = "pods";
    p.namespace_name = std::move(ns);
    return p;
}
inline ResourcePath netpols(std::string ns) {
    ResourcePath p;
    p.group = "networking.k8s.io";
    p.plural = "networkpolicies";
    p.namespace_name = std::move(ns);
    return p;
}
inline ResourcePath namespaces() {
    ResourcePath p;
    p.plural = "namespaces";
    return p;
}

inline std::string str(const json::object& o, std::initializer_list<const char*> path) {
    const json::value* v = nullptr;
    const json::object* cur = &o;
    for (const char* k : path) {
        if (!cur) return {};
        auto it = cur->find(k);
        if (it == cur->end()) return {};
        v = &it->value();
        cur = v->is_object() ? &v->get_object() : nullptr;
    }
    return v && v->is_string() ? std::string(v->get_string()) : std::string();
}

inline const std::string managed_selector = "kubesandbox.io/managed-by=kubesandbox";

class RawProviderTest : public kubesandbox::test::LocalClusterTest {
protected:
    static void TearDownTestSuite() {
        if (!cluster_) return;
        // Nothing labelled may be left: pods, NetworkPolicies, namespaces (all namespaces).
        asio::io_context io;
        KubeClient client(io.get_executor(), cluster_->kube_config());
        std::size_t left_pods = 99, left_nps = 99, left_ns = 99;
        auto check = [&]() -> asio::awaitable<void> {
            for (int i = 0; i < 40; ++i) {
                ListOptions lo;
                lo.label_selector = managed_selector;
                const ResourcePath rp1 = pods("");
                auto p = co_await client.list(rp1, lo);
                const ResourcePath rp2 = netpols("");
                auto n = co_await client.list(rp2, lo);
                const ResourcePath rp3 = namespaces();
                auto s = co_await client.list(rp3, lo);
                if (p && n && s) {
                    left_pods = p->items.size();
                    left_nps = n->items.size();
                    left_ns = s->items.size();
                    if (left_pods + left_nps + left_ns == 0) co_return;
                }
                co_await sleep_for(250ms);
            }
        };
        kubesandbox::test::run_coroutine_test(io, check, 30s);
        EXPECT_EQ(left_pods, 0u) << "labelled pods left behind";
        EXPECT_EQ(left_nps, 0u) << "labelled NetworkPolicies left behind";
        EXPECT_EQ(left_ns, 0u) << "labelled namespaces left behind";
        LocalClusterTest::TearDownTestSuite();
    }

    void SetUp() override {
        LocalClusterTest::SetUp();
        client_ = std::make_unique<KubeClient>(client());
    }

    std::unique_ptr<RawProvider> provider(RawProviderOptions cfg = {}, KubeClientOptions copts = {}) {
        if (cfg.startup_timeout == 120s) cfg.startup_timeout = 60s;
        return std::make_unique<RawProvider>(client(std::move(copts)), std::move(cfg));
    }

    // Lost responses surface as a request timeout: keep it short.
    static KubeClientOptions quick_timeouts() {
        KubeClientOptions o;
        o.request_timeout = 3s;
        return o;
    }

    std::unique_ptr<KubeClient> client_;
};

// Objects made by hand (not through a provider).

inline ResourcePath core(std::string plural, std::string ns) {
    ResourcePath p;
    p.plural = std::move(plural);
    p.namespace_name = std::move(ns);
    return p;
}

inline json::object object_meta(const std::string& name, json::object labels, json::object annotations) {
    json::object m;
    m["name"] = name;
    if (!labels.empty()) m["labels"] = std::move(labels);
    if (!annotations.empty()) m["annotations"] = std::move(annotations);
    return m;
}

// A plain pod made by hand (not through a provider).
inline json::object hand_pod(const std::string& name, json::object labels, json::object annotations,
                             const std::string& image = "busybox") {
    json::object c;
    c["name"] = "sandbox";
    c["image"] = image;
    c["command"] = json::array{"sleep", "3600"};
    json::object spec;
    spec["containers"] = json::array{std::move(c)};
    spec["restartPolicy"] = "Never";
    spec["terminationGracePeriodSeconds"] = 0;
    json::object pod;
    pod["apiVersion"] = "v1";
    pod["kind"] = "Pod";
    pod["metadata"] = object_meta(name, std::move(labels), std::move(annotations));
    pod["spec"] = std::move(spec);
    return pod;
}

inline json::object hand_namespace(const std::string& name, json::object labels, json::object annotations) {
    json::object o;
    o["apiVersion"] = "v1";
    o["kind"] = "Namespace";
    o["metadata"] = object_meta(name, std::move(labels), std::move(annotations));
    return o;
}

inline json::object hand_policy(const std::string& name, json::object labels, json::object annotations) {
    json::object match;
    match["kubesandbox.io/sandbox-id"] = "ghost";
    json::object sel;
    sel["matchLabels"] = std::move(match);
    json::object spec;
    spec["podSelector"] = std::move(sel);
    spec["policyTypes"] = json::array{"Ingress", "Egress"};
    json::object o;
    o["apiVersion"] = "networking.k8s.io/v1";
    o["kind"] = "NetworkPolicy";
    o["metadata"] = object_meta(name, std::move(labels), std::move(annotations));
    o["spec"] = std::move(spec);
    return o;
}

inline const char* const long_ago = "2020-01-01T00:00:00.000Z";

}  // namespace kubesandbox::test::raw
