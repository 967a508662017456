// The tunnel connection: the router (or a runtime) reached through the API server's
// pods/portforward, one WebSocket per pooled connection, no kubectl and no local port.
#include "connection/pooled_connection.hpp"
#include "connection/service_endpoints.hpp"
#include "kube/client_impl.hpp"
#include "kube/port_forward_stream.hpp"

#include <atomic>

namespace kubesandbox {

namespace asio = boost::asio;

namespace {

asio::awaitable<Result<net::AnyStream>> open_tunnel(std::shared_ptr<KubeClient::Impl> client,
                                                    kube::PortForwardTarget target) {
    co_return co_await kube::open_port_forward(std::move(client), std::move(target));
}

// A ready endpoint of the Service's port, resolved again for every new connection (so a
// replaced router pod is found), taken in turn across the ready ones.
asio::awaitable<Result<net::AnyStream>> open_to_service(KubeClient client, std::string ns, std::string service,
                                                        std::uint16_t port,
                                                        std::shared_ptr<std::atomic<std::size_t>> turn) {
    ResourcePath service_path{"", "v1", "services", ns, service};
    auto found = co_await client.get(service_path);
    if (!found) co_return fail(found.error());
    ResourcePath slices{"discovery.k8s.io", "v1", "endpointslices", ns, ""};
    ListOptions options;
    options.label_selector = "kubernetes.io/service-name=" + service;
    auto page = co_await client.list(slices, options);
    if (!page) co_return fail(page.error());
    auto endpoints = ready_endpoints(*found, page->items, port);
    if (!endpoints) co_return fail(endpoints.error());
    const ServiceEndpoint& chosen = (*endpoints)[turn->fetch_add(1) % endpoints->size()];
    kube::PortForwardTarget target{ns, chosen.pod, chosen.port};
    co_return co_await kube::open_port_forward(KubeClientAccess::impl(client), std::move(target));
}

}  // namespace

Result<std::shared_ptr<RouterConnection>> make_tunnel_connection(KubeClient& client, TunnelConnectionOptions options) {
    if (options.pod.empty() == options.service.empty())
        return fail(errc::invalid_config, "a tunnel needs either the pod or the service to forward to");
    if (options.port == 0) return fail(errc::invalid_config, "a tunnel needs the port to forward to");
    kube::PortForwardTarget target{options.namespace_name, options.pod, options.port};
    PooledConnectionSettings settings;
    settings.description = "tunnel to " + std::string(options.service.empty() ? "" : "service ") +
                           options.namespace_name + "/" + (options.service.empty() ? options.pod : options.service) +
                           ":" + std::to_string(options.port);
    settings.token = options.token;
    settings.host = "localhost:" + std::to_string(options.port);
    settings.max_connections = options.max_connections;
    settings.max_idle = options.max_idle;
    settings.open_backoff_max = options.open_backoff_max;
    StreamOpener open;
    if (options.service.empty()) {
        auto impl = KubeClientAccess::impl(client);
        open = [impl, target](std::chrono::steady_clock::time_point) { return open_tunnel(impl, target); };
    } else {
        auto turn = std::make_shared<std::atomic<std::size_t>>(0);
        open = [client, ns = options.namespace_name, service = options.service, port = options.port, turn](
                   std::chrono::steady_clock::time_point) { return open_to_service(client, ns, service, port, turn); };
    }
    return make_pooled_router_connection(client.get_executor(), std::move(settings), std::move(open));
}

}  // namespace kubesandbox
