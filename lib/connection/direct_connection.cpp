// The direct connection: the router at a URL (TCP, or TLS for https://), over the pool.
#include "connection/pooled_connection.hpp"
#include "net/connector.hpp"

#include <boost/url/parse.hpp>

namespace kubesandbox {

namespace asio = boost::asio;

Result<std::shared_ptr<RouterConnection>> make_direct_connection(asio::any_io_executor executor,
                                                                 DirectConnectionOptions options) {
    auto url = boost::urls::parse_absolute_uri(options.url);
    if (!url) return fail(errc::invalid_config, "invalid router URL: " + options.url);
    std::string scheme(url->scheme());
    if (scheme != "http" && scheme != "https")
        return fail(errc::invalid_config, "router URL must be http:// or https://: " + options.url);
    if (url->host().empty()) return fail(errc::invalid_config, "router URL has no host: " + options.url);
    net::ConnectTarget target;
    target.tls = scheme == "https";
    target.host = std::string(url->host_type() == boost::urls::host_type::ipv6 ? url->host_address() : url->host());
    target.port = url->has_port() ? std::string(url->port()) : (target.tls ? "443" : "80");
    target.connect_timeout = options.connect_timeout;
    if (target.tls) {
        if (auto tls = net::use_tls(target, options.ca_pem, options.insecure_skip_verify); !tls)
            return fail(tls.error());
    }
    std::string prefix(url->encoded_path());
    while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
    std::string host = net::host_header(target.host, target.port, target.tls);
    PooledConnectionSettings settings;
    settings.description = options.url;
    settings.token = options.token;
    settings.prefix = std::move(prefix);
    settings.host = std::move(host);
    settings.max_connections = options.max_connections;
    settings.max_idle = options.max_idle;
    StreamOpener open = [executor, target](std::chrono::steady_clock::time_point deadline) {
        return net::connect(executor, target, deadline);
    };
    return make_pooled_router_connection(std::move(executor), std::move(settings), std::move(open));
}

}  // namespace kubesandbox
