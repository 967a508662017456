// SandboxManager's I/O: the thread table (on one strand), single-flight acquisitions, the
// reaper, shutdown. Decisions come from manager_core.
#include <kubesandbox/sandbox_manager.hpp>

#include "manager/manager_core.hpp"
#include "manager/slot.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <random>
#include <unordered_map>

namespace kubesandbox {

namespace asio = boost::asio;
using std::chrono::steady_clock;
using Slot = SandboxLease::Slot;

std::string_view to_string(AcquireKind kind) noexcept {
    switch (kind) {
        case AcquireKind::cached:
            return "cached";
        case AcquireKind::reconnected:
            return "reconnected";
        case AcquireKind::created:
            return "created";
        case AcquireKind::adopted:
            return "adopted";
        case AcquireKind::recreated:
            return "recreated";
    }
    return "unknown";
}

std::string_view to_string(ManagerEvent::Kind kind) noexcept {
    switch (kind) {
        case ManagerEvent::Kind::created:
            return "created";
        case ManagerEvent::Kind::reconnected:
            return "reconnected";
        case ManagerEvent::Kind::adopted:
            return "adopted";
        case ManagerEvent::Kind::recreated:
            return "recreated";
        case ManagerEvent::Kind::lost:
            return "lost";
        case ManagerEvent::Kind::reaped:
            return "reaped";
        case ManagerEvent::Kind::failed:
            return "failed";
    }
    return "unknown";
}

namespace {

using Strand = asio::strand<asio::any_io_executor>;
constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);
// A thread whose sandbox was reaped or lost is remembered this long, so its next get() says
// recreated rather than created.
constexpr auto forget_after = std::chrono::hours(24);

struct Acquired {
    std::shared_ptr<Slot> slot;
    AcquireKind kind = AcquireKind::created;
};

// One acquisition in flight; every get() of the thread waits on it. The timer never expires:
// cancelling it wakes the waiters.
struct Pending {
    explicit Pending(const Strand& strand) : done(strand, steady_clock::time_point::max()) {}
    asio::steady_timer done;
    std::optional<Result<Acquired>> result;
    bool reconnect_only = false;  // the starter's policy looked without creating
};

struct Entry {
    std::shared_ptr<Slot> slot;  // the bound sandbox; null when none
    std::shared_ptr<Pending> pending;
    std::string instance;  // the incarnation last seen ("" = unknown)
    bool seen = false;     // this thread had a sandbox here
    steady_clock::time_point last_change = steady_clock::now();
    steady_clock::time_point verified = steady_clock::now();  // the cluster last confirmed `instance`
};

}  // namespace

struct SandboxManager::Impl {
    Strand strand;
    std::shared_ptr<SandboxProvider> provider;
    SandboxManagerOptions options;
    std::unordered_map<std::string, Entry> table;
    asio::steady_timer reaper_timer;
    bool stopping = false;
    bool delete_late = false;  // acquisitions finishing from now on delete what they made
    bool reaper_running = false;
    bool topping_up = false;  // a warm-pool top-up is under way
    std::minstd_rand jitter{std::random_device{}()};
    ManagerStats counters;

    Impl(asio::any_io_executor ex, std::shared_ptr<SandboxProvider> p, SandboxManagerOptions o)
        : strand(asio::make_strand(std::move(ex))),
          provider(std::move(p)),
          options(std::move(o)),
          reaper_timer(strand) {}
};

namespace {

using ImplPtr = std::shared_ptr<SandboxManager::Impl>;

GetOrCreateOptions creation_options(const SandboxManagerOptions& o, const std::string& thread_id) {
    GetOrCreateOptions go;
    go.sandbox_id = manager::sandbox_id_for(o.scope, thread_id);
    go.labels = o.labels;
    go.labels["scope"] = o.scope;
    if (o.idle_ttl) go.ttl_idle_seconds = o.idle_ttl->count();
    if (o.absolute_ttl) go.ttl_seconds = o.absolute_ttl->count();
    return go;
}

void emit(const SandboxManager::Impl& impl, ManagerEvent::Kind kind, const std::string& thread_id,
          std::optional<Error> error = std::nullopt) {
    if (!impl.options.on_event) return;
    try {
        impl.options.on_event(ManagerEvent{kind, thread_id, std::move(error)});
    } catch (const std::exception& e) {
        impl.options.logger.warning(std::string("on_event threw: ") + e.what());
    }
}

std::optional<ManagerEvent::Kind> event_of(AcquireKind kind) {
    switch (kind) {
        case AcquireKind::cached:
            return std::nullopt;
        case AcquireKind::reconnected:
            return ManagerEvent::Kind::reconnected;
        case AcquireKind::created:
            return ManagerEvent::Kind::created;
        case AcquireKind::adopted:
            return ManagerEvent::Kind::adopted;
        case AcquireKind::recreated:
            return ManagerEvent::Kind::recreated;
    }
    return std::nullopt;
}

void count(ManagerStats& c, AcquireKind kind) {
    switch (kind) {
        case AcquireKind::cached:
            break;
        case AcquireKind::reconnected:
            ++c.reconnected;
            break;
        case AcquireKind::created:
            ++c.created;
            break;
        case AcquireKind::adopted:
            ++c.adopted;
            break;
        case AcquireKind::recreated:
            ++c.recreated;
            break;
    }
}

// Whatever ends an acquisition (an exception included), its waiters wake with a result:
// otherwise every later get() of the thread would wait forever.
struct ResolveOnExit {
    std::shared_ptr<Pending> pending;
    ImplPtr impl;
    std::string thread_id;
    ~ResolveOnExit() {
        if (pending->result) return;
        pending->result = fail(errc::io_error, "the acquisition ended without a result");
        if (auto it = impl->table.find(thread_id); it != impl->table.end() && it->second.pending == pending) {
            it->second.pending.reset();
            if (!it->second.slot && !it->second.seen) impl->table.erase(it);
        }
        pending->done.cancel();
    }
};

// Runs on the strand, owned by the manager rather than by the first caller: a caller that
// gives up does not fail the others. The starter's GetOptions decide what it does; each caller
// that joins applies its own to what it found (get_on_strand).
asio::awaitable<void> acquire(ImplPtr impl, std::string thread_id, GetOptions get_options,
                              std::shared_ptr<Pending> pending) {
    ResolveOnExit resolve{pending, impl, thread_id};
    std::string known;
    bool seen = false;
    if (auto it = impl->table.find(thread_id); it != impl->table.end()) {
        known = it->second.instance;
        seen = it->second.seen;
    }
    const bool history = seen || get_options.expect_existing;
    const OnLost policy = get_options.on_lost.value_or(impl->options.on_lost);
    GetOrCreateOptions go = creation_options(impl->options, thread_id);
    const bool create = !manager::reconnect_only(policy, history);
    go.create_if_missing = create;
    pending->reconnect_only = !create;
    const std::string sandbox_id = *go.sandbox_id;

    Result<Acquired> result = fail(errc::cancelled, "acquisition did not finish");
    std::optional<std::string> instance;
    try {
        auto got = co_await impl->provider->acquire(std::move(go));
        if (!got) {
            if (!create && got.error().is(errc::not_found)) {
                ++impl->counters.lost;
                result = fail(errc::sandbox_lost,
                              "the sandbox of thread " + thread_id + " is gone (" + got.error().message + ")");
            } else {
                result = fail(got.error());
            }
        } else {
            auto verdict = manager::classify(got->origin, known, got->instance, history);
            if (verdict.lost) ++impl->counters.lost;
            // Under OnLost::error the replacement is not remembered: every get() says
            // sandbox_lost until the host asks for the new sandbox (GetOptions::on_lost).
            if (!(verdict.lost && policy == OnLost::error)) instance = got->instance;
            if (verdict.lost && policy == OnLost::error) {
                result = fail(errc::sandbox_lost, "the sandbox of thread " + thread_id +
                                                      " was lost; a new one now stands under its id " + sandbox_id);
            } else {
                count(impl->counters, verdict.kind);
                result =
                    Acquired{std::make_shared<Slot>(std::move(got->sandbox), thread_id, impl->provider, sandbox_id),
                             verdict.kind};
            }
        }
    } catch (const std::exception& e) {
        result = fail(errc::io_error, std::string("acquisition failed: ") + e.what());
    } catch (...) {
        result = fail(errc::io_error, "acquisition failed: unknown exception");
    }
    // Finished after shutdown(delete_sandboxes) stopped waiting for it: nothing it made may
    // outlive the manager.
    if (result && impl->delete_late) {
        auto d = co_await impl->provider->delete_sandbox(sandbox_id);
        if (!d)
            impl->options.logger.warning("thread " + thread_id + ": deleting after shutdown: " + d.error().describe());
        result = fail(errc::cancelled, "the sandbox manager shut down during the acquisition");
        instance.reset();
    }

    auto it = impl->table.find(thread_id);
    if (it != impl->table.end() && it->second.pending == pending) {
        Entry& e = it->second;
        e.pending.reset();
        e.last_change = steady_clock::now();
        if (instance) {
            e.instance = *instance;
            e.seen = true;
        }
        if (result) {
            e.slot = result->slot;
            e.verified = steady_clock::now();
        } else if (!e.seen && !e.slot) impl->table.erase(it);  // a failure is not remembered
    }
    if (!result) {
        impl->options.logger.log(LogLevel::info, "thread " + thread_id + ": " + result.error().describe());
        auto kind = result.error().is(errc::sandbox_lost) ? ManagerEvent::Kind::lost : ManagerEvent::Kind::failed;
        if (kind == ManagerEvent::Kind::failed) ++impl->counters.failed;
        emit(*impl, kind, thread_id, result.error());
    } else if (auto kind = event_of(result->kind)) {
        if (result->kind == AcquireKind::recreated) emit(*impl, ManagerEvent::Kind::lost, thread_id);
        emit(*impl, *kind, thread_id);
    }
    pending->result = std::move(result);
    pending->done.cancel();
}

asio::awaitable<Result<SandboxLease>> get_on_strand(ImplPtr impl, std::string thread_id, GetOptions options) {
    if (auto scope_ok = manager::validate_scope(impl->options.scope); !scope_ok) co_return fail(scope_ok.error());
    if (impl->stopping) co_return fail(errc::cancelled, "the sandbox manager is shutting down");
    if (auto valid = manager::validate_thread_id(thread_id); !valid) co_return fail(valid.error());
    {
        Entry& e = impl->table[thread_id];
        if (e.slot && !e.slot->lost.load() && !e.pending) {
            if (steady_clock::now() - e.verified < impl->options.verify_after)
                co_return Slot::lease(e.slot, AcquireKind::cached);
            auto slot = e.slot;
            const std::string instance = e.instance;
            auto info = co_await impl->provider->describe(manager::sandbox_id_for(impl->options.scope, thread_id));
            // Someone else's deletion or re-creation shows as another instance (or none).
            const bool same = info && (info->instance.empty() || info->instance == instance) &&
                              info->status != "failed" && info->status != "terminated";
            if (same || (!info && !info.error().is(errc::not_found))) {  // unverifiable: the op will tell
                auto it = impl->table.find(thread_id);
                if (it != impl->table.end() && it->second.slot == slot && !it->second.pending) {
                    if (same) it->second.verified = steady_clock::now();
                    co_return Slot::lease(slot, AcquireKind::cached);
                }
            } else {
                slot->lost.store(true);
            }
        }
    }
    Entry& e = impl->table[thread_id];
    // Held here, not read back from `e`: the acquisition may run to its end inside co_spawn (a
    // provider that answers without suspending), resetting e.pending or erasing `e`.
    std::shared_ptr<Pending> pending = e.pending;
    const bool started = !pending;
    if (!pending) {
        pending = std::make_shared<Pending>(impl->strand);
        e.pending = pending;
        asio::co_spawn(impl->strand, acquire(impl, thread_id, options, pending), asio::detached);
    }
    while (!pending->result) co_await pending->done.async_wait(tuple_awaitable);
    const auto& r = *pending->result;
    const OnLost mine = options.on_lost.value_or(impl->options.on_lost);
    if (!r) {
        // Joined an acquisition whose policy only looked; this caller asked for a new sandbox.
        if (!started && pending->reconnect_only && mine == OnLost::recreate && r.error().is(errc::sandbox_lost))
            co_return co_await get_on_strand(impl, std::move(thread_id), std::move(options));
        co_return fail(r.error());
    }
    if (impl->delete_late) co_return fail(errc::cancelled, "the sandbox manager shut down and deleted its sandboxes");
    AcquireKind kind = r->kind;
    if (!started) {
        // A joiner's own knowledge and policy apply to what the shared acquisition found.
        if (options.expect_existing && (kind == AcquireKind::created || kind == AcquireKind::adopted))
            kind = AcquireKind::recreated;
        if (kind == AcquireKind::recreated && mine == OnLost::error)
            co_return fail(errc::sandbox_lost, "the sandbox of thread " + thread_id + " was lost");
    }
    co_return Slot::lease(r->slot, kind);
}

// One reaper pass: the provider reaps what is expired or dead, asking this process first.
asio::awaitable<Result<CleanupResult>> pass_on_strand(ImplPtr impl) {
    CleanupOptions co;
    co.may_delete = [impl](const SandboxInfo& info) {
        auto thread = manager::thread_of(impl->options.scope, info.id);
        if (!thread) return true;
        auto it = impl->table.find(*thread);
        if (it == impl->table.end()) return true;
        Entry& e = it->second;
        if (e.pending) return false;  // being acquired right now
        if (!e.slot) return true;
        const bool past_absolute =
            manager::past_absolute_ttl(info.created_at, impl->options.absolute_ttl, std::chrono::system_clock::now());
        if (manager::veto_reaping(e.slot->busy.load(std::memory_order_acquire), e.slot->last_use(), steady_clock::now(),
                                  impl->options.idle_ttl, past_absolute))
            return false;
        // Unbound before the delete: a get() from now on looks in the cluster again.
        e.slot.reset();
        e.last_change = steady_clock::now();
        return true;
    };
    ++impl->counters.reaper_passes;
    // Heartbeat: sandboxes busy here are recorded as active (debounced by the provider), so the
    // reapers of other processes, which cannot see this one's leases, keep them too.
    for (const auto& [thread, e] : impl->table)
        if (e.slot && e.slot->busy.load(std::memory_order_acquire) > 0)
            impl->provider->record_activity(manager::sandbox_id_for(impl->options.scope, thread));
    auto r = co_await impl->provider->cleanup(std::move(co));
    if (r) {
        impl->counters.reaped += r->deleted.size();
        for (const auto& id : r->deleted) {
            auto thread = manager::thread_of(impl->options.scope, id);
            if (!thread) continue;
            // Dead sandboxes are reaped without asking: unbind them here too.
            if (auto it = impl->table.find(*thread); it != impl->table.end() && it->second.slot) {
                it->second.slot->lost.store(true);
                it->second.slot.reset();
                it->second.last_change = steady_clock::now();
            }
            emit(*impl, ManagerEvent::Kind::reaped, *thread);
        }
    }
    auto now = steady_clock::now();
    std::erase_if(impl->table, [&](const auto& kv) {
        const Entry& e = kv.second;
        return !e.slot && !e.pending && now - e.last_change > forget_after;
    });
    co_return r;
}

// The provider's warm pool, topped up beside the reaper (one top-up at a time; a no-op for
// providers without a pool): filled when run() starts, its dead pods replaced after each pass.
void top_up_warm_pool(const ImplPtr& impl) {
    if (impl->topping_up || impl->stopping) return;
    impl->topping_up = true;
    auto task = [](ImplPtr i) -> asio::awaitable<void> {
        try {
            auto r = co_await i->provider->ensure_warm_pool();
            if (!r) i->options.logger.warning("warm pool top-up failed: " + r.error().describe());
        } catch (const std::exception& e) {
            i->options.logger.warning(std::string("warm pool top-up failed: ") + e.what());
        }
        i->topping_up = false;  // resumed on the strand: co_spawned there
    };
    asio::co_spawn(impl->strand, task(impl), asio::detached);
}

asio::awaitable<void> run_on_strand(ImplPtr impl) {
    if (impl->reaper_running) {
        impl->options.logger.warning("run() called while the reaper runs: ignored");
        co_return;
    }
    impl->reaper_running = true;
    struct Stopped {
        SandboxManager::Impl& impl;
        ~Stopped() { impl.reaper_running = false; }
    } stopped{*impl};
    unsigned failures = 0;
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    const auto& o = impl->options;
    top_up_warm_pool(impl);
    while (!impl->stopping) {
        impl->reaper_timer.expires_after(
            manager::next_pass_in(o.reap_interval, failures, o.backoff_initial, o.backoff_max, unit(impl->jitter)));
        co_await impl->reaper_timer.async_wait(tuple_awaitable);
        if (impl->stopping) break;
        auto r = co_await pass_on_strand(impl);
        if (r) {
            failures = 0;
            for (const auto& e : r->errors) o.logger.warning("reaper: " + e.id + ": " + e.error.describe());
            top_up_warm_pool(impl);
        } else {
            ++failures;
            ++impl->counters.reaper_errors;
            o.logger.warning("reaper pass failed (" + std::to_string(failures) + " in a row): " + r.error().describe());
        }
    }
}

bool quiet(const SandboxManager::Impl& impl) {
    for (const auto& [thread, e] : impl.table)
        if (e.pending || (e.slot && e.slot->busy.load() > 0)) return false;
    return true;
}

asio::awaitable<ShutdownReport> shutdown_on_strand(ImplPtr impl, ShutdownOptions options) {
    impl->stopping = true;
    impl->reaper_timer.cancel();
    ShutdownReport report;
    auto deadline = steady_clock::now() + options.graceful;
    asio::steady_timer poll(impl->strand);
    while (!quiet(*impl)) {
        if (steady_clock::now() >= deadline) {
            report.drained = false;
            break;
        }
        poll.expires_after(std::chrono::milliseconds(20));
        co_await poll.async_wait(tuple_awaitable);
    }
    if (options.delete_sandboxes) {
        impl->delete_late = true;
        std::vector<std::string> threads;
        for (const auto& [thread, e] : impl->table)
            if (e.slot) threads.push_back(thread);
        for (const auto& thread : threads) {
            auto d = co_await impl->provider->delete_sandbox(manager::sandbox_id_for(impl->options.scope, thread));
            if (d && *d) ++report.deleted;
            else if (!d) report.errors.push_back(CleanupError{thread, d.error()});
            if (auto it = impl->table.find(thread); it != impl->table.end()) it->second.slot.reset();
        }
    }
    co_return report;
}

asio::awaitable<Result<bool>> remove_on_strand(ImplPtr impl, std::string thread_id) {
    if (auto valid = manager::validate_thread_id(thread_id); !valid) co_return fail(valid.error());
    // An acquisition in flight could create the sandbox after our delete: let it finish first.
    if (auto it = impl->table.find(thread_id); it != impl->table.end() && it->second.pending) {
        auto pending = it->second.pending;
        while (!pending->result) co_await pending->done.async_wait(tuple_awaitable);
    }
    auto d = co_await impl->provider->delete_sandbox(manager::sandbox_id_for(impl->options.scope, thread_id));
    if (!d) co_return fail(d.error());
    // Deliberately removed, not lost: the thread's next sandbox is simply created.
    if (auto it = impl->table.find(thread_id); it != impl->table.end() && !it->second.pending) {
        if (it->second.slot) it->second.slot->lost.store(true);
        impl->table.erase(it);
    }
    co_return *d;
}

asio::awaitable<Result<std::optional<SandboxInfo>>> find_on_strand(ImplPtr impl, std::string thread_id) {
    if (auto valid = manager::validate_thread_id(thread_id); !valid) co_return fail(valid.error());
    auto info = co_await impl->provider->describe(manager::sandbox_id_for(impl->options.scope, thread_id));
    if (!info) {
        if (info.error().is(errc::not_found)) co_return std::optional<SandboxInfo>();
        co_return fail(info.error());
    }
    info->id = std::move(thread_id);
    co_return std::optional<SandboxInfo>(std::move(*info));
}

asio::awaitable<Result<SandboxPage>> list_on_strand(ImplPtr impl, ListSandboxesOptions options) {
    options.labels["scope"] = impl->options.scope;
    auto page = co_await impl->provider->list(std::move(options));
    if (!page) co_return fail(page.error());
    SandboxPage out;
    out.next_cursor = std::move(page->next_cursor);
    for (auto& item : page->items) {
        auto thread = manager::thread_of(impl->options.scope, item.id);
        if (!thread) continue;
        item.id = std::move(*thread);
        out.items.push_back(std::move(item));
    }
    co_return out;
}

asio::awaitable<ManagerStats> stats_on_strand(ImplPtr impl) {
    ManagerStats s = impl->counters;
    for (const auto& [thread, e] : impl->table) {
        if (e.pending) ++s.acquisitions_in_flight;
        if (!e.slot) continue;
        ++s.threads;
        if (e.slot->busy.load() > 0) ++s.busy;
    }
    auto cluster = co_await impl->provider->stats();
    if (cluster) s.cluster = *cluster;
    co_return s;
}

}  // namespace

SandboxManager::SandboxManager(asio::any_io_executor executor, std::shared_ptr<SandboxProvider> provider,
                               SandboxManagerOptions options)
    : impl_(std::make_shared<Impl>(std::move(executor), std::move(provider), std::move(options))) {}

SandboxManager::~SandboxManager() {
    // Coroutines still on the strand keep the Impl alive; they only need to stop, and the host's
    // callback may be gone with the host.
    asio::post(impl_->strand, [impl = impl_] {
        impl->stopping = true;
        impl->reaper_timer.cancel();
        impl->options.on_event = nullptr;
    });
}

// The public operations are plain functions returning the strand's awaitable: nothing refers to
// `this` once they return, so a manager may be destroyed while its operations are pending.
asio::awaitable<Result<SandboxLease>> SandboxManager::get(std::string thread_id, GetOptions options) {
    return asio::co_spawn(impl_->strand, get_on_strand(impl_, std::move(thread_id), std::move(options)),
                          asio::use_awaitable);
}

asio::awaitable<Result<std::optional<SandboxInfo>>> SandboxManager::find(std::string thread_id) {
    return asio::co_spawn(impl_->strand, find_on_strand(impl_, std::move(thread_id)), asio::use_awaitable);
}

asio::awaitable<Result<bool>> SandboxManager::remove(std::string thread_id) {
    return asio::co_spawn(impl_->strand, remove_on_strand(impl_, std::move(thread_id)), asio::use_awaitable);
}

asio::awaitable<Result<SandboxPage>> SandboxManager::list(ListSandboxesOptions options) {
    return asio::co_spawn(impl_->strand, list_on_strand(impl_, std::move(options)), asio::use_awaitable);
}

asio::awaitable<Result<CleanupResult>> SandboxManager::cleanup() {
    return asio::co_spawn(impl_->strand, pass_on_strand(impl_), asio::use_awaitable);
}

asio::awaitable<void> SandboxManager::run() {
    return asio::co_spawn(impl_->strand, run_on_strand(impl_), asio::use_awaitable);
}

asio::awaitable<ShutdownReport> SandboxManager::shutdown(ShutdownOptions options) {
    return asio::co_spawn(impl_->strand, shutdown_on_strand(impl_, options), asio::use_awaitable);
}

asio::awaitable<ManagerStats> SandboxManager::stats() {
    return asio::co_spawn(impl_->strand, stats_on_strand(impl_), asio::use_awaitable);
}

std::string SandboxManager::sandbox_id_for(std::string_view thread_id) const {
    return manager::sandbox_id_for(impl_->options.scope, thread_id);
}

}  // namespace kubesandbox
