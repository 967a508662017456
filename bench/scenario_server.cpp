// Scenario 10: the example agent host (examples/sandbox_server) under load: requests/s of
// `POST /threads/{t}/execute` with "true" on warm threads from many keep-alive clients at once,
// next to the same load sent straight through a SandboxManager in this process (same scope, so
// both serve the same sandboxes).
#include "support.hpp"

#include <kubesandbox/raw_provider.hpp>
#include <kubesandbox/sandbox_manager.hpp>

#include "util/child_process.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <iostream>

extern char** environ;

namespace kubesandbox::bench {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;
using namespace std::chrono_literals;

namespace {

constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);
constexpr const char* scope = "bench-server";

// The server started with --port 0; its port from the first stdout line.
struct ServerProcess {
    pid_t pid = -1;
    int out = -1, err = -1;
    std::uint16_t port = 0;

    ~ServerProcess() {
        if (pid > 0) {
            ::kill(pid, SIGTERM);
            int status = 0;
            ::waitpid(pid, &status, 0);
        }
        if (out >= 0) ::close(out);
        if (err >= 0) ::close(err);
    }
};

bool start_server(ServerProcess& s, const std::string& program, const Env& env) {
    std::vector<std::string> argv{program, "--kubeconfig", env.kubeconfig.string(), "--scope", scope, "--port", "0"};
    auto spawned = util::spawn_child(argv, environ);
    if (!spawned) return false;
    s.pid = spawned->pid;
    s.out = spawned->stdout_fd;
    s.err = spawned->stderr_fd;  // a few lines per thread: the pipe never fills
    std::string line;
    char c = 0;
    while (::read(s.out, &c, 1) == 1 && c != '\n') line += c;
    const std::string prefix = "listening on 127.0.0.1:";
    if (line.rfind(prefix, 0) != 0) return false;
    s.port = static_cast<std::uint16_t>(std::stoi(line.substr(prefix.size())));
    return true;
}

// One client: a keep-alive connection, `n` executes of "true" on `thread`; false on any failure.
asio::awaitable<bool> client_calls(std::uint16_t port, std::string thread, int n) {
    tcp::socket socket(co_await asio::this_coro::executor);
    auto [cec] = co_await socket.async_connect({asio::ip::make_address("127.0.0.1"), port}, tuple_awaitable);
    if (cec) co_return false;
    beast::flat_buffer buffer;
    for (int i = 0; i < n; ++i) {
        http::request<http::string_body> req{http::verb::post, "/threads/" + thread + "/execute", 11};
        req.set(http::field::host, "127.0.0.1");
        req.body() = "true";
        req.prepare_payload();
        auto [wec, wn] = co_await http::async_write(socket, req, tuple_awaitable);
        if (wec) co_return false;
        http::response<http::string_body> res;
        auto [rec, rn] = co_await http::async_read(socket, buffer, res, tuple_awaitable);
        if (rec || res.result_int() != 200 || res.body().find("\"exit_code\":0") == std::string::npos) co_return false;
    }
    co_return true;
}

// Runs `clients` coroutines of `make(i)` at once; the wall time, or -1 when one failed.
template <class Make>
double all_at_once(asio::io_context& io, int clients, Make make, const std::string& what) {
    double seconds = -1;
    run_on(
        io,
        [&]() -> asio::awaitable<void> {
            auto ok = std::make_shared<int>(0);
            auto finished = std::make_shared<int>(0);
            auto t0 = Clock::now();
            for (int i = 0; i < clients; ++i) {
                asio::co_spawn(
                    io,
                    [i, ok, finished, &make]() -> asio::awaitable<void> {
                        if (co_await make(i)) ++*ok;
                        ++*finished;
                    },
                    asio::detached);
            }
            while (*finished < clients) co_await sleep_for(1ms);
            if (*ok == clients) seconds = seconds_since(t0);
            else failures.push_back("scenario 10: " + what + ": " + std::to_string(clients - *ok) + " clients failed");
        },
        600s, "scenario 10 " + what);
    return seconds;
}

}  // namespace

void scenario_server(asio::io_context& io, LocalCluster& cluster, const Env& env, const Sizes& sz,
                     const std::string& server_program) {
    if (server_program.empty() || ::access(server_program.c_str(), X_OK) != 0) {
        failures.push_back("scenario 10: the example server was not found (" + server_program + ")");
        return;
    }
    ServerProcess server;
    if (!start_server(server, server_program, env)) {
        failures.push_back("scenario 10: the example server did not start");
        return;
    }
    const int clients = sz.server_clients;
    const int calls = std::max(2, sz.exec_n / 2);
    auto thread_of = [](int i) { return "bench-srv-" + std::to_string(i); };
    // In this process: the same scope and provider settings as the server's.
    RawProviderOptions po;
    po.namespace_name = "default";
    po.logger = Logger::silent();
    auto provider = std::make_shared<RawProvider>(KubeClient(io.get_executor(), cluster.kube_config()), po);
    SandboxManagerOptions mo;
    mo.scope = scope;
    mo.logger = Logger::silent();
    auto manager = std::make_shared<SandboxManager>(io.get_executor(), provider, mo);

    // Warm-up: the server creates each thread's sandbox, the manager here adopts it.
    bool warm = all_at_once(
                    io, clients, [&](int i) { return client_calls(server.port, thread_of(i), 1); },
                    "warm-up through the server") > 0;
    warm = warm && all_at_once(
                       io, clients,
                       [&](int i) -> asio::awaitable<bool> {
                           auto lease = co_await manager->get(thread_of(i));
                           if (!lease) co_return false;
                           auto r = co_await lease->execute("true");
                           co_return r && r->exit_code == 0;
                       },
                       "warm-up through the library") > 0;
    std::vector<double> through_server, direct;
    if (warm) {
        for (int round = 0; round < 2; ++round) {
            double s = all_at_once(
                io, clients, [&](int i) { return client_calls(server.port, thread_of(i), calls); }, "server");
            double d = all_at_once(
                io, clients,
                [&](int i) -> asio::awaitable<bool> {
                    for (int k = 0; k < calls; ++k) {
                        auto lease = co_await manager->get(thread_of(i));
                        if (!lease) co_return false;
                        auto r = co_await lease->execute("true");
                        if (!r || r->exit_code != 0) co_return false;
                    }
                    co_return true;
                },
                "library");
            if (s > 0) through_server.push_back(s);
            if (d > 0) direct.push_back(d);
        }
    }
    run_on(
        io,
        [&]() -> asio::awaitable<void> {
            ShutdownOptions so;
            so.delete_sandboxes = true;
            co_await manager->shutdown(so);
        },
        300s, "scenario 10 cleanup");
    manager.reset();
    io.restart();
    io.poll();
    if (through_server.size() != 2 || direct.size() != 2) return;
    const double requests = static_cast<double>(clients) * calls;
    auto rate = [&](const std::vector<double>& v) { return requests / ((v[0] + v[1]) / 2); };
    const std::string name = "10 execute(true) on warm threads, " + std::to_string(clients) + " clients";
    Row ours = single_row(name, "example server (HTTP, one io thread)", "req/s", rate(through_server));
    Row peer = single_row(name, "SandboxManager called directly", "req/s", rate(direct));
    compare_to_peer(ours, peer, "the library directly");
    rows.push_back(ours);
    rows.push_back(peer);
}

}  // namespace kubesandbox::bench
