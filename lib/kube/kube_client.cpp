#include <kubesandbox/kube_client.hpp>

#include "kube/client_impl.hpp"
#include "kube/exec_plugin.hpp"
#include "kube/retry_policy.hpp"
#include "proto/status.hpp"
#include "proto/watch_decoder.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/beast/core/detail/base64.hpp>
#include <boost/beast/http.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <cstdlib>
#include <deque>
#include <map>
#include <fstream>
#include <poll.h>
#include <sstream>

namespace kubesandbox {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using asio::ip::tcp;
using namespace asio::experimental::awaitable_operators;
using std::chrono::steady_clock;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

namespace {

Result<void> add_ca_pem(asio::ssl::context& ctx, const std::string& pem) {
    std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), BIO_free);
    X509_STORE* store = SSL_CTX_get_cert_store(ctx.native_handle());
    int added = 0;
    while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
        X509_STORE_add_cert(store, cert);
        X509_free(cert);
        ++added;
    }
    ERR_clear_error();
    if (added == 0) return fail(errc::invalid_config, "certificate-authority: no PEM certificate found");
    return {};
}

Result<std::shared_ptr<asio::ssl::context>> make_ssl_context(const KubeConfig& cfg) {
    auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_client);
    ctx->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                     asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 | asio::ssl::context::no_tlsv1_1);
    if (cfg.insecure_skip_tls_verify) {
        ctx->set_verify_mode(asio::ssl::verify_none);
    } else {
        ctx->set_verify_mode(asio::ssl::verify_peer);
        if (!cfg.certificate_authority_pem.empty()) {
            if (auto r = add_ca_pem(*ctx, cfg.certificate_authority_pem); !r) return fail(r.error());
        } else {
            boost::system::error_code ec;
            ctx->set_default_verify_paths(ec);
        }
    }
    if (!cfg.client_certificate_pem.empty() || !cfg.client_key_pem.empty()) {
        boost::system::error_code ec;
        ctx->use_certificate_chain(asio::buffer(cfg.client_certificate_pem), ec);
        if (ec) {
            ERR_clear_error();
            return fail(errc::invalid_config, "client-certificate: not a usable PEM certificate");
        }
        ctx->use_private_key(asio::buffer(cfg.client_key_pem), asio::ssl::context::pem, ec);
        if (ec) {
            ERR_clear_error();
            return fail(errc::invalid_config, "client-key: not a usable PEM private key matching the certificate");
        }
    }
    return ctx;
}

std::string trim(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
    std::size_t i = 0;
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
    return s.substr(i);
}

Error transport_error(boost::system::error_code ec, const std::string& what) {
    return make_error(ec, what + ": " + ec.message());
}

// A typed error that keeps the lower-layer code it was mapped from.
Error mapped_error(errc code, std::string message, boost::system::error_code lower) {
    Error e = make_error(code, std::move(message));
    e.lower_code = lower;
    return e;
}

bool has_credentials(const KubeConfig& c) {
    return !c.token.empty() || !c.token_file.empty() || c.exec.has_value() || !c.username.empty() ||
           !c.password.empty();
}

std::string env_or_empty(const char* name) {
    const char* v = std::getenv(name);
    return v ? std::string(v) : std::string();
}

// Whether an idle keep-alive socket is still usable: readable-with-nothing means the peer closed.
bool looks_alive(net::AnyStream& stream) {
    if (!stream) return false;
    auto& sock = stream.socket();
    if (!sock.is_open()) return false;
    pollfd pfd{sock.native_handle(), POLLIN, 0};
    int n = ::poll(&pfd, 1, 0);
    if (n == 0) return true;  // nothing pending: alive
    // Readable on an idle HTTP connection means EOF, reset, or stray bytes: discard either way.
    return false;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// KubeClient::Impl

KubeClient::Impl::Impl(asio::any_io_executor ex, KubeConfig cfg, KubeClientOptions opts)
    : executor(std::move(ex)),
      config(std::move(cfg)),
      options(std::move(opts)),
      limiter(options.qps, options.burst),
      exec_strand(asio::make_strand(executor)) {
    auto parsed = proto::parse_server_url(config.server);
    if (!parsed) {
        config_error = parsed.error();
    } else {
        url = *parsed;
        if (!url.tls && has_credentials(config) && !proto::is_loopback_host(url.host)) {
            // Bearer tokens and passwords in clear text on the network: refuse (loopback is fine).
            config_error = make_error(errc::invalid_config,
                                      "refusing to send credentials over plain http:// to non-loopback host " +
                                          url.host + ": use https:// for this server");
        } else if (url.tls) {
            auto ctx = make_ssl_context(config);
            if (ctx) ssl_context = *ctx;
            else config_error = ctx.error();
        }
    }
    const std::size_t n = std::max<std::size_t>(1, options.max_connections);
    slots = std::make_unique<SlotChannel>(executor, n);
    for (std::size_t i = 0; i < n; ++i) slots->try_send(boost::system::error_code{});
    init_exec_provider();
}

KubeClient::Impl::~Impl() = default;

void KubeClient::Impl::init_exec_provider() {
    if (config.exec && config.token.empty() && config.token_file.empty())
        exec_provider = std::make_shared<kube::ExecCredentialProvider>(exec_strand, config);
}

asio::awaitable<Result<std::string>> KubeClient::Impl::exec_authorization(bool force_refresh) {
    // The provider is single-threaded: every call runs on its strand.
    auto provider = exec_provider;
    auto fetch = [provider, force_refresh]() -> asio::awaitable<Result<kube::Credential>> {
        co_return co_await provider->get(force_refresh);
    };
    auto credential = co_await asio::co_spawn(exec_strand, std::move(fetch), asio::use_awaitable);
    if (!credential) co_return fail(credential.error());
    if (credential->token.empty())
        co_return fail(errc::exec_plugin_failed,
                       "the exec plugin returned a client certificate without a token; certificate "
                       "credentials from exec plugins are not supported yet");
    co_return "Bearer " + credential->token;
}

std::string KubeClient::Impl::host_header() const {
    const bool default_port = (url.tls && url.port == "443") || (!url.tls && url.port == "80");
    std::string host = url.host.find(':') != std::string::npos ? "[" + url.host + "]" : url.host;
    return default_port ? host : host + ":" + url.port;
}

asio::awaitable<Result<std::string>> KubeClient::Impl::authorization(bool force_refresh) {
    // tokenFile wins over token (client-go): the file is the rotating source of truth; a static
    // token only covers for a file that cannot be read (yet).
    if (!config.token_file.empty()) {
        std::lock_guard lock(mutex);
        const auto now = steady_clock::now();
        if (force_refresh || file_token.empty() || now - file_token_read > options.token_file_reload_interval) {
            std::ifstream in(config.token_file, std::ios::binary);
            if (in) {
                std::stringstream ss;
                ss << in.rdbuf();
                std::string fresh = trim(ss.str());
                if (!fresh.empty()) file_token = std::move(fresh);
                file_token_read = now;
            } else if (file_token.empty() && config.token.empty()) {
                co_return fail(errc::invalid_config, "tokenFile " + config.token_file + ": cannot be read");
            }
        }
        if (!file_token.empty()) co_return "Bearer " + file_token;
        if (!config.token.empty()) co_return "Bearer " + config.token;
        co_return fail(errc::invalid_config, "tokenFile " + config.token_file + ": is empty");
    }
    if (!config.token.empty()) co_return "Bearer " + config.token;
    if (exec_provider) co_return co_await exec_authorization(force_refresh);
    if (!config.username.empty() || !config.password.empty()) {
        std::string plain = config.username + ":" + config.password;
        std::string encoded(beast::detail::base64::encoded_size(plain.size()), '\0');
        encoded.resize(beast::detail::base64::encode(encoded.data(), plain.data(), plain.size()));
        co_return "Basic " + encoded;
    }
    co_return std::string();
}

asio::awaitable<Result<net::AnyStream>> KubeClient::Impl::connect(steady_clock::time_point deadline) {
    if (config_error) co_return fail(*config_error);
    // Proxy selection: explicit proxy-url, else HTTPS_PROXY/HTTP_PROXY unless NO_PROXY matches.
    std::string proxy = config.proxy_url;
    if (proxy.empty()) {
        proxy = env_or_empty(url.tls ? "HTTPS_PROXY" : "HTTP_PROXY");
        if (proxy.empty()) proxy = env_or_empty(url.tls ? "https_proxy" : "http_proxy");
        std::string no_proxy = env_or_empty("NO_PROXY");
        if (no_proxy.empty()) no_proxy = env_or_empty("no_proxy");
        if (!proxy.empty() && proto::no_proxy_matches(no_proxy, url.host, url.port)) proxy.clear();
    }
    std::string connect_host = url.host, connect_port = url.port;
    std::string proxy_authorization;
    if (!proxy.empty()) {
        // The parser strips user:password@ and never repeats it in its messages.
        auto p = proto::parse_server_url(proxy.find("://") == std::string::npos ? "http://" + proxy : proxy);
        if (!p) co_return fail(errc::invalid_config, "proxy-url: " + p.error().message);
        if (p->tls) co_return fail(errc::invalid_config, "proxy-url: only http:// proxies (HTTP CONNECT) are supported");
        connect_host = p->host;
        connect_port = p->port;
        if (p->has_userinfo) proxy_authorization = proto::basic_authorization(p->username, p->password);
    }
    const std::string where = connect_host + ":" + connect_port;

    // Connecting gets connect_timeout, but never past the request's own deadline.
    const auto now = steady_clock::now();
    const auto connect_deadline = (deadline - now > options.connect_timeout) ? now + options.connect_timeout : deadline;
    tcp::resolver resolver(executor);
    asio::steady_timer timer(executor);
    timer.expires_at(connect_deadline);
    auto resolved = co_await (resolver.async_resolve(connect_host, connect_port, use_tuple) || timer.async_wait(use_tuple));
    if (resolved.index() == 1) co_return fail(errc::timeout, "resolving " + where + " timed out");
    auto [rec, endpoints] = std::get<0>(resolved);
    if (rec) co_return fail(transport_error(rec, "resolving " + where));

    tcp::socket socket(executor);
    auto connected = co_await (asio::async_connect(socket, endpoints, use_tuple) || timer.async_wait(use_tuple));
    if (connected.index() == 1) co_return fail(errc::timeout, "connecting to " + where + " timed out");
    if (auto [cec, ep] = std::get<0>(connected); cec) co_return fail(transport_error(cec, "connecting to " + where));
    socket.set_option(tcp::no_delay(true));

    if (!proxy.empty()) {
        // HTTP CONNECT through the proxy, then TLS (or plain HTTP) end to end.
        std::string target = host_header();
        if (target.find(':') == std::string::npos || target.back() == ']') target += ":" + url.port;
        std::string connect_req = "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n";
        if (!proxy_authorization.empty()) connect_req += "Proxy-Authorization: " + proxy_authorization + "\r\n";
        connect_req += "\r\n";
        auto written = co_await (asio::async_write(socket, asio::buffer(connect_req), use_tuple) || timer.async_wait(use_tuple));
        if (written.index() == 1) co_return fail(errc::timeout, "proxy CONNECT timed out");
        if (auto [wec, n] = std::get<0>(written); wec) co_return fail(transport_error(wec, "proxy CONNECT to " + where));
        std::string head;
        auto dyn = asio::dynamic_buffer(head, 16 * 1024);
        auto read = co_await (asio::async_read_until(socket, dyn, "\r\n\r\n", use_tuple) || timer.async_wait(use_tuple));
        if (read.index() == 1) co_return fail(errc::timeout, "proxy CONNECT timed out");
        if (auto [rec2, n] = std::get<0>(read); rec2) co_return fail(transport_error(rec2, "proxy CONNECT to " + where));
        if (!(head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200")))
            co_return fail(errc::connection_failed, "proxy " + where + " refused CONNECT: " + head.substr(0, std::min<std::size_t>(head.find('\r'), 200)));
    }

    if (!url.tls) co_return net::AnyStream::tcp(std::move(socket));

    const std::string sni = config.tls_server_name.empty() ? url.host : config.tls_server_name;
    std::string sni_name = sni;
    boost::system::error_code aec;
    asio::ip::make_address(sni, aec);
    if (!aec) sni_name.clear();  // SNI must not carry an IP address
    const std::string verify = config.insecure_skip_tls_verify ? std::string() : sni;
    auto stream = net::AnyStream::tls_client(std::move(socket), *ssl_context, sni_name, verify);
    auto hs = co_await (stream.async_handshake(use_tuple) || timer.async_wait(use_tuple));
    if (hs.index() == 1) {
        stream.close();
        co_return fail(errc::timeout, "TLS handshake with " + where + " timed out");
    }
    if (auto [hec] = std::get<0>(hs); hec) {
        stream.close();
        if (hec.category() == asio::error::get_ssl_category()) {
            // Certificate verification, protocol or cipher failures: typed, never retried.
            std::string msg = "TLS handshake with " + where + " failed: " + hec.message();
            if (!verify.empty()) msg += " (verifying the server certificate for \"" + verify + "\")";
            co_return fail(mapped_error(errc::tls_error, std::move(msg), hec));
        }
        co_return fail(transport_error(hec, "TLS handshake with " + where));
    }
    co_return stream;
}

std::optional<kube::PooledConnection> KubeClient::Impl::take_idle() {
    std::lock_guard lock(mutex);
    while (!idle.empty()) {
        kube::PooledConnection c = std::move(idle.back());
        idle.pop_back();
        if (steady_clock::now() - c.idle_since < std::chrono::seconds(55) && looks_alive(c.stream)) return c;
        c.stream.close();
    }
    return std::nullopt;
}

void KubeClient::Impl::give_back(kube::PooledConnection connection) {
    connection.idle_since = steady_clock::now();
    connection.stream.expires_never();
    std::lock_guard lock(mutex);
    idle.push_back(std::move(connection));
}

asio::awaitable<Result<kube::RawResponse>> KubeClient::Impl::attempt(const kube::RawRequest& request,
                                                                     const std::string& authorization,
                                                                     kube::AttemptProgress& progress) {
    progress = kube::AttemptProgress{};
    // One absolute deadline for the whole attempt: waiting for a pool slot, connecting, sending
    // and receiving all spend from the same request_timeout.
    const auto deadline = steady_clock::now() + options.request_timeout;
    asio::steady_timer timer(executor);
    timer.expires_at(deadline);
    auto got = co_await (slots->async_receive(use_tuple) || timer.async_wait(use_tuple));
    if (got.index() == 1) co_return fail(errc::timeout, "no connection to the API server became free in time");
    struct SlotGuard {
        SlotChannel* ch;
        ~SlotGuard() { ch->try_send(boost::system::error_code{}); }
    } slot_guard{slots.get()};

    bool reused = true;
    std::optional<kube::PooledConnection> conn = take_idle();
    if (!conn) {
        reused = false;
        auto s = co_await connect(deadline);
        if (!s) {
            progress.connect_failed = true;
            co_return fail(s.error());
        }
        conn.emplace();
        conn->stream = std::move(*s);
    }

    http::request<http::string_body> req;
    req.method_string(request.method);
    req.target(full_target(request.target));
    req.version(11);
    req.set(http::field::host, host_header());
    req.set(http::field::user_agent, options.user_agent);
    req.set(http::field::accept, "application/json");
    if (!authorization.empty()) req.set(http::field::authorization, authorization);
    if (!request.content_type.empty()) req.set(http::field::content_type, request.content_type);
    req.keep_alive(true);
    req.body() = request.body;
    req.prepare_payload();

    const auto remaining = deadline - steady_clock::now();
    if (remaining <= steady_clock::duration::zero()) {
        give_back(std::move(*conn));
        co_return fail(errc::timeout, "API request timed out before it could be sent");
    }
    conn->stream.expires_after(remaining);
    auto [wec, wn] = co_await http::async_write(conn->stream, req, use_tuple);
    if (wec) {
        conn->stream.close();
        if (steady_clock::now() >= deadline)
            co_return fail(mapped_error(errc::timeout, "request timed out while sending", wec));
        // Nothing reached a live server on a stale reused connection: safe to retry anything.
        progress.request_sent = !reused;
        co_return fail(transport_error(wec, "sending " + request.method + " request"));
    }
    progress.request_sent = true;

    http::response_parser<http::string_body> parser;
    parser.body_limit(std::uint64_t(512) * 1024 * 1024);
    parser.header_limit(256 * 1024);
    auto [rec, rn] = co_await http::async_read(conn->stream, conn->buffer, parser, use_tuple);
    if (rec) {
        conn->stream.close();
        if (steady_clock::now() >= deadline) co_return fail(mapped_error(errc::timeout, "API request timed out", rec));
        if (rec == http::error::end_of_stream || rec == http::error::partial_message || rec == asio::error::eof ||
            rec == asio::error::connection_reset || rec == asio::error::broken_pipe ||
            rec == asio::ssl::error::stream_truncated) {
            // Even on a reused connection the server may have acted on the request before
            // closing: a non-idempotent request is never replayed once written (idle sockets
            // are checked before reuse instead).
            co_return fail(mapped_error(errc::connection_closed,
                                        "the API server closed the connection before a full response (" +
                                            rec.message() + ")",
                                        rec));
        }
        co_return fail(mapped_error(errc::invalid_response, "reading the response: " + rec.message(), rec));
    }
    auto msg = parser.release();
    kube::RawResponse out;
    out.status = msg.result_int();
    out.content_type = std::string(msg[http::field::content_type]);
    out.retry_after = std::string(msg[http::field::retry_after]);
    out.body = std::move(msg.body());
    if (msg.keep_alive()) give_back(std::move(*conn));
    else conn->stream.close();
    co_return out;
}

asio::awaitable<Result<kube::RawResponse>> KubeClient::Impl::execute(kube::RawRequest request) {
    if (config_error) co_return fail(*config_error);
    bool auth_refreshed = false;
    for (int number = 0;; ++number) {
        if (auto wait = limiter.reserve(); wait > steady_clock::duration::zero()) {
            asio::steady_timer t(executor, wait);
            co_await t.async_wait(use_tuple);
        }
        auto auth = co_await authorization(false);
        if (!auth) co_return fail(auth.error());
        kube::AttemptProgress progress;
        auto resp = co_await attempt(request, *auth, progress);

        kube::Attempt a;
        a.number = number;
        a.idempotent = request.idempotent;
        a.request_sent = progress.request_sent;
        if (resp) {
            resp->attempt = number;
            if (resp->status == 401 && !auth_refreshed && (exec_provider || !config.token_file.empty())) {
                // Rotated credentials: refresh once; a 401 means the request was not processed.
                auth_refreshed = true;
                auto fresh = co_await authorization(true);
                if (!fresh) co_return fail(fresh.error());
                --number;
                continue;
            }
            a.http_status = resp->status;
            a.retry_after = proto::parse_retry_after(resp->retry_after);
            if (resp->status < 400) co_return resp;
        } else if (resp.error().is(errc::invalid_config) || resp.error().is(errc::cancelled) ||
                   resp.error().is(errc::tls_error) || (resp.error().is(errc::timeout) && !progress.connect_failed)) {
            // A connect timeout is a connection failure like a refused connect and may be retried;
            // a request that ran out of time waiting for its response is not replayed.
            co_return resp;
        }
        std::optional<std::chrono::milliseconds> delay;
        {
            std::lock_guard lock(mutex);
            delay = kube::retry_delay(a, options, rng);
        }
        if (!delay) co_return resp;
        asio::steady_timer t(executor, *delay);
        auto [ec] = co_await t.async_wait(use_tuple);
        if (ec == asio::error::operation_aborted) co_return fail(errc::cancelled, "cancelled while waiting to retry");
    }
}

// ---------------------------------------------------------------------------------------------
// Typed operations

namespace {

Error error_of(const kube::RawResponse& r) {
    return proto::error_from_response(r.status, r.content_type, r.body, r.retry_after);
}

// Whether `existing` carries every label and annotation of the object we tried to create:
// the generic "is it ours" check before a 409 after a lost response counts as success.
bool carries_our_metadata(const json::object& sent, const json::object& existing) {
    const json::value* sm = sent.if_contains("metadata");
    const json::value* em = existing.if_contains("metadata");
    if (!sm || !sm->is_object()) return true;
    for (const char* field : {"labels", "annotations"}) {
        const json::value* ours = sm->get_object().if_contains(field);
        if (!ours || !ours->is_object()) continue;
        const json::value* theirs = em && em->is_object() ? em->get_object().if_contains(field) : nullptr;
        for (const auto& kv : ours->get_object()) {
            if (!theirs || !theirs->is_object()) return false;
            const json::value* v = theirs->get_object().if_contains(kv.key());
            if (!v || *v != kv.value()) return false;
        }
    }
    return true;
}

std::string metadata_name(const json::object& body) {
    if (auto* md = body.if_contains("metadata"); md && md->is_object())
        if (auto* n = md->get_object().if_contains("name"); n && n->is_string()) return std::string(n->get_string());
    return {};
}

// Merge and strategic-merge patches converge to the same object when replayed; a JSON patch
// (add to a list, move, ...) may not, unless a "test" op guards it.
bool patch_is_idempotent(const json::value& body, PatchType type) {
    if (type != PatchType::json) return true;
    if (!body.is_array()) return false;
    for (const auto& op : body.get_array()) {
        if (!op.is_object()) continue;
        if (auto* o = op.get_object().if_contains("op"); o && o->is_string() && o->get_string() == "test") return true;
    }
    return false;
}

}  // namespace

KubeClient::KubeClient(asio::any_io_executor executor, KubeConfig config, KubeClientOptions options)
    : impl_(std::make_shared<Impl>(std::move(executor), std::move(config), std::move(options))) {}
KubeClient::KubeClient(KubeClient&&) noexcept = default;
KubeClient& KubeClient::operator=(KubeClient&&) noexcept = default;
KubeClient::~KubeClient() = default;

const KubeConfig& KubeClient::config() const { return impl_->config; }
const KubeClientOptions& KubeClient::options() const { return impl_->options; }
asio::any_io_executor KubeClient::get_executor() const { return impl_->executor; }

asio::awaitable<Result<json::object>> KubeClient::get(ResourcePath path) {
    kube::RawRequest raw_request{"GET", path.str(), {}, {}, true};
    auto r = co_await impl_->execute(std::move(raw_request));
    if (!r) co_return fail(r.error());
    if (r->status >= 300) co_return fail(error_of(*r));
    co_return proto::decode_object(r->body);
}

asio::awaitable<Result<json::object>> KubeClient::create(ResourcePath collection, json::object body,
                                                         CreateOptions options) {
    const std::string name = metadata_name(body);
    if (options.idempotent && name.empty())
        co_return fail(errc::invalid_argument,
                       "an idempotent create needs metadata.name: a retried generateName create could make a "
                       "second object");
    std::string target = collection.str();
    if (!options.field_manager.empty()) target += "?fieldManager=" + proto::url_encode(options.field_manager);
    std::string serialized = json::serialize(body);
    kube::RawRequest raw_request{"POST", target, std::move(serialized), "application/json", options.idempotent};
    auto r = co_await impl_->execute(std::move(raw_request));
    if (!r) co_return fail(r.error());
    if (r->status >= 300) {
        Error e = error_of(*r);
        if (options.idempotent && r->attempt > 0 && e.is(errc::already_exists)) {
            // A retry hit AlreadyExists: most likely our earlier attempt created the object and
            // its response was lost (or came back as a 5xx). It is ours if it carries our labels
            // and annotations (callers put an owner or creation token there); else it is not.
            const ResourcePath object_path = collection.with_name(name);
            auto existing = co_await get(object_path);
            if (existing && carries_our_metadata(body, *existing)) co_return std::move(*existing);
        }
        co_return fail(std::move(e));
    }
    co_return proto::decode_object(r->body);
}

asio::awaitable<Result<json::object>> KubeClient::replace(ResourcePath path, json::object body) {
    kube::RawRequest raw_request{"PUT", path.str(), json::serialize(body), "application/json", true};
    auto r = co_await impl_->execute(std::move(raw_request));
    if (!r) co_return fail(r.error());
    if (r->status >= 300) co_return fail(error_of(*r));
    co_return proto::decode_object(r->body);
}

asio::awaitable<Result<json::object>> KubeClient::patch(ResourcePath path, json::value body, PatchType type) {
    kube::RawRequest raw_request{"PATCH", path.str(), json::serialize(body),
                                 std::string(proto::patch_content_type(type)), patch_is_idempotent(body, type)};
    auto r = co_await impl_->execute(std::move(raw_request));
    if (!r) co_return fail(r.error());
    if (r->status >= 300) co_return fail(error_of(*r));
    co_return proto::decode_object(r->body);
}

asio::awaitable<Result<DeleteResult>> KubeClient::remove(ResourcePath path, DeleteOptions options) {
    kube::RawRequest raw_request{"DELETE", path.str(), proto::delete_body(options), "application/json", true};
    auto r = co_await impl_->execute(std::move(raw_request));
    if (!r) co_return fail(r.error());
    DeleteResult out;
    if (r->status == 404) {
        Error e = error_of(*r);
        // A 404 for the URL itself (resource type unknown) is not "already gone".
        if (e.message == "the server could not find the requested resource") co_return fail(std::move(e));
        out.found = false;
        co_return out;
    }
    if (r->status >= 300) co_return fail(error_of(*r));
    boost::system::error_code ec;
    out.body = json::parse(r->body, ec);
    if (ec) co_return fail(errc::invalid_response, "delete response is not valid JSON");
    co_return out;
}

asio::awaitable<Result<ListPage>> KubeClient::list(ResourcePath collection, ListOptions options) {
    kube::RawRequest raw_request{"GET", proto::list_target(collection, options), {}, {}, true};
    auto r = co_await impl_->execute(std::move(raw_request));
    if (!r) co_return fail(r.error());
    if (r->status >= 300) co_return fail(error_of(*r));
    co_return proto::decode_list(r->body);
}

asio::awaitable<Result<HttpResponse>> KubeClient::request(std::string method, std::string target,
                                                          std::string body, std::string content_type) {
    const bool idempotent = method == "GET" || method == "HEAD" || method == "PUT" || method == "DELETE";
    kube::RawRequest raw_request{std::string(method), std::string(target), std::move(body),
                                      std::string(content_type), idempotent};
    auto r = co_await impl_->execute(std::move(raw_request));
    if (!r) co_return fail(r.error());
    co_return HttpResponse{r->status, std::move(r->content_type), std::move(r->body)};
}

// ---------------------------------------------------------------------------------------------
// Watch

struct WatchStream::Impl {
    std::shared_ptr<KubeClient::Impl> client;
    net::AnyStream stream;
    beast::flat_buffer buffer;
    http::response_parser<http::buffer_body> parser;
    proto::WatchDecoder decoder;
    std::array<char, 64 * 1024> chunk{};
    std::chrono::milliseconds idle_timeout{0};  // 0 = none
    bool finished = false;
    std::optional<Error> failure;  // reported once the events received before it are out
};

WatchStream::WatchStream() = default;
WatchStream::WatchStream(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
WatchStream::WatchStream(WatchStream&&) noexcept = default;
WatchStream& WatchStream::operator=(WatchStream&&) noexcept = default;
WatchStream::~WatchStream() { close(); }

void WatchStream::close() {
    if (impl_) {
        impl_->stream.close();
        impl_->finished = true;
    }
}

asio::awaitable<Result<std::optional<WatchEvent>>> WatchStream::next() {
    if (!impl_) co_return fail(errc::invalid_argument, "watch stream is not open");
    auto& s = *impl_;
    for (;;) {
        auto ev = s.decoder.next();
        if (!ev) co_return fail(ev.error());
        if (*ev) {
            if ((*ev)->type == WatchEvent::Type::error) {
                // The server ends the stream after an ERROR event; its Status is the error.
                s.finished = true;
                s.stream.close();
                co_return fail(proto::error_from_watch_status((*ev)->object));
            }
            co_return std::move(*ev);
        }
        if (s.failure) co_return fail(*s.failure);
        if (s.finished || s.parser.is_done()) {
            s.finished = true;
            if (s.decoder.buffered() != 0)
                co_return fail(errc::invalid_response, "watch stream ended in the middle of an event");
            co_return std::optional<WatchEvent>{};
        }
        s.parser.get().body().data = s.chunk.data();
        s.parser.get().body().size = s.chunk.size();
        // The idle deadline runs only while we wait for bytes, not while the caller works.
        const auto idle_deadline = steady_clock::now() + s.idle_timeout;
        if (s.idle_timeout.count() > 0) s.stream.expires_after(s.idle_timeout);
        auto [ec, n] = co_await http::async_read_some(s.stream, s.buffer, s.parser, use_tuple);
        if (s.idle_timeout.count() > 0 && !s.finished) s.stream.expires_never();
        if (ec == http::error::need_buffer) ec = {};
        const std::size_t got = s.chunk.size() - s.parser.get().body().size;
        if (got != 0) s.decoder.feed(std::string_view(s.chunk.data(), got));
        if (ec) {
            const bool closed_by_caller = s.finished;
            s.finished = true;
            s.stream.close();
            if (!closed_by_caller && s.idle_timeout.count() > 0 && steady_clock::now() >= idle_deadline)
                s.failure = mapped_error(errc::timeout,
                                         "watch idle: nothing received for " + std::to_string(s.idle_timeout.count()) +
                                             " ms",
                                         ec);
            else if (ec == asio::error::operation_aborted)
                s.failure = make_error(errc::cancelled, "watch cancelled");
            else
                s.failure = mapped_error(errc::connection_closed, "watch connection lost: " + ec.message(), ec);
        }
    }
}

asio::awaitable<Result<WatchStream>> KubeClient::watch(ResourcePath collection, WatchOptions options) {
    auto& c = *impl_;
    if (c.config_error) co_return fail(*c.config_error);
    bool auth_refreshed = false;
    for (int number = 0;; ++number) {
        auto auth = co_await c.authorization(auth_refreshed);
        if (!auth) co_return fail(auth.error());
        auto stream = co_await c.connect();
        kube::Attempt a;
        a.number = number;
        a.idempotent = true;
        if (stream) {
            auto impl = std::make_unique<WatchStream::Impl>();
            impl->client = impl_;
            impl->stream = std::move(*stream);
            impl->idle_timeout = options.idle_timeout;
            http::request<http::empty_body> req{http::verb::get, c.full_target(proto::watch_target(collection, options)), 11};
            req.set(http::field::host, c.host_header());
            req.set(http::field::user_agent, c.options.user_agent);
            req.set(http::field::accept, "application/json");
            if (!auth->empty()) req.set(http::field::authorization, *auth);
            impl->stream.expires_after(c.options.request_timeout);
            auto [wec, wn] = co_await http::async_write(impl->stream, req, use_tuple);
            boost::system::error_code hec = wec;
            if (!wec) {
                impl->parser.body_limit(boost::none);
                auto [rec, rn] = co_await http::async_read_header(impl->stream, impl->buffer, impl->parser, use_tuple);
                hec = rec;
            }
            if (!hec) {
                const unsigned status = impl->parser.get().result_int();
                if (status == 200) {
                    impl->stream.expires_never();
                    co_return WatchStream(std::move(impl));
                }
                // Read the (small) error body, then report it.
                std::string body;
                std::array<char, 8192> buf{};
                while (!impl->parser.is_done() && body.size() < 64 * 1024) {
                    impl->parser.get().body().data = buf.data();
                    impl->parser.get().body().size = buf.size();
                    auto [bec, bn] = co_await http::async_read_some(impl->stream, impl->buffer, impl->parser, use_tuple);
                    body.append(buf.data(), buf.size() - impl->parser.get().body().size);
                    if (bec && bec != http::error::need_buffer) break;
                }
                impl->stream.close();
                Error e = proto::error_from_response(status, std::string(impl->parser.get()[http::field::content_type]), body,
                                                     std::string(impl->parser.get()[http::field::retry_after]));
                if (status == 401 && !auth_refreshed && (c.exec_provider || !c.config.token_file.empty())) {
                    auth_refreshed = true;
                    --number;
                    continue;
                }
                a.http_status = status;
                a.retry_after = e.retry_after;
                std::optional<std::chrono::milliseconds> delay;
                {
                    std::lock_guard lock(c.mutex);
                    delay = kube::retry_delay(a, c.options, c.rng);
                }
                if (!delay) co_return fail(std::move(e));
                asio::steady_timer t(c.executor, *delay);
                co_await t.async_wait(use_tuple);
                continue;
            }
            impl->stream.close();
            stream = fail(mapped_error(errc::connection_closed, "watch request failed: " + hec.message(), hec));
        }
        if (stream.error().is(errc::invalid_config) || stream.error().is(errc::tls_error)) co_return fail(stream.error());
        std::optional<std::chrono::milliseconds> delay;
        {
            std::lock_guard lock(c.mutex);
            delay = kube::retry_delay(a, c.options, c.rng);
        }
        if (!delay) co_return fail(stream.error());
        asio::steady_timer t(c.executor, *delay);
        co_await t.async_wait(use_tuple);
    }
}

// ---------------------------------------------------------------------------------------------
// ListWatch

namespace {

std::string object_key(const json::object& o) {
    const json::value* md = o.if_contains("metadata");
    if (!md || !md->is_object()) return {};
    std::string key;
    if (auto* ns = md->get_object().if_contains("namespace"); ns && ns->is_string()) key = std::string(ns->get_string());
    key += '/';
    if (auto* n = md->get_object().if_contains("name"); n && n->is_string()) key += std::string(n->get_string());
    return key;
}

std::string object_rv(const json::object& o) {
    if (auto* md = o.if_contains("metadata"); md && md->is_object())
        if (auto* rv = md->get_object().if_contains("resourceVersion"); rv && rv->is_string())
            return std::string(rv->get_string());
    return {};
}

bool is_too_old(const Error& e) { return e.is(errc::expired) || e.is(errc::gone); }

void push_event(std::deque<WatchEvent>& out, WatchEvent::Type type, const json::object& object) {
    WatchEvent ev;
    ev.type = type;
    ev.object = object;
    out.push_back(std::move(ev));
}

// After a (re-)list: the events that turn what the caller knew into what the list says.
void diff_list(std::map<std::string, json::object>& known, std::map<std::string, json::object> listed,
               std::deque<WatchEvent>& out) {
    for (const auto& [key, obj] : listed) {
        auto it = known.find(key);
        if (it == known.end()) push_event(out, WatchEvent::Type::added, obj);
        else if (object_rv(it->second) != object_rv(obj)) push_event(out, WatchEvent::Type::modified, obj);
    }
    for (const auto& [key, obj] : known)
        if (!listed.contains(key)) push_event(out, WatchEvent::Type::deleted, obj);
    known = std::move(listed);
}

}  // namespace

struct ListWatch::State {
    State(KubeClient c, ResourcePath p, WatchOptions o)
        : client(std::move(c)), collection(std::move(p)), options(std::move(o)) {}
    KubeClient client;
    ResourcePath collection;
    WatchOptions options;
    std::map<std::string, json::object> known;  // what the caller has been told exists
    std::deque<WatchEvent> pending;
    std::optional<WatchStream> stream;
    std::string resource_version;
    bool need_list = true;
    int lists = 0;
    int expired_in_a_row = 0;  // 410 right after a fresh list: give up instead of spinning
};

ListWatch::ListWatch(KubeClient client, ResourcePath collection, WatchOptions options)
    : state_(std::make_unique<State>(std::move(client), std::move(collection), std::move(options))) {}
ListWatch::ListWatch(ListWatch&&) noexcept = default;
ListWatch& ListWatch::operator=(ListWatch&&) noexcept = default;
ListWatch::~ListWatch() { close(); }

void ListWatch::close() {
    if (state_ && state_->stream) state_->stream->close();
}

int ListWatch::lists_made() const noexcept { return state_ ? state_->lists : 0; }

asio::awaitable<Result<WatchEvent>> ListWatch::next() {
    if (!state_) co_return fail(errc::invalid_argument, "list-watch is not open");
    auto& s = *state_;
    for (;;) {
        if (!s.pending.empty()) {
            WatchEvent ev = std::move(s.pending.front());
            s.pending.pop_front();
            co_return std::move(ev);
        }
        if (s.need_list) {
            ListOptions lo;
            lo.label_selector = s.options.label_selector;
            lo.field_selector = s.options.field_selector;
            lo.limit = 500;
            std::map<std::string, json::object> listed;
            std::string rv;
            for (;;) {
                auto page = co_await s.client.list(s.collection, lo);
                if (!page) co_return fail(page.error());
                for (auto& item : page->items) {
                    if (!item.is_object()) continue;
                    std::string key = object_key(item.get_object());
                    listed[key] = std::move(item.get_object());
                }
                rv = page->resource_version;
                if (page->continue_token.empty()) break;
                lo.continue_token = page->continue_token;
            }
            ++s.lists;
            diff_list(s.known, std::move(listed), s.pending);
            s.resource_version = rv;
            s.need_list = false;
            continue;
        }
        if (!s.stream) {
            WatchOptions wo = s.options;
            wo.resource_version = s.resource_version;
            auto w = co_await s.client.watch(s.collection, wo);
            if (!w) {
                if (is_too_old(w.error())) {
                    s.need_list = true;  // now, or on the caller's next call after giving up
                    if (++s.expired_in_a_row <= 2) continue;
                    s.expired_in_a_row = 0;
                }
                co_return fail(w.error());
            }
            s.stream.emplace(std::move(*w));
        }
        auto ev = co_await s.stream->next();
        if (!ev) {
            s.stream.reset();
            if (is_too_old(ev.error())) {
                s.need_list = true;
                if (++s.expired_in_a_row <= 2) continue;
                s.expired_in_a_row = 0;
            }
            co_return fail(ev.error());
        }
        if (!*ev) {  // normal end (timeoutSeconds): resume from the last resourceVersion seen
            s.stream.reset();
            continue;
        }
        s.expired_in_a_row = 0;
        WatchEvent& e = **ev;
        if (auto rv = object_rv(e.object); !rv.empty()) s.resource_version = rv;
        if (e.type == WatchEvent::Type::bookmark) continue;
        const std::string key = object_key(e.object);
        if (e.type == WatchEvent::Type::deleted) s.known.erase(key);
        else s.known[key] = e.object;
        co_return std::move(e);
    }
}

}  // namespace kubesandbox
