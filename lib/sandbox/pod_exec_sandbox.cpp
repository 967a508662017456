#include <kubesandbox/pod_exec_sandbox.hpp>

#include "files/scripts.hpp"
#include "files/text.hpp"
#include "kube/client_impl.hpp"
#include "kube/exec_session.hpp"
#include "sandbox/pod_exec_internals.hpp"
#include "sandbox/pod_exec_scripts.hpp"
#include "sandbox/shell_session.hpp"
#include "util/random.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
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

constexpr std::size_t max_session_command = 64 * 1024;
// The scripts each shell session's driver keeps: the file operations' and the transfers'.
constexpr auto session_scripts = [] {
    std::array<std::string_view, files::command_scripts.size() + 2> all{};
    std::copy(files::command_scripts.begin(), files::command_scripts.end(), all.begin());
    all[files::command_scripts.size()] = sandbox::upload_script;
    all[files::command_scripts.size() + 1] = sandbox::download_script;
    return all;
}();

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

std::vector<std::string> PodExecSandbox::Internals::launch_argv(const PodExecSandbox& self, const std::string& marker,
                                                                std::vector<std::string> argv) {
    std::vector<std::string> out{self.options_.shell,  "-c", sandbox::launch_script, "sh", marker,
                                 self.options_.workdir};
    out.insert(out.end(), std::make_move_iterator(argv.begin()), std::make_move_iterator(argv.end()));
    return out;
}

std::vector<std::string> PodExecSandbox::Internals::launch_shell_argv(const PodExecSandbox& self,
                                                                      const std::string& marker,
                                                                      const std::string& command) {
    return {self.options_.shell, "-c", launch_head + marker + launch_tail(self.options_) + command};
}

asio::awaitable<bool> PodExecSandbox::Internals::kill_marked(std::shared_ptr<KubeClient::Impl> client,
                                                             kube::ExecTarget killer) {
    kube::ExecRunOptions kill_run;
    kill_run.max_stdout = 4096;
    kill_run.max_stderr = 4096;
    kill_run.timeout = std::chrono::seconds(30);
    auto done = co_await kube::run_exec(std::move(client), std::move(killer), std::move(kill_run));
    co_return done && done->exit_code == 0;
}

kube::ExecTarget PodExecSandbox::Internals::killer(const PodExecSandbox& self, std::string marker,
                                                   sandbox::DriverHello driver, std::string token) {
    std::vector<std::string> argv{self.options_.shell, "-c", sandbox::kill_script, "sh", std::move(marker)};
    if (driver.pid > 0) {
        argv.push_back(std::to_string(driver.pid));
        argv.push_back(std::move(token));
        // Commands share the driver's process group, and only what they started is in it.
        argv.push_back(!driver.own_groups && driver.leads_group() ? "1" : "0");
    }
    return make_target(self, std::move(argv), false);
}

asio::awaitable<bool> PodExecSandbox::Internals::kill_marked(PodExecSandbox& self, std::string marker,
                                                             sandbox::DriverHello driver, std::string token) {
    co_return co_await kill_marked(KubeClientAccess::impl(self.client_),
                                   killer(self, std::move(marker), driver, std::move(token)));
}

asio::awaitable<std::optional<Error>> PodExecSandbox::Internals::gone_error(PodExecSandbox& self) {
    ResourcePath pod;
    pod.plural = "pods";
    pod.namespace_name = self.namespace_;
    pod.name = self.pod_;
    auto current = co_await self.client_.get(pod);
    if (!current && current.error().is(errc::not_found))
        co_return make_error(errc::not_found, "sandbox " + self.id_ + " was deleted while the command ran");
    if (current && current->contains("metadata") && current->at("metadata").as_object().contains("deletionTimestamp"))
        co_return make_error(errc::not_found, "sandbox " + self.id_ + " is being deleted");
    co_return std::nullopt;
}

asio::awaitable<Result<kube::ExecOutcome>> PodExecSandbox::Internals::run_marked(
    PodExecSandbox& self, std::vector<std::string> argv, bool shell_command, std::string stdin_data, bool with_stdin,
    std::chrono::seconds limit, OutputSink sink) {
    const std::string marker = util::random_hex(8);
    kube::ExecTarget target = make_target(
        self, shell_command ? launch_shell_argv(self, marker, argv.at(0)) : launch_argv(self, marker, std::move(argv)),
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

asio::awaitable<std::optional<Result<kube::ExecOutcome>>> PodExecSandbox::Internals::run_in_session(
    PodExecSandbox& self, const std::string& command, std::chrono::seconds limit, std::size_t cap,
    std::optional<std::string_view> input) {
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
        if (ran && ran->not_sent) co_return fail(errc::connection_closed, "no shell session could take the command");
        if (self.options_.on_activity) self.options_.on_activity();
        // The session is not used again on the paths below but the last: it goes back now,
        // so that the pool does not count it as busy while a kill or a check runs.
        if (!ran || ran->cancelled || ran->outcome.timed_out) lease.give_back();
        if ((ran && ran->cancelled) ||
            (co_await asio::this_coro::cancellation_state).cancelled() != asio::cancellation_type::none) {
            asio::co_spawn(KubeClientAccess::impl(self.client_)->executor,
                           kill_marked(KubeClientAccess::impl(self.client_), killer(self, marker, driver, token)),
                           asio::detached);
            co_return fail(errc::cancelled, "execute in " + self.id_ + " was cancelled; its command is being killed");
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

asio::awaitable<std::optional<Result<kube::ExecOutcome>>> PodExecSandbox::Internals::transfer_in_session(
    PodExecSandbox& self, const std::string& command, std::size_t cap, std::optional<std::string_view> input) {
    if (!self.sessions_ || self.sessions_->unusable) co_return std::nullopt;
    auto ran = co_await run_in_session(self, command, self.options_.default_timeout, cap, input);
    if (ran && !*ran && ran->error().is(errc::connection_closed)) co_return std::nullopt;
    co_return ran;
}

asio::awaitable<Result<kube::ExecOutcome>> PodExecSandbox::Internals::stream(PodExecSandbox& self,
                                                                             std::vector<std::string> argv,
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

asio::awaitable<Result<kube::ExecOutcome>> PodExecSandbox::Internals::transfer(PodExecSandbox& self,
                                                                               std::vector<std::string> argv,
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
        auto outcome = co_await kube::run_exec(KubeClientAccess::impl(self.client_), std::move(target), std::move(run));
        if (outcome) co_return outcome;
        if (auto gone = co_await gone_error(self)) co_return fail(std::move(*gone));
        if (attempt >= 1 || !outcome.error().is(errc::connection_closed)) co_return fail(outcome.error());
    }
}

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

asio::awaitable<Result<ExecuteResponse>> PodExecSandbox::execute(std::string command,
                                                                 std::optional<std::chrono::seconds> timeout,
                                                                 OutputSink sink) {
    if (auto bad = check_command({command}, timeout)) co_return fail(std::move(*bad));
    const std::chrono::seconds limit = timeout.value_or(options_.default_timeout);
    std::vector<std::string> argv{std::move(command)};
    auto outcome =
        co_await Internals::run_marked(*this, std::move(argv), true, std::string(), false, limit, std::move(sink));
    if (!outcome) co_return fail(outcome.error());
    // The sink's own exception, now that the command it stopped has been killed.
    if (outcome->sink_exception) std::rethrow_exception(outcome->sink_exception);
    if (outcome->stopped_by_sink)
        co_return fail(errc::cancelled, "the output sink stopped the command in " + id_ + "; it was killed");
    if (outcome->timed_out) co_return timed_out_response(limit);
    ExecuteResponse r;
    r.exit_code = outcome->exit_code;
    co_return r;
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

}  // namespace kubesandbox
