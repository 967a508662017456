// PodExecSandbox's file transfers: whole files through shell sessions or execs of their own,
// several at once, and single files streamed.
#include <kubesandbox/pod_exec_sandbox.hpp>

#include "files/text.hpp"
#include "sandbox/byte_streams.hpp"
#include "sandbox/pod_exec_internals.hpp"
#include "sandbox/pod_exec_scripts.hpp"
#include "sandbox/transfer_status.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <atomic>
#include <memory>

namespace kubesandbox {

namespace asio = boost::asio;

namespace {

// The per-file error of a transfer that ran: none, one of the four literals, or a description
// (DeepAgents allows a backend-specific string when no literal applies).
std::optional<std::string> transfer_error(const kube::ExecOutcome& outcome) {
    if (outcome.timed_out) return std::string("transfer timed out");
    if (!outcome.exit_code) return std::string("transfer failed: no exit status from the sandbox");
    return kubesandbox::transfer_error(*outcome.exit_code, outcome.stderr_data);
}

// Files up to this size go through a shell session; a larger one takes an exec of its own, whose
// input and output paths are made for size (a download finds out by reading one byte more).
constexpr std::size_t max_session_transfer = 1024 * 1024;
// Content up to this size quoted (and without NUL) goes as an argument: the shell's printf writes
// it, where input needs `head`, a program (~0.5 ms under dash). The driver reads a request a byte
// per system call (~1 us a byte under busybox), so larger content goes as input.
constexpr std::size_t max_argument_upload = 1024;

bool is_absolute_clean_path(std::string_view p) {
    return !p.empty() && p.front() == '/' && p.find('\0') == std::string_view::npos;
}

// Runs `work(i)` for i in [0, n), at most `parallel` at once. The waiting happens in a
// coroutine of its own, so the caller's cancellation state is left as it was. When the caller
// is cancelled, no further item starts (the result is true), and those in flight are still
// waited for: they reference `work`, and through it the caller's frame.
template <typename Work>
asio::awaitable<bool> for_each_bounded(std::size_t n, std::size_t parallel, Work& work) {
    if (n == 0) co_return false;
    auto executor = co_await asio::this_coro::executor;
    auto body = [&work, n, parallel, executor]() -> asio::awaitable<bool> {
        co_await asio::this_coro::throw_if_cancelled(false);
        const std::size_t workers = std::max<std::size_t>(1, std::min(parallel, n));
        auto next = std::make_shared<std::atomic<std::size_t>>(0);
        auto remaining = std::make_shared<std::atomic<std::size_t>>(workers);
        auto stop = std::make_shared<std::atomic<bool>>(false);
        auto done = std::make_shared<asio::steady_timer>(executor, asio::steady_timer::time_point::max());
        for (std::size_t w = 0; w < workers; ++w) {
            auto worker = [next, remaining, stop, done, n, &work]() -> asio::awaitable<void> {
                for (std::size_t i = (*next)++; i < n && !*stop; i = (*next)++) co_await work(i);
                if (--*remaining == 0) asio::post(done->get_executor(), [done] { done->cancel(); });
            };
            asio::co_spawn(executor, worker(), asio::detached);
        }
        bool cancelled = false;
        while (remaining->load() != 0) {
            co_await done->async_wait(asio::as_tuple(asio::use_awaitable));
            asio::cancellation_state state = co_await asio::this_coro::cancellation_state;
            if (state.cancelled() != asio::cancellation_type::none) {
                cancelled = true;
                *stop = true;
                co_await asio::this_coro::reset_cancellation_state();
            }
        }
        co_return cancelled;
    };
    co_return co_await asio::co_spawn(executor, std::move(body), asio::use_awaitable);
}

}  // namespace

asio::awaitable<Result<std::vector<FileUploadResponse>>> PodExecSandbox::upload_files(
    std::vector<std::pair<std::string, std::string>> files) {
    std::vector<FileUploadResponse> out(files.size());
    std::optional<Error> fatal;
    auto one = [&](std::size_t i) -> asio::awaitable<void> {
        auto& [path, content] = files[i];
        out[i].path = path;
        if (!is_absolute_clean_path(path)) {
            out[i].error = file_error::invalid_path;
            co_return;
        }
        if (content.size() > options_.max_file_bytes) {
            out[i].error = file_error::file_too_large;
            co_return;
        }
        if (fatal) {
            out[i].error = "not attempted: " + fatal->message;
            co_return;
        }
        std::optional<Result<kube::ExecOutcome>> in_session;
        if (content.size() <= max_session_transfer) {
            std::string command = "set -- " + files::shell_quote(path) + " " + std::to_string(content.size());
            std::optional<std::string_view> input;
            std::string quoted;
            if (content.size() < max_argument_upload && content.find('\0') == std::string::npos &&
                (quoted = files::shell_quote(content)).size() <= max_argument_upload) {
                command.append(" ").append(quoted);
            } else {
                input = content;
            }
            command.append("\n").append(sandbox::upload_script);
            in_session = co_await Internals::transfer_in_session(*this, command, 64 * 1024, input);
        }
        Result<kube::ExecOutcome> outcome;
        if (in_session) {
            outcome = std::move(*in_session);
        } else {
            std::vector<std::string> argv{options_.shell, "-c", sandbox::upload_script,
                                          "sh",           path, std::to_string(content.size())};
            outcome = co_await Internals::transfer(*this, std::move(argv), std::move(content), true, 64 * 1024);
        }
        if (!outcome) {
            if (outcome.error().is(errc::not_found)) fatal = outcome.error();
            out[i].error = "transfer failed: " + outcome.error().message;
            co_return;
        }
        out[i].error = transfer_error(*outcome);
    };
    bool cancelled = co_await for_each_bounded(files.size(), options_.max_parallel_transfers, one);
    if (options_.on_activity) options_.on_activity();
    // The sandbox is gone: nothing written survives, so the whole call failed.
    if (fatal) co_return fail(std::move(*fatal));
    if (cancelled) co_return fail(errc::cancelled, "upload_files was cancelled; files not yet started were not sent");
    co_return out;
}

asio::awaitable<Result<std::vector<FileDownloadResponse>>> PodExecSandbox::download_files(
    std::vector<std::string> paths) {
    std::vector<FileDownloadResponse> out(paths.size());
    std::optional<Error> fatal;
    auto one = [&](std::size_t i) -> asio::awaitable<void> {
        const std::string& path = paths[i];
        out[i].path = path;
        if (!is_absolute_clean_path(path)) {
            out[i].error = file_error::invalid_path;
            co_return;
        }
        if (fatal) {
            out[i].error = "not attempted: " + fatal->message;
            co_return;
        }
        // Through a session first, up to max_session_transfer bytes; a larger file again, in an
        // exec of its own, unless the session's limit was max_file_bytes already.
        const bool limit_is_max = options_.max_file_bytes <= max_session_transfer;
        const std::size_t session_limit = limit_is_max ? options_.max_file_bytes : max_session_transfer;
        const std::string command = "set -- " + files::shell_quote(path) + " " + std::to_string(session_limit + 1) +
                                    "\n" + sandbox::download_script;
        auto in_session = co_await Internals::transfer_in_session(*this, command, session_limit + 1);
        Result<kube::ExecOutcome> outcome;
        if (in_session && *in_session && (*in_session)->stdout_data.size() > session_limit && limit_is_max &&
            !transfer_error(**in_session)) {
            out[i].error = file_error::file_too_large;
            co_return;
        }
        if (in_session &&
            (!*in_session || (*in_session)->stdout_data.size() <= session_limit || transfer_error(**in_session))) {
            outcome = std::move(*in_session);
        } else {
            std::vector<std::string> argv{options_.shell, "-c", sandbox::download_script, "sh", path};
            outcome =
                co_await Internals::transfer(*this, std::move(argv), std::string(), false, options_.max_file_bytes);
        }
        if (!outcome) {
            if (outcome.error().is(errc::not_found)) fatal = outcome.error();
            out[i].error = "transfer failed: " + outcome.error().message;
            co_return;
        }
        if (outcome->stdout_truncated) {
            out[i].error = file_error::file_too_large;
            co_return;
        }
        out[i].error = transfer_error(*outcome);
        if (!out[i].error) out[i].content = std::move(outcome->stdout_data);
    };
    bool cancelled = co_await for_each_bounded(paths.size(), options_.max_parallel_transfers, one);
    if (options_.on_activity) options_.on_activity();
    if (fatal) co_return fail(std::move(*fatal));
    if (cancelled) co_return fail(errc::cancelled, "download_files was cancelled");
    co_return out;
}

asio::awaitable<Result<FileUploadResponse>> PodExecSandbox::upload_from(std::string path, std::uint64_t size,
                                                                        ByteSource source) {
    FileUploadResponse r{path, std::nullopt};
    if (!is_absolute_clean_path(path)) {
        r.error = file_error::invalid_path;
        co_return r;
    }
    std::vector<std::string> argv{options_.shell,      "-c", sandbox::upload_script, "sh", std::move(path),
                                  std::to_string(size)};
    kube::ExecRunOptions run;
    run.stdin_source = sandbox::exactly(std::move(source), size);
    run.max_stdout = 64 * 1024;
    run.max_stderr = 64 * 1024;
    auto outcome = co_await Internals::stream(*this, std::move(argv), std::move(run));
    if (!outcome) {
        if (!outcome.error().is(errc::connection_closed)) co_return fail(outcome.error());
        r.error = "transfer failed: " + outcome.error().message;
        co_return r;
    }
    r.error = transfer_error(*outcome);
    co_return r;
}

asio::awaitable<Result<FileDownloadResponse>> PodExecSandbox::download_to(std::string path, ByteSink sink) {
    FileDownloadResponse r{path, std::nullopt, std::nullopt};
    if (!is_absolute_clean_path(path)) {
        r.error = file_error::invalid_path;
        co_return r;
    }
    std::vector<std::string> argv{options_.shell, "-c", sandbox::download_script, "sh", std::move(path)};
    kube::ExecRunOptions run;
    auto errors = std::make_shared<std::string>();  // the script's stderr, for a failure's description
    run.on_output = [sink = std::move(sink), errors](int channel, std::string_view data) -> asio::awaitable<bool> {
        if (channel == 1) {
            if (data.empty()) co_return true;  // a sink sees no empty piece
            co_return co_await sink(data);
        }
        errors->append(data.substr(0, 4096 - std::min<std::size_t>(errors->size(), 4096)));
        co_return true;
    };
    auto outcome = co_await Internals::stream(*this, std::move(argv), std::move(run));
    if (!outcome) {
        if (!outcome.error().is(errc::connection_closed)) co_return fail(outcome.error());
        r.error = "transfer failed: " + outcome.error().message;
        co_return r;
    }
    if (outcome->sink_exception) std::rethrow_exception(outcome->sink_exception);
    if (outcome->stopped_by_sink) co_return fail(errc::cancelled, "the sink stopped the download of " + r.path);
    outcome->stderr_data = std::move(*errors);
    r.error = transfer_error(*outcome);
    co_return r;
}

}  // namespace kubesandbox
