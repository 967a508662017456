// SandboxLease: a thread's sandbox for one turn. Each operation keeps the slot busy while it
// runs and notes its use; an operation that finds the sandbox gone marks it lost, so the next
// get() looks again instead of handing out a dead sandbox.
#include "manager/slot.hpp"

namespace kubesandbox {

namespace asio = boost::asio;

namespace {

// Held around each operation: a lease's slot is busy for the operation even if the lease is
// moved from or released meanwhile.
struct BusyGuard {
    std::shared_ptr<SandboxLease::Slot> slot;
    explicit BusyGuard(std::shared_ptr<SandboxLease::Slot> s) : slot(std::move(s)) {
        slot->acquire_busy();
        slot->record_use();
    }
    BusyGuard(const BusyGuard&) = delete;
    BusyGuard& operator=(const BusyGuard&) = delete;
    ~BusyGuard() {
        slot->touch();
        slot->release_busy();
    }
};

Error no_sandbox() { return Error{errc::invalid_argument, "the lease holds no sandbox"}; }

template <class T>
void note_outcome(SandboxLease::Slot& slot, const Result<T>& r) {
    if (!r && (r.error().is(errc::not_found) || r.error().is(errc::pod_failed))) slot.lost.store(true);
}

}  // namespace

SandboxLease::SandboxLease(std::shared_ptr<Slot> slot, AcquireKind kind) noexcept
    : slot_(std::move(slot)), kind_(kind) {
    if (slot_) slot_->acquire_busy();
}

SandboxLease::SandboxLease(SandboxLease&& other) noexcept
    : slot_(std::exchange(other.slot_, nullptr)), kind_(other.kind_) {}

SandboxLease& SandboxLease::operator=(SandboxLease&& other) noexcept {
    if (this != &other) {
        release();
        slot_ = std::exchange(other.slot_, nullptr);
        kind_ = other.kind_;
    }
    return *this;
}

SandboxLease::~SandboxLease() { release(); }

void SandboxLease::release() noexcept {
    if (!slot_) return;
    slot_->touch();
    slot_->release_busy();
    slot_.reset();
}

const std::string& SandboxLease::thread_id() const {
    static const std::string none;
    return slot_ ? slot_->thread_id : none;
}

const std::string& SandboxLease::id() const {
    static const std::string none;
    return slot_ ? slot_->sandbox->id() : none;
}

asio::awaitable<Result<ExecuteResponse>> SandboxLease::execute(std::string command,
                                                               std::optional<std::chrono::seconds> timeout) {
    if (!slot_) co_return fail(no_sandbox());
    BusyGuard busy(slot_);
    auto r = co_await busy.slot->sandbox->execute(std::move(command), timeout);
    note_outcome(*busy.slot, r);
    co_return r;
}

asio::awaitable<Result<ExecuteResponse>> SandboxLease::execute(std::string command,
                                                               std::optional<std::chrono::seconds> timeout,
                                                               OutputSink sink) {
    if (!slot_) co_return fail(no_sandbox());
    BusyGuard busy(slot_);
    auto r = co_await busy.slot->sandbox->execute(std::move(command), timeout, std::move(sink));
    note_outcome(*busy.slot, r);
    co_return r;
}

asio::awaitable<Result<std::vector<FileUploadResponse>>> SandboxLease::upload_files(
    std::vector<std::pair<std::string, std::string>> files) {
    if (!slot_) co_return fail(no_sandbox());
    BusyGuard busy(slot_);
    auto r = co_await busy.slot->sandbox->upload_files(std::move(files));
    note_outcome(*busy.slot, r);
    co_return r;
}

asio::awaitable<Result<std::vector<FileDownloadResponse>>> SandboxLease::download_files(
    std::vector<std::string> paths) {
    if (!slot_) co_return fail(no_sandbox());
    BusyGuard busy(slot_);
    auto r = co_await busy.slot->sandbox->download_files(std::move(paths));
    note_outcome(*busy.slot, r);
    co_return r;
}

asio::awaitable<Result<FileUploadResponse>> SandboxLease::upload_from(std::string path, std::uint64_t size,
                                                                      ByteSource source) {
    if (!slot_) co_return fail(no_sandbox());
    BusyGuard busy(slot_);
    auto r = co_await busy.slot->sandbox->upload_from(std::move(path), size, std::move(source));
    note_outcome(*busy.slot, r);
    co_return r;
}

asio::awaitable<Result<FileDownloadResponse>> SandboxLease::download_to(std::string path, ByteSink sink) {
    if (!slot_) co_return fail(no_sandbox());
    BusyGuard busy(slot_);
    auto r = co_await busy.slot->sandbox->download_to(std::move(path), std::move(sink));
    note_outcome(*busy.slot, r);
    co_return r;
}

}  // namespace kubesandbox
