// Caller ids served by warm pods (shared-namespace raw mode) against the embedded local cluster.
// One suite, RawBindingTest, in two files: raw_binding_test.cpp (claiming: the id's binding names
// the warm pod, replicas converge on one pod per id, managers over a warm pool) and
// raw_binding_recovery_test.cpp (a bound pod deleted or dead is never handed out again; cleanup
// sweeps bindings and claims that lost their other half).
#pragma once

#include <kubesandbox/raw_provider.hpp>
#include <kubesandbox/sandbox_manager.hpp>

#include "../support/local_cluster_fixture.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/this_coro.hpp>

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

namespace kubesandbox::test::raw_binding {

namespace asio = boost::asio;
namespace json = boost::json;
using namespace std::chrono_literals;

inline ResourcePath in_default(const char* plural, std::string name = {}) {
    ResourcePath p;
    p.plural = plural;
    p.namespace_name = "default";
    p.name = std::move(name);
    return p;
}

inline std::string at(const json::object& o, std::initializer_list<const char*> path) {
    const json::object* cur = &o;
    const json::value* v = nullptr;
    for (const char* k : path) {
        if (!cur) return {};
        v = cur->if_contains(k);
        if (!v) return {};
        cur = v->is_object() ? &v->get_object() : nullptr;
    }
    return v && v->is_string() ? std::string(v->get_string()) : std::string();
}

class RawBindingTest : public kubesandbox::test::LocalClusterTest {
protected:
    static void TearDownTestSuite() {
        if (!cluster_) return;
        // Nothing of ours may be left: pods, bindings.
        asio::io_context io;
        KubeClient kc(io.get_executor(), cluster_->kube_config());
        std::size_t left = 99;
        auto check = [&]() -> asio::awaitable<void> {
            for (int i = 0; i < 60; ++i) {
                ListOptions lo;
                lo.label_selector = "kubesandbox.io/managed-by=kubesandbox";
                auto p = co_await kc.list(in_default("pods"), lo);
                auto c = co_await kc.list(in_default("configmaps"), lo);
                if (p && c) {
                    left = p->items.size() + c->items.size();
                    if (left == 0) co_return;
                }
                co_await sleep_for(250ms);
            }
        };
        kubesandbox::test::run_coroutine_test(io, check, 30s);
        EXPECT_EQ(left, 0u) << "pods or bindings left behind";
        LocalClusterTest::TearDownTestSuite();
    }

    std::shared_ptr<RawProvider> provider(int warm, std::vector<std::string> command = {}) {
        RawProviderOptions po;
        if (!command.empty()) po.command = std::move(command);
        po.startup_timeout = 60s;
        po.warm_pool_size = warm;
        po.logger = Logger::silent();
        return std::make_shared<RawProvider>(client(), po);
    }

    // Deletes every sandbox of the provider's configuration, warm ones too, once the refills
    // its claims started are over (one still running would create warm pods after the list).
    asio::awaitable<void> delete_all(RawProvider& p) {
        co_await wait_refills(p);
        ListSandboxesOptions all;
        all.include_warm = true;
        auto page = co_await p.list(all);
        EXPECT_TRUE(page) << page.error().describe();
        if (!page) co_return;
        for (auto& i : page->items) {
            auto d = co_await p.delete_sandbox(i.id);
            EXPECT_TRUE(d) << i.id << ": " << d.error().describe();
        }
    }

    asio::awaitable<void> wait_refills(RawProvider& p) {
        for (int i = 0; i < 1200; ++i) {
            auto s = co_await p.pool_status();
            if (s && !s->refilling) co_return;
            co_await sleep_for(100ms);
        }
        ADD_FAILURE() << "the warm pool's refill never ended";
    }

    asio::awaitable<void> wait_pool(RawProvider& p, int n) {
        for (int i = 0; i < 600; ++i) {
            auto s = co_await p.pool_status();
            if (s && s->available >= n) co_return;
            co_await sleep_for(100ms);
        }
        ADD_FAILURE() << "the warm pool did not fill";
    }

    // Pods serving `id` (not being deleted): the bound warm pod, or one at the id's own name.
    asio::awaitable<std::vector<std::string>> pods_serving(std::string id) {
        ListOptions lo;
        lo.label_selector = "kubesandbox.io/managed-by=kubesandbox";
        auto kc = client();
        auto list = co_await kc.list(in_default("pods"), lo);
        EXPECT_TRUE(list);
        std::vector<std::string> out;
        if (!list) co_return out;
        for (auto& item : list->items) {
            const auto& pod = item.as_object();
            if (!at(pod, {"metadata", "deletionTimestamp"}).empty()) continue;
            if (at(pod, {"metadata", "annotations", "kubesandbox.io/thread-id-original"}) == id ||
                at(pod, {"metadata", "labels", "kubesandbox.io/sandbox-id"}) == id)
                out.push_back(at(pod, {"metadata", "name"}));
        }
        co_return out;
    }
};

}  // namespace kubesandbox::test::raw_binding
