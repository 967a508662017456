// Acquiring a sandbox: by caller id (reconnect, or create-or-adopt at the id's own pod name) or
// a fresh random one (from the warm pool when there is one). In shared-namespace mode a caller
// id goes through its binding (naming.hpp, manifests.hpp): creating the binding is the claim
// on the id, so replicas agree on one pod even when it is a warm pod with a random name.
#include "providers/raw/naming.hpp"
#include "providers/raw/pod_state.hpp"
#include "providers/raw/state.hpp"
#include "util/json_access.hpp"
#include "util/random.hpp"
#include "util/time_format.hpp"

namespace kubesandbox::raw {

namespace asio = boost::asio;
namespace json = boost::json;
using std::chrono::steady_clock;
using std::chrono::system_clock;
using util::annotation_of;
using util::label_of;
using util::metadata_of;
using util::string_at;

namespace {

std::string uid_of(const json::object& o) { return string_at(metadata_of(o), "uid"); }

// Hands out a live pod: waits for its creator's setup, restores its policy, records activity.
// `activity_id` is what the sandbox reports its activity under.
asio::awaitable<Result<PodAcquisition>> reconnect(StatePtr st, std::string ns, std::string name, json::object pod,
                                                  std::string activity_id, std::string id) {
    const std::string uid = uid_of(pod);
    const std::string sandbox_label = label_of(pod, keys::sandbox_id);
    auto w = co_await wait_ready(st, ns, name, std::move(pod), steady_clock::now() + st->options.startup_timeout, true);
    if (!w) co_return fail(w.error());
    // Reconnecting never hands out a pod whose policy was deleted behind our back.
    auto np = co_await ensure_network_policy(st, ns, name, sandbox_label, uid);
    if (!np) co_return fail(np.error());
    {
        std::lock_guard lock(st->mutex);
        st->last_patch[activity_id] = steady_clock::now();
    }
    auto p = co_await patch_activity(st, ns, name);
    // Gone between the read and the patch (reaped by someone): not a sandbox to hand out.
    if (!p && p.error().is(errc::not_found))
        co_return fail(errc::conflict, "sandbox " + id + " was deleted while it was being acquired");
    if (!p) co_return fail(p.error());
    co_return PodAcquisition{make_sandbox(st, ns, name, activity_id), SandboxOrigin::existing, uid};
}

// What is at the id's own pod name: a live pod to hand out, or nothing (any dead pod there has
// been deleted and is gone: `replaced`).
struct AtName {
    std::optional<PodAcquisition> acquired;
    bool replaced{false};
};

asio::awaitable<Result<AtName>> acquire_at_name(StatePtr st, Target target, bool create_if_missing) {
    const auto& cfg = st->options;
    const ResourcePath path = pods_path(target.ns).with_name(target.pod);
    auto got = co_await st->client.get(path);
    if (!got) {
        if (got.error().is(errc::not_found)) co_return AtName{};
        co_return fail(got.error());
    }
    const std::string where = target.ns + "/" + target.pod;
    if (label_of(*got, keys::managed_by) != keys::managed_by_value)
        co_return fail(errc::already_exists, "pod " + where + " exists and is not managed by kubesandbox");
    if (target.label && label_of(*got, keys::sandbox_id) != *target.label)
        co_return fail(errc::already_exists,
                       "pod " + where + " belongs to another sandbox (" + label_of(*got, keys::sandbox_id) + ")");
    auto ev = evaluate_pod(*got);
    const bool abandoned = setup_abandoned(*got, cfg, system_clock::now());
    if (!ev.dead && !abandoned) {
        if (ev.state == PodState::failed) co_return fail(ev.error);
        auto r = co_await reconnect(st, target.ns, target.pod, std::move(*got), target.id, target.id);
        if (!r) co_return fail(r.error());
        co_return AtName{std::move(*r), false};
    }
    // A dead or terminating pod would block its id forever: replace it.
    if (!create_if_missing)
        co_return fail(errc::not_found, "sandbox " + target.id + " is gone: " +
                                            (abandoned ? std::string("its setup was abandoned") : ev.error.message));
    auto deadline = steady_clock::now() + cfg.startup_timeout;
    std::string uid = uid_of(*got);
    if (!being_deleted(*got)) {
        DeleteOptions dopts;
        dopts.grace_period_seconds = 0;  // it is dead: nothing to shut down gracefully
        dopts.precondition_uid = uid;
        auto d = co_await st->client.remove(path, std::move(dopts));
        if (!d && !d.error().is(errc::not_found) && !d.error().is(errc::conflict)) co_return fail(d.error());
    }
    auto gone = co_await wait_gone(st, target.ns, target.pod, uid, deadline);
    if (!gone) co_return fail(gone.error());
    co_return AtName{std::nullopt, true};
}

// Creates (or adopts) the pod at the id's own name.
asio::awaitable<Result<PodAcquisition>> create_at_name(StatePtr st, Target target, const GetOrCreateOptions& options,
                                                       bool replaced) {
    // A pod reference names the pod itself; a caller id is recorded as the sandbox id.
    std::string identity_id = target.label ? target.id : target.pod;
    auto idt = make_identity(st->options, identity_id, options.labels, options.ttl_seconds, options.ttl_idle_seconds,
                             util::now_rfc3339(true));
    if (!idt) co_return fail(idt.error());
    auto r = co_await create_and_wait(st, target.pod, std::move(*idt), true, false);
    if (!r) co_return fail(r.error());
    SandboxOrigin origin = replaced     ? SandboxOrigin::replaced
                           : r->adopted ? SandboxOrigin::adopted
                                        : SandboxOrigin::created;
    co_return PodAcquisition{make_sandbox(st, target.ns, target.pod, target.id), origin, r->uid};
}

// A warm pod claimed under a binding serves that id (bound_identity) and is ours.
bool serves(const json::object& pod, const std::string& id) {
    return label_of(pod, keys::managed_by) == keys::managed_by_value && annotation_of(pod, keys::id_original) == id &&
           label_of(pod, keys::pool_status) == "active";
}

bool our_binding(const json::object& b, const std::string& label) {
    return label_of(b, keys::managed_by) == keys::managed_by_value && label_of(b, keys::sandbox_id) == label;
}

// Deletes a binding that named a pod no longer there (preconditioned: one re-bound since stays).
asio::awaitable<Result<void>> unbind(StatePtr st, ResourcePath path, std::string uid) {
    DeleteOptions o;
    o.precondition_uid = std::move(uid);
    auto d = co_await st->client.remove(std::move(path), std::move(o));
    if (!d && !d.error().is(errc::not_found) && !d.error().is(errc::conflict)) co_return fail(d.error());
    co_return Result<void>{};
}

// Makes the binding its pod's dependent, so it goes with the pod whoever deletes it. Best effort:
// cleanup sweeps a binding whose pod is gone.
asio::awaitable<void> own_binding(StatePtr st, ResourcePath path, std::string pod, std::string uid) {
    auto r = co_await st->client.patch(std::move(path), owner_patch(pod, uid), PatchType::merge);
    if (!r && !r.error().is(errc::not_found))
        st->options.logger.warning("binding of pod " + pod + " not made its dependent: " + r.error().describe());
}

asio::awaitable<Result<PodAcquisition>> acquire_bound(StatePtr st, Target target, GetOrCreateOptions options) {
    const auto& cfg = st->options;
    const std::string& label = *target.label;
    const ResourcePath bpath = bindings_path(target.ns).with_name(target.pod);
    auto gone = [&](const std::string& why) {
        return fail(errc::not_found, "sandbox " + target.id + " is gone: " + why);
    };
    bool replaced = false;
    auto origin_or_replaced = [&](SandboxOrigin o) { return replaced ? SandboxOrigin::replaced : o; };
    // Each round either hands out a pod or removes something stale or lost a race; a few
    // rounds settle any interleaving of replicas.
    for (int round = 0; round < 8; ++round) {
        auto b = co_await st->client.get(bpath);
        if (!b && !b.error().is(errc::not_found)) co_return fail(b.error());
        if (b) {
            if (!our_binding(*b, label))
                co_return fail(errc::already_exists, "configmap " + target.ns + "/" + target.pod +
                                                         " exists and is not kubesandbox's binding of " + target.id);
            const std::string pod = bound_pod(*b);
            if (pod.empty())
                co_return fail(errc::invalid_response,
                               "the binding of sandbox " + target.id + " (configmap " + target.pod + ") names no pod");
            if (pod == target.pod) {
                auto at = co_await acquire_at_name(st, target, options.create_if_missing);
                if (!at) co_return fail(at.error());
                if (at->acquired) {
                    at->acquired->origin = origin_or_replaced(at->acquired->origin);
                    co_return std::move(*at->acquired);
                }
                replaced = replaced || at->replaced;
                if (!options.create_if_missing) co_return gone("its pod " + target.pod + " does not exist");
                auto made = co_await create_at_name(st, target, options, replaced);
                if (!made) co_return fail(made.error());
                // The binding was read before the pod was made: if it has been swept since and
                // the id bound elsewhere, this pod is not the id's (remove it, go again).
                auto again = co_await st->client.get(bpath);
                if (again && uid_of(*again) == uid_of(*b)) {
                    co_await own_binding(st, bpath, target.pod, made->uid);
                    co_return std::move(*made);
                }
                if (!again && !again.error().is(errc::not_found)) co_return fail(again.error());
                const std::optional<std::string> expected = label;
                auto d = co_await delete_objects(st, target.ns, target.pod, expected, false, std::string());
                if (!d && !d.error().is(errc::not_found)) co_return fail(d.error());
                continue;
            }
            // Bound to a claimed warm pod.
            auto p = co_await st->client.get(pods_path(target.ns).with_name(pod));
            if (!p && !p.error().is(errc::not_found)) co_return fail(p.error());
            const bool ours = p && serves(*p, target.id);
            if (ours && !evaluate_pod(*p).dead && !setup_abandoned(*p, cfg, system_clock::now())) {
                auto r = co_await reconnect(st, target.ns, pod, std::move(*p), target.ns + "/" + pod, target.id);
                if (!r) co_return fail(r.error());
                r->origin = origin_or_replaced(r->origin);
                co_return std::move(*r);
            }
            if (!options.create_if_missing) co_return gone("its pod " + pod + " is gone");
            if (ours) {
                const std::optional<std::string> expected = label_of(*p, keys::sandbox_id);
                auto d = co_await delete_objects(st, target.ns, pod, expected, false, std::string());
                if (!d && !d.error().is(errc::not_found) && !d.error().is(errc::conflict)) co_return fail(d.error());
            }
            auto u = co_await unbind(st, bpath, uid_of(*b));
            if (!u) co_return fail(u.error());
            replaced = true;
            continue;
        }

        // Unbound. A pod at the id's name (made before bindings, or by a creator whose binding
        // was swept) is the id's: every replica finds it the same way.
        auto at = co_await acquire_at_name(st, target, options.create_if_missing);
        if (!at) co_return fail(at.error());
        if (at->acquired) {
            at->acquired->origin = origin_or_replaced(at->acquired->origin);
            co_return std::move(*at->acquired);
        }
        replaced = replaced || at->replaced;
        if (!options.create_if_missing)
            co_return fail(errc::not_found,
                           "sandbox " + target.id + " (pod " + target.ns + "/" + target.pod + ") not found");
        std::optional<ClaimedPod> claimed;
        if (cfg.warm_pool_size > 0) {
            auto c = co_await claim_warm(st, options.labels, options.ttl_seconds, options.ttl_idle_seconds, target.id);
            spawn_refill(st);
            if (c) claimed = std::move(*c);
            else cfg.logger.warning("warm pool claim failed, creating: " + c.error().describe());
        }
        const std::string pod = claimed ? claimed->name : target.pod;
        const std::string token = util::random_hex(16);
        CreateOptions copts;
        copts.idempotent = true;
        copts.field_manager = "kubesandbox";
        // Built outside the co_await: g++ 12 destroys a conditional's temporary there twice.
        const std::string pod_uid = claimed ? claimed->uid : std::string();
        json::object body = build_binding(cfg, target.pod, label, pod, pod_uid, token, util::now_rfc3339(true));
        auto made = co_await st->client.create(bindings_path(target.ns), std::move(body), copts);
        // A 409, or an answer lost: whether the binding there is ours, its token says.
        if (!made && (made.error().is(errc::already_exists) || made.error().outcome_unknown())) {
            auto there = co_await st->client.get(bpath);
            if (there && annotation_of(*there, keys::creation_token) == token) made = std::move(*there);
        }
        if (made) {
            if (claimed) {
                {
                    std::lock_guard lock(st->mutex);
                    st->last_patch[claimed->ns + "/" + pod] = steady_clock::now();
                }
                co_return PodAcquisition{make_sandbox(st, claimed->ns, pod, claimed->ns + "/" + pod),
                                         origin_or_replaced(SandboxOrigin::claimed_warm), claimed->uid};
            }
            auto r = co_await create_at_name(st, target, options, replaced);
            if (!r) {
                auto u = co_await unbind(st, bpath, uid_of(*made));
                if (!u) cfg.logger.warning("binding of " + target.id + " not removed: " + u.error().describe());
                co_return fail(r.error());
            }
            co_await own_binding(st, bpath, target.pod, r->uid);
            co_return std::move(*r);
        }
        // Someone else bound the id first: what we claimed goes (the pool refills), theirs serves.
        if (claimed) {
            const std::optional<std::string> expected = claimed->name;
            auto d = co_await delete_objects(st, claimed->ns, claimed->name, expected, false, std::string());
            if (!d && !d.error().is(errc::not_found))
                cfg.logger.warning("claimed warm pod " + claimed->name + " not released: " + d.error().describe());
        }
        if (!made.error().is(errc::already_exists) && !made.error().outcome_unknown()) co_return fail(made.error());
    }
    co_return fail(errc::conflict, "the binding of sandbox " + target.id + " kept changing; try again");
}

}  // namespace

asio::awaitable<Result<PodAcquisition>> acquire(StatePtr st, GetOrCreateOptions options) {
    const auto& cfg = st->options;
    if (options.sandbox_id && options.sandbox_id->empty())
        co_return fail(errc::invalid_argument, "sandbox_id must not be empty");

    if (options.sandbox_id) {
        auto target = resolve_id(cfg, *options.sandbox_id);
        if (!target) co_return fail(target.error());
        if (target->label && !cfg.namespace_per_sandbox)
            co_return co_await acquire_bound(st, std::move(*target), std::move(options));
        auto at = co_await acquire_at_name(st, *target, options.create_if_missing);
        if (!at) co_return fail(at.error());
        if (at->acquired) co_return std::move(*at->acquired);
        if (!options.create_if_missing)
            co_return fail(errc::not_found,
                           "sandbox " + target->id + " (pod " + target->ns + "/" + target->pod + ") not found");
        co_return co_await create_at_name(st, std::move(*target), options, at->replaced);
    }

    if (!options.create_if_missing)
        co_return fail(errc::invalid_argument, "create_if_missing=false needs a sandbox_id");
    if (cfg.warm_pool_size > 0) {
        auto claimed =
            co_await claim_warm(st, options.labels, options.ttl_seconds, options.ttl_idle_seconds, std::nullopt);
        spawn_refill(st);
        if (claimed && *claimed) {
            const ClaimedPod& c = **claimed;
            co_return PodAcquisition{make_sandbox(st, c.ns, c.name, c.ns + "/" + c.name), SandboxOrigin::claimed_warm,
                                     c.uid};
        }
        if (!claimed) cfg.logger.warning("warm pool claim failed, creating: " + claimed.error().describe());
    }
    std::string name = random_pod_name();
    std::string ns = namespace_for(cfg, name);
    auto idt = make_identity(cfg, name, options.labels, options.ttl_seconds, options.ttl_idle_seconds,
                             util::now_rfc3339(true));
    if (!idt) co_return fail(idt.error());
    auto r = co_await create_and_wait(st, name, std::move(*idt), false, false);
    if (!r) co_return fail(r.error());
    co_return PodAcquisition{make_sandbox(st, ns, name, ns + "/" + name), SandboxOrigin::created, r->uid};
}

asio::awaitable<Result<Located>> locate(StatePtr st, Target target) {
    Located at{target.ns, target.pod, std::nullopt};
    if (!target.label || st->options.namespace_per_sandbox) co_return at;
    auto b = co_await st->client.get(bindings_path(target.ns).with_name(target.pod));
    if (!b) {
        if (b.error().is(errc::not_found)) co_return at;
        co_return fail(b.error());
    }
    if (!our_binding(*b, *target.label)) co_return at;
    if (auto pod = bound_pod(*b); !pod.empty()) at.pod = pod;
    at.binding = std::move(*b);
    co_return at;
}

}  // namespace kubesandbox::raw
