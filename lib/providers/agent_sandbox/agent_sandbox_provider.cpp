// AgentSandboxProvider: SandboxClaims through the API, the data plane through a router.
#include <kubesandbox/agent_sandbox_provider.hpp>

#include "proto/validation.hpp"
#include "providers/agent_sandbox/provider_state.hpp"
#include "providers/raw/manifests.hpp"
#include "providers/raw/naming.hpp"
#include "util/bounded_for_each.hpp"
#include "util/json_access.hpp"
#include "util/time_format.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>

namespace kubesandbox {

namespace asio = boost::asio;
namespace json = boost::json;
using agent_sandbox::claim_shape;
using agent_sandbox::claims_path;
using agent_sandbox::ClaimState;
using agent_sandbox::delete_quietly;
using agent_sandbox::make_sandbox;
using agent_sandbox::record_claim_activity;
using agent_sandbox::StatePtr;
using agent_sandbox::wait_ready;
using std::chrono::steady_clock;
using std::chrono::system_clock;
using util::metadata_of;
using util::string_at;

namespace {

constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);

// Raw mode's identity rules (reserved keys, sanitised values, originals kept) for the claim.
RawProviderOptions identity_options(const AgentSandboxProviderOptions& o) {
    RawProviderOptions r;
    r.extra_labels = o.extra_labels;
    r.default_labels = o.default_labels;
    r.default_ttl_seconds = o.default_ttl_seconds;
    r.default_ttl_idle_seconds = o.default_ttl_idle_seconds;
    return r;
}

std::string selector(const AgentSandboxProviderOptions& o, const std::map<std::string, std::string>& user_labels) {
    std::string s = std::string(keys::managed_by) + "=" + keys::managed_by_value;
    for (const auto& [k, v] : user_labels)
        s += "," + std::string(keys::prefix) + k + "=" + proto::sanitize_label_value(v);
    (void)o;
    return s;
}

// A sandbox's id() ("<namespace>/<claim>", a claim named by us in this provider's namespace),
// a random claim's bare name, or else a caller id (which may contain '/').
bool names_a_claim(const AgentSandboxProviderOptions& o, const std::string& id) {
    if (raw::is_random_pod_name(id)) return true;
    auto slash = id.find('/');
    return slash != std::string::npos && id.substr(0, slash) == o.namespace_name &&
           id.compare(slash + 1, 4, "ksb-") == 0 && id.find('/', slash + 1) == std::string::npos;
}

Result<std::string> resolve_claim(const AgentSandboxProviderOptions& o, const std::string& id) {
    if (id.empty()) return fail(errc::invalid_argument, "empty sandbox id");
    if (names_a_claim(o, id)) return id.substr(id.find('/') + 1);
    return raw::pod_name_for(id);
}

Error claim_error(const ClaimState& s, const std::string& claim) {
    std::string text = "sandbox claim " + claim + ": " + s.reason + (s.message.empty() ? "" : ": " + s.message);
    if (s.reason == "TemplateNotFound" || s.reason == "WarmPoolNotFound" || s.reason == "InvalidMetadata" ||
        s.reason == "EnvVarsInjectionRejected" || s.reason == "VolumeClaimTemplatesError")
        return make_error(errc::invalid_config, text);
    if (s.reason == "ClaimDeleted" || s.reason == "ClaimExpired" || s.reason == "SandboxExpired")
        return make_error(errc::sandbox_lost, text);
    return make_error(errc::pod_failed, text);
}

// Ours: managed by kubesandbox and, when asked for by caller id, made for that id.
bool ours(const json::object& claim, const std::optional<std::string>& label) {
    return util::label_of(claim, keys::managed_by) == keys::managed_by_value &&
           (!label || util::label_of(claim, keys::sandbox_id) == *label);
}

}  // namespace

AgentSandboxProvider::AgentSandboxProvider(KubeClient client, AgentSandboxProviderOptions options)
    : state_(std::make_shared<State>(std::move(client), std::move(options))) {}

AgentSandboxProvider::~AgentSandboxProvider() = default;

const AgentSandboxProviderOptions& AgentSandboxProvider::options() const { return state_->options; }

std::string AgentSandboxProvider::claim_name_for(const std::string& id) { return raw::pod_name_for(id); }

asio::awaitable<Result<Acquisition>> AgentSandboxProvider::acquire(GetOrCreateOptions request) {
    StatePtr st = state_;
    const auto& o = st->options;
    if (!o.connection && !o.tunnel_to_pods && !o.direct_to_pods)
        co_return fail(errc::invalid_config,
                       "agent-sandbox mode needs a router connection (or tunnel_to_pods or direct_to_pods)");
    const bool random = !request.sandbox_id;
    std::string claim = random ? raw::random_pod_name() : std::string();
    if (!random) {
        auto resolved = resolve_claim(o, *request.sandbox_id);
        if (!resolved) co_return fail(resolved.error());
        claim = *resolved;
    }
    // Asked for by name (a sandbox's id() or a random claim's name) or by caller id.
    const bool by_name = random || names_a_claim(o, *request.sandbox_id);
    const std::string id = by_name ? claim : *request.sandbox_id;
    auto identity = raw::make_identity(identity_options(o), id, request.labels, request.ttl_seconds,
                                       request.ttl_idle_seconds, util::now_rfc3339());
    if (!identity) co_return fail(identity.error());
    const auto deadline = steady_clock::now() + o.ready_timeout;
    // The claim's shape (its pool or template) matters only to a claim made here.
    auto claims = co_await claims_path(st);
    if (!claims) co_return fail(claims.error());
    const ResourcePath path = *claims;
    SandboxOrigin origin = SandboxOrigin::existing;
    bool created_here = false;
    std::string resource_version;
    std::string claim_uid;

    for (int round = 0; round < 3; ++round) {
        auto existing = co_await st->client.get(path.with_name(claim));
        if (existing) {
            if (!ours(*existing, by_name ? std::nullopt : std::optional<std::string>(identity->label)))
                co_return fail(errc::conflict, "sandbox claim " + claim + " exists and was not made for " + id);
            auto state = agent_sandbox::evaluate_claim(*existing);
            if (state.kind == ClaimState::Kind::ready) {
                Acquisition a;
                a.sandbox = make_sandbox(st, claim, state);
                a.origin = origin;
                a.instance = string_at(metadata_of(*existing), "uid");
                co_return a;
            }
            if (state.kind == ClaimState::Kind::failed) {
                if (!request.create_if_missing)
                    co_return fail(errc::not_found, "sandbox " + id + " is gone (" + state.reason + ")");
                const std::string failed_uid = string_at(metadata_of(*existing), "uid");
                co_await delete_quietly(st, claim, failed_uid);
                // Wait for the old claim to leave before making a new one under its name (or
                // until another caller's new claim holds the name: the next round looks at it).
                asio::steady_timer timer(co_await asio::this_coro::executor);
                while (steady_clock::now() < deadline) {
                    auto again = co_await st->client.get(path.with_name(claim));
                    if (!again && again.error().is(errc::not_found)) break;
                    if (again && string_at(metadata_of(*again), "uid") != failed_uid) break;
                    timer.expires_after(std::chrono::milliseconds(50));
                    co_await timer.async_wait(tuple_awaitable);
                }
                origin = SandboxOrigin::replaced;
                continue;
            }
            resource_version = string_at(metadata_of(*existing), "resourceVersion");
            claim_uid = string_at(metadata_of(*existing), "uid");
            if (origin == SandboxOrigin::existing) origin = SandboxOrigin::adopted;
        } else if (existing.error().is(errc::not_found)) {
            if (!request.create_if_missing) co_return fail(errc::not_found, "no sandbox " + id);
            auto shape = co_await claim_shape(st);
            if (!shape) co_return fail(shape.error());
            auto body = agent_sandbox::build_claim(o, *shape, claim, identity->labels, identity->annotations,
                                                   request.ttl_seconds ? request.ttl_seconds : o.default_ttl_seconds,
                                                   system_clock::now());
            auto made = co_await st->client.create(path, std::move(body));
            if (!made) {
                if (made.error().is(errc::already_exists)) continue;  // a concurrent creator: adopt theirs
                co_return fail(made.error());
            }
            created_here = true;
            if (origin != SandboxOrigin::replaced) origin = SandboxOrigin::created;
            resource_version = string_at(metadata_of(*made), "resourceVersion");
            claim_uid = string_at(metadata_of(*made), "uid");
        } else {
            co_return fail(existing.error());
        }

        auto state = co_await wait_ready(st, claim, claim_uid, resource_version, deadline);
        if (!state || state->kind != ClaimState::Kind::ready) {
            // A claim this call made and that never became usable is not left behind.
            if (created_here) co_await delete_quietly(st, claim, claim_uid);
            if (!state) co_return fail(state.error());
            // The next claim looks for the pool (or template) again.
            if (state->reason == "WarmPoolNotFound" || state->reason == "TemplateNotFound")
                agent_sandbox::forget_shape(st);
            co_return fail(claim_error(*state, claim));
        }
        if (created_here && origin == SandboxOrigin::created && state->sandbox_name != claim)
            origin = SandboxOrigin::claimed_warm;
        Acquisition a;
        a.sandbox = make_sandbox(st, claim, *state);
        a.origin = origin;
        a.instance = claim_uid;  // the claim wait_ready saw become ready
        co_return a;
    }
    co_return fail(errc::conflict, "sandbox claim " + claim + " kept changing while acquiring it");
}

asio::awaitable<Result<SandboxInfo>> AgentSandboxProvider::describe(std::string id) {
    StatePtr st = state_;
    auto claim = resolve_claim(st->options, id);
    if (!claim) co_return fail(claim.error());
    auto p = co_await claims_path(st);
    if (!p) co_return fail(p.error());
    auto got = co_await st->client.get(p->with_name(*claim));
    if (!got) co_return fail(got.error());
    if (util::label_of(*got, keys::managed_by) != keys::managed_by_value)
        co_return fail(errc::not_found, "sandbox claim " + *claim + " is not managed by kubesandbox");
    co_return agent_sandbox::claim_info(*got);
}

asio::awaitable<Result<SandboxPage>> AgentSandboxProvider::list(ListSandboxesOptions request) {
    StatePtr st = state_;
    ListOptions lo;
    lo.label_selector = selector(st->options, request.labels);
    lo.limit = request.limit;
    lo.continue_token = request.cursor;
    auto claims = co_await claims_path(st);
    if (!claims) co_return fail(claims.error());
    auto page = co_await st->client.list(*claims, lo);
    if (!page) co_return fail(page.error());
    SandboxPage out;
    for (const auto& item : page->items) {
        if (!item.is_object()) continue;
        auto info = agent_sandbox::claim_info(item.get_object());
        if (request.status && info.status != *request.status) continue;
        out.items.push_back(std::move(info));
    }
    out.next_cursor = page->continue_token;
    co_return out;
}

asio::awaitable<Result<bool>> AgentSandboxProvider::delete_sandbox(std::string id) {
    StatePtr st = state_;
    auto claim = resolve_claim(st->options, id);
    if (!claim) co_return fail(claim.error());
    auto p = co_await claims_path(st);
    if (!p) co_return fail(p.error());
    // Only a claim of ours, and the one read: a claim someone else made under the name stays.
    auto got = co_await st->client.get(p->with_name(*claim));
    if (!got && got.error().is(errc::not_found)) co_return false;
    if (!got) co_return fail(got.error());
    if (util::label_of(*got, keys::managed_by) != keys::managed_by_value)
        co_return fail(errc::conflict, "sandbox claim " + *claim + " was not made by kubesandbox; left alone");
    DeleteOptions options;
    options.precondition_uid = string_at(metadata_of(*got), "uid");
    auto removed = co_await st->client.remove(p->with_name(*claim), std::move(options));
    if (!removed && removed.error().is(errc::not_found)) co_return false;
    if (!removed) co_return fail(removed.error());
    co_return removed->found;
}

asio::awaitable<Result<CleanupResult>> AgentSandboxProvider::cleanup(CleanupOptions request) {
    StatePtr st = state_;
    CleanupResult result;
    const auto now = system_clock::now();
    auto claims = co_await claims_path(st);
    if (!claims) co_return fail(claims.error());
    std::string cursor;
    do {
        ListOptions lo;
        lo.label_selector = selector(st->options, {});
        lo.limit = 500;
        lo.continue_token = cursor;
        auto page = co_await st->client.list(*claims, lo);
        if (!page) co_return fail(page.error());
        cursor = page->continue_token;
        std::vector<const json::object*> expired;
        for (const auto& item : page->items) {
            if (!item.is_object()) continue;
            const json::object& claim = item.get_object();
            if (metadata_of(claim).contains("deletionTimestamp")) continue;
            auto info = agent_sandbox::claim_info(claim);
            auto age_since = [&](const std::string& stamp) -> std::optional<std::chrono::seconds> {
                auto tp = util::parse_rfc3339(stamp);
                if (!tp) return std::nullopt;
                return std::chrono::duration_cast<std::chrono::seconds>(now - *tp);
            };
            bool reap = info.status == "failed" || info.status == "terminated";
            if (auto ttl = util::parse_decimal(util::annotation_of(claim, keys::ttl_seconds))) {
                if (auto age = age_since(info.created_at); age && age->count() >= *ttl) reap = true;
            }
            std::string last = info.last_activity.empty() ? info.created_at : info.last_activity;
            auto idle = age_since(last);
            if (auto ttl_idle = util::parse_decimal(util::annotation_of(claim, keys::ttl_idle_seconds))) {
                if (idle && idle->count() >= *ttl_idle) reap = true;
            }
            if (request.max_idle && idle && *idle >= *request.max_idle && info.status == "running") reap = true;
            if (reap) expired.push_back(&claim);
        }
        // The page's deletions overlap; each asks the caller right before its own delete.
        co_await util::bounded_for_each(
            expired.size(), request.concurrency, [&](std::size_t i) -> asio::awaitable<void> {
                const json::object& claim = *expired[i];
                auto info = agent_sandbox::claim_info(claim);
                if (request.may_delete && !request.may_delete(info)) {
                    ++result.kept;
                    co_return;
                }
                const ResourcePath& p = *claims;
                DeleteOptions d;
                d.precondition_resource_version = string_at(metadata_of(claim), "resourceVersion");
                auto removed = co_await st->client.remove(p.with_name(string_at(metadata_of(claim), "name")), d);
                if (removed && removed->found) {
                    result.deleted.push_back(info.id);
                } else if (!removed && !removed.error().is(errc::conflict) && !removed.error().is(errc::not_found)) {
                    result.errors.push_back(CleanupError{info.id, removed.error()});
                } else {
                    ++result.kept;  // someone else deleted or touched it meanwhile
                }
            });
    } while (!cursor.empty());
    std::sort(result.deleted.begin(), result.deleted.end());
    co_return result;
}

asio::awaitable<Result<PoolStatus>> AgentSandboxProvider::pool_status() {
    StatePtr st = state_;
    PoolStatus ps;
    // The pool new claims name: the shape's, or with a v1alpha1 template claim (which names no
    // pool) the option's.
    auto version = co_await agent_sandbox::claim_version(st);
    if (!version) co_return fail(version.error());
    auto shape = co_await claim_shape(st);
    if (!shape) co_return fail(shape.error());
    const std::string pool = shape->warm_pool.empty() ? st->options.warm_pool : shape->warm_pool;
    if (!pool.empty()) {
        ResourcePath p{agent_sandbox::claims_group, *version, "sandboxwarmpools", st->options.namespace_name, pool};
        auto pool = co_await st->client.get(p);
        if (!pool) co_return fail(pool.error());
        const json::object* spec = util::object_at(*pool, "spec");
        const json::object* status = util::object_at(*pool, "status");
        ps.target = static_cast<int>(util::int_at(spec, "replicas").value_or(1));
        ps.available = static_cast<int>(util::int_at(status, "readyReplicas").value_or(0));
        ps.total = static_cast<int>(util::int_at(status, "replicas").value_or(0));
    }
    auto s = co_await stats();
    if (!s) co_return fail(s.error());
    ps.active = s->total;
    ps.total += s->total;
    co_return ps;
}

asio::awaitable<Result<ProviderStats>> AgentSandboxProvider::stats() {
    StatePtr st = state_;
    ProviderStats s;
    const auto now = system_clock::now();
    std::string cursor;
    do {
        ListSandboxesOptions lo;
        lo.limit = 500;
        lo.cursor = cursor;
        auto page = co_await list(lo);
        if (!page) co_return fail(page.error());
        cursor = page->next_cursor;
        for (const auto& info : page->items) {
            ++s.total;
            if (info.status == "running") {
                ++s.running;
                auto last = util::parse_rfc3339(info.last_activity.empty() ? info.created_at : info.last_activity);
                if (last && now - *last > std::chrono::seconds(300)) ++s.idle;
            } else if (info.status == "pending") {
                ++s.pending;
            } else if (info.status == "failed") {
                ++s.failed;
            }
        }
    } while (!cursor.empty());
    co_return s;
}

void AgentSandboxProvider::record_activity(const std::string& id) {
    auto claim = resolve_claim(state_->options, id);
    if (claim) record_claim_activity(state_, *claim);
}

}  // namespace kubesandbox
