#include <kubesandbox/pod_exec_sandbox.hpp>

#include "files/text.hpp"
#include "kube/client_impl.hpp"
#include "kube/exec_session.hpp"
#include "sandbox/transfer_status.hpp"
#include "util/random.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <atomic>
#include <exception>

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

// Every command given as argv runs under this launcher: it marks its environment (inherited by
// everything the command starts), enters the working directory and, when it does not lead a
// process group already, starts a session of its own (setsid without forking: util-linux and
// busybox agree there), so a timeout can kill the command's whole process group.
constexpr const char* launch_script = R"SH(KUBESANDBOX_EXEC=$1; export KUBESANDBOX_EXEC
if [ -n "$2" ]; then cd -- "$2" || exit 1; fi
shift 2
if read -r _ _ _ _ pg _ < /proc/$$/stat 2>/dev/null && [ "$pg" != "$$" ] && command -v setsid >/dev/null 2>&1; then
  exec setsid "$@"
fi
exec "$@"
)SH";

// Kills what a timed-out command left running: processes carrying its marker (in their
// environment, or for the shell that runs a shell command, at the start of its script), their descendants
// (which may have cleared their environment) and the process groups the marked processes lead.
// Several passes catch children forked meanwhile; groups are matched against every group leader
// marked in any pass, since a child forked just before its marked parent was killed carries no
// marker when it cleared its environment, and its parent is pid 1 by the next pass. (A group's id
// is not reused while the group has a member.) Zombies are passed over (already dead, and no
// longer a sign that anything is left) unless other threads of theirs still run. Never touches
// PID 1 or its own group.
constexpr const char* kill_script = R"SH(m="KUBESANDBOX_EXEC=$1"
self=$$
read -r _ _ _ _ selfpg _ < /proc/$self/stat 2>/dev/null
leaders=
for pass in 1 2 3 4 5; do
  marked= stats=
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [ "$p" = "$self" ] && continue
    [ "$p" = 1 ] && continue
    s=$(cat "$d/stat" 2>/dev/null) || continue
    s=${s##*) }
    set -- $s
    [ "$1" = Z ] && [ "${18}" = 1 ] && continue
    stats="$stats $p:$2:$3"
    if tr '\000' '\n' 2>/dev/null < "$d/environ" | grep -qxF -- "$m" ||
       tr '\000' '\n' 2>/dev/null < "$d/cmdline" | grep -q -- "^$m; export KUBESANDBOX_EXEC; "; then
      marked="$marked $p"
      [ "$p" = "$3" ] && leaders="$leaders $p"
    fi
  done
  [ -n "$marked$leaders" ] || break
  victims=$marked
  changed=1
  while [ -n "$changed" ]; do
    changed=
    for e in $stats; do
      p=${e%%:*}; r=${e#*:}; pp=${r%%:*}; pg=${r#*:}
      case " $victims " in *" $p "*) continue ;; esac
      case " $victims " in *" $pp "*) victims="$victims $p"; changed=1; continue ;; esac
      [ "$pg" = "$selfpg" ] && continue
      case " $leaders " in *" $pg "*) victims="$victims $p"; changed=1 ;; esac
    done
  done
  [ -n "$victims" ] || break
  for p in $victims; do kill -9 "$p" 2>/dev/null; done
done
exit 0
)SH";

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

kube::ExecTarget make_target(const PodExecSandbox& sandbox, std::vector<std::string> argv, bool with_stdin) {
    kube::ExecTarget target;
    target.namespace_name = sandbox.namespace_name();
    target.pod = sandbox.pod_name();
    target.container = sandbox.options().container;
    target.command = std::move(argv);
    target.stdin = with_stdin;
    return target;
}

// The per-file error of a transfer that ran: none, one of the four literals, or a description
// (DeepAgents allows a backend-specific string when no literal applies).
std::optional<std::string> transfer_error(const kube::ExecOutcome& outcome) {
    if (outcome.timed_out) return std::string("transfer timed out");
    if (!outcome.exit_code) return std::string("transfer failed: no exit status from the sandbox");
    return kubesandbox::transfer_error(*outcome.exit_code, outcome.stderr_data);
}

bool is_absolute_clean_path(std::string_view p) {
    return !p.empty() && p.front() == '/' && p.find('\0') == std::string_view::npos;
}

}  // namespace

PodExecSandbox::PodExecSandbox(KubeClient client, std::string namespace_name, std::string pod_name,
                               PodExecSandboxOptions options)
    : client_(std::move(client)),
      namespace_(std::move(namespace_name)),
      pod_(std::move(pod_name)),
      id_(namespace_ + "/" + pod_),
      options_(std::move(options)) {}

PodExecSandbox::~PodExecSandbox() = default;

namespace {

// A NUL cannot cross exec's argv (it would cut the command short), and a negative timeout has
// no meaning: both are caller mistakes, refused before anything runs.
std::optional<Error> check_command(const std::vector<std::string>& argv, std::optional<std::chrono::seconds> timeout) {
    if (argv.empty()) return make_error(errc::invalid_argument, "empty command");
    for (const auto& arg : argv)
        if (arg.find('\0') != std::string::npos)
            return make_error(errc::invalid_argument, "the command contains a NUL byte");
    if (timeout && timeout->count() < 0)
        return make_error(errc::invalid_argument,
                          "negative timeout (" + std::to_string(timeout->count()) + " s); 0 means none");
    return std::nullopt;
}

}  // namespace

// Steps shared by execute, run and the transfers.
struct PodExecSandbox::Internals {
    static std::vector<std::string> launch_argv(const PodExecSandbox& self, const std::string& marker,
                                                std::vector<std::string> argv) {
        std::vector<std::string> out{self.options_.shell, "-c", launch_script, "sh", marker, self.options_.workdir};
        out.insert(out.end(), std::make_move_iterator(argv.begin()), std::make_move_iterator(argv.end()));
        return out;
    }

    // A shell command runs in the launcher's own shell: one shell image per call instead of two
    // (the launcher's, then `sh -c COMMAND`'s). The launcher's steps share the command's first
    // line, so line numbers and error texts are those of `sh -c COMMAND`. No setsid here: it
    // would need a second image, and the runtimes start an exec'd process as the leader of a
    // session of its own already (runc's and crun's exec, the local kubelet); where one does
    // not, a timeout still finds the command by its marker and its descendants. The EXIT trap
    // keeps the marked shell to the end: busybox (and bash) otherwise exec the script's last
    // command in place of the shell, and one that clears its environment (`env -i ...`) would
    // carry no marker left for a timeout to find.
    static std::vector<std::string> launch_shell_argv(const PodExecSandbox& self, const std::string& marker,
                                                      const std::string& command) {
        std::string script = "KUBESANDBOX_EXEC=" + marker + "; export KUBESANDBOX_EXEC; trap : EXIT; ";
        if (!self.options_.workdir.empty())
            script += "cd -- " + files::shell_quote(self.options_.workdir) + " || exit 1; ";
        script += command;
        return {self.options_.shell, "-c", std::move(script)};
    }

    // Kills every process of the command marked `marker`. Best effort: when the pod is gone there
    // is nothing left to kill. Holds no reference to the sandbox, so it may outlive the call.
    static asio::awaitable<bool> kill_marked(std::shared_ptr<KubeClient::Impl> client, kube::ExecTarget killer) {
        kube::ExecRunOptions kill_run;
        kill_run.max_stdout = 4096;
        kill_run.max_stderr = 4096;
        kill_run.timeout = std::chrono::seconds(30);
        auto done = co_await kube::run_exec(std::move(client), std::move(killer), std::move(kill_run));
        co_return done && done->exit_code == 0;
    }
    static kube::ExecTarget killer(const PodExecSandbox& self, std::string marker) {
        return make_target(self, {self.options_.shell, "-c", kill_script, "sh", std::move(marker)}, false);
    }
    static asio::awaitable<bool> kill_marked(PodExecSandbox& self, std::string marker) {
        co_return co_await kill_marked(KubeClientAccess::impl(self.client_), killer(self, std::move(marker)));
    }

    static asio::awaitable<std::optional<Error>> gone_error(PodExecSandbox& self) {
        ResourcePath pod;
        pod.plural = "pods";
        pod.namespace_name = self.namespace_;
        pod.name = self.pod_;
        auto current = co_await self.client_.get(pod);
        if (!current && current.error().is(errc::not_found))
            co_return make_error(errc::not_found, "sandbox " + self.id_ + " was deleted while the command ran");
        if (current && current->contains("metadata") &&
            current->at("metadata").as_object().contains("deletionTimestamp"))
            co_return make_error(errc::not_found, "sandbox " + self.id_ + " is being deleted");
        co_return std::nullopt;
    }

    // Runs `argv`, or with `shell_command` set, the shell command argv[0].
    static asio::awaitable<Result<kube::ExecOutcome>> run_marked(PodExecSandbox& self, std::vector<std::string> argv,
                                                                 bool shell_command, std::string stdin_data,
                                                                 bool with_stdin, std::chrono::seconds limit,
                                                                 OutputSink sink) {
        const std::string marker = util::random_hex(8);
        kube::ExecTarget target = make_target(
            self,
            shell_command ? launch_shell_argv(self, marker, argv.at(0)) : launch_argv(self, marker, std::move(argv)),
            with_stdin);
        kube::ExecRunOptions run;
        run.stdin_data = std::move(stdin_data);
        run.max_stdout = self.options_.max_output_bytes;
        run.max_stderr = self.options_.max_output_bytes;
        if (limit.count() > 0) run.timeout = limit;
        run.on_output = std::move(sink);
        auto outcome = co_await kube::run_exec(KubeClientAccess::impl(self.client_), std::move(target), std::move(run));
        if (self.options_.on_activity) self.options_.on_activity();
        if ((co_await asio::this_coro::cancellation_state).cancelled() != asio::cancellation_type::none) {
            // The caller gave up: nothing more is awaited here, and the command is killed on the
            // side (the kill holds no reference to this sandbox, which may be gone by then).
            asio::co_spawn(KubeClientAccess::impl(self.client_)->executor,
                           kill_marked(KubeClientAccess::impl(self.client_), killer(self, marker)), asio::detached);
            co_return fail(errc::cancelled, "execute in " + self.id_ + " was cancelled; its command is being killed");
        }
        if (!outcome) {
            // A connection that died mid-command: say whether the sandbox itself is gone.
            if (outcome.error().is(errc::connection_closed) || outcome.error().is(errc::pod_failed)) {
                if (auto gone = co_await gone_error(self)) co_return fail(std::move(*gone));
            }
            if (outcome.error().is(errc::connection_closed)) {
                // The command may still run: kill it, and say whether that worked.
                Error lost = outcome.error();
                bool killed = co_await kill_marked(self, marker);
                lost.message += killed ? "; the command was killed" : "; the command could not be killed";
                co_return fail(std::move(lost));
            }
            co_return fail(outcome.error());
        }
        if (outcome->timed_out || outcome->stopped_by_sink) {
            co_await kill_marked(self, marker);
        } else if (!outcome->exit_code || *outcome->exit_code >= 128) {
            // Killed by a signal or no status: on a real node this is how a deleted pod looks.
            if (auto gone = co_await gone_error(self)) co_return fail(std::move(*gone));
        }
        co_return outcome;
    }

    static asio::awaitable<Result<kube::ExecOutcome>> transfer(PodExecSandbox& self, std::vector<std::string> argv,
                                                               std::string stdin_data, bool with_stdin,
                                                               std::size_t max_stdout) {
        // A transfer is idempotent (the same bytes to the same path, or a read): one retry when the
        // connection broke and the sandbox still exists. The payload is shared, never copied.
        auto input = std::make_shared<const std::string>(std::move(stdin_data));
        for (int attempt = 0;; ++attempt) {
            kube::ExecTarget target = make_target(self, argv, with_stdin);
            kube::ExecRunOptions run;
            run.stdin_shared = input;
            run.max_stdout = max_stdout;
            run.max_stderr = 64 * 1024;
            run.stop_at_cap = true;
            if (self.options_.default_timeout.count() > 0) run.timeout = self.options_.default_timeout;
            auto outcome =
                co_await kube::run_exec(KubeClientAccess::impl(self.client_), std::move(target), std::move(run));
            if (outcome) co_return outcome;
            if (auto gone = co_await gone_error(self)) co_return fail(std::move(*gone));
            if (attempt >= 1 || !outcome.error().is(errc::connection_closed)) co_return fail(outcome.error());
        }
    }
};

asio::awaitable<Result<ExecuteResponse>> PodExecSandbox::execute(std::string command,
                                                                 std::optional<std::chrono::seconds> timeout) {
    if (auto bad = check_command({command}, timeout)) co_return fail(std::move(*bad));
    const std::chrono::seconds limit = timeout.value_or(options_.default_timeout);
    std::vector<std::string> argv{std::move(command)};
    OutputSink collected;  // none: the output is collected with its cap
    auto outcome =
        co_await Internals::run_marked(*this, std::move(argv), true, std::string(), false, limit, std::move(collected));
    if (!outcome) co_return fail(outcome.error());
    // On timeout the output so far is dropped, as the reference does.
    if (outcome->timed_out) co_return timed_out_response(limit);
    co_return compose_response(*outcome, options_.max_output_bytes);
}

asio::awaitable<Result<RunResponse>> PodExecSandbox::run(std::vector<std::string> argv, std::string stdin_data,
                                                         std::optional<std::chrono::seconds> timeout) {
    OutputSink collected;  // none: the streams are collected with their caps
    co_return co_await run(std::move(argv), std::move(stdin_data), timeout, std::move(collected));
}

asio::awaitable<Result<RunResponse>> PodExecSandbox::run(std::vector<std::string> argv, std::string stdin_data,
                                                         std::optional<std::chrono::seconds> timeout, OutputSink sink) {
    if (auto bad = check_command(argv, timeout)) co_return fail(std::move(*bad));
    const std::chrono::seconds limit = timeout.value_or(options_.default_timeout);
    auto outcome = co_await Internals::run_marked(*this, std::move(argv), false, std::move(stdin_data), true, limit,
                                                  std::move(sink));
    if (!outcome) co_return fail(outcome.error());
    // The sink's own exception, now that the command it stopped has been killed.
    if (outcome->sink_exception) std::rethrow_exception(outcome->sink_exception);
    RunResponse r;
    r.stopped = outcome->stopped_by_sink;
    r.timed_out = outcome->timed_out;
    r.exit_code = outcome->timed_out ? std::optional<int>(124) : outcome->exit_code;
    r.stdout_data = std::move(outcome->stdout_data);
    r.stderr_data = std::move(outcome->stderr_data);
    r.truncated = outcome->stdout_truncated || outcome->stderr_truncated;
    co_return r;
}

namespace {

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
        std::vector<std::string> argv{options_.shell, "-c", upload_script, "sh", path, std::to_string(content.size())};
        auto outcome = co_await Internals::transfer(*this, std::move(argv), std::move(content), true, 64 * 1024);
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
        std::vector<std::string> argv{options_.shell, "-c", download_script, "sh", path};
        auto outcome =
            co_await Internals::transfer(*this, std::move(argv), std::string(), false, options_.max_file_bytes);
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

}  // namespace kubesandbox
