// The tunnel connection: the router (or a runtime) reached through the API server's
// pods/portforward, one WebSocket per pooled connection, no kubectl and no local port.
#include "connection/pooled_connection.hpp"
#include "kube/client_impl.hpp"
#include "kube/port_forward_stream.hpp"

namespace kubesandbox {

namespace asio = boost::asio;

namespace {

asio::awaitable<Result<net::AnyStream>> open_tunnel(std::shared_ptr<KubeClient::Impl> client,
                                                    kube::PortForwardTarget target) {
    co_return co_await kube::open_port_forward(std::move(client), std::move(target));
}

}  // namespace

Result<std::shared_ptr<RouterConnection>> make_tunnel_connection(KubeClient& client, TunnelConnectionOptions options) {
    if (options.pod.empty()) return fail(errc::invalid_config, "a tunnel needs the pod to forward to");
    if (options.port == 0) return fail(errc::invalid_config, "a tunnel needs the port to forward to");
    kube::PortForwardTarget target{options.namespace_name, options.pod, options.port};
    PooledConnectionSettings settings;
    settings.description =
        "tunnel to " + options.namespace_name + "/" + options.pod + ":" + std::to_string(options.port);
    settings.token = options.token;
    settings.host = "localhost:" + std::to_string(options.port);
    settings.max_connections = options.max_connections;
    settings.max_idle = options.max_idle;
    auto impl = KubeClientAccess::impl(client);
    StreamOpener open = [impl, target](std::chrono::steady_clock::time_point) { return open_tunnel(impl, target); };
    return make_pooled_router_connection(client.get_executor(), std::move(settings), std::move(open));
}

}  // namespace kubesandbox
