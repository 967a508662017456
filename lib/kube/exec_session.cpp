#include "kube/exec_session.hpp"

#include "kube/channel_websocket.hpp"
#include "kube/client_impl.hpp"
#include "proto/channel_protocol.hpp"
#include "proto/exec_status.hpp"
#include "proto/status.hpp"
#include "util/large_string.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/websocket.hpp>

#include <array>

namespace kubesandbox::kube {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using namespace asio::experimental::awaitable_operators;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

namespace {

// Input per stdin message: with a client's 8-byte frame header (a mask included) and the channel
// byte, a message is exactly four 16 KiB TLS records, sealed and sent at once.
constexpr std::size_t max_stdin_message = 64 * 1024 - 9;

using WebSocket = ChannelWebSocket;

}  // namespace

std::string exec_request_target(const ExecTarget& t) {
    ResourcePath p;
    p.plural = "pods";
    p.namespace_name = t.namespace_name;
    p.name = t.pod;
    p.subresource = "exec";
    std::vector<std::pair<std::string, std::string>> q;
    for (const auto& arg : t.command) q.emplace_back("command", arg);
    if (!t.container.empty()) q.emplace_back("container", t.container);
    q.emplace_back("stderr", "true");
    if (t.stdin) q.emplace_back("stdin", "true");
    q.emplace_back("stdout", "true");
    return p.str() + proto::query_string(q);
}

namespace {

struct Session {
    std::unique_ptr<WebSocket> ws;
    bool v5 = false;
};

// Built outside the coroutine: g++ 12 rejects braced lists of literals in coroutine calls.
std::vector<std::string> exec_protocols() { return {"v5.channel.k8s.io", "v4.channel.k8s.io"}; }

asio::awaitable<Result<Session>> open_session(KubeClient::Impl& client, const ExecTarget& target) {
    auto opened = co_await open_channel_websocket(client, exec_request_target(target), exec_protocols());
    if (!opened) co_return fail(opened.error());
    Session s;
    s.v5 = opened->protocol == "v5.channel.k8s.io";
    s.ws = std::move(opened->ws);
    co_return s;
}

struct ReadResult {
    std::optional<Error> error;
};

asio::awaitable<ReadResult> read_loop(WebSocket& ws, ExecOutcome& out, std::string& status,
                                      const ExecRunOptions& options, bool& finished) {
    beast::flat_buffer buffer;
    for (;;) {
        auto [ec, n] = co_await ws.async_read(buffer, use_tuple);
        if (ec) {
            finished = true;
            ws.next_layer().close();  // wakes a stdin writer blocked on a peer that stopped reading
            if (ec == websocket::error::closed) {
                out.closed_cleanly = ws.reason().code == websocket::close_code::normal;
                if (!out.closed_cleanly && status.empty())
                    co_return ReadResult{make_error(errc::connection_closed, "exec WebSocket closed with code " +
                                                                                 std::to_string(ws.reason().code))};
                co_return ReadResult{};
            }
            Error lost = make_error(errc::connection_closed, "exec connection lost: " + ec.message());
            lost.lower_code = ec;  // keep the Asio/Beast/SSL cause
            co_return ReadResult{std::move(lost)};
        }
        if (!ws.got_binary()) {
            finished = true;
            ws.next_layer().close();
            co_return ReadResult{
                make_error(errc::invalid_response, "exec server sent a text message on a binary protocol")};
        }
        std::string_view message(static_cast<const char*>(buffer.data().data()), buffer.size());
        if (!message.empty()) {
            auto frame = proto::decode_channel_frame(message);
            if (frame) {
                if (options.on_output && (frame->channel == 1 || frame->channel == 2)) {
                    // Awaited before the next read: a slow consumer holds the server back (TCP).
                    bool go = false;
                    try {
                        go = co_await options.on_output(frame->channel, frame->payload);
                    } catch (...) {
                        out.sink_exception = std::current_exception();
                    }
                    if (!go) {
                        out.stopped_by_sink = true;
                        finished = true;
                        ws.next_layer().close();
                        co_return ReadResult{};
                    }
                    buffer.consume(buffer.size());
                    continue;
                }
                switch (frame->channel) {
                    case 1:
                        util::append_capped(out.stdout_data, frame->payload, options.max_stdout, out.stdout_truncated);
                        break;
                    case 2:
                        util::append_capped(out.stderr_data, frame->payload, options.max_stderr, out.stderr_truncated);
                        break;
                    case 3:
                        if (status.size() < 1024 * 1024) status.append(frame->payload);
                        break;
                    default:
                        break;  // 255 close signals and unknown channels need no action here
                }
            }
        }
        buffer.consume(buffer.size());
        if (options.stop_at_cap && (out.stdout_truncated || out.stderr_truncated)) {
            finished = true;
            ws.next_layer().close();
            co_return ReadResult{};
        }
    }
}

// Sends the input pulled from `source` as stdin messages, then (v5) its end. An error from the
// source closes the connection (no end of input is sent) and is returned.
asio::awaitable<std::optional<Error>> write_stdin(
    WebSocket& ws, const std::function<asio::awaitable<Result<std::string_view>>()>& source, bool v5,
    const bool& finished) {
    while (!finished) {
        Result<std::string_view> piece = co_await source();
        if (!piece) {
            ws.next_layer().close();
            co_return piece.error();
        }
        if (piece->empty()) break;
        while (!piece->empty() && !finished) {
            const std::size_t n = std::min(max_stdin_message, piece->size());
            // The channel byte and the payload as two buffers: the input is not copied once more.
            static constexpr char stdin_channel = 0;
            const std::array<asio::const_buffer, 2> msg{asio::buffer(&stdin_channel, 1),
                                                        asio::buffer(piece->data(), n)};
            auto [ec, written] = co_await ws.async_write(msg, use_tuple);
            // The command may exit without reading its input: the reader reports the outcome.
            if (ec) co_return std::nullopt;
            piece->remove_prefix(n);
        }
    }
    if (v5 && !finished) {
        std::string close = proto::encode_close_signal(0);
        co_await ws.async_write(asio::buffer(close), use_tuple);
    }
    co_return std::nullopt;
}

asio::awaitable<Result<ExecOutcome>> run_on_strand(std::shared_ptr<KubeClient::Impl> client, ExecTarget target,
                                                   ExecRunOptions options) {
    auto session = co_await open_session(*client, target);
    if (!session) co_return fail(session.error());
    // The command went out in the request; its copy (the launcher script and the command, ~1 KiB)
    // need not stay for the whole session.
    std::vector<std::string>().swap(target.command);
    ExecOutcome out;
    out.protocol = session->v5 ? "v5.channel.k8s.io" : "v4.channel.k8s.io";
    WebSocket& ws = *session->ws;

    // Watchdog: on the deadline, close the socket; the read loop then ends.
    bool finished = false;
    struct Watch {
        bool timed_out = false;
        bool done = false;  // set before `ws` dies, so a late timer handler does nothing
    };
    auto watch = std::make_shared<Watch>();
    auto timer = std::make_shared<asio::steady_timer>(co_await asio::this_coro::executor);
    // However this frame ends (an exception included), a late timer handler must not touch `ws`.
    struct Disarm {
        std::shared_ptr<Watch> watch;
        std::shared_ptr<asio::steady_timer> timer;
        ~Disarm() {
            watch->done = true;
            timer->cancel();
        }
    } disarm{watch, timer};
    if (options.timeout) {
        timer->expires_after(*options.timeout);
        timer->async_wait([timer, watch, &ws](boost::system::error_code ec) {
            if (ec || watch->done) return;
            watch->timed_out = true;
            ws.next_layer().close();
        });
    }

    ChannelKeepAlive keep_alive(ws, co_await asio::this_coro::executor);
    std::string status;
    ReadResult read;
    std::optional<Error> source_error;
    if (target.stdin) {
        auto source = std::move(options.stdin_source);
        if (!source) {
            // The whole input as one piece, then its end.
            const std::string* input = options.stdin_shared ? options.stdin_shared.get() : &options.stdin_data;
            source = [input, sent = false]() mutable -> asio::awaitable<Result<std::string_view>> {
                std::string_view piece = sent ? std::string_view{} : std::string_view{*input};
                sent = true;
                co_return piece;
            };
        }
        auto both =
            co_await (read_loop(ws, out, status, options, finished) && write_stdin(ws, source, session->v5, finished));
        read = std::move(std::get<0>(both));
        source_error = std::move(std::get<1>(both));
    } else {
        read = co_await read_loop(ws, out, status, options, finished);
    }
    watch->done = true;
    timer->cancel();
    ws.next_layer().close();
    if (source_error) co_return fail(std::move(*source_error));
    if (keep_alive.timed_out() && read.error) {
        Error silent =
            make_error(errc::connection_closed, "exec connection lost: the server went silent (no answer to a ping)");
        silent.lower_code = read.error->lower_code;
        read.error = std::move(silent);
    }
    if (options.stop_at_cap && (out.stdout_truncated || out.stderr_truncated)) co_return out;
    if (watch->timed_out) {
        out.timed_out = true;
        co_return out;
    }
    if (!status.empty()) {
        auto code = proto::decode_exec_status(status);
        if (!code) co_return fail(code.error());
        out.exit_code = *code;
        co_return out;
    }
    if (read.error) co_return fail(std::move(*read.error));
    co_return out;
}

}  // namespace

asio::awaitable<Result<ExecOutcome>> run_exec(std::shared_ptr<KubeClient::Impl> client, ExecTarget target,
                                              ExecRunOptions options) {
    // Every operation of one session runs on its own strand: safe on a multi-threaded io_context.
    auto strand = asio::make_strand(client->executor);
    auto op = [client = std::move(client), target = std::move(target),
               options = std::move(options)]() mutable -> asio::awaitable<Result<ExecOutcome>> {
        // A cancelled caller gets the aborted operations as errors, never an exception.
        co_await asio::this_coro::throw_if_cancelled(false);
        co_return co_await run_on_strand(std::move(client), std::move(target), std::move(options));
    };
    co_return co_await asio::co_spawn(strand, std::move(op), asio::use_awaitable);
}

}  // namespace kubesandbox::kube
