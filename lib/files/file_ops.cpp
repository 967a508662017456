// The file operations' I/O: one execute (or one transfer) per operation, everything else in the
// sans-IO cores beside this file. With a virtual root, scripts get real paths and parsers the
// caller's (virtual) ones, so every path in a result and every message is virtual.
#include <kubesandbox/file_ops.hpp>

#include "files/edit_core.hpp"
#include "files/listing.hpp"
#include "files/policy.hpp"
#include "files/read_page.hpp"

#include <algorithm>
#include <variant>

namespace kubesandbox {

namespace asio = boost::asio;

namespace {

constexpr std::chrono::seconds grep_timeout{35};
constexpr std::chrono::seconds glob_timeout{35};

Result<void> check_argument(std::string_view what, std::string_view value) {
    if (value.find('\0') != std::string_view::npos)
        return fail(errc::invalid_argument, std::string(what) + " contains a NUL byte");
    return {};
}

bool timed_out(const ExecuteResponse& r) {
    return r.exit_code == 124 && r.output.rfind("Command timed out after ", 0) == 0;
}

std::string timeout_text(std::string_view op, std::chrono::seconds t) {
    return "Error: " + std::string(op) + " timed out after " + std::to_string(t.count()) +
           "s. Try a more specific pattern or a narrower path.";
}

}  // namespace

// real: what the sandbox sees; shown: what the caller gave (and sees in results).
struct FileOps::Target {
    std::string real;
    std::string shown;
};

struct FileOps::Internals {
    // The real path, or the file-level error code (invalid_path, permission_denied) after auditing.
    static asio::awaitable<std::variant<Target, std::string>> resolve(FileOps& self, const char* op, std::string path,
                                                                      bool writes) {
        const FilePolicy& policy = self.options_.policy;
        Target t{path, path};
        AuditEvent event{op, path, {}};
        auto refuse = [&](const char* code) -> std::variant<Target, std::string> {
            event.metadata.emplace_back("outcome", code == std::string("invalid_path") ? "invalid" : "denied");
            files::audit(policy, event);
            return std::string(code);
        };
        if (!self.options_.root_dir.empty()) {
            auto real = files::virtual_to_real(self.options_.root_dir, path);
            if (!real) co_return refuse(file_error::invalid_path);
            t.real = std::move(*real);
        }
        const bool rooted = !self.options_.root_dir.empty();
        if (writes && (policy.restricts_writes() || rooted)) {
            auto canonical = files::normalize_absolute(t.real);
            if (!canonical) co_return refuse(file_error::invalid_path);
            const bool removes = std::string_view(op) == "remove";
            if (policy.resolve_symlinks) {
                // rm removes a symlink itself: resolve only its folders. A write follows it.
                std::vector<std::string> paths{*canonical};
                if (rooted) paths.push_back(*files::normalize_absolute(self.options_.root_dir));
                auto resolved =
                    co_await self.sandbox_.execute(files::canonical_paths_command(!removes, paths), std::nullopt);
                auto parsed = resolved ? files::parse_canonical_paths(resolved->output, paths.size()) : std::nullopt;
                if (!parsed || !parsed->front()) co_return refuse(file_error::permission_denied);  // cannot tell
                canonical = *parsed->front();
                // A symlink below the root may lead out of it: the resolved path must stay inside.
                if (rooted && (!parsed->back() || !files::path_covers(*parsed->back(), *canonical)))
                    co_return refuse(file_error::invalid_path);
            }
            event.metadata.emplace_back("canonical", *canonical);
            bool allowed =
                removes ? files::remove_allowed(policy, *canonical) : files::write_allowed(policy, *canonical);
            if (!allowed) co_return refuse(file_error::permission_denied);
            // Write where the check looked: "link/../x" would otherwise resolve differently in the sandbox.
            t.real = *canonical;
        }
        event.metadata.emplace_back("outcome", "allowed");
        if (t.real != path) event.metadata.emplace_back("real_path", t.real);
        if (!files::audit(policy, std::move(event))) co_return std::string(file_error::permission_denied);
        co_return t;
    }

    // Default search roots: "" means "/" for glob (and the virtual "/" under a root) or "." for grep.
    static std::string default_path(const FileOps& self, std::string path, const char* plain_default) {
        if (!path.empty()) return path;
        return self.options_.root_dir.empty() ? std::string(plain_default) : std::string("/");
    }
};

asio::awaitable<Result<LsResult>> FileOps::ls(std::string path) {
    if (auto ok = check_argument("path", path); !ok) co_return tl::unexpected(ok.error());
    auto target = co_await Internals::resolve(*this, "ls", path, false);
    if (auto* code = std::get_if<std::string>(&target)) co_return LsResult{"Path '" + path + "': " + *code, {}};
    auto& t = std::get<Target>(target);
    auto response = co_await sandbox_.execute(files::ls_command(t.real), std::nullopt);
    if (!response) co_return tl::unexpected(response.error());
    co_return files::parse_ls_output(t.shown, response->output);
}

asio::awaitable<Result<ReadResult>> FileOps::read(std::string path, long long offset, long long limit) {
    if (auto ok = check_argument("path", path); !ok) co_return tl::unexpected(ok.error());
    offset = std::clamp(offset, 0LL, files::max_read_offset);
    limit = std::clamp(limit, 0LL, files::max_read_offset);
    ReadResult result;
    auto target = co_await Internals::resolve(*this, "read", path, false);
    if (auto* code = std::get_if<std::string>(&target)) {
        result.error = "File '" + path + "': " + *code;
        co_return result;
    }
    auto& t = std::get<Target>(target);
    auto kind = files::file_kind(t.real);
    auto response = co_await sandbox_.execute(files::read_command(t.real, kind, offset, limit), std::nullopt);
    if (!response) co_return tl::unexpected(response.error());
    auto parsed = files::parse_read_output(response->output, response->truncated);
    if (parsed.large) {
        // Larger than a whole read: its size, its first bytes and the page, in a second call.
        response = co_await sandbox_.execute(files::read_command(t.real, kind, offset, limit, true), std::nullopt);
        if (!response) co_return tl::unexpected(response.error());
        parsed = files::parse_read_output(response->output, response->truncated);
        if (parsed.large) parsed.error = "unexpected server response: the file's size is missing";
    }
    if (parsed.error) {
        result.error = "File '" + path + "': " + *parsed.error;
    } else if (parsed.too_large_binary) {
        result.error = "File '" + path + "': Binary file exceeds maximum preview size of " +
                       std::to_string(file_limits::max_output_bytes) + " bytes";
    } else {
        result = files::read_page(parsed.source, kind, offset, limit);
        if (result.error) result.error = "File '" + path + "': " + *result.error;
    }
    co_return result;
}

asio::awaitable<Result<WriteResult>> FileOps::write(std::string path, std::string content) {
    if (auto ok = check_argument("path", path); !ok) co_return tl::unexpected(ok.error());
    WriteResult result;
    auto target = co_await Internals::resolve(*this, "write", path, true);
    if (auto* code = std::get_if<std::string>(&target)) {
        result.error = "Failed to write file '" + path + "': " + *code;
        co_return result;
    }
    std::vector<std::pair<std::string, std::string>> files;
    files.emplace_back(std::get<Target>(target).real, std::move(content));
    auto responses = co_await sandbox_.upload_files(std::move(files));
    if (!responses) co_return tl::unexpected(responses.error());
    if (responses->empty()) result.error = "Failed to write file '" + path + "': upload returned no response";
    else if (responses->front().error)
        result.error = "Failed to write file '" + path + "': " + *responses->front().error;
    else result.path = path;
    co_return result;
}

asio::awaitable<Result<EditResult>> FileOps::edit(std::string path, std::string old_string, std::string new_string,
                                                  bool replace_all) {
    if (auto ok = check_argument("path", path); !ok) co_return tl::unexpected(ok.error());
    EditResult result;
    auto target = co_await Internals::resolve(*this, "edit", path, true);
    if (auto* code = std::get_if<std::string>(&target)) {
        result.error = files::edit_error_text(*code, path, old_string);
        co_return result;
    }
    const std::string real = std::get<Target>(target).real;
    std::vector<std::string> paths{real};
    auto downloaded = co_await sandbox_.download_files(std::move(paths));
    if (!downloaded) co_return tl::unexpected(downloaded.error());
    if (downloaded->empty()) {
        result.error = "Error editing file '" + path + "': download returned no response";
        co_return result;
    }
    auto& file = downloaded->front();
    if (file.error || !file.content) {
        std::string code = file.error.value_or("unknown error");
        if (code == file_error::is_directory) code = "not_a_file";
        result.error = files::edit_error_text(code, path, old_string);
        co_return result;
    }
    auto outcome = files::apply_edit(*file.content, old_string, new_string, replace_all);
    if (outcome.code) {
        result.error = files::edit_error_text(*outcome.code, path, old_string);
        co_return result;
    }
    std::vector<std::pair<std::string, std::string>> upload;
    upload.emplace_back(real, std::move(outcome.content));
    auto uploaded = co_await sandbox_.upload_files(std::move(upload));
    if (!uploaded) co_return tl::unexpected(uploaded.error());
    if (uploaded->empty() || uploaded->front().error) {
        std::string why = uploaded->empty() ? "upload returned no response" : *uploaded->front().error;
        result.error = "Error editing file '" + path + "': " + why;
        co_return result;
    }
    result.path = path;
    result.occurrences = outcome.count;
    co_return result;
}

asio::awaitable<Result<RemoveResult>> FileOps::remove(std::string path) {
    if (auto ok = check_argument("path", path); !ok) co_return tl::unexpected(ok.error());
    auto target = co_await Internals::resolve(*this, "remove", path, true);
    if (auto* code = std::get_if<std::string>(&target))
        co_return RemoveResult{"Error deleting file '" + path + "': " + *code, {}};
    auto response = co_await sandbox_.execute(files::remove_command(std::get<Target>(target).real), std::nullopt);
    if (!response) co_return tl::unexpected(response.error());
    co_return files::parse_remove_output(path, response->output, response->exit_code);
}

asio::awaitable<Result<GrepResult>> FileOps::grep(std::string pattern, std::string path, std::string glob,
                                                  std::optional<std::size_t> max_count) {
    for (auto [what, value] :
         {std::pair<const char*, std::string_view>{"pattern", pattern}, {"path", path}, {"glob", glob}})
        if (auto ok = check_argument(what, value); !ok) co_return tl::unexpected(ok.error());
    path = Internals::default_path(*this, std::move(path), ".");
    GrepResult result;
    auto target = co_await Internals::resolve(*this, "grep", path, false);
    if (auto* code = std::get_if<std::string>(&target)) {
        result.error = "Path '" + path + "': " + *code;
        co_return result;
    }
    // No early stop in the sandbox: lines of binary files are dropped only afterwards, and the
    // first max_count are taken in name order here.
    auto command =
        files::grep_command(std::get<Target>(target).real, pattern, std::nullopt, files::grep_prefilter(glob));
    auto response = co_await sandbox_.execute(std::move(command), grep_timeout);
    if (!response) co_return tl::unexpected(response.error());
    if (timed_out(*response)) {
        result.error = timeout_text("grep", grep_timeout);
        co_return result;
    }
    co_return files::grep_result(path, glob, max_count, response->output, response->truncated);
}

asio::awaitable<Result<GlobResult>> FileOps::glob(std::string pattern, std::string path) {
    for (auto [what, value] : {std::pair<const char*, std::string_view>{"pattern", pattern}, {"path", path}})
        if (auto ok = check_argument(what, value); !ok) co_return tl::unexpected(ok.error());
    path = Internals::default_path(*this, std::move(path), "/");
    GlobResult result;
    auto target = co_await Internals::resolve(*this, "glob", path, false);
    if (auto* code = std::get_if<std::string>(&target)) {
        result.error = "Path '" + path + "': " + *code;
        co_return result;
    }
    auto response = co_await sandbox_.execute(
        files::glob_command(std::get<Target>(target).real, files::glob_prefilter(pattern)), glob_timeout);
    if (!response) co_return tl::unexpected(response.error());
    if (timed_out(*response)) {
        result.error = timeout_text("glob", glob_timeout);
        co_return result;
    }
    co_return files::glob_result(path, pattern, response->output, response->truncated);
}

}  // namespace kubesandbox
