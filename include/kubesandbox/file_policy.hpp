// A policy around a sandbox: where writes may go (allow and deny prefixes, checked on the
// canonical path with symlinked parents resolved in the sandbox), commands refused by substring
// (a speed bump for honest mistakes, not a security boundary: the sandbox is the boundary), and
// an audit hook called for every operation. FileOps applies it to its own operations;
// PolicySandbox applies it to execute/upload/download of any Sandbox.
#pragma once

#include <kubesandbox/logger.hpp>
#include <kubesandbox/sandbox.hpp>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace kubesandbox {

struct AuditEvent {
    std::string operation;  // execute, upload, download, ls, read, write, edit, remove, glob, grep
    std::string target;     // the path (as the caller gave it) or the command
    // outcome = allowed | denied | invalid, and per operation facts (bytes, canonical path, ...)
    std::vector<std::pair<std::string, std::string>> metadata;
};

// An error means the audit record could not be written.
using AuditHook = std::function<Result<void>(const AuditEvent&)>;

struct FilePolicy {
    std::vector<std::string> allow_prefixes;  // writes only below these (empty = anywhere not denied)
    std::vector<std::string> deny_prefixes;   // never below these; wins over allow
    std::vector<std::string> deny_commands;   // execute refused when the command contains one
    bool resolve_symlinks{true};              // canonical path asked of the sandbox before a checked write
    AuditHook audit;
    bool fail_closed{false};  // an audit failure refuses the operation (default: it proceeds)
    Logger logger{};          // where audit failures are reported

    bool restricts_writes() const { return !allow_prefixes.empty() || !deny_prefixes.empty(); }
};

// Applies a FilePolicy to another sandbox's execute/upload/download. A refused command returns
// exit code 126 and an output saying why; a refused upload or download gets permission_denied.
class PolicySandbox final : public Sandbox {
public:
    PolicySandbox(std::shared_ptr<Sandbox> inner, FilePolicy policy);

    const std::string& id() const override { return inner_->id(); }
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

private:
    std::shared_ptr<Sandbox> inner_;
    FilePolicy policy_;
};

}  // namespace kubesandbox
