#include "local/router_objects.hpp"

#include <boost/json/array.hpp>

namespace kubesandbox::local {

namespace asio = boost::asio;
namespace json = boost::json;

json::object router_gateway(std::uint16_t port) {
    json::object listener{{"name", "http"}, {"protocol", "HTTP"}, {"port", port}};
    return json::object{{"apiVersion", "gateway.networking.k8s.io/v1"},
                        {"kind", "Gateway"},
                        {"metadata", json::object{{"name", router_gateway_name},
                                                  {"namespace", router_gateway_namespace},
                                                  {"labels", json::object{{"app", "sandbox-router"}}}}},
                        {"spec", json::object{{"gatewayClassName", "kubesandbox-local"},
                                              {"listeners", json::array{std::move(listener)}}}}};
}

json::object router_gateway_status(const std::string& host) {
    auto condition = [](const char* type, const char* reason) {
        return json::object{{"type", type}, {"status", "True"}, {"reason", reason}, {"message", ""}};
    };
    json::object listener{
        {"name", "http"},
        {"attachedRoutes", 1},
        {"supportedKinds", json::array{json::object{{"group", "gateway.networking.k8s.io"}, {"kind", "HTTPRoute"}}}},
        {"conditions", json::array{condition("Programmed", "Programmed")}}};
    return json::object{
        {"addresses", json::array{json::object{{"type", "IPAddress"}, {"value", host}}}},
        {"conditions", json::array{condition("Accepted", "Accepted"), condition("Programmed", "Programmed")}},
        {"listeners", json::array{std::move(listener)}}};
}

json::object router_pod(std::uint16_t port) {
    json::object container{
        {"name", "router"},
        {"image", "busybox"},
        {"command", json::array{"sleep", "2147483647"}},
        {"ports", json::array{json::object{{"name", "http"}, {"containerPort", port}}}},
        {"readinessProbe",
         json::object{{"httpGet", json::object{{"path", "/healthz"}, {"port", port}}}, {"periodSeconds", 5}}}};
    return json::object{
        {"apiVersion", "v1"},
        {"kind", "Pod"},
        {"metadata", json::object{{"name", "sandbox-router"},
                                  {"namespace", router_namespace},
                                  {"labels", json::object{{"app", "sandbox-router"}}}}},
        {"spec", json::object{{"hostNetwork", true}, {"containers", json::array{std::move(container)}}}}};
}

json::object router_service(std::uint16_t port) {
    return json::object{
        {"apiVersion", "v1"},
        {"kind", "Service"},
        {"metadata", json::object{{"name", router_service_name}, {"namespace", router_namespace}}},
        {"spec", json::object{{"selector", json::object{{"app", "sandbox-router"}}},
                              {"ports", json::array{json::object{
                                            {"name", "http"}, {"port", router_service_port}, {"targetPort", port}}}}}}};
}

namespace {

asio::awaitable<Result<void>> create_kept(KubeClient& client, ResourcePath collection, json::object body) {
    auto made = co_await client.create(std::move(collection), std::move(body));
    if (!made && !made.error().is(errc::already_exists)) co_return fail(made.error());
    co_return Result<void>{};
}

}  // namespace

asio::awaitable<Result<void>> publish_router(KubeClient client, std::string host, std::uint16_t port) {
    json::object ns{
        {"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", json::object{{"name", router_namespace}}}};
    ResourcePath namespaces{"", "v1", "namespaces", "", ""};
    if (auto made = co_await create_kept(client, namespaces, std::move(ns)); !made) co_return made;
    ResourcePath pods{"", "v1", "pods", router_namespace, ""};
    if (auto made = co_await create_kept(client, pods, router_pod(port)); !made) co_return made;
    ResourcePath services{"", "v1", "services", router_namespace, ""};
    if (auto made = co_await create_kept(client, services, router_service(port)); !made) co_return made;
    ResourcePath gateways{"gateway.networking.k8s.io", "v1", "gateways", router_gateway_namespace, ""};
    if (auto made = co_await create_kept(client, gateways, router_gateway(port)); !made) co_return made;
    ResourcePath status = gateways.with_name(router_gateway_name);
    status.subresource = "status";
    json::object body{{"status", router_gateway_status(host)}};
    auto written = co_await client.patch(status, json::value(std::move(body)), PatchType::merge);
    if (!written) co_return fail(written.error());
    co_return Result<void>{};
}

}  // namespace kubesandbox::local
