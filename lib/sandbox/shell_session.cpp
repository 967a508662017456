#include "sandbox/shell_session.hpp"

#include "kube/channel_websocket.hpp"
#include "kube/client_impl.hpp"
#include "proto/channel_protocol.hpp"
#include "util/random.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/websocket.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <optional>

namespace kubesandbox::sandbox {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::size_t max_request_message = 32 * 1024;
constexpr std::size_t max_hello = 256;
constexpr auto end_grace = std::chrono::seconds(5);

std::vector<std::string> exec_protocols() { return {"v5.channel.k8s.io", "v4.channel.k8s.io"}; }

// What a server in front of the API server answers a request line or header it finds too long.
bool refused_as_too_long(const Error& e) {
    return e.http_status == 400 || e.http_status == 413 || e.http_status == 414 || e.http_status == 431;
}

// One command in flight; lives in run()'s frame, reached by the reader through `current`.
struct Command {
    Command(std::string marker, std::size_t cap_, asio::any_io_executor ex)
        : out(marker, TrailerScanner::Kind::stdout_with_status),
          err(std::move(marker), TrailerScanner::Kind::stderr_bare),
          cap(cap_),
          wake(std::move(ex)) {}
    TrailerScanner out;
    TrailerScanner err;
    std::size_t cap;
    kube::ExecOutcome outcome;
    std::optional<Error> error;
    bool finished{};
    asio::steady_timer wake;
};

}  // namespace

struct ShellSession::Private : std::enable_shared_from_this<ShellSession::Private> {
    Private(asio::any_io_executor ex, Clock::duration idle_limit_)
        : strand(asio::make_strand(ex)), idle_timer(strand), idle_limit(idle_limit_), end_timer(strand) {}

    asio::strand<asio::any_io_executor> strand;
    std::unique_ptr<kube::ChannelWebSocket> ws;
    std::optional<kube::ChannelKeepAlive> keep_alive;  // while the reader runs; stopped on the strand
    bool v5{};
    DriverHello hello;
    Command* current{};  // on the strand only
    std::atomic<bool> open{true};
    std::atomic<bool> busy{};
    std::atomic<bool> dirty{};
    std::atomic<bool> ending{};
    // Ends the session once it has been idle for idle_limit, so that an unused sandbox holds no
    // connection and no shell, and a pending read does not keep an io_context running for long.
    asio::steady_timer idle_timer;
    Clock::duration idle_limit;
    std::uint64_t idle_generation{};  // on the strand only: tells a stale expiry from the current one
    asio::steady_timer end_timer;
    std::string token;  // in the driver's argv: the kill script checks it is this session's driver
    // Sent on stdin once, never shown to a command: the trailers are `marker`.N after command N.
    std::string marker;
    // Sent with it: command N's own marker is `exec_prefix`N (in its environment, for the kill).
    std::string exec_prefix;
    std::atomic<std::uint64_t> commands{};      // commands sent so far; changed on the strand only
    std::span<const std::string_view> scripts;  // the driver keeps them: requests name them

    void arm_idle_timer() {
        const std::uint64_t generation = ++idle_generation;
        idle_timer.expires_after(idle_limit);
        idle_timer.async_wait([weak = weak_from_this(), generation](boost::system::error_code ec) {
            auto self = weak.lock();
            if (ec || !self || self->idle_generation != generation) return;
            self->end_on_strand();
        });
    }
    void disarm_idle_timer() {
        ++idle_generation;
        idle_timer.cancel();
    }

    void finish(Command& cmd, std::optional<Error> error) {
        cmd.error = std::move(error);
        cmd.finished = true;
        current = nullptr;
        cmd.wake.cancel();
    }

    void broke(Error why) {
        open = false;
        keep_alive.reset();
        disarm_idle_timer();
        end_timer.cancel();
        if (current) finish(*current, std::move(why));
        if (ws) ws->next_layer().close();
    }

    // Output between commands: something the last command left running still writes here.
    void on_output(std::uint8_t channel, std::string_view data) {
        if (!current) {
            if (!data.empty()) dirty = true;
            return;
        }
        Command& cmd = *current;
        const bool ok = channel == 1
                            ? cmd.out.feed(data, cmd.outcome.stdout_data, cmd.cap, cmd.outcome.stdout_truncated)
                            : cmd.err.feed(data, cmd.outcome.stderr_data, cmd.cap, cmd.outcome.stderr_truncated);
        if (!ok) {
            broke(make_error(errc::invalid_response, "the sandbox's shell session sent a malformed trailer"));
            return;
        }
        if (cmd.out.stray() || cmd.err.stray()) dirty = true;
        if (cmd.out.done() && cmd.err.done()) {
            cmd.outcome.exit_code = cmd.out.status();
            finish(cmd, std::nullopt);
        }
    }

    static asio::awaitable<void> read_loop(std::shared_ptr<Private> self) {
        beast::flat_buffer buffer;
        for (;;) {
            auto [ec, n] = co_await self->ws->async_read(buffer, use_tuple);
            (void)n;
            if (ec) {
                const bool silent = self->keep_alive && self->keep_alive->timed_out();
                Error lost = make_error(errc::connection_closed,
                                        silent ? "the sandbox's shell session went silent: no answer to a ping"
                                               : "the sandbox's shell session ended: " + ec.message());
                lost.lower_code = ec;
                self->broke(std::move(lost));
                break;
            }
            std::string_view message(static_cast<const char*>(buffer.data().data()), buffer.size());
            auto frame = proto::decode_channel_frame(message);
            if (frame && (frame->channel == 1 || frame->channel == 2)) {
                self->on_output(frame->channel, frame->payload);
            } else if (frame && frame->channel == 3) {
                // The status: the driver itself ended (killed, or its input closed).
                self->broke(make_error(errc::connection_closed,
                                       "the sandbox's shell session ended before the command finished"));
            }
            buffer.consume(buffer.size());
            if (!self->open) break;
        }
    }

    void end_on_strand() {
        if (ending.exchange(true)) return;
        disarm_idle_timer();
        if (!open || !ws) return;
        if (!v5 || current) {
            // No way to close stdin alone (v4), or a command still runs: cut the connection.
            broke(make_error(errc::cancelled, "the shell session was ended"));
            return;
        }
        // The driver reads end of input and exits; the reader sees the status, then the close.
        asio::co_spawn(
            strand,
            [self = shared_from_this()]() -> asio::awaitable<void> {
                std::string close = proto::encode_close_signal(0);
                auto [ec, n] = co_await self->ws->async_write(asio::buffer(close), use_tuple);
                (void)n;
                if (ec) {
                    self->broke(make_error(errc::connection_closed, "the shell session was ended"));
                    co_return;
                }
                // A server that ends an exec only once every holder of its output has closed it
                // would keep the session open while something an earlier command started runs:
                // the connection is cut after a grace period (broke() cancels the wait).
                self->end_timer.expires_after(end_grace);
                co_await self->end_timer.async_wait(use_tuple);
                if (self->open) self->broke(make_error(errc::cancelled, "the shell session was ended"));
            },
            asio::detached);
    }
};

ShellSession::ShellSession(std::shared_ptr<Private> state) : state_(std::move(state)) {}

ShellSession::~ShellSession() { end(); }

const DriverHello& ShellSession::driver() const { return state_->hello; }

const std::string& ShellSession::token() const { return state_->token; }

std::string ShellSession::next_exec_marker() const {
    return command_exec_marker(state_->exec_prefix, state_->commands.load() + 1);
}

bool ShellSession::reusable() const { return state_->open && !state_->busy && !state_->dirty && !state_->ending; }

void ShellSession::end() {
    auto state = state_;
    asio::post(state->strand, [state] { state->end_on_strand(); });
}

asio::awaitable<Result<std::shared_ptr<ShellSession>>> ShellSession::open(std::shared_ptr<KubeClient::Impl> client,
                                                                          kube::ExecTarget driver,
                                                                          Clock::duration idle_limit,
                                                                          std::span<const std::string_view> scripts) {
    auto state = std::make_shared<Private>(client->executor, idle_limit);
    state->token = util::random_hex(8);
    state->marker = util::random_hex(16);
    state->exec_prefix = util::random_hex(6);
    state->scripts = scripts.first(std::min(scripts.size(), max_stored_scripts));
    driver.command.push_back(state->token);
    driver.command.insert(driver.command.end(), state->scripts.begin(), state->scripts.end());
    auto op = [client, state, driver = std::move(driver)]() -> asio::awaitable<Result<std::shared_ptr<ShellSession>>> {
        co_await asio::this_coro::throw_if_cancelled(false);
        auto opened =
            co_await kube::open_channel_websocket(*client, kube::exec_request_target(driver), exec_protocols());
        if (!opened) co_return fail(opened.error());
        state->v5 = opened->protocol == "v5.channel.k8s.io";
        state->ws = std::move(opened->ws);
        // The session's marker goes out at once: the driver reads it after its greeting and
        // then makes ready for the first command.
        {
            const std::string first = '\0' + state->marker + ' ' + state->exec_prefix + '\n';
            auto [ec, written] = co_await state->ws->async_write(asio::buffer(first), use_tuple);
            (void)written;
            if (ec) {
                state->open = false;
                state->ws->next_layer().close();
                co_return fail(errc::connection_closed, "the sandbox's shell session did not start: " + ec.message());
            }
        }
        // The driver's first line, within the client's request timeout.
        // The flags outlive this frame: a handler already queued may run after it.
        struct Watch {
            bool expired{};
            bool done{};
        };
        auto watch = std::make_shared<Watch>();
        asio::steady_timer watchdog(state->strand);
        watchdog.expires_after(client->options.request_timeout);
        watchdog.async_wait([watch, state](boost::system::error_code ec) {
            if (ec || watch->done) return;
            watch->expired = true;
            state->ws->next_layer().close();
        });
        std::string line;
        beast::flat_buffer buffer;
        std::optional<Error> failure;
        for (;;) {
            auto [ec, n] = co_await state->ws->async_read(buffer, use_tuple);
            (void)n;
            if (ec) {
                failure = make_error(errc::connection_closed,
                                     watch->expired ? "the sandbox's shell session did not start in time"
                                                    : "the sandbox's shell session did not start: " + ec.message());
                break;
            }
            std::string_view message(static_cast<const char*>(buffer.data().data()), buffer.size());
            auto frame = proto::decode_channel_frame(message);
            if (frame && frame->channel == 3) {
                failure = make_error(errc::pod_failed, "the sandbox's shell session exited at start");
                break;
            }
            if (frame && frame->channel == 1) line.append(frame->payload);
            buffer.consume(buffer.size());
            const std::size_t eol = line.find('\n');
            if (eol != std::string::npos) {
                auto hello = parse_driver_hello(std::string_view(line).substr(0, eol));
                if (!hello || eol + 1 != line.size()) {
                    failure = make_error(errc::invalid_response, "the sandbox's shell session sent no greeting");
                    break;
                }
                state->hello = *hello;
                break;
            }
            if (line.size() > max_hello) {
                failure = make_error(errc::invalid_response, "the sandbox's shell session sent no greeting");
                break;
            }
        }
        watch->done = true;
        watchdog.cancel();
        if (failure) {
            state->open = false;
            state->ws->next_layer().close();
            co_return fail(std::move(*failure));
        }
        state->keep_alive.emplace(*state->ws, state->strand);
        asio::co_spawn(state->strand, Private::read_loop(state), asio::detached);
        co_return std::make_shared<ShellSession>(state);
    };
    co_return co_await asio::co_spawn(state->strand, std::move(op), asio::use_awaitable);
}

asio::awaitable<Result<ShellRun>> ShellSession::run(std::string_view command, std::size_t cap,
                                                    std::optional<Clock::duration> timeout,
                                                    std::optional<std::string_view> input) {
    auto state = state_;
    const bool with_input = input.has_value();
    // Copied with the request: the caller's frame may be gone when the coroutine below runs.
    std::string input_bytes(input.value_or(std::string_view()));
    auto op = [state, command = std::string(command), cap, timeout, with_input,
               input_bytes = std::move(input_bytes)]() mutable -> asio::awaitable<Result<ShellRun>> {
        co_await asio::this_coro::throw_if_cancelled(false);
        if (!state->open || state->current || state->ending) {
            ShellRun unsent;
            unsent.not_sent = true;
            co_return unsent;
        }
        state->busy = true;
        state->disarm_idle_timer();
        const std::uint64_t number = ++state->commands;
        std::string request = encode_shell_request(command, state->marker, number, state->scripts, with_input);
        request.append(input_bytes);
        input_bytes = std::string();
        Command cmd(command_trailer(state->marker, number), cap, state->strand);
        state->current = &cmd;
        cmd.wake.expires_after(timeout ? *timeout : Clock::duration::max());
        static constexpr char stdin_channel = 0;
        std::string_view rest(request);
        while (!rest.empty() && !cmd.finished) {
            const std::size_t n = std::min(max_request_message, rest.size());
            const std::array<asio::const_buffer, 2> msg{asio::buffer(&stdin_channel, 1), asio::buffer(rest.data(), n)};
            auto [ec, written] = co_await state->ws->async_write(msg, use_tuple);
            (void)written;
            if (ec && !cmd.finished) {
                Error lost = make_error(errc::connection_closed, "the sandbox's shell session broke: " + ec.message());
                lost.lower_code = ec;
                state->broke(std::move(lost));
            }
            rest.remove_prefix(n);
        }
        boost::system::error_code waited;
        if (!cmd.finished) std::tie(waited) = co_await cmd.wake.async_wait(use_tuple);
        ShellRun result;
        if (!cmd.finished) {
            // Timed out, or the caller was cancelled: the driver still waits for the command.
            state->current = nullptr;
            state->broke(make_error(errc::cancelled, "the shell session was ended"));
            result.cancelled = waited == asio::error::operation_aborted;
            result.outcome.timed_out = !result.cancelled;
            co_return result;
        }
        if (cmd.error) co_return fail(std::move(*cmd.error));
        if (with_input && cmd.outcome.exit_code != 0) state->dirty = true;
        state->busy = false;
        state->arm_idle_timer();
        result.outcome = std::move(cmd.outcome);
        co_return result;
    };
    co_return co_await asio::co_spawn(state->strand, std::move(op), asio::use_awaitable);
}

ShellSessionPool::ShellSessionPool(std::shared_ptr<KubeClient::Impl> client, kube::ExecTarget driver,
                                   std::size_t max_sessions, Clock::duration idle_limit,
                                   std::span<const std::string_view> scripts)
    : client_(std::move(client)),
      driver_(std::move(driver)),
      max_sessions_(max_sessions),
      idle_limit_(idle_limit),
      scripts_(scripts) {}

ShellSessionPool::~ShellSessionPool() = default;  // each idle session ends in its destructor

asio::awaitable<Result<std::shared_ptr<ShellSession>>> ShellSessionPool::acquire() {
    std::vector<Idle> stale;  // ended outside the lock
    std::shared_ptr<ShellSession> found;
    {
        std::lock_guard lock(mutex_);
        const auto now = Clock::now();
        while (!idle_.empty()) {
            Idle last = std::move(idle_.back());
            idle_.pop_back();
            // A margin before the session's own idle timer ends it (armed a little earlier).
            if (last.session->reusable() && now - last.since < idle_limit_ * 3 / 4) {
                found = std::move(last.session);
                break;
            }
            stale.push_back(std::move(last));
        }
        // All the sessions this sandbox keeps are busy: the caller runs its command in an exec
        // of its own rather than start (and soon end) one more shell.
        if (!found && in_use_ >= max_sessions_) co_return std::shared_ptr<ShellSession>();
        ++in_use_;
        if (!found) ++opened_;
    }
    stale.clear();
    if (found) co_return found;
    // The count goes back down unless a session comes out (an exception included).
    struct Undo {
        ShellSessionPool* pool;
        ~Undo() {
            if (!pool) return;
            std::lock_guard lock(pool->mutex_);
            --pool->in_use_;
        }
    } undo{this};
    const bool with_scripts = !scripts_.empty() && !scripts_refused_;
    auto opened = co_await ShellSession::open(client_, driver_, idle_limit_,
                                              with_scripts ? scripts_ : std::span<const std::string_view>());
    if (!opened && with_scripts && refused_as_too_long(opened.error())) {
        // The scripts make the exec's URL some 7 KB longer: a proxy with a small limit on request
        // lines (nginx's 8 KB) answers so. Without them, commands carry their scripts.
        opened = co_await ShellSession::open(client_, driver_, idle_limit_);
        if (opened) scripts_refused_ = true;
    }
    if (opened) undo.pool = nullptr;
    co_return opened;
}

void ShellSessionPool::release(std::shared_ptr<ShellSession> session) {
    std::lock_guard lock(mutex_);
    --in_use_;
    // Not kept: ended by its destructor (outside the lock, when `session` goes).
    if (!session->reusable() || idle_.size() >= max_sessions_) return;
    idle_.push_back(Idle{std::move(session), Clock::now()});
}

std::size_t ShellSessionPool::idle_count() const {
    std::lock_guard lock(mutex_);
    return idle_.size();
}

std::size_t ShellSessionPool::reusable_count() const {
    std::lock_guard lock(mutex_);
    std::size_t n = 0;
    for (const auto& idle : idle_)
        if (idle.session->reusable()) ++n;
    return n;
}

std::size_t ShellSessionPool::opened_count() const {
    std::lock_guard lock(mutex_);
    return opened_;
}

}  // namespace kubesandbox::sandbox
