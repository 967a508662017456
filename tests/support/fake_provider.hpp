// An in-memory SandboxProvider for testing what is written against the interface (the
// SandboxManager): sandboxes are map entries, acquisitions can be held at a gate or made to
// fail, and every call is counted. Thread-safe (a mutex), so it serves multi-threaded tests.
#pragma once

#include <kubesandbox/sandbox_provider.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

namespace kubesandbox::test {

class FakeProvider final : public SandboxProvider {
public:
    struct Record {
        std::string instance;
        std::map<std::string, std::string> labels;
        std::string last_command;
        bool expired = false;  // cleanup() reaps it (asking may_delete)
    };

    // The shared world: tests reach in to delete, expire or inspect sandboxes.
    struct World {
        std::mutex mutex;
        std::map<std::string, Record> sandboxes;  // by sandbox id
        std::atomic<int> acquisitions{0};
        std::atomic<int> fail_next_acquisitions{0};
        std::atomic<int> fail_next_cleanups{0};
        std::atomic<bool> gate_closed{false};  // acquisitions wait while closed
        std::atomic<bool> instant{false};      // acquisitions answer without suspending
        std::set<std::string> gated_ids;       // only these wait (empty: all)
        std::atomic<int> next_instance{1};
        std::atomic<int> deletes{0};
    };

    explicit FakeProvider(std::shared_ptr<World> world = std::make_shared<World>()) : world_(std::move(world)) {}

    std::shared_ptr<World> world() const { return world_; }

    boost::asio::awaitable<Result<Acquisition>> acquire(GetOrCreateOptions options) override {
        namespace asio = boost::asio;
        std::string id = options.sandbox_id.value_or("random-" + std::to_string(world_->next_instance++));
        ++world_->acquisitions;
        if (!world_->instant.load()) {
            asio::steady_timer wait(co_await asio::this_coro::executor);
            while (world_->gate_closed.load() && gated(id)) {
                wait.expires_after(std::chrono::milliseconds(2));
                co_await wait.async_wait(asio::as_tuple(asio::use_awaitable));
            }
            // A network round trip's worth of suspension, so concurrent calls overlap.
            wait.expires_after(std::chrono::milliseconds(1));
            co_await wait.async_wait(asio::as_tuple(asio::use_awaitable));
        }
        if (world_->fail_next_acquisitions.load() > 0) {
            --world_->fail_next_acquisitions;
            co_return fail(errc::internal_error, "injected acquisition failure");
        }
        std::lock_guard lock(world_->mutex);
        Acquisition a;
        auto it = world_->sandboxes.find(id);
        if (it != world_->sandboxes.end()) {
            a.origin = SandboxOrigin::existing;
        } else if (!options.create_if_missing) {
            co_return fail(errc::not_found, "sandbox " + id + " not found");
        } else {
            Record r;
            r.instance = "uid-" + std::to_string(world_->next_instance++);
            r.labels = options.labels;
            it = world_->sandboxes.emplace(id, std::move(r)).first;
            a.origin = SandboxOrigin::created;
        }
        a.instance = it->second.instance;
        a.sandbox = std::make_unique<FakeSandbox>(world_, id, a.instance);
        co_return a;
    }

    boost::asio::awaitable<Result<SandboxInfo>> describe(std::string id) override {
        std::lock_guard lock(world_->mutex);
        auto it = world_->sandboxes.find(id);
        if (it == world_->sandboxes.end()) co_return fail(errc::not_found, "sandbox " + id + " not found");
        SandboxInfo info;
        info.id = id;
        info.labels = it->second.labels;
        info.status = "running";
        info.instance = it->second.instance;
        co_return info;
    }

    boost::asio::awaitable<Result<SandboxPage>> list(ListSandboxesOptions options) override {
        std::lock_guard lock(world_->mutex);
        SandboxPage page;
        for (const auto& [id, r] : world_->sandboxes) {
            bool match = true;
            for (const auto& [k, v] : options.labels) {
                auto l = r.labels.find(k);
                if (l == r.labels.end() || l->second != v) match = false;
            }
            if (!match) continue;
            SandboxInfo info;
            info.id = id;
            info.labels = r.labels;
            info.status = "running";
            page.items.push_back(std::move(info));
        }
        co_return page;
    }

    boost::asio::awaitable<Result<bool>> delete_sandbox(std::string id) override {
        ++world_->deletes;
        std::lock_guard lock(world_->mutex);
        co_return world_->sandboxes.erase(id) > 0;
    }

    boost::asio::awaitable<Result<CleanupResult>> cleanup(CleanupOptions options) override {
        if (world_->fail_next_cleanups.load() > 0) {
            --world_->fail_next_cleanups;
            co_return fail(errc::internal_error, "injected cleanup failure");
        }
        std::lock_guard lock(world_->mutex);
        CleanupResult result;
        for (auto it = world_->sandboxes.begin(); it != world_->sandboxes.end();) {
            SandboxInfo info;
            info.id = it->first;
            if (!it->second.expired || (options.may_delete && !options.may_delete(info))) {
                ++result.kept;
                ++it;
                continue;
            }
            result.deleted.push_back(it->first);
            it = world_->sandboxes.erase(it);
        }
        co_return result;
    }

    boost::asio::awaitable<Result<PoolStatus>> pool_status() override { co_return PoolStatus{}; }

    boost::asio::awaitable<Result<ProviderStats>> stats() override {
        std::lock_guard lock(world_->mutex);
        ProviderStats s;
        s.total = s.running = static_cast<int>(world_->sandboxes.size());
        co_return s;
    }

    void record_activity(const std::string&) override {}

private:
    class FakeSandbox final : public Sandbox {
    public:
        FakeSandbox(std::shared_ptr<World> w, std::string id, std::string instance)
            : world_(std::move(w)), id_(std::move(id)), instance_(std::move(instance)) {}
        const std::string& id() const override { return id_; }

        // "sleep-ms N" suspends for N ms; anything else answers "ran: <command>". A sandbox
        // deleted or replaced meanwhile answers not_found.
        boost::asio::awaitable<Result<ExecuteResponse>> execute(std::string command,
                                                                std::optional<std::chrono::seconds>) override {
            namespace asio = boost::asio;
            if (command.rfind("sleep-ms ", 0) == 0) {
                asio::steady_timer t(co_await asio::this_coro::executor);
                t.expires_after(std::chrono::milliseconds(std::stoi(command.substr(9))));
                co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
            }
            std::lock_guard lock(world_->mutex);
            auto it = world_->sandboxes.find(id_);
            if (it == world_->sandboxes.end() || it->second.instance != instance_)
                co_return fail(errc::not_found, "sandbox " + id_ + " is gone");
            it->second.last_command = command;
            co_return ExecuteResponse{"ran: " + command, 0, false};
        }
        boost::asio::awaitable<Result<std::vector<FileUploadResponse>>> upload_files(
            std::vector<std::pair<std::string, std::string>> files) override {
            std::vector<FileUploadResponse> out;
            for (auto& f : files) out.push_back(FileUploadResponse{f.first, std::nullopt});
            co_return out;
        }
        boost::asio::awaitable<Result<std::vector<FileDownloadResponse>>> download_files(
            std::vector<std::string> paths) override {
            std::vector<FileDownloadResponse> out;
            for (auto& p : paths) out.push_back(FileDownloadResponse{p, std::nullopt, file_error::file_not_found});
            co_return out;
        }

    private:
        std::shared_ptr<World> world_;
        std::string id_, instance_;
    };

    bool gated(const std::string& id) {
        std::lock_guard lock(world_->mutex);
        return world_->gated_ids.empty() || world_->gated_ids.count(id) > 0;
    }

    std::shared_ptr<World> world_;
};

}  // namespace kubesandbox::test
