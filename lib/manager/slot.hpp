// A thread's bound sandbox as the manager and its leases share it. The manager's table is
// touched only on its strand; a slot is shared with leases on any thread, hence the atomics.
#pragma once

#include <kubesandbox/sandbox_manager.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

namespace kubesandbox {

struct SandboxLease::Slot {
    std::unique_ptr<Sandbox> sandbox;
    std::string thread_id;
    std::atomic<std::size_t> busy{0};
    std::atomic<std::chrono::steady_clock::rep> last_used{std::chrono::steady_clock::now().time_since_epoch().count()};
    // An operation found the sandbox gone: the next get() acquires again instead of using it.
    std::atomic<bool> lost{false};

    // For the activity record at the start of each operation: the end of one is recorded by the
    // sandbox, but other processes' reapers must see a long command as activity before it ends.
    std::shared_ptr<SandboxProvider> provider;
    std::string sandbox_id;

    Slot(std::unique_ptr<Sandbox> s, std::string thread, std::shared_ptr<SandboxProvider> p, std::string id)
        : sandbox(std::move(s)), thread_id(std::move(thread)), provider(std::move(p)), sandbox_id(std::move(id)) {}

    void record_use() {
        if (provider) provider->record_activity(sandbox_id);
    }

    // The only way to make a lease: leases exist for bound slots alone.
    static SandboxLease lease(std::shared_ptr<Slot> slot, AcquireKind kind) noexcept {
        return SandboxLease(std::move(slot), kind);
    }

    // Release/acquire: a reaper that sees busy drop to 0 also sees the last_used written before.
    void acquire_busy() noexcept { busy.fetch_add(1, std::memory_order_acq_rel); }
    void release_busy() noexcept { busy.fetch_sub(1, std::memory_order_acq_rel); }
    void touch() noexcept {
        last_used.store(std::chrono::steady_clock::now().time_since_epoch().count(), std::memory_order_release);
    }
    std::chrono::steady_clock::time_point last_use() const noexcept {
        return std::chrono::steady_clock::time_point(
            std::chrono::steady_clock::duration(last_used.load(std::memory_order_acquire)));
    }
};

}  // namespace kubesandbox
