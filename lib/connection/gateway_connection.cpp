// The gateway connection: the router behind a Gateway API Gateway, at the address its
// controller publishes. One list-watch per connection keeps that address current.
#include "connection/gateway_address.hpp"
#include "connection/pooled_connection.hpp"
#include "net/connector.hpp"

#include <kubesandbox/kube_client.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <atomic>
#include <mutex>

namespace kubesandbox {

namespace asio = boost::asio;
using std::chrono::steady_clock;

namespace {

// What the watch has learnt, read by every new connection.
struct GatewayState {
    std::mutex mutex;
    std::optional<GatewayAddress> address;
    std::string problem{"the gateway has not been read yet"};  // why there is no address
    bool absent = false;  // the Gateway does not exist: no use waiting for an address
    std::atomic<std::uint64_t> generation{0};
    std::atomic<bool> stopped{false};
    asio::cancellation_signal cancel;  // used on the strand only

    void publish(Result<GatewayAddress> seen, bool exists = true) {
        std::lock_guard lock(mutex);
        absent = !exists;
        if (seen) {
            if (address != *seen) {
                address = std::move(*seen);
                generation.fetch_add(1);
            }
            problem.clear();
        } else {
            if (address) generation.fetch_add(1);
            address.reset();
            problem = seen.error().message;
        }
    }
};

// Where the Gateway is and how its address is read.
struct GatewayLookup {
    KubeClient client;
    ResourcePath path;
    std::optional<std::uint16_t> port;
    std::string protocol;
};

// Reads the Gateway once: a list that finds nothing yields no watch event, and a missing
// Gateway should fail requests at once rather than keep them waiting.
asio::awaitable<void> read_gateway(GatewayLookup lookup, std::shared_ptr<GatewayState> state) {
    if (auto got = co_await lookup.client.get(lookup.path); got) {
        state->publish(gateway_address(*got, lookup.port, lookup.protocol));
    } else if (got.error().is(errc::not_found)) {
        state->publish(fail(errc::service_unavailable, "gateway " + lookup.path.name + " does not exist"), false);
    }
}

// Follows the Gateway until stopped: each ADDED/MODIFIED republishes its address, DELETED
// withdraws it, failures back off from 100 ms to 5 s (the ListWatch resumes or re-lists).
asio::awaitable<void> follow_gateway(std::shared_ptr<GatewayState> state, std::shared_ptr<ListWatch> watch,
                                     GatewayLookup lookup) {
    asio::steady_timer backoff(co_await asio::this_coro::executor);
    auto delay = std::chrono::milliseconds(100);
    const std::string name = lookup.path.name;
    co_await read_gateway(lookup, state);
    while (!state->stopped) {
        auto event = co_await watch->next();
        if (state->stopped) break;
        if (!event) {
            {
                std::lock_guard lock(state->mutex);
                if (!state->address) state->problem = "cannot watch gateway " + name + ": " + event.error().message;
            }
            backoff.expires_after(delay);
            co_await backoff.async_wait(asio::as_tuple(asio::use_awaitable));
            delay = std::min<std::chrono::milliseconds>(delay * 2, std::chrono::seconds(5));
            continue;
        }
        delay = std::chrono::milliseconds(100);
        if (event->type == WatchEvent::Type::deleted)
            state->publish(fail(errc::service_unavailable, "gateway " + name + " was deleted"), false);
        else if (event->type == WatchEvent::Type::added || event->type == WatchEvent::Type::modified)
            state->publish(gateway_address(event->object, lookup.port, lookup.protocol));
    }
}

// Stops the watch when the connection (the only owner of this) goes away.
struct GatewayFollower {
    GatewayFollower(std::shared_ptr<GatewayState> s, std::shared_ptr<ListWatch> w, asio::any_io_executor executor)
        : state(std::move(s)), watch(std::move(w)), strand(asio::make_strand(std::move(executor))) {}
    GatewayFollower(const GatewayFollower&) = delete;
    GatewayFollower& operator=(const GatewayFollower&) = delete;

    std::shared_ptr<GatewayState> state;
    std::shared_ptr<ListWatch> watch;
    asio::strand<asio::any_io_executor> strand;

    ~GatewayFollower() {
        state->stopped = true;
        asio::post(strand, [state = state, watch = watch] {
            watch->close();
            state->cancel.emit(asio::cancellation_type::terminal);
        });
    }
};

// A stream to the current address, waiting for one until the deadline or the ready timeout.
asio::awaitable<Result<net::AnyStream>> open_to_gateway(asio::any_io_executor executor,
                                                        std::shared_ptr<GatewayState> state, GatewayLookup lookup,
                                                        net::ConnectTarget target, steady_clock::time_point deadline,
                                                        std::chrono::milliseconds ready_timeout) {
    const auto give_up = std::min(deadline, steady_clock::now() + ready_timeout);
    asio::steady_timer poll(executor);
    bool read_again = false;
    for (;;) {
        std::string problem;
        bool return_now = false;
        {
            std::lock_guard lock(state->mutex);
            if (state->address) {
                target.host = state->address->host;
                target.port = std::to_string(state->address->port);
                break;
            }
            problem = state->problem;
            if (state->absent) return_now = true;
        }
        if (return_now && !read_again) {
            // The watch may not have seen it created yet.
            read_again = true;
            co_await read_gateway(lookup, state);
            continue;
        }
        if (return_now) co_return fail(errc::service_unavailable, "no router to connect to: " + problem);
        if (steady_clock::now() >= give_up) {
            errc code = steady_clock::now() >= deadline ? errc::timeout : errc::service_unavailable;
            co_return fail(code, "no address to reach the router at: " + problem);
        }
        // Only while the Gateway is being programmed: a short poll keeps this free of wake-up plumbing.
        poll.expires_after(std::chrono::milliseconds(50));
        co_await poll.async_wait(asio::as_tuple(asio::use_awaitable));
    }
    auto connected = co_await net::connect(executor, target, deadline);
    if (connected || steady_clock::now() >= deadline) co_return connected;
    // The watch may lag behind a move (or be failing to re-list): read the Gateway again, and
    // try once more if it publishes another address now.
    co_await read_gateway(lookup, state);
    {
        std::lock_guard lock(state->mutex);
        if (!state->address ||
            (state->address->host == target.host && std::to_string(state->address->port) == target.port))
            co_return connected;
        target.host = state->address->host;
        target.port = std::to_string(state->address->port);
    }
    co_return co_await net::connect(executor, std::move(target), deadline);
}

}  // namespace

Result<std::shared_ptr<RouterConnection>> make_gateway_connection(KubeClient& client,
                                                                  GatewayConnectionOptions options) {
    if (options.gateway_name.empty())
        return fail(errc::invalid_config, "a gateway connection needs the gateway's name");
    net::ConnectTarget target;
    target.tls = options.https;
    target.connect_timeout = options.connect_timeout;
    if (target.tls) {
        if (auto tls = net::use_tls(target, options.ca_pem, options.insecure_skip_verify); !tls)
            return fail(tls.error());
    }
    auto executor = client.get_executor();
    auto state = std::make_shared<GatewayState>();
    WatchOptions watch_options;
    watch_options.field_selector = "metadata.name=" + options.gateway_name;
    watch_options.timeout_seconds = 300;
    ResourcePath gateways{"gateway.networking.k8s.io", "v1", "gateways", options.gateway_namespace, ""};
    auto watch = std::make_shared<ListWatch>(client, gateways, watch_options);
    auto follower = std::make_shared<GatewayFollower>(state, watch, executor);
    GatewayLookup lookup{client, gateways.with_name(options.gateway_name), options.port,
                         options.https ? "HTTPS" : "HTTP"};
    asio::co_spawn(follower->strand, follow_gateway(state, watch, lookup),
                   asio::bind_cancellation_slot(state->cancel.slot(), asio::detached));

    PooledConnectionSettings settings;
    settings.description = "gateway " + options.gateway_namespace + "/" + options.gateway_name;
    settings.token = options.token;
    settings.max_connections = options.max_connections;
    settings.max_idle = options.max_idle;
    settings.generation = [state] { return state->generation.load(); };
    settings.current_host = [state, tls = options.https] {
        std::lock_guard lock(state->mutex);
        if (!state->address) return std::string("gateway");
        return net::host_header(state->address->host, std::to_string(state->address->port), tls);
    };
    StreamOpener open = [executor, state, lookup, target, follower,
                         ready_timeout = options.ready_timeout](steady_clock::time_point deadline) {
        return open_to_gateway(executor, state, lookup, target, deadline, ready_timeout);
    };
    return make_pooled_router_connection(std::move(executor), std::move(settings), std::move(open));
}

}  // namespace kubesandbox
