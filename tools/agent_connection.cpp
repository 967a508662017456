#include "agent_connection.hpp"

#include "file_commands.hpp"

#include <kubesandbox/kube_client.hpp>
#include <kubesandbox/local_cluster.hpp>
#include <kubesandbox/router_connection.hpp>

#include <boost/json/parse.hpp>

#include <cstdlib>

namespace kubesandbox::cli {

namespace json = boost::json;

namespace {

std::string from_environment(const char* name) {
    const char* e = std::getenv(name);
    return e ? e : "";
}

// "NS/NAME:PORT" (the port optional) of --router-service.
struct ServiceRef {
    std::string namespace_name, name;
    std::uint16_t port = 8080;
};

Result<ServiceRef> parse_service(const std::string& text) {
    ServiceRef ref;
    auto slash = text.find('/');
    auto colon = text.rfind(':');
    if (slash == std::string::npos || slash == 0)
        return fail(errc::invalid_config, "--router-service is NAMESPACE/NAME[:PORT], not '" + text + "'");
    ref.namespace_name = text.substr(0, slash);
    ref.name =
        text.substr(slash + 1, colon == std::string::npos || colon < slash ? std::string::npos : colon - slash - 1);
    if (colon != std::string::npos && colon > slash) {
        const std::string port = text.substr(colon + 1);
        char* end = nullptr;
        long value = std::strtol(port.c_str(), &end, 10);
        if (port.empty() || *end != '\0' || value <= 0 || value > 65535)
            return fail(errc::invalid_config, "--router-service has an invalid port: '" + text + "'");
        ref.port = static_cast<std::uint16_t>(value);
    }
    if (ref.name.empty()) return fail(errc::invalid_config, "--router-service names no Service: '" + text + "'");
    return ref;
}

}  // namespace

Result<void> choose_agent_connection(const AgentConnectionFlags& flags, const LocalCluster* cluster, KubeClient& client,
                                     AgentSandboxProviderOptions& agent) {
    const std::string& how = flags.connection;
    if (how == "pod-tunnel") {
        agent.tunnel_to_pods = true;
        return {};
    }
    if (how == "pod-direct") {
        agent.direct_to_pods = true;
        return {};
    }
    const bool gateway = how == "gateway", in_cluster = how == "in-cluster", tunnel = how == "tunnel",
               kubectl = how == "kubectl-tunnel";
    if (how != "direct" && !gateway && !in_cluster && !tunnel && !kubectl)
        return fail(errc::invalid_config,
                    "--connection must be direct, in-cluster, gateway, tunnel, kubectl-tunnel, pod-tunnel or "
                    "pod-direct, not '" +
                        how + "'");
    // The router: flags, then the environment, then what kubesandbox-local wrote.
    std::string url = flags.router_url, token = flags.router_token;
    if (url.empty()) url = from_environment("KUBESANDBOX_ROUTER_URL");
    if (token.empty()) token = from_environment("KUBESANDBOX_ROUTER_TOKEN");
    if (cluster) {
        if (url.empty()) url = cluster->router_url();
        if (token.empty()) token = cluster->token();
    } else if (url.empty() || token.empty()) {
        std::string kubeconfig = flags.kubeconfig;
        if (kubeconfig.empty()) {
            std::string e = from_environment("KUBECONFIG");
            kubeconfig = e.substr(0, e.find(':'));
        }
        if (auto written = read_local_file(kubeconfig + ".router")) {
            boost::system::error_code ec;
            auto v = json::parse(*written, ec);
            if (!ec && v.is_object()) {
                auto* u = v.get_object().if_contains("url");
                auto* t = v.get_object().if_contains("token");
                if (url.empty() && u && u->is_string()) url = std::string(u->get_string());
                if (token.empty() && t && t->is_string()) token = std::string(t->get_string());
            }
        }
    }
    // Inside a real cluster the router Service has a DNS name (agent-sandbox installs it there);
    // a local cluster's pods share the host's loopback, where its router listens (found above).
    if (in_cluster && url.empty()) url = "http://sandbox-router-svc.agent-sandbox-system.svc.cluster.local:8080";
    if (gateway) {
        GatewayConnectionOptions options;
        options.gateway_name = flags.gateway_name;
        options.gateway_namespace = flags.gateway_namespace;
        options.token = token;
        auto connection = make_gateway_connection(client, options);
        if (!connection) return fail(connection.error());
        agent.connection = *connection;
        return {};
    }
    if (tunnel || kubectl) {
        auto service = parse_service(flags.router_service);
        if (!service) return fail(service.error());
        Result<std::shared_ptr<RouterConnection>> connection = fail(errc::invalid_config, "");
        if (tunnel) {
            TunnelConnectionOptions options;
            options.namespace_name = service->namespace_name;
            options.service = service->name;
            options.port = service->port;
            options.token = token;
            connection = make_tunnel_connection(client, options);
        } else {
            if (cluster)
                return fail(errc::invalid_config, "--connection kubectl-tunnel needs a kubeconfig file, not --local");
            KubectlTunnelOptions options;
            options.kubeconfig = flags.kubeconfig;
            options.context = flags.context;
            options.namespace_name = service->namespace_name;
            options.target = "svc/" + service->name;
            options.port = service->port;
            options.token = token;
            connection = make_kubectl_tunnel_connection(client.get_executor(), options);
        }
        if (!connection) return fail(connection.error());
        agent.connection = *connection;
        return {};
    }
    if (url.empty())
        return fail(errc::invalid_config,
                    "agent-sandbox mode needs the router's URL (--router-url, $KUBESANDBOX_ROUTER_URL, or a "
                    "kubesandbox-local kubeconfig), or another --connection");
    DirectConnectionOptions direct;
    direct.url = url;
    direct.token = token;
    auto connection = make_direct_connection(client.get_executor(), direct);
    if (!connection) return fail(connection.error());
    agent.connection = *connection;
    return {};
}

}  // namespace kubesandbox::cli
