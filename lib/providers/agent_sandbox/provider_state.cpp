// The agent-sandbox provider's state and claim I/O (see provider_state.hpp).
#include "providers/agent_sandbox/provider_state.hpp"

#include "proto/status.hpp"
#include "util/json_access.hpp"
#include "util/time_format.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/parse.hpp>

namespace kubesandbox::agent_sandbox {

namespace asio = boost::asio;
namespace json = boost::json;
using std::chrono::steady_clock;
using util::metadata_of;
using util::string_at;

namespace {
constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);
}  // namespace

// The claims' API version: the option, or the cluster's choice read once from discovery.
asio::awaitable<Result<std::string>> claim_version(StatePtr st) {
    {
        std::lock_guard lock(st->mutex);
        if (st->version) co_return *st->version;
    }
    std::vector<std::string> served;
    if (st->options.claim_api_version.empty()) {
        auto got = co_await st->client.request("GET", std::string("/apis/") + agent_sandbox::claims_group);
        if (!got) co_return fail(got.error());
        if (got->status == 200) {
            boost::system::error_code ec;
            auto doc = json::parse(got->body, ec);
            if (ec || !doc.is_object())
                co_return fail(errc::invalid_response,
                               std::string("unreadable discovery document of ") + agent_sandbox::claims_group);
            served = agent_sandbox::served_versions(doc.get_object());
        } else if (got->status == 403) {
            // Allowed to use claims but not to read discovery: the version of agent-sandbox ≥ 0.5.
            // (A 401 is a credentials problem, returned below like any other error.)
            st->options.logger.warning(std::string("agent-sandbox: discovery of ") + agent_sandbox::claims_group +
                                       " refused (HTTP " + std::to_string(got->status) + "); using v1beta1");
            served.push_back("v1beta1");
        } else if (got->status != 404) {
            co_return fail(proto::error_from_response(got->status, got->content_type, got->body));
        }
    }
    auto version = agent_sandbox::choose_claim_version(st->options, served);
    if (!version) co_return fail(version.error());
    std::lock_guard lock(st->mutex);
    st->version = *version;
    co_return *version;
}

// What a new claim names (pool or template), read from the namespace's pools when the options
// name the other one.
asio::awaitable<Result<ClaimShape>> claim_shape(StatePtr st) {
    std::uint64_t generation = 0;
    {
        std::lock_guard lock(st->mutex);
        if (st->shape) co_return *st->shape;
        generation = st->shape_generation;
    }
    auto version = co_await claim_version(st);
    if (!version) co_return fail(version.error());
    json::array pools;
    if (agent_sandbox::shape_needs_pools(st->options, *version)) {
        ResourcePath p{agent_sandbox::claims_group, *version, "sandboxwarmpools", st->options.namespace_name, ""};
        auto page = co_await st->client.list(p);
        if (!page) co_return fail(page.error());
        pools = std::move(page->items);
    }
    auto shape = agent_sandbox::complete_claim_shape(st->options, *version, pools);
    if (!shape) co_return fail(shape.error());
    std::lock_guard lock(st->mutex);
    if (st->shape_generation == generation) st->shape = *shape;  // not if it was forgotten meanwhile
    co_return *shape;
}

asio::awaitable<Result<ResourcePath>> claims_path(StatePtr st) {
    auto version = co_await claim_version(st);
    if (!version) co_return fail(version.error());
    co_return agent_sandbox::claims_path(st->options.namespace_name, *version);
}

void forget_shape(const StatePtr& st) {
    std::lock_guard lock(st->mutex);
    st->shape.reset();
    ++st->shape_generation;
}

// Debounced, detached PATCH of the claim's last-activity annotation.
void record_claim_activity(const StatePtr& st, const std::string& claim) {
    {
        std::lock_guard lock(st->mutex);
        auto& last = st->activity_sent[claim];
        auto now = steady_clock::now();
        if (last != steady_clock::time_point{} && now - last < st->options.activity_debounce) return;
        last = now;
    }
    json::object body{
        {"metadata", json::object{{"annotations", json::object{{keys::last_activity, util::now_rfc3339()}}}}}};
    asio::co_spawn(
        st->client.get_executor(),
        [st, claim, body]() mutable -> asio::awaitable<void> {
            // No co_await inside a conditional expression: g++ 12 destroys its temporaries twice.
            auto p = co_await claims_path(st);
            if (!p) {
                st->options.logger.warning("agent-sandbox: recording activity of " + claim + ": " +
                                           p.error().describe());
                co_return;
            }
            auto r = co_await st->client.patch(p->with_name(claim), json::value(std::move(body)), PatchType::merge);
            if (!r && !r.error().is(errc::not_found))
                st->options.logger.warning("agent-sandbox: recording activity of " + claim + ": " +
                                           r.error().describe());
        },
        asio::detached);
}

std::unique_ptr<Sandbox> make_sandbox(const StatePtr& st, const std::string& claim, const ClaimState& state) {
    const auto& o = st->options;
    RouterSandboxOptions r;
    r.sandbox_name = state.sandbox_name;
    r.namespace_name = o.namespace_name;
    r.id = o.namespace_name + "/" + claim;
    r.port = o.runtime_port;
    if (o.send_pod_ip && !state.pod_ip.empty()) r.pod_ip = state.pod_ip;
    r.base_dir = o.base_dir;
    r.max_output_bytes = o.max_output_bytes;
    r.default_timeout = o.default_exec_timeout;
    r.max_file_bytes = o.max_file_bytes;
    std::weak_ptr<AgentSandboxProvider::State> weak = st;
    r.on_activity = [weak, claim] {
        if (auto s = weak.lock()) record_claim_activity(s, claim);
    };
    // Without a router each sandbox gets connections of its own; they fail only without a pod, a
    // port or a valid address, all set here. (A runtime may keep connect_port: it does not keep
    // the provider alive.)
    auto connect_port = [weak, state](std::uint16_t port) -> Result<std::shared_ptr<RouterConnection>> {
        auto s = weak.lock();
        if (!s) return fail(errc::cancelled, "the agent-sandbox provider of " + state.sandbox_name + " is gone");
        const auto& o = s->options;
        if (o.direct_to_pods) {
            DirectConnectionOptions direct;
            direct.url = agent_sandbox::in_cluster_url(state, o.namespace_name, port);
            direct.max_connections = 8;
            return make_direct_connection(s->client.get_executor(), direct);
        }
        if (o.tunnel_to_pods) {
            TunnelConnectionOptions tunnel;
            tunnel.namespace_name = o.namespace_name;
            tunnel.pod = state.sandbox_name;
            tunnel.port = port;
            tunnel.max_connections = 8;
            return make_tunnel_connection(s->client, tunnel);
        }
        return o.connection;
    };
    auto connection = connect_port(o.runtime_port);
    if (!connection) o.logger.warning("no connection to sandbox " + claim + ": " + connection.error().describe());
    RuntimeEndpoint endpoint{connection ? *connection : o.connection, std::move(r), std::move(connect_port)};
    if (o.runtime) return o.runtime(std::move(endpoint));
    return std::make_unique<RouterSandbox>(std::move(endpoint.connection), std::move(endpoint.options));
}

// Waits with one watch (re-established from the last resourceVersion, after one read on 410)
// until the claim `uid` names is ready, has failed for good, or the deadline passes.
asio::awaitable<Result<ClaimState>> wait_ready(StatePtr st, std::string claim, std::string uid,
                                               std::string resource_version, steady_clock::time_point deadline) {
    auto claims = co_await claims_path(st);
    if (!claims) co_return fail(claims.error());
    ResourcePath path = *claims;
    auto deleted = [] {
        ClaimState gone;
        gone.kind = ClaimState::Kind::failed;
        gone.reason = "ClaimDeleted";
        gone.message = "the claim was deleted while waiting for it";
        return gone;
    };
    bool read_again = false;  // the watch's history is gone: read the claim, then watch from there
    int reads_in_a_row = 0;
    while (true) {
        auto left = std::chrono::duration_cast<std::chrono::seconds>(deadline - steady_clock::now());
        if (left.count() <= 0) co_return fail(errc::startup_timeout, "sandbox claim " + claim + " not ready in time");
        if (read_again) {
            // Never a tight loop, whatever a server answers: a pause from the second time on.
            if (++reads_in_a_row > 1) {
                asio::steady_timer pause(co_await asio::this_coro::executor,
                                         std::chrono::milliseconds(std::min(1000, 100 * reads_in_a_row)));
                co_await pause.async_wait(tuple_awaitable);
            }
            // A deletion in the gap would never be seen by a fresh watch: it starts from what
            // exists. Listed (by name), not read: the watch goes on from the list's
            // resourceVersion, which is current; the claim's own may be older than the server's
            // history and answer 410 again.
            ListOptions lo;
            lo.field_selector = "metadata.name=" + claim;
            auto listed = co_await st->client.list(path, lo);
            if (!listed) co_return fail(listed.error());
            const json::object* current = nullptr;
            for (const auto& item : listed->items)
                if (item.is_object() && string_at(metadata_of(item.get_object()), "name") == claim)
                    current = &item.get_object();
            if (!current) co_return deleted();
            // Made again under the name in the gap: ours was deleted.
            if (!uid.empty() && string_at(metadata_of(*current), "uid") != uid) co_return deleted();
            auto state = agent_sandbox::evaluate_claim(*current);
            if (state.kind != ClaimState::Kind::pending) co_return state;
            resource_version = listed->resource_version;
            read_again = false;
        }
        WatchOptions w;
        w.field_selector = "metadata.name=" + claim;
        w.resource_version = resource_version;
        w.timeout_seconds = static_cast<int>(std::max<std::int64_t>(1, left.count()));
        w.idle_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(left) + std::chrono::seconds(5);
        auto stream = co_await st->client.watch(path, w);
        if (!stream) {
            if (stream.error().is(errc::gone) || stream.error().is(errc::expired)) {
                read_again = true;
                continue;
            }
            co_return fail(stream.error());
        }
        while (true) {
            auto event = co_await stream->next();
            if (!event) {
                if (event.error().is(errc::gone) || event.error().is(errc::expired)) read_again = true;
                if (event.error().is(errc::timeout) && steady_clock::now() >= deadline)
                    co_return fail(errc::startup_timeout, "sandbox claim " + claim + " not ready in time");
                break;  // re-watch
            }
            if (!*event) break;  // the server ended the watch
            const WatchEvent& ev = **event;
            if (ev.type == WatchEvent::Type::error) {
                read_again = true;
                break;
            }
            resource_version = string_at(metadata_of(ev.object), "resourceVersion");
            reads_in_a_row = 0;
            if (ev.type == WatchEvent::Type::bookmark) continue;
            if (ev.type == WatchEvent::Type::deleted) co_return deleted();
            auto state = agent_sandbox::evaluate_claim(ev.object);
            if (state.kind != ClaimState::Kind::pending) co_return state;
        }
    }
}

// Deletes the claim `uid` names: a claim made again under its name by another caller meanwhile stays.
asio::awaitable<void> delete_quietly(StatePtr st, std::string claim, std::string uid) {
    auto p = co_await claims_path(st);
    if (!p) co_return;  // only after the version was known: not reached
    DeleteOptions options;
    options.precondition_uid = std::move(uid);
    co_await st->client.remove(p->with_name(claim), std::move(options));
}

}  // namespace kubesandbox::agent_sandbox
