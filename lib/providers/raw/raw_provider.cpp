// Raw mode's façade: the public operations, composed from the pure cores (naming, pod_state,
// manifests) and the I/O parts (readiness, lifecycle, warm_pool, cleanup).
#include <kubesandbox/raw_provider.hpp>

#include "providers/raw/naming.hpp"
#include "providers/raw/pod_state.hpp"
#include "providers/raw/state.hpp"
#include "util/json_access.hpp"
#include "util/time_format.hpp"

#include <utility>

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

asio::awaitable<Result<Acquisition>> RawProvider::acquire(GetOrCreateOptions options) {
    auto got = co_await raw::acquire(state_, std::move(options));
    if (!got) co_return fail(got.error());
    co_return Acquisition{std::move(got->sandbox), got->origin, std::move(got->uid)};
}

asio::awaitable<Result<std::unique_ptr<PodExecSandbox>>> RawProvider::get_or_create_pod(GetOrCreateOptions options) {
    auto got = co_await raw::acquire(state_, std::move(options));
    if (!got) co_return fail(got.error());
    co_return std::move(got->sandbox);
}

asio::awaitable<Result<SandboxInfo>> RawProvider::describe(std::string id) {
    StatePtr st = state_;
    auto target = raw::resolve_id(st->options, id);
    if (!target) co_return fail(target.error());
    auto at = co_await raw::locate(st, *target);
    if (!at) co_return fail(at.error());
    auto got = co_await st->client.get(raw::pods_path(at->ns).with_name(at->pod));
    if (!got) co_return fail(got.error());
    // A pod that is not this sandbox's is not this sandbox: at the id's name it carries the id's
    // label; a bound warm pod carries the id in its annotation.
    const bool bound = at->pod != target->pod;
    if (label_of(*got, keys::managed_by) != keys::managed_by_value ||
        (!bound && target->label && label_of(*got, keys::sandbox_id) != *target->label) ||
        (bound && util::annotation_of(*got, keys::id_original) != target->id))
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
    auto at = co_await raw::locate(st, *target);
    if (!at) co_return fail(at.error());
    bool found = false;
    if (at->binding) {
        // The binding first: from then on every replica looks for the id afresh.
        DeleteOptions o;
        o.precondition_uid = util::string_at(metadata_of(*at->binding), "uid");
        auto d = co_await st->client.remove(raw::bindings_path(at->ns).with_name(target->pod), std::move(o));
        if (!d && !d.error().is(errc::not_found) && !d.error().is(errc::conflict)) co_return fail(d.error());
        found = d && d->found;
        if (at->pod != target->pod) {
            {
                std::lock_guard lock(st->mutex);
                st->last_patch.erase(at->ns + "/" + at->pod);
            }
            const std::optional<std::string> expected = at->pod;
            auto p = co_await raw::delete_objects(st, at->ns, at->pod, expected, false, std::string());
            if (!p) co_return fail(p.error());
            found = found || *p;
        }
    }
    // The pod at the id's own name too (cold, or from before bindings).
    auto r = co_await raw::delete_objects(st, target->ns, target->pod, target->label, true, "");
    if (!r) co_return fail(r.error());
    co_return found || *r;
}

void RawProvider::record_activity(const std::string& id) { raw::record_activity(state_, id); }

asio::awaitable<Result<CleanupResult>> RawProvider::cleanup(CleanupOptions options) {
    co_return co_await raw::cleanup(state_, std::move(options));
}

asio::awaitable<Result<int>> RawProvider::ensure_warm_pool() {
    StatePtr st = state_;
    // One fill at a time per provider (a refill after claims may be running): two would count
    // the same shortfall and overshoot for good.
    {
        std::lock_guard lock(st->mutex);
        if (st->refilling) {
            st->refill_again = true;  // the running refill counts again when it is done
            co_return 0;
        }
        st->refilling = true;
    }
    struct Done {
        StatePtr st;
        ~Done() {
            bool again = false;
            {
                std::lock_guard lock(st->mutex);
                st->refilling = false;
                again = std::exchange(st->refill_again, false);
            }
            if (again) raw::spawn_refill(st);
        }
    } done{st};
    co_return co_await raw::fill_pool(st);
}

asio::awaitable<Result<PoolStatus>> RawProvider::pool_status() {
    StatePtr st = state_;
    PoolStatus ps;
    ps.target = st->options.warm_pool_size;
    {
        std::lock_guard lock(st->mutex);
        ps.refilling = st->refilling;
    }
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
