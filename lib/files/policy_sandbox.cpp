// PolicySandbox: a FilePolicy in front of another sandbox's execute/upload/download.
#include <kubesandbox/file_policy.hpp>

#include "files/policy.hpp"

namespace kubesandbox {

namespace asio = boost::asio;

PolicySandbox::PolicySandbox(std::shared_ptr<Sandbox> inner, FilePolicy policy)
    : inner_(std::move(inner)), policy_(std::move(policy)) {}

namespace {

// The policy's answer to a command, audited: a refusal to return, or nullopt to run it.
std::optional<ExecuteResponse> refuse_command(const FilePolicy& policy, const std::string& command) {
    AuditEvent event{"execute", command, {}};
    if (auto denied = files::denied_command(policy, command)) {
        event.metadata.emplace_back("outcome", "denied");
        event.metadata.emplace_back("matched", *denied);
        files::audit(policy, std::move(event));
        return ExecuteResponse{"Error: command refused by policy (it contains '" + *denied + "')", 126, false};
    }
    event.metadata.emplace_back("outcome", "allowed");
    if (!files::audit(policy, std::move(event)))
        return ExecuteResponse{"Error: command refused: the audit record could not be written", 126, false};
    return std::nullopt;
}

}  // namespace

asio::awaitable<Result<ExecuteResponse>> PolicySandbox::execute(std::string command,
                                                                std::optional<std::chrono::seconds> timeout) {
    if (auto refused = refuse_command(policy_, command)) co_return std::move(*refused);
    co_return co_await inner_->execute(std::move(command), timeout);
}

// A refusal is the command's answer, as in execute(): its text goes to the sink as stderr.
asio::awaitable<Result<ExecuteResponse>> PolicySandbox::execute(std::string command,
                                                                std::optional<std::chrono::seconds> timeout,
                                                                OutputSink sink) {
    if (auto refused = refuse_command(policy_, command)) {
        if (!co_await sink(2, refused->output)) co_return fail(errc::cancelled, "the output sink stopped the command");
        refused->output.clear();
        co_return std::move(*refused);
    }
    co_return co_await inner_->execute(std::move(command), timeout, std::move(sink));
}

namespace {

// What the policy says of a write: its error, or where to write (the canonical path when the
// policy resolved one, so the write lands where the check looked, not where "link/../x" leads).
struct WriteDecision {
    std::optional<std::string> error{};
    std::string target{};
};

// Decides the writes of `files` (path, size), each audited.
asio::awaitable<Result<std::vector<WriteDecision>>> decide_writes(
    Sandbox& inner, const FilePolicy& policy, const std::vector<std::pair<std::string, std::uint64_t>>& files) {
    std::vector<std::optional<std::string>> canonical(files.size());
    if (policy.restricts_writes()) {
        std::vector<std::string> normal;
        std::vector<std::size_t> which;
        for (std::size_t i = 0; i < files.size(); ++i) {
            if (auto n = files::normalize_absolute(files[i].first)) {
                canonical[i] = *n;
                normal.push_back(*n);
                which.push_back(i);
            }
        }
        if (policy.resolve_symlinks && !normal.empty()) {
            auto resolved = co_await inner.execute(files::canonical_paths_command(true, normal), std::nullopt);
            if (!resolved) co_return tl::unexpected(resolved.error());
            auto parsed = files::parse_canonical_paths(resolved->output, normal.size());
            for (std::size_t k = 0; k < which.size(); ++k)
                canonical[which[k]] = parsed ? (*parsed)[k] : std::optional<std::string>();
        }
    }
    std::vector<WriteDecision> out(files.size());
    for (std::size_t i = 0; i < files.size(); ++i) {
        AuditEvent event{"upload", files[i].first, {{"bytes", std::to_string(files[i].second)}}};
        if (policy.restricts_writes()) {
            // A relative path is the sandbox's invalid_path; one that could not be resolved is refused.
            bool relative = files[i].first.empty() || files[i].first[0] != '/';
            if (relative) {
                out[i].error = file_error::invalid_path;
            } else if (!canonical[i] || !files::write_allowed(policy, *canonical[i])) {
                out[i].error = file_error::permission_denied;
            }
            if (canonical[i]) event.metadata.emplace_back("canonical", *canonical[i]);
        }
        event.metadata.emplace_back("outcome", out[i].error ? "denied" : "allowed");
        bool recorded = files::audit(policy, std::move(event));
        if (!out[i].error && !recorded) out[i].error = file_error::permission_denied;
        if (!out[i].error) out[i].target = canonical[i] ? *canonical[i] : files[i].first;
    }
    co_return out;
}

}  // namespace

asio::awaitable<Result<std::vector<FileUploadResponse>>> PolicySandbox::upload_files(
    std::vector<std::pair<std::string, std::string>> files) {
    std::vector<std::pair<std::string, std::uint64_t>> sizes;
    for (const auto& [path, content] : files) sizes.emplace_back(path, content.size());
    auto decided = co_await decide_writes(*inner_, policy_, sizes);
    if (!decided) co_return tl::unexpected(decided.error());
    std::vector<FileUploadResponse> out(files.size());
    std::vector<std::pair<std::string, std::string>> allowed;
    std::vector<std::size_t> slots;
    for (std::size_t i = 0; i < files.size(); ++i) {
        out[i].path = files[i].first;
        out[i].error = std::move((*decided)[i].error);
        if (out[i].error) continue;
        allowed.emplace_back(std::move((*decided)[i].target), std::move(files[i].second));
        slots.push_back(i);
    }
    if (!allowed.empty()) {
        auto inner = co_await inner_->upload_files(std::move(allowed));
        if (!inner) co_return tl::unexpected(inner.error());
        for (std::size_t k = 0; k < slots.size() && k < inner->size(); ++k) {
            std::string original = std::move(out[slots[k]].path);
            out[slots[k]] = std::move((*inner)[k]);
            out[slots[k]].path = std::move(original);
        }
    }
    co_return out;
}

asio::awaitable<Result<FileUploadResponse>> PolicySandbox::upload_from(std::string path, std::uint64_t size,
                                                                       ByteSource source) {
    std::vector<std::pair<std::string, std::uint64_t>> one{{path, size}};
    auto decided = co_await decide_writes(*inner_, policy_, one);
    if (!decided) co_return tl::unexpected(decided.error());
    if (decided->front().error) co_return FileUploadResponse{std::move(path), std::move(decided->front().error)};
    auto inner = co_await inner_->upload_from(std::move(decided->front().target), size, std::move(source));
    if (inner) inner->path = std::move(path);
    co_return inner;
}

asio::awaitable<Result<FileDownloadResponse>> PolicySandbox::download_to(std::string path, ByteSink sink) {
    if (!files::audit(policy_, AuditEvent{"download", path, {{"outcome", "allowed"}}}))
        co_return FileDownloadResponse{std::move(path), std::nullopt, file_error::permission_denied};
    co_return co_await inner_->download_to(std::move(path), std::move(sink));
}

asio::awaitable<Result<std::vector<FileDownloadResponse>>> PolicySandbox::download_files(
    std::vector<std::string> paths) {
    std::vector<FileDownloadResponse> out(paths.size());
    std::vector<std::string> allowed;
    std::vector<std::size_t> slots;
    for (std::size_t i = 0; i < paths.size(); ++i) {
        out[i].path = paths[i];
        if (!files::audit(policy_, AuditEvent{"download", paths[i], {{"outcome", "allowed"}}})) {
            out[i].error = file_error::permission_denied;
            continue;
        }
        allowed.push_back(paths[i]);
        slots.push_back(i);
    }
    if (!allowed.empty()) {
        auto inner = co_await inner_->download_files(std::move(allowed));
        if (!inner) co_return tl::unexpected(inner.error());
        for (std::size_t k = 0; k < slots.size() && k < inner->size(); ++k) out[slots[k]] = std::move((*inner)[k]);
    }
    co_return out;
}

}  // namespace kubesandbox
