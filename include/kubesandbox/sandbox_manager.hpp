// Conversation threads to sandboxes: each thread id gets its own sandbox, acquired on first use,
// kept between turns, reaped when idle. Written against SandboxProvider alone, so it serves
// every mode.
//
// The binding thread -> sandbox lives in the cluster (a deterministic sandbox id per thread,
// create-or-adopt), so managers in several processes asking for one thread converge on one
// sandbox without sticky sessions. In this process, concurrent gets of one thread share one
// acquisition; different threads never wait on each other. Safe on a multi-threaded io_context.
#pragma once

#include <kubesandbox/error.hpp>
#include <kubesandbox/logger.hpp>
#include <kubesandbox/sandbox.hpp>
#include <kubesandbox/sandbox_provider.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kubesandbox {

// What get() does when a thread's sandbox is gone (expired, deleted, its pod died, replaced by
// someone else): provision a new one and say so (SandboxLease::recreated), or fail with
// errc::sandbox_lost. Never silently.
enum class OnLost { recreate, error };

// How get() came by the thread's sandbox.
enum class AcquireKind {
    cached,       // bound in this manager, used as it was
    reconnected,  // found in the cluster (made earlier, or by another replica)
    created,      // new and empty: the thread had no sandbox
    adopted,      // another replica created it concurrently; this manager waited for it
    recreated,    // new and empty, replacing one the thread had: its files are gone
};

std::string_view to_string(AcquireKind kind) noexcept;

// What a host may want to log or count: each acquisition that reached the cluster (cached gets
// are not events), each loss, each sandbox reaped by this manager, each failed acquisition.
struct ManagerEvent {
    enum class Kind { created, reconnected, adopted, recreated, lost, reaped, failed };
    Kind kind{Kind::created};
    std::string thread_id{};
    std::optional<Error> error{};  // failed, and lost under OnLost::error
};

std::string_view to_string(ManagerEvent::Kind kind) noexcept;

struct SandboxManagerOptions {
    // Part of every sandbox id ("<scope>:<thread id>") and a label on every sandbox, so
    // applications sharing a namespace keep apart. DNS label syntax, at most 32 characters.
    std::string scope{"thread"};
    // Written on each sandbox at creation; every replica's reaper (and `kubesandbox cleanup`)
    // enforces them. nullopt = none.
    std::optional<std::chrono::seconds> idle_ttl{std::chrono::minutes(30)};
    std::optional<std::chrono::seconds> absolute_ttl{};
    OnLost on_lost{OnLost::recreate};
    // A bound sandbox unused here for this long is checked against the cluster (one GET) on the
    // next get(), so one deleted or re-created by someone else meanwhile is reported, never used
    // as if it were the old one. 0 = on every get.
    std::chrono::milliseconds verify_after{std::chrono::seconds(30)};
    // Time between reaper passes; after failed passes the reaper backs off exponentially from
    // backoff_initial to backoff_max.
    std::chrono::milliseconds reap_interval{std::chrono::seconds(60)};
    std::chrono::milliseconds backoff_initial{std::chrono::seconds(1)};
    std::chrono::milliseconds backoff_max{std::chrono::seconds(60)};
    std::map<std::string, std::string> labels{};  // user labels on every sandbox
    Logger logger{};
    // Called on the manager's strand: must return quickly and not call back into the manager.
    std::function<void(const ManagerEvent&)> on_event{};
};

struct GetOptions {
    std::optional<OnLost> on_lost{};  // this call only
    // The host knows the thread had a sandbox (say, from its own conversation store): a
    // missing one counts as lost even in a process that never saw it.
    bool expect_existing{false};
};

class SandboxManager;

// A thread's sandbox, held for one turn. It is a Sandbox (execute and the file operations go to
// the thread's sandbox); while any lease of a thread is alive, its sandbox is busy and this
// process's reaper never deletes it. Move-only; cheap.
class SandboxLease final : public Sandbox {
public:
    SandboxLease() = default;
    SandboxLease(SandboxLease&&) noexcept;
    SandboxLease& operator=(SandboxLease&&) noexcept;
    ~SandboxLease() override;

    explicit operator bool() const noexcept { return slot_ != nullptr; }

    const std::string& thread_id() const;
    const std::string& id() const override;  // the sandbox's id ("<namespace>/<name>")
    AcquireKind kind() const noexcept { return kind_; }
    bool created() const noexcept { return kind_ == AcquireKind::created || kind_ == AcquireKind::recreated; }
    bool recreated() const noexcept { return kind_ == AcquireKind::recreated; }

    using Sandbox::execute;
    boost::asio::awaitable<Result<ExecuteResponse>> execute(std::string command,
                                                            std::optional<std::chrono::seconds> timeout) override;
    boost::asio::awaitable<Result<ExecuteResponse>> execute(std::string command,
                                                            std::optional<std::chrono::seconds> timeout,
                                                            OutputSink sink) override;
    boost::asio::awaitable<Result<std::vector<FileUploadResponse>>> upload_files(
        std::vector<std::pair<std::string, std::string>> files) override;
    boost::asio::awaitable<Result<std::vector<FileDownloadResponse>>> download_files(
        std::vector<std::string> paths) override;
    boost::asio::awaitable<Result<FileUploadResponse>> upload_from(std::string path, std::uint64_t size,
                                                                   ByteSource source) override;
    boost::asio::awaitable<Result<FileDownloadResponse>> download_to(std::string path, ByteSink sink) override;

    // Ends the lease early (the destructor does the same).
    void release() noexcept;

    struct Slot;

private:
    SandboxLease(std::shared_ptr<Slot> slot, AcquireKind kind) noexcept;

    std::shared_ptr<Slot> slot_{};
    AcquireKind kind_{AcquireKind::cached};
};

struct ManagerStats {
    // This process.
    std::size_t threads{0};                 // threads with a bound sandbox
    std::size_t busy{0};                    // of those, with a lease alive
    std::size_t acquisitions_in_flight{0};  // threads whose acquisition has not finished
    std::uint64_t created{0}, reconnected{0}, adopted{0}, recreated{0}, lost{0};
    std::uint64_t failed{0};  // acquisitions that ended in an error other than sandbox_lost
    std::uint64_t reaped{0}, reaper_passes{0}, reaper_errors{0};
    // The cluster (all replicas); unset when the provider could not be asked.
    std::optional<ProviderStats> cluster{};
};

struct ShutdownOptions {
    // How long to wait for leases and acquisitions in flight to finish; then shutdown goes on
    // without them (drained = false).
    std::chrono::milliseconds graceful{std::chrono::seconds(10)};
    // Delete the sandboxes bound in this manager (for runs whose sandboxes must not outlive
    // the process). Acquisitions still in flight then delete what they make when they finish.
    bool delete_sandboxes{false};
};

struct ShutdownReport {
    bool drained{true};  // every lease and acquisition finished within `graceful`
    std::size_t deleted{0};
    std::vector<CleanupError> errors{};
};

// Overloads stand in for default arguments: a braced default in a co_await expression is
// destroyed twice by g++ 12.
class SandboxManager {
public:
    SandboxManager(boost::asio::any_io_executor executor, std::shared_ptr<SandboxProvider> provider,
                   SandboxManagerOptions options = {});
    ~SandboxManager();
    SandboxManager(const SandboxManager&) = delete;
    SandboxManager& operator=(const SandboxManager&) = delete;

    // The thread's sandbox: bound here already, found in the cluster, or created. Concurrent
    // calls for one thread share one acquisition; a failed acquisition is not remembered.
    boost::asio::awaitable<Result<SandboxLease>> get(std::string thread_id, GetOptions options);
    boost::asio::awaitable<Result<SandboxLease>> get(std::string thread_id) {
        return get(std::move(thread_id), GetOptions());
    }

    // Deletes the thread's sandbox; false when it had none. Leases still alive fail afterwards.
    // An acquisition of the thread in flight finishes first, so what it makes is deleted too.
    boost::asio::awaitable<Result<bool>> remove(std::string thread_id);

    // The thread's sandbox as the cluster has it (id = the thread id), without creating or
    // touching it; nullopt when the thread has none.
    boost::asio::awaitable<Result<std::optional<SandboxInfo>>> find(std::string thread_id);

    // This manager's scope's sandboxes in the cluster (all replicas), a page at a time; each
    // item's id is the thread id.
    boost::asio::awaitable<Result<SandboxPage>> list(ListSandboxesOptions options);
    boost::asio::awaitable<Result<SandboxPage>> list() { return list(ListSandboxesOptions()); }

    // One reaper pass now: expired and dead sandboxes go, except those busy here.
    boost::asio::awaitable<Result<CleanupResult>> cleanup();

    // The reaper: a pass every reap_interval until shutdown(), backing off through API errors;
    // it also keeps the provider's warm pool topped up (ensure_warm_pool at start and after each
    // pass). co_spawn it next to the server; it returns after shutdown().
    boost::asio::awaitable<void> run();

    // Stops the reaper and refuses new gets (errc::cancelled), waits for what is in flight,
    // and optionally deletes the sandboxes bound here.
    boost::asio::awaitable<ShutdownReport> shutdown(ShutdownOptions options);
    boost::asio::awaitable<ShutdownReport> shutdown() { return shutdown(ShutdownOptions()); }

    boost::asio::awaitable<ManagerStats> stats();

    // The sandbox id a thread maps to (pure: creates nothing).
    std::string sandbox_id_for(std::string_view thread_id) const;

    struct Impl;

private:
    std::shared_ptr<Impl> impl_;
};

}  // namespace kubesandbox
