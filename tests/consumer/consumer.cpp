// Uses the public API only: builds a client, makes one request to a closed loopback port and
// checks the failure comes back as a typed value.
#include <kubesandbox/error.hpp>
#include <kubesandbox/kube_client.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <cstdio>

int main() {
    boost::asio::io_context io;
    unsigned short port;
    {
        boost::asio::ip::tcp::acceptor a(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
        port = a.local_endpoint().port();
    }
    kubesandbox::KubeClientOptions options;
    options.max_retries = 0;
    kubesandbox::KubeClient client(
        io.get_executor(), kubesandbox::KubeConfig::from_url("http://127.0.0.1:" + std::to_string(port)), options);
    int rc = 1;
    kubesandbox::ResourcePath ns;
    ns.plural = "namespaces";
    boost::asio::co_spawn(
        io,
        [&]() -> boost::asio::awaitable<void> {
            auto r = co_await client.list(ns);
            if (!r) {
                std::printf("typed error as expected: %s\n", r.error().describe().c_str());
                rc = 0;
            }
        },
        [](std::exception_ptr e) {
            if (e) std::rethrow_exception(e);
        });
    io.run_for(std::chrono::seconds(10));
    return rc;
}
