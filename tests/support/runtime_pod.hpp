// Pods running the local cluster's sandbox runtime (python-runtime's API), reached through the
// local cluster's router: what the agent-sandbox mode talks to, without its control plane.
#pragma once

#include <kubesandbox/kube_client.hpp>
#include <kubesandbox/local_cluster.hpp>
#include <kubesandbox/router_sandbox.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

#include <chrono>
#include <memory>
#include <string>

namespace kubesandbox::test {

// Creates the pod (readiness = the runtime's port answers) and waits until it is Ready. A
// base_dir other than the runtime's /app becomes its working directory and SANDBOX_BASE_DIR.
inline boost::asio::awaitable<Result<void>> create_runtime_pod(KubeClient& client, std::string namespace_name,
                                                               std::string name, std::string image,
                                                               std::string base_dir) {
    namespace json = boost::json;
    json::object container{{"name", "runtime"},
                           {"image", image},
                           {"ports", json::array{json::object{{"containerPort", 8888}}}},
                           {"readinessProbe", json::object{{"httpGet", json::object{{"path", "/"}, {"port", 8888}}},
                                                           {"periodSeconds", 1}}}};
    if (base_dir != "/app") {
        container["workingDir"] = base_dir;
        container["env"] = json::array{json::object{{"name", "SANDBOX_BASE_DIR"}, {"value", base_dir}}};
    }
    json::object pod{{"apiVersion", "v1"},
                     {"kind", "Pod"},
                     {"metadata", json::object{{"name", name}}},
                     {"spec", json::object{{"containers", json::array{container}}}}};
    ResourcePath pods{"", "v1", "pods", namespace_name, ""};
    auto created = co_await client.create(pods, pod);
    if (!created) co_return fail(created.error());
    boost::asio::steady_timer timer(co_await boost::asio::this_coro::executor);
    for (int i = 0; i < 600; ++i) {
        auto got = co_await client.get(pods.with_name(name));
        if (!got) co_return fail(got.error());
        if (auto* st = got->if_contains("status"); st && st->is_object()) {
            if (auto* conds = st->get_object().if_contains("conditions"); conds && conds->is_array()) {
                for (const auto& c : conds->get_array()) {
                    if (c.is_object() && c.get_object().at("type") == "Ready" && c.get_object().at("status") == "True")
                        co_return Result<void>{};
                }
            }
        }
        timer.expires_after(std::chrono::milliseconds(50));
        co_await timer.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
    }
    co_return fail(errc::timeout, "runtime pod " + name + " not Ready");
}

inline std::shared_ptr<RouterConnection> local_router(const LocalCluster& cluster,
                                                      boost::asio::any_io_executor executor) {
    DirectConnectionOptions options;
    options.url = cluster.router_url();
    options.token = cluster.token();
    auto connection = make_direct_connection(std::move(executor), options);
    return connection ? *connection : nullptr;
}

}  // namespace kubesandbox::test
