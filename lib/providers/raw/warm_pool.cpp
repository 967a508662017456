// The warm pool: pods of one configuration started ahead of demand (pool-status=warm) and
// claimed by a resourceVersion-preconditioned PATCH, so two claimers never share one.
#include "providers/raw/naming.hpp"
#include "providers/raw/pod_state.hpp"
#include "providers/raw/state.hpp"
#include "util/json_access.hpp"
#include "util/random.hpp"
#include "util/time_format.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace kubesandbox::raw {

namespace asio = boost::asio;
namespace json = boost::json;
using util::annotation_of;
using util::label_of;
using util::metadata_of;
using util::string_at;

namespace {

// Warm pods of this configuration that are alive (starting ones too, or concurrent refills
// overshoot). Dead ones can never be claimed: they are deleted here, so the refill replaces
// them instead of leaving the pool short for good.
asio::awaitable<Result<int>> count_warm(StatePtr st) {
    auto pods = co_await list_all(st, list_path(st->options), warm_selector(st->options, st->config_hash));
    if (!pods) co_return fail(pods.error());
    int n = 0;
    for (const auto& pod : *pods) {
        if (evaluate_sandbox(pod, true).state != PodState::failed) {
            ++n;
            continue;
        }
        // Only pods that are over for good (not a back-off a kubelet may still recover from).
        const auto& m = metadata_of(pod);
        if (m.contains("deletionTimestamp") || !evaluate_pod(pod).dead) continue;
        // Preconditioned on what was listed: a pod claimed meanwhile is not ours to delete.
        auto removed = co_await delete_objects(st, string_at(m, "namespace"), string_at(m, "name"), std::nullopt, true,
                                               string_at(m, "resourceVersion"));
        if (!removed) st->options.logger.warning("dead warm pod not deleted: " + removed.error().describe());
    }
    co_return n;
}

bool claimed_by(const json::object& pod, const std::string& token) {
    return label_of(pod, keys::pool_status) == "active" && annotation_of(pod, keys::claim_token) == token;
}

// A claimed pod is handed out only with its deny-all policy in place (made with the warm pod,
// but deleted behind our back since, say): restored, or the pod is released and the claim fails
// (the caller creates a sandbox instead, with a policy of its own).
asio::awaitable<Result<std::optional<ClaimedPod>>> with_policy(StatePtr st, ClaimedPod claimed, std::string label) {
    auto np = co_await ensure_network_policy(st, claimed.ns, claimed.name, label, claimed.uid);
    if (np) co_return std::optional<ClaimedPod>(std::move(claimed));
    const std::optional<std::string> expected = label;
    auto d = co_await delete_objects(st, claimed.ns, claimed.name, expected, true, std::string());
    if (!d && !d.error().is(errc::not_found))
        st->options.logger.warning("claimed warm pod " + claimed.name + " not released: " + d.error().describe());
    co_return fail(np.error());
}

// A claim whose outcome could not be learned (its answer lost or a 409 to its replay, and the
// read after it failed): the caller makes a sandbox of its own, so a pod this claim may have taken would be a
// second one nobody uses. Read back a few times on the side; deleted when the token is ours.
asio::awaitable<void> release_if_claimed(StatePtr st, std::string ns, std::string name, std::string token) {
    asio::steady_timer timer(st->client.get_executor());
    for (int attempt = 0; attempt < 6; ++attempt) {
        timer.expires_after(std::chrono::milliseconds(250) * (1 << attempt));
        co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
        auto pod = co_await st->client.get(pods_path(ns).with_name(name));
        if (!pod && pod.error().is(errc::not_found)) co_return;
        if (!pod) continue;
        if (!claimed_by(*pod, token)) co_return;  // not taken by this claim
        const auto& m = metadata_of(*pod);
        auto removed = co_await delete_objects(st, ns, name, std::nullopt, true, string_at(m, "resourceVersion"));
        if (removed || removed.error().is(errc::not_found) || removed.error().is(errc::conflict)) co_return;
    }
    st->options.logger.warning("warm pod " + ns + "/" + name +
                               " may be claimed by a request whose answer was lost; cleanup will remove it");
}

}  // namespace

asio::awaitable<Result<int>> fill_pool(StatePtr st) {
    int target = st->options.warm_pool_size;
    if (target <= 0) co_return 0;
    auto have = co_await count_warm(st);
    if (!have) co_return fail(have.error());
    int created = 0;
    std::optional<Error> err;
    for (int i = *have; i < target; ++i) {
        std::string name = random_pod_name();
        auto idt = make_identity(st->options, name, {}, std::nullopt, std::nullopt, util::now_rfc3339(true));
        if (!idt) co_return fail(idt.error());
        auto r = co_await create_and_wait(st, name, std::move(*idt), false, true);
        if (r) ++created;
        else if (!err) err = r.error();
    }
    if (created == 0 && err) co_return fail(*err);
    co_return created;
}

void spawn_refill(const StatePtr& st) {
    if (st->options.warm_pool_size <= 0) return;
    {
        std::lock_guard lock(st->mutex);
        if (st->refilling) {
            st->refill_again = true;  // a claim after the running refill counted: count again
            return;
        }
        st->refilling = true;
    }
    auto task = [](StatePtr s) -> asio::awaitable<void> {
        for (;;) {
            try {
                auto r = co_await fill_pool(s);
                if (!r) s->options.logger.warning("warm pool refill failed: " + r.error().describe());
            } catch (const std::exception& e) {
                s->options.logger.warning(std::string("warm pool refill failed: ") + e.what());
            }
            std::lock_guard lock(s->mutex);
            if (!s->refill_again) {
                s->refilling = false;
                break;
            }
            s->refill_again = false;
        }
    };
    asio::co_spawn(st->client.get_executor(), task(st), asio::detached);
}

// The claim carries a token unique to this call: when the PATCH went through but its response
// was lost, the retry's 409 (or the dead connection) is resolved by reading the pod back,
// instead of being taken for someone else's claim and orphaning the pod.
asio::awaitable<Result<std::optional<ClaimedPod>>> claim_warm(StatePtr st,
                                                              std::map<std::string, std::string> user_labels,
                                                              std::optional<std::int64_t> ttl,
                                                              std::optional<std::int64_t> ttl_idle,
                                                              std::optional<std::string> caller_id) {
    using Claimed = std::optional<ClaimedPod>;
    ListOptions lo;
    lo.label_selector = warm_selector(st->options, st->config_hash);
    lo.limit = 100;
    auto page = co_await st->client.list(list_path(st->options), std::move(lo));
    if (!page) co_return fail(page.error());
    for (const auto& item : page->items) {
        if (!item.is_object()) continue;
        const auto& pod = item.get_object();
        if (!is_ready(pod) || status_of(pod) != "warm") continue;
        const auto& m = metadata_of(pod);
        std::string name = string_at(m, "name");
        std::string ns = string_at(m, "namespace");  // per-sandbox mode: the pod's own namespace
        std::string uid = string_at(m, "uid");
        auto now = util::now_rfc3339(true);
        auto idt = make_identity(st->options, caller_id ? *caller_id : name, user_labels, ttl, ttl_idle, now);
        if (!idt) co_return fail(idt.error());
        if (caller_id) *idt = bound_identity(std::move(*idt), name);
        const std::string token = util::random_hex(16);
        const ResourcePath path = pods_path(ns).with_name(name);
        std::int64_t running_for = 0;
        const json::object* status = util::object_at(pod, "status");
        if (auto started = util::parse_rfc3339(status ? string_at(*status, "startTime") : std::string()))
            running_for =
                std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now() - *started).count();
        auto deadline = claimed_deadline(*idt, st->options.active_deadline_seconds, running_for);
        auto r = co_await st->client.patch(
            path, warm_claim_patch(*idt, string_at(m, "resourceVersion"), token, now, deadline), PatchType::merge);
        if (r) {
            // The precondition guarantees we were the only claimer of that version.
            // (The pod named outside the co_await: g++ 12 destroys a braced temporary there twice.)
            ClaimedPod got{ns, name, uid};
            if (claimed_by(*r, token)) co_return co_await with_policy(st, std::move(got), idt->label);
            continue;
        }
        if (r.error().is(errc::not_found)) continue;
        auto now_pod = co_await st->client.get(path);
        if (now_pod && claimed_by(*now_pod, token)) {  // response lost
            ClaimedPod got{ns, name, uid};
            co_return co_await with_policy(st, std::move(got), idt->label);
        }
        // Unread, this claim may have gone through: a 409 can answer the replay of our own PATCH.
        if (!now_pod && !now_pod.error().is(errc::not_found) &&
            (r.error().is(errc::conflict) || r.error().outcome_unknown()))
            asio::co_spawn(st->client.get_executor(), release_if_claimed(st, ns, name, token), asio::detached);
        if (r.error().is(errc::conflict)) continue;  // someone else got it: take the next
        co_return fail(r.error());
    }
    co_return Claimed();
}

}  // namespace kubesandbox::raw
