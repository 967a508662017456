// The SandboxManager's decisions, apart from its I/O: ids, how an acquisition is reported,
// whether this process vetoes a reaping, and the reaper's back-off. Pure; unit-tested alone.
#pragma once

#include <kubesandbox/error.hpp>
#include <kubesandbox/sandbox_manager.hpp>
#include <kubesandbox/sandbox_provider.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace kubesandbox::manager {

// A scope is a DNS label of at most 32 characters (it becomes a label value and an id prefix).
Result<void> validate_scope(std::string_view scope);
// Any bytes but NUL, 1 to 1024 of them.
Result<void> validate_thread_id(std::string_view thread_id);

// "<scope>:<thread id>". The ':' keeps every thread id a caller id for the providers (never
// read as "<namespace>/<pod>" or a bare pod name), so each maps to its own hashed name.
std::string sandbox_id_for(std::string_view scope, std::string_view thread_id);
// The inverse; nullopt for another scope's (or a random) sandbox.
std::optional<std::string> thread_of(std::string_view scope, std::string_view sandbox_id);

// What the thread's history makes of how the provider came by the sandbox. `known_instance`:
// the instance this manager last saw for the thread ("" = none seen); `expect_existing`: the
// host says the thread had one.
struct Verdict {
    AcquireKind kind{AcquireKind::created};
    bool lost{false};  // the thread's sandbox was lost (kind is recreated)
};
Verdict classify(SandboxOrigin origin, std::string_view known_instance, std::string_view got_instance,
                 bool expect_existing);

// With OnLost::error and a history, only an existing sandbox will do: look, do not create.
bool reconnect_only(OnLost on_lost, bool has_history);

// This process's veto on reaping a sandbox: busy (a lease alive), or used here within the idle
// TTL (the cluster's activity annotation is debounced and may lag) unless its absolute TTL is
// over, which only a command in flight defers.
bool veto_reaping(std::size_t busy, std::chrono::steady_clock::time_point last_used,
                  std::chrono::steady_clock::time_point now, std::optional<std::chrono::seconds> idle_ttl,
                  bool past_absolute_ttl);

// Whether a sandbox created at `created_at` (RFC 3339, as SandboxInfo carries it) has outlived
// `absolute_ttl`; false when either is unknown.
bool past_absolute_ttl(std::string_view created_at, std::optional<std::chrono::seconds> absolute_ttl,
                       std::chrono::system_clock::time_point now);

// The wait before the next reaper pass after `failures` failed passes in a row (0 = the
// normal interval): exponential from `initial`, capped at `max`, jittered by `jitter01` in
// [0, 1) to the upper half, so replicas spread out.
std::chrono::milliseconds next_pass_in(std::chrono::milliseconds interval, unsigned failures,
                                       std::chrono::milliseconds initial, std::chrono::milliseconds max,
                                       double jitter01);

}  // namespace kubesandbox::manager
