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
        co_return fail(errc::not_found, "sandbox " + id + " was deleted while it was being acquired");
    if (!p) co_return fail(p.error());
    co_return PodAcquisition{make_sandbox(st, ns, name, activity_id), SandboxOrigin::existing, uid};
}

// The pod at the id's own name, if any; a pod there that is not this id's is an error.
asio::awaitable<Result<std::optional<json::object>>> read_at_name(StatePtr st, const Target& target) {
    using Found = std::optional<json::object>;
    auto got = co_await st->client.get(pods_path(target.ns).with_name(target.pod));
    if (!got) {
        if (got.error().is(errc::not_found)) co_return Found();
        co_return fail(got.error());
    }
    const std::string where = target.ns + "/" + target.pod;
    if (label_of(*got, keys::managed_by) != keys::managed_by_value)
        co_return fail(errc::already_exists, "pod " + where + " exists and is not managed by kubesandbox");
    if (target.label && label_of(*got, keys::sandbox_id) != *target.label)
        co_return fail(errc::already_exists,
                       "pod " + where + " belongs to another sandbox (" + label_of(*got, keys::sandbox_id) + ")");
    co_return Found(std::move(*got));
}

// Why a pod may not be handed out ("" when it may): dead, terminating, or its setup abandoned.
std::string unusable(const json::object& pod, const RawProviderOptions& cfg) {
    if (setup_abandoned(pod, cfg, system_clock::now())) return "its setup was abandoned";
    auto ev = evaluate_pod(pod);
    return ev.dead ? ev.error.message : std::string();
}

// Deletes a dead pod at the id's own name and waits until it is gone (the name is reused).
asio::awaitable<Result<void>> remove_dead(StatePtr st, const Target& target, const json::object& pod) {
    const ResourcePath path = pods_path(target.ns).with_name(target.pod);
    auto deadline = steady_clock::now() + st->options.startup_timeout;
    std::string uid = uid_of(pod);
    if (!being_deleted(pod)) {
        DeleteOptions dopts;
        dopts.grace_period_seconds = 0;  // it is dead: nothing to shut down gracefully
        dopts.precondition_uid = uid;
        auto d = co_await st->client.remove(path, std::move(dopts));
        if (!d && !d.error().is(errc::not_found) && !d.error().is(errc::conflict)) co_return fail(d.error());
    }
    co_return co_await wait_gone(st, target.ns, target.pod, uid, deadline);
}

// Without bindings (per-sandbox namespaces, pod references): what is at the id's own name, a
// live pod to hand out, or nothing (any dead pod there is gone now: `replaced`).
struct AtName {
    std::optional<PodAcquisition> acquired;
    bool replaced{false};
};

asio::awaitable<Result<AtName>> acquire_at_name(StatePtr st, Target target, bool create_if_missing) {
    auto got = co_await read_at_name(st, target);
    if (!got) co_return fail(got.error());
    if (!*got) co_return AtName{};
    if (std::string why = unusable(**got, st->options); !why.empty()) {
        if (!create_if_missing) co_return fail(errc::not_found, "sandbox " + target.id + " is gone: " + why);
        auto gone = co_await remove_dead(st, target, **got);
        if (!gone) co_return fail(gone.error());
        co_return AtName{std::nullopt, true};
    }
    if (auto ev = evaluate_pod(**got); ev.state == PodState::failed) co_return fail(ev.error);
    auto r = co_await reconnect(st, target.ns, target.pod, std::move(**got), target.id, target.id);
    if (!r) co_return fail(r.error());
    co_return AtName{std::move(*r), false};
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

bool owned(const json::object& o) {
    const auto* refs = metadata_of(o).if_contains("ownerReferences");
    return refs && refs->is_array() && !refs->as_array().empty();
}

bool owned_by(const json::object& o, const std::string& uid) {
    const auto* refs = metadata_of(o).if_contains("ownerReferences");
    if (!refs || !refs->is_array()) return false;
    for (const auto& ref : refs->as_array())
        if (ref.is_object() && string_at(ref.as_object(), "uid") == uid) return true;
    return false;
}

// Deletes a binding that named a pod no longer there (preconditioned: one re-bound since stays).
asio::awaitable<Result<void>> unbind(StatePtr st, ResourcePath path, std::string uid) {
    DeleteOptions o;
    o.precondition_uid = std::move(uid);
    auto d = co_await st->client.remove(std::move(path), std::move(o));
    if (!d && !d.error().is(errc::not_found) && !d.error().is(errc::conflict)) co_return fail(d.error());
    co_return Result<void>{};
}

// Makes `binding` (as read) the dependent of the pod it names, so it goes with that pod whoever
// deletes it; preconditioned on what was read, so a binding deleted and made again meanwhile
// (another pod's, maybe) is never touched. False: that binding is no longer there, and the pod
// may not be handed out under it.
asio::awaitable<Result<bool>> own_binding(StatePtr st, ResourcePath path, json::object binding, std::string pod,
                                          std::string uid) {
    const std::string binding_uid = uid_of(binding);
    for (int attempt = 0; attempt < 4; ++attempt) {
        if (owned_by(binding, uid)) co_return true;
        json::object patch = owner_patch(pod, uid);
        patch["metadata"].as_object()["resourceVersion"] = string_at(metadata_of(binding), "resourceVersion");
        auto r = co_await st->client.patch(path, std::move(patch), PatchType::merge);
        if (r) co_return true;
        if (r.error().is(errc::not_found)) co_return false;
        const bool raced = r.error().is(errc::conflict);
        // Not allowed to patch, say: the binding still serves; cleanup sweeps it after its pod.
        if (!raced)
            st->options.logger.warning("binding of pod " + pod + " not made its dependent: " + r.error().describe());
        auto again = co_await st->client.get(path);
        if (!again) {
            if (again.error().is(errc::not_found)) co_return false;
            co_return fail(again.error());
        }
        if (uid_of(*again) != binding_uid || bound_pod(*again) != pod) co_return false;
        if (!raced) co_return true;
        binding = std::move(*again);
    }
    co_return true;  // still naming the pod after every attempt: others keep changing it
}

// Creates (or adopts) the id's own pod under `binding` (as read) and makes the binding its
// dependent. Nullopt when the binding went meanwhile (deleted with its sandbox, say): the pod is
// then not the id's, and one this call made is removed.
asio::awaitable<Result<std::optional<PodAcquisition>>> create_under(StatePtr st, Target target,
                                                                    const GetOrCreateOptions& options, bool replaced,
                                                                    ResourcePath bpath, json::object binding) {
    using Made = std::optional<PodAcquisition>;
    auto made = co_await create_at_name(st, target, options, replaced);
    if (!made) co_return fail(made.error());
    auto kept = co_await own_binding(st, std::move(bpath), std::move(binding), target.pod, made->uid);
    if (!kept) co_return fail(kept.error());
    if (*kept) co_return Made(std::move(*made));
    if (made->origin != SandboxOrigin::adopted) {
        const std::optional<std::string> expected = target.label;
        auto d = co_await delete_objects(st, target.ns, target.pod, expected, false, std::string());
        if (!d && !d.error().is(errc::not_found)) co_return fail(d.error());
    }
    co_return Made();
}

asio::awaitable<Result<PodAcquisition>> acquire_bound(StatePtr st, Target target, GetOrCreateOptions options) {
    const auto& cfg = st->options;
    const std::string& label = *target.label;
    const ResourcePath bpath = bindings_path(target.ns).with_name(target.pod);
    // An unowned binding younger than this names a pod its creator may still be making.
    const auto in_flight = cfg.startup_timeout + std::chrono::seconds(60);
    const bool create = options.create_if_missing;
    auto gone = [&](const std::string& why) {
        return fail(errc::not_found, "sandbox " + target.id + " is gone: " + why);
    };
    bool replaced = false;
    auto origin_or_replaced = [&](SandboxOrigin o) { return replaced ? SandboxOrigin::replaced : o; };
    // A pod is handed out only under a binding naming it, and created only under a binding no
    // pod owns yet (the garbage collector removes an owned binding once its pod is gone). Each
    // round hands out a pod, removes something stale, or lost a race; a few rounds settle any
    // interleaving of replicas.
    for (int round = 0; round < 8; ++round) {
        auto b = co_await st->client.get(bpath);
        if (!b && !b.error().is(errc::not_found)) co_return fail(b.error());
        if (b) {
            if (!our_binding(*b, label))
                co_return fail(errc::already_exists, "configmap " + target.ns + "/" + target.pod +
                                                         " exists and is not kubesandbox's binding of " + target.id);
            const std::string pod = bound_pod(*b);
            if (pod.empty()) {  // names nothing usable: as good as none
                auto u = co_await unbind(st, bpath, uid_of(*b));
                if (!u) co_return fail(u.error());
                continue;
            }
            if (pod == target.pod) {
                auto got = co_await read_at_name(st, target);
                if (!got) co_return fail(got.error());
                if (*got) {
                    if (std::string why = unusable(**got, cfg); !why.empty()) {
                        if (!create) co_return gone(why);
                        auto removed = co_await remove_dead(st, target, **got);
                        if (!removed) co_return fail(removed.error());
                        auto u = co_await unbind(st, bpath, uid_of(*b));
                        if (!u) co_return fail(u.error());
                        replaced = true;
                        continue;
                    }
                    if (auto ev = evaluate_pod(**got); ev.state == PodState::failed) co_return fail(ev.error);
                    auto r = co_await reconnect(st, target.ns, target.pod, std::move(**got), target.id, target.id);
                    if (!r && r.error().is(errc::not_found) && create) continue;
                    if (!r) co_return fail(r.error());
                    r->origin = origin_or_replaced(r->origin);
                    co_return std::move(*r);
                }
                // No pod yet. Its creator may be making it (unowned and young): make or adopt it
                // too. Otherwise the binding outlived its pod: remove it and start afresh.
                auto age = age_of(*b, system_clock::now());
                if (owned(*b) || !age || *age >= in_flight) {
                    if (!create) co_return gone("its pod " + target.pod + " does not exist");
                    auto u = co_await unbind(st, bpath, uid_of(*b));
                    if (!u) co_return fail(u.error());
                    continue;
                }
                if (!create) co_return gone("its pod " + target.pod + " is still being created");
                auto made = co_await create_under(st, target, options, replaced, bpath, std::move(*b));
                if (!made) co_return fail(made.error());
                if (*made) co_return std::move(**made);
                continue;
            }
            // Bound to a claimed warm pod.
            auto p = co_await st->client.get(pods_path(target.ns).with_name(pod));
            if (!p && !p.error().is(errc::not_found)) co_return fail(p.error());
            const bool ours = p && serves(*p, target.id);
            const std::string why = ours ? unusable(*p, cfg) : "its pod " + pod + " is gone";
            if (ours && why.empty()) {
                auto r = co_await reconnect(st, target.ns, pod, std::move(*p), target.ns + "/" + pod, target.id);
                if (!r && r.error().is(errc::not_found) && create) continue;
                if (!r) co_return fail(r.error());
                r->origin = origin_or_replaced(r->origin);
                co_return std::move(*r);
            }
            if (!create) co_return gone(why);
            if (ours) {
                const std::optional<std::string> expected = label_of(*p, keys::sandbox_id);
                auto d = co_await delete_objects(st, target.ns, pod, expected, false, std::string());
                if (!d && !d.error().is(errc::not_found) && !d.error().is(errc::conflict)) co_return fail(d.error());
                replaced = true;
            }
            auto u = co_await unbind(st, bpath, uid_of(*b));
            if (!u) co_return fail(u.error());
            continue;
        }

        // Unbound. A live pod at the id's name (made before bindings existed) is bound as it is.
        auto got = co_await read_at_name(st, target);
        if (!got) co_return fail(got.error());
        std::string live_uid;
        if (*got) {
            if (std::string why = unusable(**got, cfg); !why.empty()) {
                if (!create) co_return gone(why);
                auto removed = co_await remove_dead(st, target, **got);
                if (!removed) co_return fail(removed.error());
                replaced = true;
            } else {
                live_uid = uid_of(**got);
            }
        } else if (!create) {
            co_return fail(errc::not_found,
                           "sandbox " + target.id + " (pod " + target.ns + "/" + target.pod + ") not found");
        }
        std::optional<ClaimedPod> claimed;
        if (live_uid.empty() && cfg.warm_pool_size > 0) {
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
        const std::string owner_uid = claimed ? claimed->uid : live_uid;
        json::object body = build_binding(cfg, target.pod, label, pod, owner_uid, token, util::now_rfc3339(true));
        auto made = co_await st->client.create(bindings_path(target.ns), std::move(body), copts);
        // A 409, or an answer lost: whether the binding there is ours, its token says.
        if (!made && (made.error().is(errc::already_exists) || made.error().outcome_unknown())) {
            auto there = co_await st->client.get(bpath);
            if (there && annotation_of(*there, keys::creation_token) == token) made = std::move(*there);
            // Unknown whether ours exists: keep what was claimed (bound, it serves the id; else
            // cleanup sweeps it) and report.
            else if (!there && !there.error().is(errc::not_found)) co_return fail(there.error());
        }
        if (made) {
            if (!live_uid.empty()) {
                auto r = co_await reconnect(st, target.ns, target.pod, std::move(**got), target.id, target.id);
                if (!r && r.error().is(errc::not_found) && create) continue;
                if (!r) co_return fail(r.error());
                r->origin = origin_or_replaced(r->origin);
                co_return std::move(*r);
            }
            if (claimed) {
                {
                    std::lock_guard lock(st->mutex);
                    st->last_patch[claimed->ns + "/" + pod] = steady_clock::now();
                }
                co_return PodAcquisition{make_sandbox(st, claimed->ns, pod, claimed->ns + "/" + pod),
                                         origin_or_replaced(SandboxOrigin::claimed_warm), claimed->uid};
            }
            const std::string binding_uid = uid_of(*made);
            auto r = co_await create_under(st, target, options, replaced, bpath, std::move(*made));
            if (!r) {
                auto u = co_await unbind(st, bpath, binding_uid);
                if (!u) cfg.logger.warning("binding of " + target.id + " not removed: " + u.error().describe());
                co_return fail(r.error());
            }
            if (*r) co_return std::move(**r);
            continue;
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
