#include "net/connector.hpp"

#include "net/tls_context.hpp"
#include "net/with_timeout.hpp"
#include "proto/request.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/write.hpp>

#include <cstdlib>

namespace kubesandbox::net {

namespace asio = boost::asio;
using asio::ip::tcp;
using std::chrono::steady_clock;

namespace {

std::string env_or_empty(const char* name) {
    const char* v = std::getenv(name);
    return v ? std::string(v) : std::string();
}

Error transport_error(boost::system::error_code ec, const std::string& what) {
    return make_error(ec, what + ": " + ec.message());
}

// The CONNECT exchange on a fresh socket; the proxy's refusal is errc::connection_failed.
asio::awaitable<Result<void>> proxy_connect(tcp::socket& socket, const std::string& authority,
                                            const std::string& proxy_authorization, const std::string& where,
                                            asio::steady_timer& timer) {
    std::string request = "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\n";
    if (!proxy_authorization.empty()) request += "Proxy-Authorization: " + proxy_authorization + "\r\n";
    request += "\r\n";
    auto written = co_await with_timeout(asio::async_write(socket, asio::buffer(request), use_tuple), timer);
    if (!written) co_return fail(errc::timeout, "proxy CONNECT timed out");
    if (auto [ec, n] = *written; ec) co_return fail(transport_error(ec, "proxy CONNECT to " + where));
    std::string head;
    auto dyn = asio::dynamic_buffer(head, 16 * 1024);
    auto read = co_await with_timeout(asio::async_read_until(socket, dyn, "\r\n\r\n", use_tuple), timer);
    if (!read) co_return fail(errc::timeout, "proxy CONNECT timed out");
    if (auto [ec, n] = *read; ec) co_return fail(transport_error(ec, "proxy CONNECT to " + where));
    if (!(head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200")))
        co_return fail(errc::connection_failed, "proxy " + where + " refused CONNECT: " +
                                                    head.substr(0, std::min<std::size_t>(head.find('\r'), 200)));
    co_return Result<void>{};
}

}  // namespace

Result<void> use_tls(ConnectTarget& target, const std::string& ca_pem, bool insecure_skip_verify) {
    TlsClientSettings tls;
    tls.ca_pem = ca_pem;
    tls.insecure_skip_verify = insecure_skip_verify;
    auto context = make_tls_client_context(tls);
    if (!context) return fail(context.error());
    target.tls = true;
    target.tls_context = *context;
    target.verify_server_name = !insecure_skip_verify;
    return {};
}

std::string host_header(std::string_view host, std::string_view port, bool tls) {
    const bool default_port = (tls && port == "443") || (!tls && port == "80");
    std::string h = host.find(':') != std::string_view::npos ? "[" + std::string(host) + "]" : std::string(host);
    return default_port ? h : h + ":" + std::string(port);
}

std::string proxy_from_environment(bool tls, std::string_view host, std::string_view port) {
    std::string proxy = env_or_empty(tls ? "HTTPS_PROXY" : "HTTP_PROXY");
    if (proxy.empty()) proxy = env_or_empty(tls ? "https_proxy" : "http_proxy");
    std::string no_proxy = env_or_empty("NO_PROXY");
    if (no_proxy.empty()) no_proxy = env_or_empty("no_proxy");
    if (!proxy.empty() && proto::no_proxy_matches(no_proxy, host, port)) proxy.clear();
    return proxy;
}

asio::awaitable<Result<AnyStream>> connect(asio::any_io_executor executor, ConnectTarget target,
                                           steady_clock::time_point deadline) {
    std::string connect_host = target.host, connect_port = target.port;
    std::string proxy_authorization;
    if (!target.proxy_url.empty()) {
        // The parser strips user:password@ and never repeats it in its messages.
        const std::string& proxy = target.proxy_url;
        auto p = proto::parse_server_url(proxy.find("://") == std::string::npos ? "http://" + proxy : proxy);
        if (!p) co_return fail(errc::invalid_config, "proxy-url: " + p.error().message);
        if (p->tls)
            co_return fail(errc::invalid_config, "proxy-url: only http:// proxies (HTTP CONNECT) are supported");
        connect_host = p->host;
        connect_port = p->port;
        if (p->has_userinfo) proxy_authorization = proto::basic_authorization(p->username, p->password);
    }
    const std::string where = connect_host + ":" + connect_port;

    std::optional<ConnectGate::Permit> permit;
    if (target.tls && target.gate) {
        permit = co_await target.gate->enter(deadline);
        if (!permit)
            co_return fail(errc::timeout, "connecting to " + where + " timed out waiting behind " +
                                              std::to_string(target.gate->limit()) + " connections being opened");
    }
    const auto now = steady_clock::now();
    const auto connect_deadline = (deadline - now > target.connect_timeout) ? now + target.connect_timeout : deadline;
    asio::steady_timer timer(executor);
    timer.expires_at(connect_deadline);
    tcp::resolver resolver(executor);
    auto resolved = co_await with_timeout(resolver.async_resolve(connect_host, connect_port, use_tuple), timer);
    if (!resolved) co_return fail(errc::timeout, "resolving " + where + " timed out");
    auto [rec, endpoints] = std::move(*resolved);
    if (rec) co_return fail(transport_error(rec, "resolving " + where));

    tcp::socket socket(executor);
    auto connected = co_await with_timeout(asio::async_connect(socket, endpoints, use_tuple), timer);
    if (!connected) co_return fail(errc::timeout, "connecting to " + where + " timed out");
    if (auto [cec, ep] = *connected; cec) co_return fail(transport_error(cec, "connecting to " + where));
    socket.set_option(tcp::no_delay(true));

    if (!target.proxy_url.empty()) {
        // HTTP CONNECT through the proxy, then TLS (or plain HTTP) end to end.
        std::string authority = host_header(target.host, target.port, target.tls);
        if (authority.find(':') == std::string::npos || authority.back() == ']') authority += ":" + target.port;
        auto tunnel = co_await proxy_connect(socket, authority, proxy_authorization, where, timer);
        if (!tunnel) co_return fail(tunnel.error());
    }

    if (!target.tls) co_return AnyStream::tcp(std::move(socket));

    const std::string name = target.tls_server_name.empty() ? target.host : target.tls_server_name;
    std::string sni = name;
    boost::system::error_code aec;
    asio::ip::make_address(name, aec);
    if (!aec) sni.clear();  // SNI must not carry an IP address
    const std::string verify = target.verify_server_name ? name : std::string();
    // Sessions are resumed only toward the same server, name and verification as their own.
    const std::string session_key = target.host + ":" + target.port + "|" + sni + "|" + verify;
    auto stream = AnyStream::tls_client(std::move(socket), *target.tls_context, sni, verify, session_key);
    auto hs = co_await with_timeout(stream.async_handshake(use_tuple), timer);
    if (!hs) {
        stream.close();
        co_return fail(errc::timeout, "TLS handshake with " + where + " timed out");
    }
    if (auto [hec] = *hs; hec) {
        stream.close();
        if (hec.category() == asio::error::get_ssl_category()) {
            // Certificate verification, protocol or cipher failures: typed, never retried.
            std::string msg = "TLS handshake with " + where + " failed: " + hec.message();
            if (!verify.empty()) msg += " (verifying the server certificate for \"" + verify + "\")";
            Error e = make_error(errc::tls_error, std::move(msg));
            e.lower_code = hec;
            co_return fail(std::move(e));
        }
        co_return fail(transport_error(hec, "TLS handshake with " + where));
    }
    co_return stream;
}

}  // namespace kubesandbox::net
