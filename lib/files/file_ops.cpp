// The file operations' I/O: one execute (or one transfer) per operation, everything else in the
// sans-IO cores beside this file.
#include <kubesandbox/file_ops.hpp>

#include "files/edit_core.hpp"
#include "files/listing.hpp"
#include "files/read_page.hpp"

#include <algorithm>

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

// A grep pre-filter that is exactly the final name filter lets the sandbox stop at max_count.
bool prefilter_is_exact(std::string_view glob) {
    return glob.empty() ||
           (glob.find('/') == std::string_view::npos && glob.find_first_of("?[\\") == std::string_view::npos);
}

}  // namespace

asio::awaitable<Result<LsResult>> FileOps::ls(std::string path) {
    if (auto ok = check_argument("path", path); !ok) co_return tl::unexpected(ok.error());
    auto response = co_await sandbox_.execute(files::ls_command(path), std::nullopt);
    if (!response) co_return tl::unexpected(response.error());
    co_return files::parse_ls_output(path, response->output);
}

asio::awaitable<Result<ReadResult>> FileOps::read(std::string path, long long offset, long long limit) {
    if (auto ok = check_argument("path", path); !ok) co_return tl::unexpected(ok.error());
    offset = std::max(offset, 0LL);
    limit = std::max(limit, 0LL);
    auto kind = files::file_kind(path);
    auto response = co_await sandbox_.execute(files::read_command(path, kind, offset, limit), std::nullopt);
    if (!response) co_return tl::unexpected(response.error());
    auto parsed = files::parse_read_output(response->output, response->truncated);
    ReadResult result;
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
    std::vector<std::pair<std::string, std::string>> files;
    files.emplace_back(path, std::move(content));
    auto responses = co_await sandbox_.upload_files(std::move(files));
    if (!responses) co_return tl::unexpected(responses.error());
    WriteResult result;
    if (responses->empty()) result.error = "Failed to write file '" + path + "': upload returned no response";
    else if (responses->front().error)
        result.error = "Failed to write file '" + path + "': " + *responses->front().error;
    else result.path = path;
    co_return result;
}

asio::awaitable<Result<EditResult>> FileOps::edit(std::string path, std::string old_string, std::string new_string,
                                                  bool replace_all) {
    if (auto ok = check_argument("path", path); !ok) co_return tl::unexpected(ok.error());
    std::vector<std::string> paths{path};
    auto downloaded = co_await sandbox_.download_files(std::move(paths));
    if (!downloaded) co_return tl::unexpected(downloaded.error());
    EditResult result;
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
    upload.emplace_back(path, std::move(outcome.content));
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
    auto response = co_await sandbox_.execute(files::remove_command(path), std::nullopt);
    if (!response) co_return tl::unexpected(response.error());
    co_return files::parse_remove_output(path, response->output, response->exit_code);
}

asio::awaitable<Result<GrepResult>> FileOps::grep(std::string pattern, std::string path, std::string glob,
                                                  std::optional<std::size_t> max_count) {
    for (auto [what, value] :
         {std::pair<const char*, std::string_view>{"pattern", pattern}, {"path", path}, {"glob", glob}})
        if (auto ok = check_argument(what, value); !ok) co_return tl::unexpected(ok.error());
    if (path.empty()) path = ".";
    auto command = files::grep_command(path, pattern, prefilter_is_exact(glob) ? max_count : std::nullopt,
                                       files::grep_prefilter(glob));
    auto response = co_await sandbox_.execute(std::move(command), grep_timeout);
    if (!response) co_return tl::unexpected(response.error());
    if (timed_out(*response)) {
        GrepResult result;
        result.error = timeout_text("grep", grep_timeout);
        co_return result;
    }
    co_return files::grep_result(path, glob, max_count, response->output, response->truncated);
}

asio::awaitable<Result<GlobResult>> FileOps::glob(std::string pattern, std::string path) {
    for (auto [what, value] : {std::pair<const char*, std::string_view>{"pattern", pattern}, {"path", path}})
        if (auto ok = check_argument(what, value); !ok) co_return tl::unexpected(ok.error());
    if (path.empty()) path = "/";
    auto response = co_await sandbox_.execute(files::glob_command(path, files::glob_prefilter(pattern)), glob_timeout);
    if (!response) co_return tl::unexpected(response.error());
    if (timed_out(*response)) {
        GlobResult result;
        result.error = timeout_text("glob", glob_timeout);
        co_return result;
    }
    co_return files::glob_result(path, pattern, response->output, response->truncated);
}

}  // namespace kubesandbox
