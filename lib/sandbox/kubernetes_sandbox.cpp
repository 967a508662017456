#include <kubesandbox/kubernetes_sandbox.hpp>

#include "kube/client_impl.hpp"
#include "kube/exec_session.hpp"

#include <boost/asio/use_awaitable.hpp>

#include <atomic>
#include <random>

namespace kubesandbox {

namespace asio = boost::asio;

namespace {

// Scripts run as `sh -c SCRIPT sh ARGS...`: paths travel as argv elements, never through shell
// parsing, so quotes, $, backticks, newlines and leading dashes are inert.
// Exit codes: 20 permission denied, 21 is a directory, 22 not found.
constexpr const char* upload_script = R"SH(p=$1; n=$2
case $p in */*) d=${p%/*}; [ -n "$d" ] || d=/ ;; *) d=. ;; esac
if [ ! -d "$d" ]; then
  mkdir -p -- "$d" 2>/dev/null || { [ -e "$d" ] && exit 22; exit 20; }
fi
[ -d "$p" ] && exit 21
# `true`, not `:`: a failed redirection on a special built-in would end the shell.
{ true > "$p"; } 2>/dev/null || exit 20
exec head -c "$n" > "$p"
)SH";

constexpr const char* download_script = R"SH(p=$1
[ -d "$p" ] && exit 21
[ -e "$p" ] || exit 22
[ -r "$p" ] || exit 20
exec cat -- "$p"
)SH";

// Kills every process that carries the marker of a timed-out command, in a few passes to catch
// children forked meanwhile.
constexpr const char* kill_script = R"SH(m="KUBESANDBOX_EXEC=$1"
for pass in 1 2 3 4; do
  found=
  for d in /proc/[0-9]*; do
    [ "${d#/proc/}" = "$$" ] && continue
    if tr '\000' '\n' < "$d/environ" 2>/dev/null | grep -qxF -- "$m"; then
      kill -9 "${d#/proc/}" 2>/dev/null && found=1
    fi
  done
  [ -n "$found" ] || break
done
exit 0
)SH";

std::string random_marker() {
    static std::atomic<std::uint64_t> counter{0};
    std::random_device rd;
    std::uint64_t v = (std::uint64_t(rd()) << 32) ^ rd() ^ (counter++ << 1);
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
    return buf;
}

// Largest prefix of at most `cap` bytes that does not end inside a UTF-8 sequence.
std::size_t utf8_safe_cut(std::string_view s, std::size_t cap) {
    std::size_t cut = std::min(cap, s.size());
    // Find the lead byte of the last sequence that starts before the cut.
    std::size_t lead = cut;
    for (int back = 0; lead > 0 && back < 4; ++back) {
        --lead;
        const unsigned char c = static_cast<unsigned char>(s[lead]);
        if ((c & 0xC0) != 0x80) {
            const std::size_t need = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
            return lead + need <= cut ? cut : lead;
        }
    }
    return cut;
}

ExecuteResponse timed_out_response(std::chrono::seconds limit) {
    ExecuteResponse r;
    r.output = "Command timed out after " + std::to_string(limit.count()) + " seconds";
    r.exit_code = 124;
    return r;
}

// stdout, then "\n" + stderr when both are non-empty, capped on a UTF-8 boundary.
ExecuteResponse compose_response(kube::ExecOutcome& outcome, std::size_t cap) {
    ExecuteResponse r;
    r.output = std::move(outcome.stdout_data);
    if (!r.output.empty() && !outcome.stderr_data.empty()) r.output += '\n';
    r.output += outcome.stderr_data;
    r.truncated = outcome.stdout_truncated || outcome.stderr_truncated || r.output.size() > cap;
    if (r.truncated) r.output.resize(utf8_safe_cut(r.output, cap));
    r.exit_code = outcome.exit_code;
    return r;
}

std::optional<std::string> file_error_for_exit(int code) {
    switch (code) {
    case 0: return std::nullopt;
    case 20: return std::string(file_error::permission_denied);
    case 21: return std::string(file_error::is_directory);
    case 22: return std::string(file_error::file_not_found);
    default: return "error (exit code " + std::to_string(code) + ")";
    }
}

kube::ExecTarget make_target(const KubernetesSandbox& sandbox, std::vector<std::string> argv, bool with_stdin) {
    kube::ExecTarget target;
    target.namespace_name = sandbox.namespace_name();
    target.pod = sandbox.pod_name();
    target.container = sandbox.options().container;
    target.command = std::move(argv);
    target.stdin = with_stdin;
    return target;
}

// The per-file error of a transfer that ran: none, one of the literals, or a description.
std::optional<std::string> transfer_error(const kube::ExecOutcome& outcome) {
    if (outcome.timed_out) return std::string("timeout");
    if (!outcome.exit_code) return std::string("unknown result (no exit status)");
    return file_error_for_exit(*outcome.exit_code);
}

bool is_absolute_clean_path(std::string_view p) {
    return !p.empty() && p.front() == '/' && p.find('\0') == std::string_view::npos;
}


}  // namespace

KubernetesSandbox::KubernetesSandbox(KubeClient client, std::string namespace_name, std::string pod_name,
                                     KubernetesSandboxOptions options)
    : client_(std::move(client)),
      namespace_(std::move(namespace_name)),
      pod_(std::move(pod_name)),
      id_(namespace_ + "/" + pod_),
      options_(std::move(options)) {}

KubernetesSandbox::~KubernetesSandbox() = default;

asio::awaitable<Result<ExecuteResponse>> KubernetesSandbox::execute(std::string command,
                                                                    std::optional<std::chrono::seconds> timeout) {
    const std::chrono::seconds limit = timeout.value_or(options_.default_timeout);
    const std::string marker = random_marker();
    kube::ExecTarget target = make_target(*this, {"env", "KUBESANDBOX_EXEC=" + marker, options_.shell, "-c", std::move(command)}, false);
    kube::ExecRunOptions run;
    run.max_stdout = options_.max_output_bytes;
    run.max_stderr = options_.max_output_bytes;
    if (limit.count() > 0) run.timeout = limit;

    auto outcome = co_await kube::run_exec(client_.impl(), std::move(target), std::move(run));
    if (options_.on_activity) options_.on_activity();
    if (!outcome) {
        // A connection that died mid-command: say whether the sandbox itself is gone.
        if (outcome.error().is(errc::connection_closed)) {
            ResourcePath pod;
            pod.plural = "pods";
            pod.namespace_name = namespace_;
            pod.name = pod_;
            auto current = co_await client_.get(pod);
            if (!current && current.error().is(errc::not_found))
                co_return fail(errc::not_found, "sandbox " + id_ + " was deleted while the command ran");
            if (current && current->contains("metadata") && current->at("metadata").as_object().contains("deletionTimestamp"))
                co_return fail(errc::not_found, "sandbox " + id_ + " is being deleted");
        }
        co_return fail(outcome.error());
    }
    if (outcome->timed_out) {
        // Kill what the command left running; its output so far is dropped, as the reference does.
        kube::ExecTarget killer = make_target(*this, {options_.shell, "-c", kill_script, "sh", marker}, false);
        kube::ExecRunOptions kill_run;
        kill_run.max_stdout = 4096;
        kill_run.max_stderr = 4096;
        kill_run.timeout = std::chrono::seconds(30);
        co_await kube::run_exec(client_.impl(), std::move(killer), std::move(kill_run));
        co_return timed_out_response(limit);
    }
    co_return compose_response(*outcome, options_.max_output_bytes);
}

asio::awaitable<Result<ExecuteResponse>> KubernetesSandbox::run(std::vector<std::string> argv, std::string stdin_data,
                                                                std::optional<std::chrono::seconds> timeout) {
    kube::ExecTarget target = make_target(*this, std::move(argv), true);
    kube::ExecRunOptions run;
    run.stdin_data = std::move(stdin_data);
    run.max_stdout = options_.max_output_bytes;
    run.max_stderr = options_.max_output_bytes;
    const std::chrono::seconds limit = timeout.value_or(options_.default_timeout);
    if (limit.count() > 0) run.timeout = limit;
    auto outcome = co_await kube::run_exec(client_.impl(), std::move(target), std::move(run));
    if (!outcome) co_return fail(outcome.error());
    if (outcome->timed_out) co_return timed_out_response(limit);
    co_return compose_response(*outcome, options_.max_output_bytes);
}

asio::awaitable<Result<std::vector<FileUploadResponse>>> KubernetesSandbox::upload_files(
    std::vector<std::pair<std::string, std::string>> files) {
    std::vector<FileUploadResponse> out;
    out.reserve(files.size());
    for (auto& [path, content] : files) {
        FileUploadResponse r;
        r.path = path;
        if (!is_absolute_clean_path(path)) {
            r.error = file_error::invalid_path;
            out.push_back(std::move(r));
            continue;
        }
        kube::ExecTarget target = make_target(*this, {options_.shell, "-c", upload_script, "sh", path, std::to_string(content.size())}, true);
        kube::ExecRunOptions run;
        run.stdin_data = std::move(content);
        run.max_stdout = 64 * 1024;
        run.max_stderr = 64 * 1024;
        run.timeout = options_.default_timeout;
        auto outcome = co_await kube::run_exec(client_.impl(), std::move(target), std::move(run));
        if (!outcome) co_return fail(outcome.error());
        r.error = transfer_error(*outcome);
        out.push_back(std::move(r));
    }
    if (options_.on_activity) options_.on_activity();
    co_return out;
}

asio::awaitable<Result<std::vector<FileDownloadResponse>>> KubernetesSandbox::download_files(std::vector<std::string> paths) {
    std::vector<FileDownloadResponse> out;
    out.reserve(paths.size());
    for (auto& path : paths) {
        FileDownloadResponse r;
        r.path = path;
        if (!is_absolute_clean_path(path)) {
            r.error = file_error::invalid_path;
            out.push_back(std::move(r));
            continue;
        }
        kube::ExecTarget target = make_target(*this, {options_.shell, "-c", download_script, "sh", path}, false);
        kube::ExecRunOptions run;
        run.max_stderr = 64 * 1024;
        run.timeout = options_.default_timeout;
        auto outcome = co_await kube::run_exec(client_.impl(), std::move(target), std::move(run));
        if (!outcome) co_return fail(outcome.error());
        r.error = transfer_error(*outcome);
        if (!r.error) r.content = std::move(outcome->stdout_data);
        out.push_back(std::move(r));
    }
    if (options_.on_activity) options_.on_activity();
    co_return out;
}

}  // namespace kubesandbox
