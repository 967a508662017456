// An agent host in miniature: an HTTP server on loopback giving every conversation thread its
// own sandbox through one SandboxManager. Several instances on one cluster serve the same
// threads without sticky sessions.
//
//   sandbox_server [--kubeconfig K] [--context C] [-n NS] [--port P] [--idle-ttl S]
//                  [--absolute-ttl S] [--warm-pool N] [--image I] [--scope S] [--threads N]
//                  [--qps N] [--delete-on-exit]
//
//   POST   /threads/{thread}/execute[?timeout=S]   body: the command -> 200 {output, exit_code, ...}
//   GET    /threads/{thread}                       -> 200 {sandbox_id, ...} | 404
//   DELETE /threads/{thread}                       -> 204 (idempotent)
//   GET    /stats                                  -> the manager's stats as JSON
//   GET    /metrics                                -> the counters, Prometheus text format
//
// Without --kubeconfig and $KUBECONFIG it starts the embedded local cluster.
#include <kubesandbox/kubesandbox.hpp>
#include <kubesandbox/local_cluster.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <boost/url/parse.hpp>

#include <atomic>
#include <charconv>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <thread>

namespace ks = kubesandbox;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using asio::ip::tcp;
using namespace std::chrono_literals;

namespace {

constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);

struct Args {
    std::string kubeconfig, context, namespace_name, image, scope = "thread";
    unsigned short port = 0;
    std::optional<std::int64_t> idle_ttl, absolute_ttl;
    int warm_pool = 0;
    int threads = 1;
    std::optional<std::int64_t> qps;  // the API client's rate limit; 0 = none
    bool delete_on_exit = false;
};

std::optional<std::int64_t> parse_int(std::string_view s) {
    std::int64_t v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size() || v < 0) return std::nullopt;
    return v;
}

std::optional<Args> parse_args(int argc, char** argv) {
    Args a;
    for (int i = 1; i < argc; ++i) {
        std::string_view k = argv[i];
        if (k == "--delete-on-exit") {
            a.delete_on_exit = true;
            continue;
        }
        if (i + 1 >= argc) {
            std::cerr << "missing value for " << k << "\n";
            return std::nullopt;
        }
        std::string v = argv[++i];
        auto number = [&](auto& out) {
            auto n = parse_int(v);
            if (!n) return false;
            out = static_cast<std::remove_reference_t<decltype(out)>>(*n);
            return true;
        };
        bool ok = true;
        if (k == "--kubeconfig") a.kubeconfig = v;
        else if (k == "--context") a.context = v;
        else if (k == "-n" || k == "--namespace") a.namespace_name = v;
        else if (k == "--image") a.image = v;
        else if (k == "--scope") a.scope = v;
        else if (k == "--port") ok = parse_int(v).value_or(70000) <= 65535 && number(a.port);
        else if (k == "--warm-pool") ok = number(a.warm_pool);
        else if (k == "--threads") ok = number(a.threads) && a.threads > 0;
        else if (k == "--idle-ttl") ok = (a.idle_ttl = parse_int(v)).has_value();
        else if (k == "--absolute-ttl") ok = (a.absolute_ttl = parse_int(v)).has_value();
        else if (k == "--qps") ok = (a.qps = parse_int(v)).has_value();
        else {
            std::cerr << "unknown option " << k << "\n";
            return std::nullopt;
        }
        if (!ok) {
            std::cerr << "bad value for " << k << ": " << v << "\n";
            return std::nullopt;
        }
    }
    return a;
}

using Response = http::response<http::string_body>;

Response reply(unsigned status, std::string body, std::string content_type = "application/json") {
    Response r{static_cast<http::status>(status), 11};
    r.set(http::field::content_type, content_type);
    r.body() = std::move(body);
    r.prepare_payload();
    return r;
}

Response json_reply(unsigned status, const json::value& v) { return reply(status, json::serialize(v) + "\n"); }

Response error_reply(unsigned status, std::string_view code, std::string_view message) {
    return json_reply(status, json::object{{"error", code}, {"message", message}});
}

// Library errors as HTTP: the caller's mistakes 400, a lost sandbox 409 (the host decides), a
// manager shutting down 503, everything the cluster did 502.
Response library_error(const ks::Error& e) {
    if (e.is(ks::errc::invalid_argument)) return error_reply(400, "invalid_argument", e.message);
    if (e.is(ks::errc::sandbox_lost)) return error_reply(409, "sandbox_lost", e.message);
    if (e.is(ks::errc::cancelled)) return error_reply(503, "shutting_down", e.message);
    return error_reply(502, "cluster_error", e.describe());
}

json::object info_json(const std::string& thread, const std::string& sandbox_id, const ks::SandboxInfo& info) {
    return json::object{{"thread", thread},
                        {"sandbox_id", sandbox_id},
                        {"namespace", info.namespace_name},
                        {"pod", info.pod_name},
                        {"status", info.status},
                        {"created_at", info.created_at},
                        {"last_activity", info.last_activity}};
}

// JSON is built outside coroutines: g++ 12 miscompiles brace-initialised JSON in them.
Response execute_reply(const ks::ExecuteResponse& out, const std::string& sandbox_id, const ks::SandboxLease& lease) {
    json::object o{{"output", out.output},
                   {"exit_code", out.exit_code ? json::value(*out.exit_code) : json::value(nullptr)},
                   {"truncated", out.truncated},
                   {"sandbox_id", sandbox_id},
                   {"created", lease.created()},
                   {"recreated", lease.recreated()},
                   {"acquired", ks::to_string(lease.kind())}};
    return json_reply(200, o);
}

json::object stats_json(const ks::ManagerStats& s) {
    json::object o{{"threads", s.threads},
                   {"busy", s.busy},
                   {"acquisitions_in_flight", s.acquisitions_in_flight},
                   {"created", s.created},
                   {"reconnected", s.reconnected},
                   {"adopted", s.adopted},
                   {"recreated", s.recreated},
                   {"lost", s.lost},
                   {"reaped", s.reaped},
                   {"reaper_passes", s.reaper_passes},
                   {"failed", s.failed},
                   {"reaper_errors", s.reaper_errors}};
    if (s.cluster)
        o["cluster"] =
            json::object{{"total", s.cluster->total}, {"running", s.cluster->running}, {"pending", s.cluster->pending},
                         {"warm", s.cluster->warm},   {"failed", s.cluster->failed},   {"idle", s.cluster->idle}};
    return o;
}

std::string metrics_text(const ks::ManagerStats& s) {
    std::ostringstream out;
    auto gauge = [&](const char* name, const char* help, auto value) {
        out << "# HELP kubesandbox_" << name << " " << help << "\n# TYPE kubesandbox_" << name << " gauge\n"
            << "kubesandbox_" << name << " " << value << "\n";
    };
    auto counter = [&](const char* name, const char* help, auto value) {
        out << "# HELP kubesandbox_" << name << " " << help << "\n# TYPE kubesandbox_" << name << " counter\n"
            << "kubesandbox_" << name << " " << value << "\n";
    };
    gauge("threads", "Threads with a sandbox bound in this process.", s.threads);
    gauge("threads_busy", "Bound threads with a lease alive.", s.busy);
    gauge("acquisitions_in_flight", "Acquisitions not finished yet.", s.acquisitions_in_flight);
    out << "# HELP kubesandbox_acquisitions_total Acquisitions that reached the cluster, by outcome.\n"
        << "# TYPE kubesandbox_acquisitions_total counter\n";
    for (auto [kind, n] : {std::pair{"created", s.created}, std::pair{"reconnected", s.reconnected},
                           std::pair{"adopted", s.adopted}, std::pair{"recreated", s.recreated}})
        out << "kubesandbox_acquisitions_total{kind=\"" << kind << "\"} " << n << "\n";
    counter("acquisitions_failed_total", "Acquisitions that ended in an error (a lost sandbox aside).", s.failed);
    counter("sandboxes_lost_total", "Threads whose sandbox was found gone.", s.lost);
    counter("sandboxes_reaped_total", "Sandboxes this process's reaper deleted.", s.reaped);
    counter("reaper_passes_total", "Reaper passes.", s.reaper_passes);
    counter("reaper_errors_total", "Reaper passes that failed.", s.reaper_errors);
    return out.str();
}

struct Server {
    std::shared_ptr<ks::SandboxManager> manager;
    std::atomic<bool> stopping{false};
};

// One request: {thread} is percent-decoded, so any thread id travels in the path.
asio::awaitable<Response> handle(Server& server, const http::request<http::string_body>& req) {
    auto url = boost::urls::parse_origin_form(req.target());
    if (!url) co_return error_reply(400, "bad_request", "malformed request target");
    std::vector<std::string> segs;
    for (auto seg : url->segments()) segs.push_back(std::string(seg));
    auto& m = *server.manager;
    const auto method = req.method();
    if (segs.size() == 1 && segs[0] == "stats" && method == http::verb::get)
        co_return json_reply(200, stats_json(co_await m.stats()));
    if (segs.size() == 1 && segs[0] == "metrics" && method == http::verb::get)
        co_return reply(200, metrics_text(co_await m.stats()), "text/plain; version=0.0.4");
    if (segs.size() < 2 || segs.size() > 3 || segs[0] != "threads")
        co_return error_reply(404, "not_found", "no such endpoint");
    std::string thread = segs[1];
    if (thread.empty()) co_return error_reply(400, "bad_request", "the thread id is empty");
    if (segs.size() == 3) {
        if (segs[2] != "execute") co_return error_reply(404, "not_found", "no such endpoint");
        if (method != http::verb::post) co_return error_reply(405, "method_not_allowed", "use POST");
        std::optional<std::chrono::seconds> timeout;
        if (auto it = url->params().find("timeout"); it != url->params().end()) {
            auto n = parse_int((*it).value);
            if (!n) co_return error_reply(400, "bad_request", "timeout must be a whole number of seconds");
            timeout = std::chrono::seconds(*n);
        }
        if (req.body().empty()) co_return error_reply(400, "bad_request", "the body must hold the command");
        auto lease = co_await m.get(thread);
        if (!lease) co_return library_error(lease.error());
        auto out = co_await lease->execute(req.body(), timeout);
        if (!out) co_return library_error(out.error());
        co_return execute_reply(*out, m.sandbox_id_for(thread), *lease);
    }
    if (method == http::verb::get) {
        auto found = co_await m.find(thread);
        if (!found) co_return library_error(found.error());
        if (!*found) co_return error_reply(404, "not_found", "the thread has no sandbox");
        co_return json_reply(200, info_json(thread, m.sandbox_id_for(thread), **found));
    }
    if (method == http::verb::delete_) {
        auto removed = co_await m.remove(thread);
        if (!removed) co_return library_error(removed.error());
        co_return reply(204, "");
    }
    co_return error_reply(405, "method_not_allowed", "use GET or DELETE");
}

asio::awaitable<void> session(Server& server, tcp::socket socket) {
    beast::tcp_stream stream(std::move(socket));
    beast::flat_buffer buffer;
    for (;;) {
        http::request_parser<http::string_body> parser;
        parser.body_limit(16 * 1024 * 1024);
        stream.expires_after(120s);
        auto [ec, n] = co_await http::async_read(stream, buffer, parser, tuple_awaitable);
        (void)n;
        if (ec == http::error::end_of_stream || ec == beast::error::timeout) break;
        if (ec) {
            Response bad = error_reply(400, "bad_request", ec.message());
            bad.keep_alive(false);
            co_await http::async_write(stream, bad, tuple_awaitable);
            break;
        }
        auto req = parser.release();
        stream.expires_never();
        Response resp;
        try {
            resp = co_await handle(server, req);
        } catch (const std::exception& e) {
            resp = error_reply(500, "internal", e.what());
        }
        resp.keep_alive(req.keep_alive() && !server.stopping);
        stream.expires_after(120s);
        auto [wec, wn] = co_await http::async_write(stream, resp, tuple_awaitable);
        (void)wn;
        if (wec || !resp.keep_alive()) break;
    }
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
}

// Each connection on a strand of its own: with --threads > 1 its reads, writes and timeouts
// never run at once.
asio::awaitable<void> accept_loop(Server& server, tcp::acceptor& acceptor, asio::io_context& io) {
    for (;;) {
        auto [ec, socket] = co_await acceptor.async_accept(asio::make_strand(io), tuple_awaitable);
        if (ec) break;  // closed at shutdown
        auto ex = socket.get_executor();
        asio::co_spawn(ex, session(server, std::move(socket)), asio::detached);
    }
}

}  // namespace

int main(int argc, char** argv) {
    auto args = parse_args(argc, argv);
    if (!args) return 2;

    std::unique_ptr<ks::LocalCluster> cluster;
    ks::KubeConfig config;
    const char* env = std::getenv("KUBECONFIG");
    if (!args->kubeconfig.empty() || (env && *env)) {
        ks::KubeConfigLoadOptions lo;
        if (!args->kubeconfig.empty()) lo.paths.push_back(args->kubeconfig);
        if (!args->context.empty()) lo.context = args->context;
        if (!args->namespace_name.empty()) lo.namespace_name = args->namespace_name;
        auto loaded = ks::load_kubeconfig(lo);
        if (!loaded) {
            std::cerr << loaded.error().describe() << "\n";
            return 1;
        }
        config = *loaded;
    } else {
        auto started = ks::LocalCluster::start();
        if (!started) {
            std::cerr << "local cluster: " << started.error().describe() << "\n";
            return 1;
        }
        cluster = std::move(*started);
        config = cluster->kube_config();
        if (!args->namespace_name.empty()) config.namespace_name = args->namespace_name;
    }

    asio::io_context io(args->threads);
    ks::RawProviderOptions po;
    if (!config.namespace_name.empty()) po.namespace_name = config.namespace_name;
    if (!args->image.empty()) po.image = args->image;
    po.warm_pool_size = args->warm_pool;
    ks::KubeClientOptions client_options;
    if (args->qps) client_options.qps = static_cast<double>(*args->qps);
    auto provider = std::make_shared<ks::RawProvider>(ks::KubeClient(io.get_executor(), config, client_options), po);
    ks::SandboxManagerOptions mo;
    mo.scope = args->scope;
    if (args->idle_ttl) mo.idle_ttl = std::chrono::seconds(*args->idle_ttl);
    if (args->absolute_ttl) mo.absolute_ttl = std::chrono::seconds(*args->absolute_ttl);
    mo.on_event = [](const ks::ManagerEvent& e) {
        if (e.kind != ks::ManagerEvent::Kind::reconnected)
            std::clog << "thread " << e.thread_id << ": " << ks::to_string(e.kind)
                      << (e.error ? " (" + e.error->describe() + ")" : "") << "\n";
    };
    Server server{std::make_shared<ks::SandboxManager>(io.get_executor(), provider, mo)};

    tcp::acceptor acceptor(asio::make_strand(io));  // closed from the signal handler: one strand
    tcp::endpoint endpoint(asio::ip::make_address("127.0.0.1"), args->port);
    boost::system::error_code ec;
    acceptor.open(endpoint.protocol(), ec);
    if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor.bind(endpoint, ec);
    if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
        std::cerr << "cannot listen on 127.0.0.1:" << args->port << ": " << ec.message() << "\n";
        return 1;
    }
    std::cout << "listening on 127.0.0.1:" << acceptor.local_endpoint().port() << std::endl;

    asio::co_spawn(io, server.manager->run(), asio::detached);
    asio::co_spawn(acceptor.get_executor(), accept_loop(server, acceptor, io), asio::detached);

    // SIGTERM/SIGINT: stop accepting, let requests finish, delete this instance's sandboxes
    // when asked, then stop.
    int rc = 0;
    asio::signal_set signals(io, SIGTERM, SIGINT);
    signals.async_wait([&](boost::system::error_code sec, int) {
        if (sec) return;
        server.stopping = true;
        asio::post(acceptor.get_executor(), [&] { acceptor.close(); });
        asio::co_spawn(
            io,
            [&]() -> asio::awaitable<void> {
                ks::ShutdownOptions so;
                so.delete_sandboxes = args->delete_on_exit;
                auto report = co_await server.manager->shutdown(so);
                // Acquisitions still in flight finish (and, with --delete-on-exit, delete what
                // they made) before the loop stops.
                for (int i = 0; i < 600; ++i) {
                    auto s = co_await server.manager->stats();
                    if (s.acquisitions_in_flight == 0) break;
                    asio::steady_timer t(io, 100ms);
                    co_await t.async_wait(tuple_awaitable);
                }
                std::clog << "shutdown: " << (report.drained ? "drained" : "not drained") << ", " << report.deleted
                          << " sandboxes deleted\n";
                for (const auto& e : report.errors) std::clog << "  " << e.id << ": " << e.error.describe() << "\n";
                if (!report.drained || !report.errors.empty()) rc = 1;
                io.stop();
            },
            asio::detached);
    });

    std::vector<std::thread> pool;
    for (int i = 1; i < args->threads; ++i) pool.emplace_back([&] { io.run(); });
    io.run();
    for (auto& t : pool) t.join();
    return rc;
}
