#include <kubesandbox/pod_exec_sandbox.hpp>

#include "files/scripts.hpp"
#include "files/text.hpp"
#include "kube/client_impl.hpp"
#include "kube/exec_session.hpp"
#include "sandbox/byte_streams.hpp"
#include "sandbox/pod_exec_scripts.hpp"
#include "sandbox/shell_session.hpp"
#include "sandbox/transfer_status.hpp"
#include "util/random.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <exception>

namespace kubesandbox {

namespace asio = boost::asio;

namespace {

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

constexpr std::size_t max_session_command = 64 * 1024;
// Files up to this size go through a shell session; a larger one takes an exec of its own, whose
// input and output paths are made for size (a download finds out by reading one byte more).
constexpr std::size_t max_session_transfer = 1024 * 1024;
// Content up to this size quoted (and without NUL) goes as an argument: the shell's printf writes
// it, where input needs `head`, a program (~0.5 ms under dash). The driver reads a request a byte
// per system call (~1 us a byte under busybox), so larger content goes as input.
constexpr std::size_t max_argument_upload = 1024;

// The scripts each shell session's driver keeps: the file operations' and the transfers'.
constexpr auto session_scripts = [] {
    std::array<std::string_view, files::command_scripts.size() + 2> all{};
    std::copy(files::command_scripts.begin(), files::command_scripts.end(), all.begin());
    all[files::command_scripts.size()] = sandbox::upload_script;
    all[files::command_scripts.size() + 1] = sandbox::download_script;
    return all;
}();

bool is_absolute_clean_path(std::string_view p) {
    return !p.empty() && p.front() == '/' && p.find('\0') == std::string_view::npos;
}

// A shell command's launch line around its marker: the marker in the environment, the EXIT trap
// and the working directory (see launch_shell_argv). Shell sessions' drivers build the same line.
constexpr const char* launch_head = "KUBESANDBOX_EXEC=";
std::string launch_tail(const PodExecSandboxOptions& options) {
    std::string tail = "; export KUBESANDBOX_EXEC; trap : EXIT; ";
    if (!options.workdir.empty()) tail += "cd -- " + files::shell_quote(options.workdir) + " || exit 1; ";
    return tail;
}

}  // namespace

struct PodExecSandbox::Sessions {
    // Shared with each call's lease, which may outlive the sandbox when a suspended call's frame
    // is destroyed late (its io_context torn down after it).
    std::shared_ptr<sandbox::ShellSessionPool> pool;
    std::atomic<bool> unusable{};  // the image cannot run the driver: an exec per command
};

PodExecSandbox::PodExecSandbox(KubeClient client, std::string namespace_name, std::string pod_name,
                               PodExecSandboxOptions options)
    : client_(std::move(client)),
      namespace_(std::move(namespace_name)),
      pod_(std::move(pod_name)),
      id_(namespace_ + "/" + pod_),
      options_(std::move(options)) {
    if (options_.idle_shell_sessions > 0) {
        std::vector<std::string> driver{options_.shell,
                                        "-c",
                                        std::string(sandbox::shell_session_driver()),
                                        "sh",
                                        options_.shell,
                                        options_.shell_session_process_groups ? "1" : "0",
                                        launch_head,
                                        launch_tail(options_)};
        sessions_.reset(new Sessions{std::make_shared<sandbox::ShellSessionPool>(
            KubeClientAccess::impl(client_), make_target(*this, std::move(driver), true), options_.idle_shell_sessions,
            options_.shell_session_idle_limit, session_scripts)});
    }
}

PodExecSandbox::~PodExecSandbox() = default;

std::size_t PodExecSandbox::shell_sessions_opened() const { return sessions_ ? sessions_->pool->opened_count() : 0; }

std::size_t PodExecSandbox::shell_sessions_idle() const { return sessions_ ? sessions_->pool->reusable_count() : 0; }

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
        std::vector<std::string> out{self.options_.shell,  "-c", sandbox::launch_script, "sh", marker,
                                     self.options_.workdir};
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
        return {self.options_.shell, "-c", launch_head + marker + launch_tail(self.options_) + command};
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
    // `driver`: the shell session's driver that ran the command; none for an exec of its own.
    // `driver` and `token`: the shell session that ran the command; none for an exec of its own.
    static kube::ExecTarget killer(const PodExecSandbox& self, std::string marker, sandbox::DriverHello driver = {},
                                   std::string token = {}) {
        std::vector<std::string> argv{self.options_.shell, "-c", sandbox::kill_script, "sh", std::move(marker)};
        if (driver.pid > 0) {
            argv.push_back(std::to_string(driver.pid));
            argv.push_back(std::move(token));
            // Commands share the driver's process group, and only what they started is in it.
            argv.push_back(!driver.own_groups && driver.leads_group() ? "1" : "0");
        }
        return make_target(self, std::move(argv), false);
    }
    static asio::awaitable<bool> kill_marked(PodExecSandbox& self, std::string marker, sandbox::DriverHello driver = {},
                                             std::string token = {}) {
        co_return co_await kill_marked(KubeClientAccess::impl(self.client_),
                                       killer(self, std::move(marker), driver, std::move(token)));
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

    // execute() through a shell session; the same outcomes and clean-up as run_marked. nullopt:
    // run the command in an exec of its own (the sessions are busy, or this image cannot run the
    // session's driver).
    static asio::awaitable<std::optional<Result<kube::ExecOutcome>>> run_in_session(
        PodExecSandbox& self, const std::string& command, std::chrono::seconds limit, std::size_t cap,
        std::optional<std::string_view> input = std::nullopt) {
        auto& pool = *self.sessions_->pool;
        std::optional<std::chrono::steady_clock::duration> timeout;
        if (limit.count() > 0) timeout = limit;
        for (int attempt = 0;; ++attempt) {
            auto acquired = co_await pool.acquire();
            if (!acquired) {
                if (acquired.error().is(errc::invalid_response)) {
                    self.sessions_->unusable = true;
                    co_return std::nullopt;
                }
                if (acquired.error().is(errc::connection_closed) || acquired.error().is(errc::pod_failed)) {
                    if (auto gone = co_await gone_error(self)) co_return fail(std::move(*gone));
                }
                co_return fail(acquired.error());
            }
            // All the sessions are busy: this command gets an exec of its own.
            if (!*acquired) co_return std::nullopt;
            // However this call ends, the session goes back to the pool (which keeps it only if
            // it is clean).
            struct Lease {
                std::shared_ptr<sandbox::ShellSessionPool> pool;
                std::shared_ptr<sandbox::ShellSession> session;
                void give_back() {
                    if (session) pool->release(std::move(session));
                }
                ~Lease() { give_back(); }
            } lease{self.sessions_->pool, std::move(*acquired)};
            sandbox::ShellSession& session = *lease.session;
            if ((co_await asio::this_coro::cancellation_state).cancelled() != asio::cancellation_type::none)
                co_return fail(errc::cancelled, "execute in " + self.id_ + " was cancelled before its command started");
            const sandbox::DriverHello driver = session.driver();
            const std::string token = session.token();
            const std::string marker = session.next_exec_marker();
            auto ran = co_await session.run(command, cap, timeout, input);
            // The session ended between its check and the command (its idle timer): nothing ran.
            if (ran && ran->not_sent && attempt == 0) continue;
            if (ran && ran->not_sent)
                co_return fail(errc::connection_closed, "no shell session could take the command");
            if (self.options_.on_activity) self.options_.on_activity();
            // The session is not used again on the paths below but the last: it goes back now,
            // so that the pool does not count it as busy while a kill or a check runs.
            if (!ran || ran->cancelled || ran->outcome.timed_out) lease.give_back();
            if ((ran && ran->cancelled) ||
                (co_await asio::this_coro::cancellation_state).cancelled() != asio::cancellation_type::none) {
                asio::co_spawn(KubeClientAccess::impl(self.client_)->executor,
                               kill_marked(KubeClientAccess::impl(self.client_), killer(self, marker, driver, token)),
                               asio::detached);
                co_return fail(errc::cancelled,
                               "execute in " + self.id_ + " was cancelled; its command is being killed");
            }
            if (!ran) {
                if (ran.error().is(errc::connection_closed) || ran.error().is(errc::pod_failed)) {
                    if (auto gone = co_await gone_error(self)) co_return fail(std::move(*gone));
                }
                Error lost = ran.error();
                bool killed = co_await kill_marked(self, marker, driver, token);
                lost.message += killed ? "; the command was killed" : "; the command could not be killed";
                co_return fail(std::move(lost));
            }
            kube::ExecOutcome& outcome = ran->outcome;
            if (outcome.timed_out) {
                co_await kill_marked(self, marker, driver, token);
                co_return std::move(outcome);
            }
            lease.give_back();
            if (!outcome.exit_code || *outcome.exit_code >= 128) {
                if (auto gone = co_await gone_error(self)) co_return fail(std::move(*gone));
            }
            co_return std::move(outcome);
        }
    }

    // A transfer's shell command (a script after `set -- ARGS`) through a shell session, output
    // capped at `cap`, reading `input` when there is one. nullopt: it takes an exec of its own (no
    // session free, or the session broke: a transfer is idempotent, and the exec is its retry).
    static asio::awaitable<std::optional<Result<kube::ExecOutcome>>> transfer_in_session(
        PodExecSandbox& self, const std::string& command, std::size_t cap,
        std::optional<std::string_view> input = std::nullopt) {
        if (!self.sessions_ || self.sessions_->unusable) co_return std::nullopt;
        auto ran = co_await run_in_session(self, command, self.options_.default_timeout, cap, input);
        if (ran && !*ran && ran->error().is(errc::connection_closed)) co_return std::nullopt;
        co_return ran;
    }

    // A transfer streamed through an exec of its own, not retried (its source or sink has moved
    // on). A failure of the source is returned as it is; a sandbox that is gone is errc::not_found.
    static asio::awaitable<Result<kube::ExecOutcome>> stream(PodExecSandbox& self, std::vector<std::string> argv,
                                                             kube::ExecRunOptions run) {
        auto source_failed = std::make_shared<bool>(false);
        if (run.stdin_source) {
            run.stdin_source = [source_failed,
                                source = std::move(run.stdin_source)]() -> asio::awaitable<Result<std::string_view>> {
                auto piece = co_await source();
                if (!piece) *source_failed = true;
                co_return piece;
            };
        }
        const bool with_stdin = static_cast<bool>(run.stdin_source);
        if (self.options_.default_timeout.count() > 0) run.timeout = self.options_.default_timeout;
        auto outcome = co_await kube::run_exec(KubeClientAccess::impl(self.client_),
                                               make_target(self, std::move(argv), with_stdin), std::move(run));
        if (self.options_.on_activity) self.options_.on_activity();
        if (!outcome && !*source_failed) {
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
    Result<kube::ExecOutcome> outcome;
    // A long command goes in an exec of its own: the driver reads its input a byte at a time.
    bool ran_in_session = true;
    if (sessions_ && !sessions_->unusable && command.size() <= max_session_command) {
        auto in_session = co_await Internals::run_in_session(*this, command, limit, options_.max_output_bytes);
        if (in_session) outcome = std::move(*in_session);
        else ran_in_session = false;
    } else {
        ran_in_session = false;
    }
    if (!ran_in_session) {
        std::vector<std::string> argv{std::move(command)};
        OutputSink collected;  // none: the output is collected with its cap
        outcome = co_await Internals::run_marked(*this, std::move(argv), true, std::string(), false, limit,
                                                 std::move(collected));
    }
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
        if (channel == 1) co_return co_await sink(data);
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
