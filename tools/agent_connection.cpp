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

}  // namespace

Result<void> choose_agent_connection(const AgentConnectionFlags& flags, const LocalCluster* cluster, KubeClient& client,
                                     AgentSandboxProviderOptions& agent) {
    if (flags.connection == "tunnel") {
        agent.tunnel_to_pods = true;
        return {};
    }
    const bool gateway = flags.connection == "gateway", in_cluster = flags.connection == "in-cluster";
    if (flags.connection != "direct" && !gateway && !in_cluster)
        return fail(errc::invalid_config,
                    "--connection must be direct, in-cluster, gateway or tunnel, not '" + flags.connection + "'");
    // The router: flags, then the environment, then what kubesandbox-local wrote.
    std::string url = flags.router_url, token = flags.router_token;
    if (url.empty()) url = from_environment("KUBESANDBOX_ROUTER_URL");
    if (token.empty()) token = from_environment("KUBESANDBOX_ROUTER_TOKEN");
    // Inside the cluster the router Service has a DNS name (agent-sandbox installs it there).
    if (in_cluster && url.empty()) url = "http://sandbox-router-svc.agent-sandbox-system.svc.cluster.local:8080";
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
    if (url.empty())
        return fail(errc::invalid_config,
                    "agent-sandbox mode needs the router's URL (--router-url, $KUBESANDBOX_ROUTER_URL, or a "
                    "kubesandbox-local kubeconfig), or --connection tunnel");
    DirectConnectionOptions direct;
    direct.url = url;
    direct.token = token;
    auto connection = make_direct_connection(client.get_executor(), direct);
    if (!connection) return fail(connection.error());
    agent.connection = *connection;
    return {};
}

}  // namespace kubesandbox::cli
