// Raw mode's façade: the public operations, composed from the pure cores (naming, pod_state,
// manifests) and the I/O parts (readiness, lifecycle, warm_pool, cleanup).
#include <kubesandbox/raw_provider.hpp>

#include "providers/raw/naming.hpp"
#include "providers/raw/pod_state.hpp"
#include "providers/raw/state.hpp"
#include "util/json_access.hpp"
#include "util/time_format.hpp"

namespace kubesandbox {

namespace asio = boost::asio;
namespace json = boost::json;
using raw::StatePtr;
using std::chrono::steady_clock;
using std::chrono::system_clock;
using util::label_of;
using util::metadata_of;
using util::string_at;

RawProvider::RawProvider(KubeClient client, RawProviderOptions options)
    : state_(std::make_shared<State>(std::move(client), std::move(options))) {}
RawProvider::~RawProvider() = default;

const RawProviderOptions& RawProvider::options() const { return state_->options; }

std::string RawProvider::pod_name_for(const std::string& id) { return raw::pod_name_for(id); }

namespace {

struct PodAcquisition {
    std::unique_ptr<PodExecSandbox> sandbox;
    SandboxOrigin origin = SandboxOrigin::existing;
    std::string uid;
};

asio::awaitable<Result<PodAcquisition>> acquire_pod(raw::StatePtr st, GetOrCreateOptions options);

}  // namespace

asio::awaitable<Result<Acquisition>> RawProvider::acquire(GetOrCreateOptions options) {
    auto got = co_await acquire_pod(state_, std::move(options));
    if (!got) co_return fail(got.error());
    co_return Acquisition{std::move(got->sandbox), got->origin, std::move(got->uid)};
}

asio::awaitable<Result<std::unique_ptr<PodExecSandbox>>> RawProvider::get_or_create_pod(GetOrCreateOptions options) {
    auto got = co_await acquire_pod(state_, std::move(options));
    if (!got) co_return fail(got.error());
    co_return std::move(got->sandbox);
}

namespace {

asio::awaitable<Result<PodAcquisition>> acquire_pod(raw::StatePtr st, GetOrCreateOptions options) {
    const auto& cfg = st->options;
    if (options.sandbox_id && options.sandbox_id->empty())
        co_return fail(errc::invalid_argument, "sandbox_id must not be empty");

    if (options.sandbox_id) {
        auto target = raw::resolve_id(cfg, *options.sandbox_id);
        if (!target) co_return fail(target.error());
        const std::string& id = target->id;
        const std::string& name = target->pod;
        const std::string& ns = target->ns;
        const ResourcePath path = raw::pods_path(ns).with_name(name);
        auto got = co_await st->client.get(path);
        bool replaced = false;
        if (got) {
            if (label_of(*got, keys::managed_by) != keys::managed_by_value)
                co_return fail(errc::already_exists,
                               "pod " + ns + "/" + name + " exists and is not managed by kubesandbox");
            if (target->label && label_of(*got, keys::sandbox_id) != *target->label)
                co_return fail(errc::already_exists, "pod " + ns + "/" + name + " belongs to another sandbox (" +
                                                         label_of(*got, keys::sandbox_id) + ")");
            auto ev = raw::evaluate_pod(*got);
            const bool abandoned = raw::setup_abandoned(*got, cfg, system_clock::now());
            if (ev.dead || abandoned) {
                // A dead or terminating pod would block its id forever: replace it.
                if (!options.create_if_missing)
                    co_return fail(errc::not_found,
                                   "sandbox " + id + " is gone: " +
                                       (abandoned ? std::string("its setup was abandoned") : ev.error.message));
                auto deadline = steady_clock::now() + cfg.startup_timeout;
                std::string uid = string_at(metadata_of(*got), "uid");
                if (!raw::being_deleted(*got)) {
                    DeleteOptions dopts;
                    dopts.grace_period_seconds = 0;  // it is dead: nothing to shut down gracefully
                    dopts.precondition_uid = uid;
                    auto d = co_await st->client.remove(path, std::move(dopts));
                    if (!d && !d.error().is(errc::not_found) && !d.error().is(errc::conflict))
                        co_return fail(d.error());
                }
                auto gone = co_await raw::wait_gone(st, ns, name, uid, deadline);
                if (!gone) co_return fail(gone.error());
                replaced = true;
            } else {
                if (ev.state == raw::PodState::failed) co_return fail(ev.error);
                const std::string uid = string_at(metadata_of(*got), "uid");  // before *got moves
                const std::string sandbox_label = label_of(*got, keys::sandbox_id);
                auto w = co_await raw::wait_ready(st, ns, name, std::move(*got),
                                                  steady_clock::now() + cfg.startup_timeout, true);
                if (!w) co_return fail(w.error());
                // Reconnecting never hands out a pod whose policy was deleted behind our back.
                auto np = co_await raw::ensure_network_policy(st, ns, name, sandbox_label, uid);
                if (!np) co_return fail(np.error());
                {
                    std::lock_guard lock(st->mutex);
                    st->last_patch[id] = steady_clock::now();
                }
                auto p = co_await raw::patch_activity(st, ns, name);
                // Gone between the read and the patch (reaped by someone): not a sandbox to hand out.
                if (!p && p.error().is(errc::not_found))
                    co_return fail(errc::conflict, "sandbox " + id + " was deleted while it was being acquired");
                if (!p) co_return fail(p.error());
                co_return PodAcquisition{raw::make_sandbox(st, ns, name, id), SandboxOrigin::existing, uid};
            }
        } else if (!got.error().is(errc::not_found)) {
            co_return fail(got.error());
        }
        if (!options.create_if_missing)
            co_return fail(errc::not_found, "sandbox " + id + " (pod " + ns + "/" + name + ") not found");
        // A pod reference names the pod itself; a caller id is recorded as the sandbox id.
        std::string identity_id = target->label ? *options.sandbox_id : name;
        auto idt = raw::make_identity(cfg, identity_id, options.labels, options.ttl_seconds, options.ttl_idle_seconds,
                                      util::now_rfc3339(true));
        if (!idt) co_return fail(idt.error());
        auto r = co_await raw::create_and_wait(st, name, std::move(*idt), true, false);
        if (!r) co_return fail(r.error());
        SandboxOrigin origin = replaced     ? SandboxOrigin::replaced
                               : r->adopted ? SandboxOrigin::adopted
                                            : SandboxOrigin::created;
        co_return PodAcquisition{raw::make_sandbox(st, ns, name, id), origin, r->uid};
    }

    if (!options.create_if_missing)
        co_return fail(errc::invalid_argument, "create_if_missing=false needs a sandbox_id");
    if (cfg.warm_pool_size > 0) {
        auto claimed = co_await raw::claim_warm(st, options.labels, options.ttl_seconds, options.ttl_idle_seconds);
        raw::spawn_refill(st);
        if (claimed && *claimed) {
            auto [ns, name] = **claimed;
            co_return PodAcquisition{raw::make_sandbox(st, ns, name, ns + "/" + name), SandboxOrigin::claimed_warm, {}};
        }
        if (!claimed) cfg.logger.warning("warm pool claim failed, creating: " + claimed.error().describe());
    }
    std::string name = raw::random_pod_name();
    std::string ns = raw::namespace_for(cfg, name);
    auto idt = raw::make_identity(cfg, name, options.labels, options.ttl_seconds, options.ttl_idle_seconds,
                                  util::now_rfc3339(true));
    if (!idt) co_return fail(idt.error());
    auto r = co_await raw::create_and_wait(st, name, std::move(*idt), false, false);
    if (!r) co_return fail(r.error());
    co_return PodAcquisition{raw::make_sandbox(st, ns, name, ns + "/" + name), SandboxOrigin::created, r->uid};
}

}  // namespace

asio::awaitable<Result<SandboxInfo>> RawProvider::describe(std::string id) {
    StatePtr st = state_;
    auto target = raw::resolve_id(st->options, id);
    if (!target) co_return fail(target.error());
    auto got = co_await st->client.get(raw::pods_path(target->ns).with_name(target->pod));
    if (!got) co_return fail(got.error());
    // A pod of that name that is not this sandbox's is not this sandbox.
    if (label_of(*got, keys::managed_by) != keys::managed_by_value ||
        (target->label && label_of(*got, keys::sandbox_id) != *target->label))
        co_return fail(errc::not_found, "sandbox " + id + " not found");
    co_return raw::info_of(*got);
}

asio::awaitable<Result<SandboxPage>> RawProvider::list(ListSandboxesOptions options) {
    StatePtr st = state_;
    ListOptions lo;
    lo.label_selector = raw::selector_for(st->options, options.labels);
    lo.limit = options.limit ? *options.limit : 100;  // always paged, so a cursor is always honoured
    lo.continue_token = options.cursor;
    auto page = co_await st->client.list(raw::list_path(st->options), std::move(lo));
    if (!page) co_return fail(page.error());
    SandboxPage out;
    out.next_cursor = page->continue_token;
    for (const auto& item : page->items) {
        if (!item.is_object()) continue;
        auto info = raw::info_of(item.get_object());
        if (options.status && info.status != *options.status) continue;
        if (!options.status && !options.include_warm && info.status == "warm") continue;
        out.items.push_back(std::move(info));
    }
    co_return out;
}

asio::awaitable<Result<bool>> RawProvider::delete_sandbox(std::string id) {
    StatePtr st = state_;
    auto target = raw::resolve_id(st->options, id);
    if (!target) co_return fail(target.error());
    {
        std::lock_guard lock(st->mutex);
        st->last_patch.erase(id);
        st->last_patch.erase(target->id);
    }
    co_return co_await raw::delete_objects(st, target->ns, target->pod, target->label, true, "");
}

void RawProvider::record_activity(const std::string& id) { raw::record_activity(state_, id); }

asio::awaitable<Result<CleanupResult>> RawProvider::cleanup(CleanupOptions options) {
    co_return co_await raw::cleanup(state_, std::move(options));
}

asio::awaitable<Result<int>> RawProvider::ensure_warm_pool() { co_return co_await raw::fill_pool(state_); }

asio::awaitable<Result<PoolStatus>> RawProvider::pool_status() {
    StatePtr st = state_;
    PoolStatus ps;
    ps.target = st->options.warm_pool_size;
    auto pods = co_await raw::list_all(st, raw::list_path(st->options), raw::selector_for(st->options));
    if (!pods) co_return fail(pods.error());
    for (const auto& pod : *pods) {
        ++ps.total;
        if (label_of(pod, keys::pool_status) != "warm") {
            ++ps.active;
        } else if (label_of(pod, keys::config_hash) == st->config_hash && raw::is_ready(pod) &&
                   raw::status_of(pod) == "warm") {
            ++ps.available;
        }
    }
    co_return ps;
}

asio::awaitable<Result<ProviderStats>> RawProvider::stats() {
    StatePtr st = state_;
    ProviderStats s;
    auto now = system_clock::now();
    auto pods = co_await raw::list_all(st, raw::list_path(st->options), raw::selector_for(st->options));
    if (!pods) co_return fail(pods.error());
    for (const auto& pod : *pods) {
        ++s.total;
        auto status = raw::status_of(pod);
        if (status == "running") {
            ++s.running;
            if (raw::is_idle(pod, now)) ++s.idle;
        } else if (status == "pending") {
            ++s.pending;
        } else if (status == "warm") {
            ++s.warm;
        } else {
            ++s.failed;
        }
    }
    co_return s;
}

}  // namespace kubesandbox
