#include "local/router_gateway.hpp"

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

asio::awaitable<Result<void>> publish_router_gateway(KubeClient client, std::string host, std::uint16_t port) {
    ResourcePath gateways{"gateway.networking.k8s.io", "v1", "gateways", router_gateway_namespace, ""};
    auto made = co_await client.create(gateways, router_gateway(port));
    if (!made && !made.error().is(errc::already_exists)) co_return fail(made.error());
    ResourcePath status = gateways.with_name(router_gateway_name);
    status.subresource = "status";
    json::object body{{"status", router_gateway_status(host)}};
    auto written = co_await client.patch(status, json::value(std::move(body)), PatchType::merge);
    if (!written) co_return fail(written.error());
    co_return Result<void>{};
}

}  // namespace kubesandbox::local
