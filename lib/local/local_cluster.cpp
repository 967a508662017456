// LocalCluster: owns the io_context thread, the listener, the API server and the kubelet.
#include <kubesandbox/kube_client.hpp>
#include <kubesandbox/local_cluster.hpp>

#include "local/agent_controller.hpp"
#include "local/api_server.hpp"
#include "local/endpoints_controller.hpp"
#include "local/kubelet.hpp"
#include "local/router.hpp"
#include "local/router_objects.hpp"
#include "local/severable_stream.hpp"
#include "local/store.hpp"
#include "local/tls_certs.hpp"
#include "net/any_stream.hpp"
#include "proto/kubeconfig.hpp"
#include "util/random.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <thread>

namespace kubesandbox {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

namespace {

// kubesandbox-runtime: the option, $KUBESANDBOX_RUNTIME, the installed program, the built one.
std::filesystem::path find_runtime_program(const std::filesystem::path& configured) {
    std::error_code ec;
    if (!configured.empty()) return configured;
    if (const char* env = std::getenv("KUBESANDBOX_RUNTIME"); env && *env) return env;
    for (const char* candidate : {KUBESANDBOX_RUNTIME_INSTALLED, KUBESANDBOX_RUNTIME_BUILT}) {
        if (std::filesystem::is_regular_file(candidate, ec)) return candidate;
    }
    return {};
}

// Writes `y` to `path` so that it is never readable by others, not even briefly: created
// 0600 beside it, then renamed over.
Result<void> write_private_file(const std::filesystem::path& path, const std::string& y) {
    std::filesystem::path tmp = path;
    tmp += ".tmp." + std::to_string(::getpid());
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return fail(errc::io_error, "cannot write " + tmp.string() + ": " + std::strerror(errno));
    bool written = ::fchmod(fd, 0600) == 0;
    for (std::size_t off = 0; written && off < y.size();) {
        auto n = ::write(fd, y.data() + off, y.size() - off);
        if (n < 0 && errno == EINTR) continue;
        written = n > 0;
        if (written) off += static_cast<std::size_t>(n);
    }
    written = written && ::fsync(fd) == 0;
    int saved = errno;
    ::close(fd);
    std::error_code ec;
    if (!written) {
        std::filesystem::remove(tmp, ec);
        return fail(errc::io_error, "cannot write " + tmp.string() + ": " + std::strerror(saved));
    }
    std::filesystem::rename(tmp, path, ec);
    if (ec) {
        std::error_code ignored;
        std::filesystem::remove(tmp, ignored);
        return fail(errc::io_error, "cannot rename " + tmp.string() + " to " + path.string() + ": " + ec.message());
    }
    return {};
}

}  // namespace

struct LocalCluster::Impl {
    LocalClusterOptions options;
    std::string token;
    std::string url;
    std::uint16_t port = 0;
    local::ServingCerts certs;
    std::filesystem::path data_dir;
    bool remove_data_dir = false;

    local::FaultList faults;
    asio::io_context ioc{1};
    // Keeps run() going while stop() drains connections.
    asio::executor_work_guard<asio::io_context::executor_type> work{ioc.get_executor()};
    std::optional<asio::ssl::context> ssl;
    std::optional<tcp::acceptor> acceptor;
    tcp::endpoint listen_endpoint;
    local::SeverableStreams accepted;  // every API connection, cut by restart_api_server()
    std::unique_ptr<local::ApiServer> api;
    std::unique_ptr<local::Kubelet> kubelet;
    std::unique_ptr<local::SandboxRouter> router;
    local::RouterOptions router_options;
    std::uint16_t router_port = 0;
    std::unique_ptr<local::AgentController> controller;
    std::unique_ptr<local::EndpointsController> endpoints;
    std::future<void> defaults_ready;
    std::future<void> router_objects_ready;
    std::string router_url;
    std::thread thread;
    bool stopped = false;
    bool closing = false;  // stop() has begun (on the executor)
    std::mutex stop_mutex;

    Result<std::uint16_t> start_router(std::uint16_t port) {
        local::Kubelet* k = kubelet.get();
        router = std::make_unique<local::SandboxRouter>(
            ioc.get_executor(), router_options,
            [k](std::string_view ns, std::string_view name) { return k->network_pid(ns, name); });
        auto bound = router->start(options.bind_address, port);
        if (bound) router_port = *bound;
        return bound;
    }

    // A new router on the same port (on the executor); the old one's connections are cut and it
    // is kept a moment longer, while their coroutines finish on this thread.
    void replace_router() {
        std::shared_ptr<local::SandboxRouter> retired(std::move(router));
        retired->stop();
        if (auto again = start_router(router_port); !again)
            options.logger.warning("local cluster: router restart: " + again.error().describe());
        auto timer = std::make_shared<asio::steady_timer>(ioc, std::chrono::seconds(1));
        timer->async_wait([retired, timer](const error_code&) {});
    }

    asio::awaitable<void> accept_loop() {
        for (;;) {
            auto [ec, socket] = co_await acceptor->async_accept(asio::as_tuple(asio::use_awaitable));
            if (ec) {
                if (ec == asio::error::operation_aborted || !acceptor->is_open()) co_return;
                continue;
            }
            socket.set_option(tcp::no_delay(true), ec);
            asio::co_spawn(ioc, serve_connection(std::move(socket)), asio::detached);
        }
    }

    asio::awaitable<void> serve_connection(tcp::socket socket) {
        net::AnyStream stream;
        if (ssl) {
            stream = net::AnyStream::tls_server(std::move(socket), *ssl);
            stream.expires_after(std::chrono::seconds(10));
            auto [ec] = co_await stream.async_handshake(asio::as_tuple(asio::use_awaitable));
            if (ec) {
                stream.close();
                co_return;
            }
        } else {
            stream = net::AnyStream::tcp(std::move(socket));
        }
        co_await api->serve(accepted.track(std::move(stream)));
    }
};

LocalCluster::LocalCluster(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

LocalCluster::~LocalCluster() { stop(); }

Result<std::unique_ptr<LocalCluster>> LocalCluster::start(LocalClusterOptions options) {
    auto impl = std::make_unique<Impl>();
    impl->options = options;
    impl->token = options.token.empty() ? util::random_hex(24) : options.token;
    if (options.tls) {
        auto certs = local::generate_serving_certs();
        if (!certs) return fail(certs.error());
        impl->certs = std::move(*certs);
        impl->ssl.emplace(asio::ssl::context::tls_server);
        error_code ec;
        impl->ssl->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                                   asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                                   asio::ssl::context::no_tlsv1_1,
                               ec);
        impl->ssl->use_certificate_chain(asio::buffer(impl->certs.cert_pem), ec);
        if (!ec) impl->ssl->use_private_key(asio::buffer(impl->certs.key_pem), asio::ssl::context::pem, ec);
        if (ec) return fail(make_error(ec, "cannot load the generated serving certificate"));
        // Clients resume with the tickets OpenSSL sends after each handshake (stateless, keyed
        // per context); the id context keeps resumption working if client certificates are
        // ever verified here.
        static constexpr unsigned char session_context[] = "kubesandbox-local";
        SSL_CTX_set_session_id_context(impl->ssl->native_handle(), session_context, sizeof session_context - 1);
    }
    // Data directory.
    std::error_code fec;
    if (options.data_dir.empty()) {
        std::string tmpl = (std::filesystem::temp_directory_path(fec) / "kubesandbox-local-XXXXXX").string();
        if (!mkdtemp(tmpl.data())) return fail(errc::io_error, "cannot create a temporary data directory");
        impl->data_dir = tmpl;
        impl->remove_data_dir = true;
        // mkdtemp makes it 0700; pods run as an unprivileged host uid that must traverse it.
        std::filesystem::permissions(impl->data_dir,
                                     std::filesystem::perms::owner_all | std::filesystem::perms::group_read |
                                         std::filesystem::perms::group_exec | std::filesystem::perms::others_read |
                                         std::filesystem::perms::others_exec,
                                     fec);
    } else {
        impl->data_dir = options.data_dir;
        if (!options.allow_no_isolation) {
            if (auto problem = local::data_dir_problem(impl->data_dir); !problem.empty())
                return fail(errc::invalid_argument, problem);
        }
        std::filesystem::create_directories(impl->data_dir, fec);
        if (fec)
            return fail(errc::io_error,
                        "cannot create data directory " + impl->data_dir.string() + ": " + fec.message());
    }
    // Listener.
    error_code ec;
    auto address = asio::ip::make_address(options.bind_address, ec);
    if (ec) return fail(errc::invalid_argument, "invalid bind address: " + options.bind_address);
    tcp::endpoint ep(address, options.port);
    impl->acceptor.emplace(impl->ioc);
    impl->acceptor->open(ep.protocol(), ec);
    if (!ec) impl->acceptor->set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) impl->acceptor->bind(ep, ec);
    if (!ec) impl->acceptor->listen(asio::socket_base::max_listen_connections, ec);
    if (ec)
        return fail(make_error(ec, "cannot listen on " + options.bind_address + ":" + std::to_string(options.port)));
    impl->port = impl->acceptor->local_endpoint().port();
    impl->listen_endpoint = impl->acceptor->local_endpoint();
    std::string host = address.is_v6() ? "[" + options.bind_address + "]" : options.bind_address;
    if (address.is_unspecified()) host = address.is_v6() ? "[::1]" : "127.0.0.1";
    impl->url = std::string(options.tls ? "https://" : "http://") + host + ":" + std::to_string(impl->port);

    local::ApiServerOptions api_opts;
    api_opts.token = impl->token;
    api_opts.allow_anonymous = options.allow_anonymous;
    api_opts.continue_token_ttl = options.continue_token_ttl;
    api_opts.server_address = host + ":" + std::to_string(impl->port);
    impl->api = std::make_unique<local::ApiServer>(impl->ioc.get_executor(), api_opts, impl->faults);
    local::KubeletOptions kopts;
    kopts.data_dir = impl->data_dir / "pods";
    kopts.images = options.images;
    kopts.allow_no_isolation = options.allow_no_isolation;
    kopts.bwrap_program = options.bwrap_program;
    kopts.exec_spawner = options.exec_spawner;
    kopts.logger = options.logger;
    kopts.runtime_program = find_runtime_program(options.runtime_program);
    local::ApiServer* api = impl->api.get();
    impl->kubelet = std::make_unique<local::Kubelet>(
        impl->ioc.get_executor(), kopts,
        [api](const std::string& ns, const std::string& name, const std::string& uid, boost::json::object status) {
            api->write_pod_status(ns, name, uid, std::move(status));
        });
    impl->api->set_kubelet(impl->kubelet.get());

    // The sandbox router, on the same address; it asks the kubelet (same thread) for pods.
    impl->router_options.token = impl->token;
    auto router_port = impl->start_router(options.router_port);
    if (!router_port) return fail(router_port.error());
    impl->router_url = "http://" + host + ":" + std::to_string(*router_port);

    Impl* raw = impl.get();
    asio::co_spawn(impl->ioc, raw->accept_loop(), asio::detached);
    // The controllers are clients of this API server, on its executor. Part of the cluster: no
    // client-side rate limit (50 QPS would cap claims per second).
    KubeConfig self_config = KubeConfig::from_url(impl->url, impl->token, "default");
    self_config.certificate_authority_pem = impl->certs.ca_pem;
    KubeClientOptions self_client;
    self_client.qps = 0;
    impl->endpoints = std::make_unique<local::EndpointsController>(
        impl->ioc.get_executor(), KubeClient(impl->ioc.get_executor(), self_config, self_client), options.logger);
    impl->endpoints->start();
    // The objects that lead to the router (router_objects.hpp), there before start() returns.
    if (options.router_objects) {
        auto published = std::make_shared<std::promise<void>>();
        raw->router_objects_ready = published->get_future();
        std::string router_host =
            address.is_unspecified() ? (address.is_v6() ? "::1" : "127.0.0.1") : options.bind_address;
        auto publish = [](KubeClient client, std::string host, std::uint16_t port, Logger logger,
                          std::shared_ptr<std::promise<void>> done) -> asio::awaitable<void> {
            auto made = co_await local::publish_router(std::move(client), std::move(host), port);
            if (!made) logger.warning("local cluster: router objects: " + made.error().describe());
            done->set_value();
        };
        asio::co_spawn(impl->ioc,
                       publish(KubeClient(impl->ioc.get_executor(), self_config, self_client), router_host,
                               impl->router_port, options.logger, published),
                       asio::detached);
    }
    if (options.agent_sandbox) {
        local::AgentControllerOptions controller_opts;
        controller_opts.default_pool_replicas = options.agent_sandbox_pool_replicas;
        impl->controller = std::make_unique<local::AgentController>(
            impl->ioc.get_executor(), KubeClient(impl->ioc.get_executor(), self_config, self_client), controller_opts,
            options.logger);
        // Started before the cluster's thread runs; that thread then creates the defaults, and
        // start() returns once they exist so a claim made right away finds its pool.
        auto defaults = std::make_shared<std::promise<void>>();
        auto defaults_ready = defaults->get_future();
        impl->controller->start([defaults] { defaults->set_value(); });
        raw->defaults_ready = std::move(defaults_ready);
    }
    impl->thread = std::thread([raw] {
        // The kubelet writes to pipes whose reader may have exited (a command that ignores its
        // stdin): that must be EPIPE on this thread, never a SIGPIPE that ends the host process.
        sigset_t pipe_only;
        sigemptyset(&pipe_only);
        sigaddset(&pipe_only, SIGPIPE);
        pthread_sigmask(SIG_BLOCK, &pipe_only, nullptr);
        for (;;) {
            try {
                raw->ioc.run();
                break;
            } catch (...) {
                // A handler threw: keep serving (errors are values; this is a backstop).
            }
        }
    });
    if (raw->defaults_ready.valid()) raw->defaults_ready.wait_for(std::chrono::seconds(10));
    if (raw->router_objects_ready.valid()) raw->router_objects_ready.wait_for(std::chrono::seconds(10));
    return std::unique_ptr<LocalCluster>(new LocalCluster(std::move(impl)));
}

void LocalCluster::stop() {
    if (!impl_) return;
    std::lock_guard lock(impl_->stop_mutex);
    if (impl_->stopped) return;
    impl_->stopped = true;
    Impl* raw = impl_.get();
    if (raw->thread.joinable()) {
        std::promise<void> done;
        asio::post(raw->ioc, [raw, &done] {
            raw->closing = true;
            error_code ec;
            raw->acceptor->close(ec);
            raw->router->stop();
            if (raw->controller) raw->controller->stop();
            if (raw->endpoints) raw->endpoints->stop();
            raw->api->shutdown();
            raw->kubelet->shutdown();
            done.set_value();
        });
        done.get_future().wait();
        // Let the closed connections' coroutines finish before their objects go away.
        for (int i = 0; i < 150; ++i) {
            std::promise<std::size_t> open;
            asio::post(raw->ioc, [raw, &open] { open.set_value(raw->api->open_connections()); });
            if (open.get_future().get() == 0) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        raw->ioc.stop();
        raw->thread.join();
    }
    raw->controller.reset();
    raw->endpoints.reset();
    raw->router.reset();
    raw->api.reset();
    raw->kubelet.reset();
    if (raw->remove_data_dir) {
        std::error_code fec;
        std::filesystem::remove_all(raw->data_dir, fec);
    }
}

std::string LocalCluster::url() const { return impl_->url; }
std::uint16_t LocalCluster::port() const { return impl_->port; }
std::string LocalCluster::router_url() const { return impl_->router_url; }
const std::string& LocalCluster::token() const { return impl_->token; }
const std::string& LocalCluster::ca_pem() const { return impl_->certs.ca_pem; }
bool LocalCluster::isolation_available() const { return impl_->kubelet && impl_->kubelet->isolation_available(); }
std::string LocalCluster::isolation_problem() const {
    if (!impl_->kubelet) return "the cluster is stopped";
    return impl_->kubelet->isolation_available() ? std::string() : impl_->kubelet->isolation_problem();
}

KubeConfig LocalCluster::kube_config(std::string namespace_name) const {
    KubeConfig c = KubeConfig::from_url(impl_->url, impl_->token, std::move(namespace_name));
    c.certificate_authority_pem = impl_->certs.ca_pem;
    c.context_name = "kubesandbox-local";
    c.cluster_name = "kubesandbox-local";
    c.user_name = "kubesandbox-local";
    return c;
}

Result<void> LocalCluster::write_kubeconfig(const std::filesystem::path& path) const {
    std::string y;
    y += "apiVersion: v1\nkind: Config\nclusters:\n- name: kubesandbox-local\n  cluster:\n";
    y += "    server: " + impl_->url + "\n";
    if (!impl_->certs.ca_pem.empty())
        y += "    certificate-authority-data: " + proto::base64_encode(impl_->certs.ca_pem) + "\n";
    y += "users:\n- name: kubesandbox-local\n  user:\n    token: " + impl_->token + "\n";
    y += "contexts:\n- name: kubesandbox-local\n  context:\n    cluster: kubesandbox-local\n    user: "
         "kubesandbox-local\n"
         "    namespace: default\n";
    y += "current-context: kubesandbox-local\npreferences: {}\n";
    return write_private_file(path, y);
}

Result<void> LocalCluster::write_router_config(const std::filesystem::path& path) const {
    boost::json::object config{{"url", impl_->router_url}, {"token", impl_->token}};
    return write_private_file(path, boost::json::serialize(config) + "\n");
}

void LocalCluster::restart_api_server(std::chrono::milliseconds down) {
    std::promise<void> done;
    Impl* raw = impl_.get();
    asio::post(raw->ioc, [raw, &done, down] {
        error_code ec;
        raw->acceptor->close(ec);
        raw->accepted.sever_all();
        auto timer = std::make_shared<asio::steady_timer>(raw->ioc, down);
        timer->async_wait([raw, timer](error_code wait_ec) {
            if (wait_ec || raw->closing) return;
            error_code e;
            raw->acceptor.emplace(raw->ioc);
            raw->acceptor->open(raw->listen_endpoint.protocol(), e);
            if (!e) raw->acceptor->set_option(tcp::acceptor::reuse_address(true), e);
            if (!e) raw->acceptor->bind(raw->listen_endpoint, e);
            if (!e) raw->acceptor->listen(asio::socket_base::max_listen_connections, e);
            if (e) {
                raw->options.logger.warning("local cluster: API server restart: cannot listen again: " + e.message());
                return;
            }
            asio::co_spawn(raw->ioc, raw->accept_loop(), asio::detached);
        });
        done.set_value();
    });
    done.get_future().wait();
}

void LocalCluster::restart_router() {
    std::promise<void> done;
    asio::post(impl_->ioc, [this, &done] {
        impl_->replace_router();
        done.set_value();
    });
    done.get_future().wait();
}

void LocalCluster::set_router_delay(std::chrono::milliseconds delay) {
    std::promise<void> done;
    asio::post(impl_->ioc, [this, &done, delay] {
        impl_->router_options.delay = delay;
        impl_->replace_router();
        done.set_value();
    });
    done.get_future().wait();
}

void LocalCluster::add_fault(FaultRule rule) { impl_->faults.add(std::move(rule)); }
void LocalCluster::clear_faults() { impl_->faults.clear(); }
std::size_t LocalCluster::faults_applied() const { return impl_->faults.applied(); }

void LocalCluster::expire_continue_tokens() {
    std::promise<void> done;
    asio::post(impl_->ioc, [this, &done] {
        impl_->api->expire_continue_tokens();
        done.set_value();
    });
    done.get_future().wait();
}

std::size_t LocalCluster::open_watches(std::string_view plural) const {
    std::promise<std::size_t> count;
    asio::post(impl_->ioc, [this, &count, plural] { count.set_value(impl_->api->open_watches(plural)); });
    return count.get_future().get();
}

void LocalCluster::expire_watches() {
    std::promise<void> done;
    asio::post(impl_->ioc, [this, &done] {
        impl_->api->expire_watches();
        done.set_value();
    });
    done.get_future().wait();
}

}  // namespace kubesandbox
