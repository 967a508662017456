// Creating and deleting a sandbox's objects: namespace (per-sandbox mode), NetworkPolicy, Pod.
// Every object carries a creation token unique to the call that made it, so a 409 caused by our
// own retried request is told apart from someone else's object, and only our own objects are
// ever deleted.
#include "providers/raw/naming.hpp"
#include "providers/raw/pod_state.hpp"
#include "providers/raw/state.hpp"
#include "util/json_access.hpp"
#include "util/random.hpp"
#include "util/time_format.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/this_coro.hpp>

namespace kubesandbox {

RawProvider::State::State(KubeClient c, RawProviderOptions o)
    : client(std::move(c)), options(std::move(o)), config_hash(raw::config_hash(options)) {}

namespace raw {

namespace asio = boost::asio;
namespace json = boost::json;
using std::chrono::steady_clock;
using util::annotation_of;
using util::label_of;
using util::metadata_of;
using util::string_at;

namespace {

// After a create failed with `e`: the object when it exists anyway (a 409, or a lost answer
// to a request that went through), else the error to report.
asio::awaitable<Result<json::object>> existing_after(StatePtr st, ResourcePath path, Error e) {
    if (!e.is(errc::already_exists) && !e.outcome_unknown()) co_return fail(std::move(e));
    auto got = co_await st->client.get(std::move(path));
    if (got) co_return std::move(*got);
    if (got.error().is(errc::not_found)) co_return fail(std::move(e));
    co_return fail(got.error());
}

bool ours_for(const json::object& o, const std::string& sandbox_label) {
    return label_of(o, keys::managed_by) == keys::managed_by_value && label_of(o, keys::sandbox_id) == sandbox_label;
}

// Removes what one create_and_wait call made (and only that). Failures are logged: the caller
// is already reporting the error that made it clean up, and cleanup() reaps what is left.
// The deny-all policy of a sandbox being removed. While its pod may still run (`pod_uid` set),
// the policy is left to the garbage collector as the pod's dependent (made one if it was not
// yet), so the network stays closed until the pod is gone; with no pod it is deleted.
asio::awaitable<void> release_policy(StatePtr st, const std::string& ns, const std::string& name,
                                     std::optional<std::string> pod_uid) {
    const Logger& log = st->options.logger;
    const ResourcePath path = network_policies_path(ns).with_name(network_policy_name(name));
    auto np = co_await st->client.get(path);
    if (!np) {
        if (!np.error().is(errc::not_found))
            log.warning("cleanup of NetworkPolicy " + ns + "/" + network_policy_name(name) +
                        " failed: " + np.error().describe());
        co_return;
    }
    auto* refs = metadata_of(*np).if_contains("ownerReferences");
    if (refs && refs->is_array() && !refs->as_array().empty()) co_return;  // goes with its owner
    if (pod_uid && !pod_uid->empty()) {
        auto r = co_await st->client.patch(path, owner_patch(name, *pod_uid), PatchType::merge);
        if (r) co_return;
    }
    auto r = co_await st->client.remove(path);
    if (!r && !r.error().is(errc::not_found))
        log.warning("cleanup of NetworkPolicy " + ns + "/" + network_policy_name(name) +
                    " failed: " + r.error().describe());
}

// Removes what a creation made. The pod goes by its uid (`known_pod_uid`, or the one read here for
// a random name, which is nobody else's), so a pod another caller made again under the name stays.
asio::awaitable<void> remove_created(StatePtr st, std::string ns, std::string name, bool pod, bool np, bool nspace,
                                     std::string known_pod_uid = {}) {
    const Logger& log = st->options.logger;
    std::optional<std::string> pod_uid;
    if (pod) {
        const ResourcePath pod_path = pods_path(ns).with_name(name);
        if (!known_pod_uid.empty()) pod_uid = known_pod_uid;
        else if (auto cur = co_await st->client.get(pod_path)) pod_uid = string_at(metadata_of(*cur), "uid");
        DeleteOptions o;
        if (pod_uid) o.precondition_uid = *pod_uid;
        o.grace_period_seconds = st->options.delete_grace_period.count();
        auto r = co_await st->client.remove(pod_path, std::move(o));
        // Conflict: the name holds another caller's pod by now. Its policy and namespace serve
        // that pod: nothing more is ours to remove.
        if (!r && r.error().is(errc::conflict)) co_return;
        if (!r && !r.error().is(errc::not_found))
            log.warning("cleanup of pod " + ns + "/" + name + " failed: " + r.error().describe());
    }
    if (pod || np) co_await release_policy(st, ns, name, pod_uid);
    if (nspace) {
        auto r = co_await st->client.remove(namespaces_path().with_name(ns));
        if (!r && !r.error().is(errc::not_found))
            log.warning("cleanup of namespace " + ns + " failed: " + r.error().describe());
    }
}

// Per-sandbox mode: the namespace with its quota and limits. `created` says whether this call
// made the namespace (and may therefore delete it).
asio::awaitable<Result<void>> create_namespace(StatePtr st, const std::string& ns, const Identity& idt,
                                               const std::string& token, const CreateOptions& copts, bool& created) {
    const auto& cfg = st->options;
    auto r = co_await st->client.create(namespaces_path(),
                                        build_namespace(ns, idt.label, token, util::now_rfc3339(true)), copts);
    if (!r) r = co_await existing_after(st, namespaces_path().with_name(ns), r.error());
    if (!r) co_return fail(r.error());
    created = annotation_of(*r, keys::creation_token) == token;
    if (!created) {
        if (!ours_for(*r, idt.label))
            co_return fail(errc::already_exists, "namespace " + ns + " exists and is not this sandbox's");
        if (being_deleted(*r))
            co_return fail(errc::conflict, "namespace " + ns + " is being deleted; try again when it is gone");
    }
    auto rq = co_await st->client.create(core_path("resourcequotas", ns), build_resource_quota(cfg, idt.label), copts);
    auto rl = co_await st->client.create(core_path("limitranges", ns), build_limit_range(cfg, idt.label), copts);
    if (!rq && !rq.error().is(errc::already_exists)) co_return fail(rq.error());
    if (!rl && !rl.error().is(errc::already_exists)) co_return fail(rl.error());
    co_return Result<void>{};
}

// The deny-all policy, before the pod: no unisolated window. `created` as above.
asio::awaitable<Result<void>> create_network_policy(StatePtr st, const std::string& ns, const std::string& name,
                                                    const Identity& idt, const std::string& token,
                                                    const CreateOptions& copts, bool& created) {
    json::object np = build_network_policy(st->options, name, idt.label, token, std::string(), util::now_rfc3339(true));
    auto r = co_await st->client.create(network_policies_path(ns), std::move(np), copts);
    if (!r) r = co_await existing_after(st, network_policies_path(ns).with_name(network_policy_name(name)), r.error());
    if (!r) {
        Error e = r.error();
        e.message = "NetworkPolicy (block_network) could not be created, sandbox not started: " + e.message;
        co_return fail(std::move(e));
    }
    created = annotation_of(*r, keys::creation_token) == token;
    co_return Result<void>{};
}

}  // namespace

// Fail-closed: a pod we hand out has its deny-all policy, owned by the pod (so it stays until
// the pod is gone, however the pod goes). A missing one is re-created; one with that name that
// is not ours refuses the sandbox.
asio::awaitable<Result<void>> ensure_network_policy(StatePtr st, const std::string& ns, const std::string& name,
                                                    const std::string& sandbox_label, const std::string& uid) {
    const RawProviderOptions& cfg = st->options;
    if (!cfg.block_network) co_return Result<void>{};
    const ResourcePath path = network_policies_path(ns).with_name(network_policy_name(name));
    auto np = co_await st->client.get(path);
    if (np) {
        if (label_of(*np, keys::managed_by) != keys::managed_by_value)
            co_return fail(errc::conflict, "NetworkPolicy " + ns + "/" + network_policy_name(name) +
                                               " is not kubesandbox's: sandbox " + ns + "/" + name + " refused");
        bool owned = false;
        if (auto* refs = metadata_of(*np).if_contains("ownerReferences"); refs && refs->is_array())
            for (const auto& ref : refs->as_array())
                owned = owned || (ref.is_object() && string_at(ref.as_object(), "uid") == uid);
        if (!owned) {
            auto r = co_await st->client.patch(path, owner_patch(name, uid), PatchType::merge);
            if (!r && !r.error().is(errc::not_found))
                cfg.logger.warning("ownerReference on " + ns + "/" + network_policy_name(name) +
                                   " not set: " + r.error().describe());
            if (r || !r.error().is(errc::not_found)) co_return Result<void>{};
        } else {
            co_return Result<void>{};
        }
    } else if (!np.error().is(errc::not_found)) {
        co_return fail(np.error());
    }
    CreateOptions copts;
    auto r = co_await st->client.create(
        network_policies_path(ns),
        build_network_policy(cfg, name, sandbox_label, util::random_hex(16), uid, util::now_rfc3339(true)), copts);
    if (!r && !r.error().is(errc::already_exists)) {
        Error e = r.error();
        e.message = "NetworkPolicy (block_network) missing and not re-created, sandbox refused: " + e.message;
        co_return fail(std::move(e));
    }
    co_return Result<void>{};
}

namespace {

// Runs the setup script once and records the outcome for adopters waiting on it.
asio::awaitable<Result<void>> run_setup(StatePtr st, const std::string& ns, const std::string& name,
                                        const std::string& id) {
    const auto& cfg = st->options;
    auto sb = make_sandbox(st, ns, name, id);
    auto out = co_await sb->execute(cfg.setup_script, cfg.startup_timeout);
    if (!out || out->exit_code != 0) {
        std::string why;
        if (!out) {
            why = out.error().describe();
        } else {
            why = "exit code ";
            why += out->exit_code ? std::to_string(*out->exit_code) : std::string("unknown");
            why += ", output: " + out->output;
        }
        json::object ann;
        ann[keys::setup] = "failed";  // adopters waiting for it stop now
        co_await patch_annotations(st, ns, name, std::move(ann));
        co_return fail(errc::pod_failed, "setup_script failed in " + ns + "/" + name + ": " + why);
    }
    json::object ann;
    ann[keys::setup] = "done";
    co_return co_await patch_annotations(st, ns, name, std::move(ann));
}

}  // namespace

// Creates namespace (per-sandbox), NetworkPolicy and the pod, then waits for Ready and runs
// the setup script. On failure everything this call created is deleted. `adopted` is set only
// for a pod someone else created (then we wait for its setup instead of running it).
namespace {

// What one creation made so far, for the clean-up of a creation that never finished.
struct CreationRecord {
    std::string ns, name, token;
    bool created_ns = false;
    bool created_np = false;
};

// Removes what an abandoned creation made: the pod only when it carries the creation's token
// (a deterministic name may be another caller's pod), the policy and namespace when it made them.
asio::awaitable<void> remove_abandoned(StatePtr st, CreationRecord rec) {
    co_await asio::this_coro::throw_if_cancelled(false);
    const ResourcePath pod_path = pods_path(rec.ns).with_name(rec.name);
    auto pod = co_await st->client.get(pod_path);
    std::optional<std::string> pod_uid;
    if (pod && annotation_of(*pod, keys::creation_token) == rec.token) {
        pod_uid = string_at(metadata_of(*pod), "uid");
        DeleteOptions o;
        o.precondition_uid = *pod_uid;
        o.grace_period_seconds = st->options.delete_grace_period.count();
        co_await st->client.remove(pod_path, std::move(o));
    }
    // Unsure whether a pod of ours runs (the read failed): its policy stays.
    if (pod_uid || (rec.created_np && !pod && pod.error().is(errc::not_found)))
        co_await release_policy(st, rec.ns, rec.name, pod_uid);
    if (rec.created_ns) co_await remove_created(st, rec.ns, rec.name, false, false, true);
    st->options.logger.warning("sandbox creation of " + rec.ns + "/" + rec.name +
                               " was abandoned (cancelled); what it had made was removed");
}

asio::awaitable<Result<CreateOutcome>> create_steps(StatePtr st, std::string name, Identity idt, bool deterministic,
                                                    bool warm, CreationRecord& record);

}  // namespace

asio::awaitable<Result<CreateOutcome>> create_and_wait(StatePtr st, std::string name, Identity idt, bool deterministic,
                                                       bool warm) {
    // Cancelled or destroyed before it finished (the caller gave up): what the creation made so
    // far is removed on the side, holding only the provider's shared state.
    struct Abandon {
        StatePtr st;
        CreationRecord record;
        bool finished = false;
        ~Abandon() {
            if (!finished && !record.token.empty())
                asio::co_spawn(st->client.get_executor(), remove_abandoned(st, std::move(record)), asio::detached);
        }
    } abandon{st, {}};
    auto r = co_await create_steps(st, std::move(name), std::move(idt), deterministic, warm, abandon.record);
    abandon.finished = true;
    co_return r;
}

namespace {

asio::awaitable<Result<CreateOutcome>> create_steps(StatePtr st, std::string name, Identity idt, bool deterministic,
                                                    bool warm, CreationRecord& record) {
    const auto& cfg = st->options;
    auto deadline = steady_clock::now() + cfg.startup_timeout;
    std::string ns = namespace_for(cfg, name);
    const std::string token = util::random_hex(16);
    record.ns = ns;
    record.name = name;
    record.token = token;
    CreateOptions copts;
    copts.idempotent = deterministic;
    copts.field_manager = "kubesandbox";
    bool& created_ns = record.created_ns;
    bool& created_np = record.created_np;

    if (cfg.namespace_per_sandbox) {
        auto r = co_await create_namespace(st, ns, idt, token, copts, created_ns);
        if (!r) {
            Error e = r.error();
            co_await remove_created(st, ns, name, false, false, created_ns);
            co_return fail(std::move(e));
        }
    }
    if (cfg.block_network) {
        auto r = co_await create_network_policy(st, ns, name, idt, token, copts, created_np);
        if (!r) {
            Error e = r.error();
            // Another creator's pod may rely on a policy we did not make: touch only our own.
            co_await remove_created(st, ns, name, false, false, created_ns);
            co_return fail(std::move(e));
        }
    }

    json::object labels = idt.labels;
    labels[keys::pool_status] = warm ? "warm" : "active";
    labels[keys::namespace_mode] = namespace_mode(cfg);
    labels[keys::config_hash] = st->config_hash;
    json::object annotations = idt.annotations;
    annotations[keys::creation_token] = token;
    if (!cfg.setup_script.empty()) annotations[keys::setup] = "pending";
    json::object pod = build_pod(cfg, name, std::move(labels), std::move(annotations));
    if (auto weaker = hardening_problem(pod["spec"].as_object())) {
        co_await remove_created(st, ns, name, false, created_np, created_ns);
        co_return fail(errc::invalid_argument,
                       "the sandbox pod would be weaker than its hardening (pod_template_overrides or "
                       "init_containers?): " +
                           *weaker);
    }
    auto created = co_await st->client.create(pods_path(ns), std::move(pod), copts);
    // A 409 for a fixed name, or a lost answer: look at what is there.
    if (!created && (deterministic || !created.error().is(errc::already_exists)))
        created = co_await existing_after(st, pods_path(ns).with_name(name), created.error());
    if (!created) {
        Error e = created.error();
        // A random name is nobody else's: remove the pod too in case the create went through.
        co_await remove_created(st, ns, name, !deterministic, created_np, created_ns);
        co_return fail(std::move(e));
    }
    json::object initial = std::move(*created);
    CreateOutcome outcome;
    // A 409 after our own lost-response attempt is still our pod: the token says so.
    const bool ours = annotation_of(initial, keys::creation_token) == token;
    if (!ours) {
        if (!ours_for(initial, idt.label)) {
            co_await remove_created(st, ns, name, false, created_np, created_ns);
            std::string whose = label_of(initial, keys::managed_by).empty()
                                    ? std::string("not managed by kubesandbox")
                                    : "sandbox id " + label_of(initial, keys::sandbox_id);
            co_return fail(errc::already_exists,
                           "pod " + ns + "/" + name + " exists and is not this sandbox's (" + whose + ")");
        }
        outcome.adopted = true;
    }
    const std::string uid = string_at(metadata_of(initial), "uid");
    outcome.uid = uid;

    if (ours && cfg.block_network) {
        // Make the policy the pod's dependent: it goes with the pod, however the pod goes.
        auto r = co_await st->client.patch(network_policies_path(ns).with_name(network_policy_name(name)),
                                           owner_patch(name, uid), PatchType::merge);
        if (!r && !r.error().is(errc::not_found))  // not found: re-created below after Ready
            cfg.logger.warning("ownerReference on " + ns + "/" + network_policy_name(name) +
                               " not set: " + r.error().describe());
    }

    auto ready = co_await wait_ready(st, ns, name, std::move(initial), deadline, outcome.adopted);
    if (!ready) {
        Error e = ready.error();
        if (ours) co_await remove_created(st, ns, name, true, true, created_ns, uid);
        co_return fail(std::move(e));
    }
    // Fail-closed even if a racing creator removed the policy after its own failure, and for an
    // adopted pod whose policy someone deleted.
    if (auto np = co_await ensure_network_policy(st, ns, name, idt.label, uid); !np) {
        Error e = np.error();
        if (!outcome.adopted) co_await remove_created(st, ns, name, true, true, created_ns, uid);
        co_return fail(std::move(e));
    }
    if (outcome.adopted) co_return outcome;

    if (!cfg.setup_script.empty()) {
        auto setup = co_await run_setup(st, ns, name, idt.id);
        if (!setup) {
            Error e = setup.error();
            co_await remove_created(st, ns, name, true, true, created_ns, uid);
            co_return fail(std::move(e));
        }
    }
    co_return outcome;
}

asio::awaitable<Result<bool>> delete_as_read(StatePtr st, std::string ns, std::string pod, Result<json::object> cur,
                                             std::optional<std::string> expected_label, bool remove_namespace,
                                             std::string expected_version, bool check_policy);

}  // namespace

// Only our own objects: the pod must be labelled ours (and carry `expected_label` when given);
// a namespace goes only when it is the pod's per-sandbox namespace (named after the pod,
// labelled ours with the same sandbox id). The policy goes only once the pod is gone.
asio::awaitable<Result<bool>> delete_objects(StatePtr st, std::string ns, std::string pod,
                                             std::optional<std::string> expected_label, bool remove_namespace,
                                             std::string expected_version) {
    auto cur = co_await st->client.get(pods_path(ns).with_name(pod));
    co_return co_await delete_as_read(std::move(st), std::move(ns), std::move(pod), std::move(cur),
                                      std::move(expected_label), remove_namespace, std::move(expected_version), true);
}

asio::awaitable<Result<bool>> delete_listed(StatePtr st, json::object pod, bool remove_namespace) {
    const auto& m = metadata_of(pod);
    std::string ns = string_at(m, "namespace"), name = string_at(m, "name"), version = string_at(m, "resourceVersion");
    std::optional<std::string> label = label_of(pod, keys::sandbox_id);
    Result<json::object> cur(std::move(pod));
    co_return co_await delete_as_read(std::move(st), std::move(ns), std::move(name), std::move(cur), std::move(label),
                                      remove_namespace, std::move(version), false);
}

namespace {

// delete_objects once the pod has been read (`cur`: the pod, or the error reading it gave).
asio::awaitable<Result<bool>> delete_as_read(StatePtr st, std::string ns, std::string pod, Result<json::object> cur,
                                             std::optional<std::string> expected_label, bool remove_namespace,
                                             std::string expected_version, bool check_policy) {
    bool found = false;
    std::optional<Error> first_error;
    std::optional<std::string> label = expected_label;
    const ResourcePath pod_path = pods_path(ns).with_name(pod);
    bool pod_gone = false;
    std::optional<std::string> pod_uid;
    if (cur) {
        pod_uid = string_at(metadata_of(*cur), "uid");
        if (label_of(*cur, keys::managed_by) != keys::managed_by_value)
            co_return fail(errc::conflict, "pod " + ns + "/" + pod + " is not managed by kubesandbox: not deleting it");
        std::string have = label_of(*cur, keys::sandbox_id);
        if (label && have != *label)
            co_return fail(errc::conflict,
                           "pod " + ns + "/" + pod + " belongs to another sandbox (" + have + "): not deleting it");
        label = have;
        if (!expected_version.empty() && string_at(metadata_of(*cur), "resourceVersion") != expected_version)
            co_return fail(errc::conflict, "pod " + ns + "/" + pod + " changed since it was listed: not deleting it");
        DeleteOptions pod_opts;
        pod_opts.grace_period_seconds = st->options.delete_grace_period.count();
        pod_opts.precondition_uid = string_at(metadata_of(*cur), "uid");
        pod_opts.precondition_resource_version = std::move(expected_version);
        auto r1 = co_await st->client.remove(pod_path, std::move(pod_opts));
        if (r1) {
            found = found || r1->found;
            pod_gone = true;
        } else if (r1.error().is(errc::not_found)) {
            pod_gone = true;
        } else {
            first_error = r1.error();
        }
    } else if (cur.error().is(errc::not_found)) {
        pod_gone = true;
    } else {
        first_error = cur.error();
    }
    if (!pod_gone) co_return fail(*first_error);  // never unprotect a pod that may still run

    // A policy owned by the pod is left to the garbage collector, which removes it only once the
    // pod object is gone (a terminating pod keeps its network closed); an unowned one goes now.
    const ResourcePath np_path = network_policies_path(ns).with_name(network_policy_name(pod));
    Result<json::object> np = fail(errc::not_found, "not looked at");
    if (check_policy) np = co_await st->client.get(np_path);
    bool owned_by_pod = false;
    if (np && pod_uid) {
        if (auto* refs = metadata_of(*np).if_contains("ownerReferences"); refs && refs->is_array())
            for (const auto& ref : refs->as_array())
                owned_by_pod = owned_by_pod || (ref.is_object() && string_at(ref.as_object(), "uid") == *pod_uid);
    }
    if (np && owned_by_pod) {
        found = true;
    } else if (np) {
        auto r2 = co_await st->client.remove(np_path);
        if (r2) found = found || r2->found;
        else if (!r2.error().is(errc::not_found) && !first_error) first_error = r2.error();
    } else if (!np.error().is(errc::not_found) && !first_error) {
        first_error = np.error();
    }

    if (remove_namespace && ns == pod && pod.rfind("ksb-", 0) == 0) {
        const ResourcePath ns_path = namespaces_path().with_name(ns);
        auto nso = co_await st->client.get(ns_path);
        if (nso) {
            std::string nl = label_of(*nso, keys::sandbox_id);
            bool ours =
                label_of(*nso, keys::managed_by) == keys::managed_by_value && !nl.empty() && (!label || nl == *label);
            if (ours && !being_deleted(*nso)) {
                DeleteOptions ns_opts;
                ns_opts.precondition_uid = string_at(metadata_of(*nso), "uid");
                auto r3 = co_await st->client.remove(ns_path, std::move(ns_opts));
                if (r3) found = found || r3->found;
                else if (!r3.error().is(errc::not_found) && !first_error) first_error = r3.error();
            }
        } else if (!nso.error().is(errc::not_found) && !first_error) {
            first_error = nso.error();
        }
    }
    if (first_error) co_return fail(*first_error);
    co_return found;
}

}  // namespace

asio::awaitable<Result<void>> patch_annotations(StatePtr st, std::string ns, std::string pod, json::object ann) {
    auto r =
        co_await st->client.patch(pods_path(ns).with_name(pod), annotations_patch(std::move(ann)), PatchType::merge);
    if (!r) co_return fail(r.error());
    co_return Result<void>{};
}

asio::awaitable<Result<void>> patch_activity(StatePtr st, std::string ns, std::string pod) {
    json::object ann;
    ann[keys::last_activity] = util::now_rfc3339(true);
    co_return co_await patch_annotations(std::move(st), std::move(ns), std::move(pod), std::move(ann));
}

asio::awaitable<Result<std::vector<json::object>>> list_all(StatePtr st, ResourcePath path, std::string selector) {
    std::vector<json::object> out;
    ListOptions lo;
    lo.label_selector = std::move(selector);
    lo.limit = 100;
    for (;;) {
        auto page = co_await st->client.list(path, lo);
        if (!page) co_return fail(page.error());
        for (auto& item : page->items)
            if (item.is_object()) out.push_back(std::move(item.get_object()));
        if (page->continue_token.empty()) break;
        lo.continue_token = page->continue_token;
    }
    co_return out;
}

std::unique_ptr<PodExecSandbox> make_sandbox(const StatePtr& st, const std::string& ns, const std::string& pod,
                                             const std::string& id) {
    PodExecSandboxOptions o;
    o.workdir = st->options.workdir;
    o.max_output_bytes = st->options.max_output_bytes;
    o.default_timeout = st->options.default_exec_timeout;
    o.idle_shell_sessions = st->options.idle_shell_sessions;
    o.shell_session_idle_limit = st->options.shell_session_idle_limit;
    o.shell_session_process_groups = st->options.shell_session_process_groups;
    std::weak_ptr<RawProvider::State> weak = st;
    o.on_activity = [weak, id] {
        if (auto s = weak.lock()) record_activity(s, id);
    };
    // A copy shares the provider's connection pool and rate limiter.
    return std::make_unique<PodExecSandbox>(st->client, ns, pod, std::move(o));
}

void record_activity(const StatePtr& st, const std::string& id) {
    auto now = steady_clock::now();
    {
        std::lock_guard lock(st->mutex);
        auto it = st->last_patch.find(id);
        if (it != st->last_patch.end() && now - it->second < st->options.activity_debounce) return;
        st->last_patch[id] = now;
        if (st->last_patch.size() > 10000) {  // forget old entries; a repeat patch is harmless
            for (auto i = st->last_patch.begin(); i != st->last_patch.end();) {
                if (now - i->second >= st->options.activity_debounce) i = st->last_patch.erase(i);
                else ++i;
            }
        }
    }
    auto target = resolve_id(st->options, id);
    if (!target) return;
    auto task = [](StatePtr s, Target t) -> asio::awaitable<void> {
        try {
            auto r = co_await patch_activity(s, t.ns, t.pod);
            // Not at the id's own name: a warm pod its binding names.
            if (!r && r.error().is(errc::not_found) && t.label) {
                auto at = co_await locate(s, t);
                if (at && at->pod != t.pod) r = co_await patch_activity(s, at->ns, at->pod);
            }
            if (!r && !r.error().is(errc::not_found))
                s->options.logger.warning("last-activity patch failed: " + r.error().describe());
        } catch (const std::exception&) {}
    };
    asio::co_spawn(st->client.get_executor(), task(st, std::move(*target)), asio::detached);
}

}  // namespace raw
}  // namespace kubesandbox
