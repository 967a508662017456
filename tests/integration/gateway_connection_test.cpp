// The gateway connection against the local cluster: the router found through the Gateway's
// published address, followed when the address moves, waited for while it is withdrawn.
#include <kubesandbox/router_connection.hpp>
#include <kubesandbox/router_sandbox.hpp>

#include "../support/local_cluster_fixture.hpp"
#include "../support/runtime_pod.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/url/parse.hpp>

#include <gtest/gtest.h>

namespace {
namespace asio = boost::asio;
namespace json = boost::json;
using namespace kubesandbox;
using namespace std::chrono_literals;
using tcp = asio::ip::tcp;

// A TCP relay on another loopback address to the router, counting the executes it carries.
struct Relay {
    std::shared_ptr<tcp::acceptor> acceptor;
    std::shared_ptr<int> executes = std::make_shared<int>(0);
    std::uint16_t port() const { return acceptor->local_endpoint().port(); }
};

asio::awaitable<void> pump(std::shared_ptr<tcp::socket> from, std::shared_ptr<tcp::socket> to,
                           std::shared_ptr<int> executes) {
    std::array<char, 65536> buffer;
    for (;;) {
        auto [ec, n] = co_await from->async_read_some(asio::buffer(buffer), asio::as_tuple(asio::use_awaitable));
        if (ec) break;
        if (executes && std::string_view(buffer.data(), n).starts_with("POST /execute ")) ++*executes;
        auto [wec, wn] =
            co_await asio::async_write(*to, asio::buffer(buffer.data(), n), asio::as_tuple(asio::use_awaitable));
        if (wec) break;
    }
    boost::system::error_code ignored;
    to->shutdown(tcp::socket::shutdown_send, ignored);
}

asio::awaitable<void> relay_loop(Relay relay, tcp::endpoint router) {
    for (;;) {
        auto [ec, socket] = co_await relay.acceptor->async_accept(asio::as_tuple(asio::use_awaitable));
        if (ec) co_return;
        auto down = std::make_shared<tcp::socket>(std::move(socket));
        auto up = std::make_shared<tcp::socket>(down->get_executor());
        auto [cec] = co_await up->async_connect(router, asio::as_tuple(asio::use_awaitable));
        if (cec) continue;
        asio::co_spawn(down->get_executor(), pump(down, up, relay.executes), asio::detached);
        asio::co_spawn(down->get_executor(), pump(up, down, nullptr), asio::detached);
    }
}

class GatewayConnectionTest : public test::LocalClusterTest {
protected:
    tcp::endpoint router_endpoint() const {
        const std::string text = cluster_->router_url();
        auto url = boost::urls::parse_absolute_uri(text);
        return {asio::ip::make_address(std::string(url->host())),
                static_cast<std::uint16_t>(std::stoi(std::string(url->port())))};
    }

    Relay start_relay(const char* address, std::uint16_t port) {
        Relay relay;
        relay.acceptor = std::make_shared<tcp::acceptor>(io_, tcp::endpoint(asio::ip::make_address(address), port));
        asio::co_spawn(io_, relay_loop(relay, router_endpoint()), asio::detached);
        return relay;
    }

    GatewayConnectionOptions options(std::string name) const {
        GatewayConnectionOptions o;
        o.gateway_name = std::move(name);
        o.token = cluster_->token();
        o.ready_timeout = 1500ms;
        return o;
    }
};

json::object gateway_with_listener(const std::string& name, std::uint16_t port) {
    return json::object{
        {"apiVersion", "gateway.networking.k8s.io/v1"},
        {"kind", "Gateway"},
        {"metadata", json::object{{"name", name}}},
        {"spec", json::object{
                     {"gatewayClassName", "test"},
                     {"listeners", json::array{json::object{{"name", "web"}, {"protocol", "HTTP"}, {"port", port}}}}}}};
}

json::value status_with(json::array addresses) {
    return json::object{{"status", json::object{{"addresses", std::move(addresses)}}}};
}

TEST_F(GatewayConnectionTest, TheClustersGatewayReachesTheRouter) {
    run([&]() -> asio::awaitable<void> {
        auto kube = client();
        auto created = co_await test::create_runtime_pod(kube, "default", "gw-default", "busybox-runtime", "/app");
        EXPECT_TRUE(created) << (created ? "" : created.error().describe());
        if (!created) co_return;
        auto connection = make_gateway_connection(kube, options("sandbox-router-gateway"));
        EXPECT_TRUE(connection);
        if (!connection) co_return;
        EXPECT_EQ((*connection)->describe(), "gateway default/sandbox-router-gateway");
        RouterSandboxOptions sb_options;
        sb_options.sandbox_name = "gw-default";
        RouterSandbox sb(*connection, sb_options);
        auto r = co_await sb.execute("echo through the gateway");
        EXPECT_TRUE(r && r->output == "through the gateway\n") << (r ? r->output : r.error().describe());
        ResourcePath pod{"", "v1", "pods", "default", "gw-default"};
        co_await kube.remove(pod);
    });
}

TEST_F(GatewayConnectionTest, FollowsTheAddressAndWaitsWhileItIsWithdrawn) {
    run(
        [&]() -> asio::awaitable<void> {
            auto kube = client();
            auto created = co_await test::create_runtime_pod(kube, "default", "gw-moves", "busybox-runtime", "/app");
            EXPECT_TRUE(created) << (created ? "" : created.error().describe());
            if (!created) co_return;
            // Two relays to the router on one port number, so only the published address moves.
            Relay first = start_relay("127.0.0.2", 0);
            Relay second = start_relay("127.0.0.3", first.port());
            // A Gateway with no address yet: requests wait for it, then fail as unavailable.
            ResourcePath gateways{"gateway.networking.k8s.io", "v1", "gateways", "default", ""};
            auto made = co_await kube.create(gateways, gateway_with_listener("gw-test", first.port()));
            EXPECT_TRUE(made) << (made ? "" : made.error().describe());
            ResourcePath status = gateways.with_name("gw-test");
            status.subresource = "status";
            auto connection = make_gateway_connection(kube, options("gw-test"));
            EXPECT_TRUE(connection);
            if (!connection) co_return;
            RouterSandboxOptions sb_options;
            sb_options.sandbox_name = "gw-moves";
            RouterSandbox sb(*connection, sb_options);
            auto r = co_await sb.execute("true");
            EXPECT_TRUE(!r && r.error().code == errc::service_unavailable) << (r ? "ran" : r.error().describe());
            if (!r) {
                EXPECT_NE(r.error().message.find("gateway gw-test has no address"), std::string::npos)
                    << r.error().message;
            }
            // A hostile value is refused; the address after it is taken (the late MODIFIED event).
            json::array addresses{json::object{{"type", "Hostname"}, {"value", "127.0.0.9/evil"}},
                                  json::object{{"type", "IPAddress"}, {"value", "127.0.0.2"}}};
            auto published = co_await kube.patch(status, status_with(addresses), PatchType::merge);
            EXPECT_TRUE(published) << (published ? "" : published.error().describe());
            r = co_await sb.execute("echo first");
            EXPECT_TRUE(r && r->output == "first\n") << (r ? r->output : r.error().describe());
            EXPECT_EQ(*first.executes, 1);
            // The address moves: new calls follow it, and the idle connection to the old address
            // is not reused.
            json::array moved{json::object{{"value", "127.0.0.3"}}};
            co_await kube.patch(status, status_with(moved), PatchType::merge);
            bool followed = false;
            for (int i = 0; i < 100 && !followed; ++i) {
                r = co_await sb.execute("echo second");
                EXPECT_TRUE(r && r->output == "second\n") << (r ? r->output : r.error().describe());
                followed = *second.executes > 0;
                if (!followed) co_await test::sleep_for(50ms);
            }
            EXPECT_TRUE(followed);
            const int on_first = *first.executes, on_second = *second.executes;
            for (int i = 0; i < 10; ++i) {
                r = co_await sb.execute("true");
                EXPECT_TRUE(r && r->exit_code == 0) << (r ? r->output : r.error().describe());
            }
            EXPECT_EQ(*first.executes, on_first);
            EXPECT_EQ(*second.executes, on_second + 10);
            // Deleted: requests fail at once as unavailable.
            co_await kube.remove(gateways.with_name("gw-test"));
            bool withdrawn = false;
            for (int i = 0; i < 100 && !withdrawn; ++i) {
                r = co_await sb.execute("true", std::chrono::seconds(5));
                withdrawn = !r && r.error().code == errc::service_unavailable &&
                            (r.error().message.find("gw-test was deleted") != std::string::npos ||
                             r.error().message.find("gw-test does not exist") != std::string::npos);
                if (!withdrawn) co_await test::sleep_for(50ms);
            }
            EXPECT_TRUE(withdrawn) << (r ? "ran" : r.error().describe());
            // Created again with an address: found by the same connection.
            made = co_await kube.create(gateways, gateway_with_listener("gw-test", first.port()));
            EXPECT_TRUE(made);
            json::array back{json::object{{"value", "127.0.0.2"}}};
            co_await kube.patch(status, status_with(back), PatchType::merge);
            r = co_await sb.execute("echo back");
            EXPECT_TRUE(r && r->output == "back\n") << (r ? r->output : r.error().describe());
            first.acceptor->close();
            second.acceptor->close();
            co_await kube.remove(gateways.with_name("gw-test"));
            ResourcePath pod{"", "v1", "pods", "default", "gw-moves"};
            co_await kube.remove(pod);
        },
        120s);
}

// The watch cannot see a move (its re-lists fail): a connect to the old, dead address reads
// the Gateway once more and goes where it points now.
TEST_F(GatewayConnectionTest, AFailedConnectReadsTheGatewayAgain) {
    run(
        [&]() -> asio::awaitable<void> {
            auto kube = client();
            auto created = co_await test::create_runtime_pod(kube, "default", "gw-lag", "busybox-runtime", "/app");
            EXPECT_TRUE(created) << (created ? "" : created.error().describe());
            if (!created) co_return;
            Relay live = start_relay("127.0.0.5", 0);
            ResourcePath gateways{"gateway.networking.k8s.io", "v1", "gateways", "default", ""};
            auto made = co_await kube.create(gateways, gateway_with_listener("gw-lag", live.port()));
            EXPECT_TRUE(made) << (made ? "" : made.error().describe());
            ResourcePath status = gateways.with_name("gw-lag");
            status.subresource = "status";
            // Nothing listens on 127.0.0.6 at that port. (Named values: g++ 12 mishandles braced
            // temporaries inside co_await.)
            json::array dead{json::object{{"value", "127.0.0.6"}}};
            json::array alive{json::object{{"value", "127.0.0.5"}}};
            auto published = co_await kube.patch(status, status_with(dead), PatchType::merge);
            EXPECT_TRUE(published) << (published ? "" : published.error().describe());
            auto connection = make_gateway_connection(kube, options("gw-lag"));
            EXPECT_TRUE(connection);
            if (!connection) co_return;
            RouterSandboxOptions sb_options;
            sb_options.sandbox_name = "gw-lag";
            RouterSandbox sb(*connection, sb_options);
            auto r = co_await sb.execute("true", 5s);
            EXPECT_TRUE(!r && r.error().code == errc::connection_failed) << (r ? "ran" : r.error().describe());
            // The watch ends and cannot list again; the address moves meanwhile.
            FaultRule blind;
            blind.path_contains = "/gateways?";
            blind.count = -1;
            blind.status = 500;
            cluster_->add_fault(blind);
            cluster_->expire_watches();
            co_await test::sleep_for(300ms);
            published = co_await kube.patch(status, status_with(alive), PatchType::merge);
            EXPECT_TRUE(published) << (published ? "" : published.error().describe());
            r = co_await sb.execute("echo found", 10s);
            EXPECT_TRUE(r && r->output == "found\n") << (r ? r->output : r.error().describe());
            EXPECT_EQ(*live.executes, 1);
            cluster_->clear_faults();
            live.acceptor->close();
            co_await kube.remove(gateways.with_name("gw-lag"));
            ResourcePath pod{"", "v1", "pods", "default", "gw-lag"};
            co_await kube.remove(pod);
        },
        120s);
}

}  // namespace
