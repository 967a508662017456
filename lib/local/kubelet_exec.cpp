// The local kubelet's exec: the command starts in the pod (from its spawner, or a
// kubesandbox-enter of its own) and its streams travel over the Kubernetes WebSocket channel
// protocol (v5 with close, or v4).
#include "local/kubelet.hpp"

#include "local/kubelet_core.hpp"
#include "proto/status.hpp"
#include "util/child_process.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/json/serialize.hpp>
#include <boost/url/parse.hpp>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace kubesandbox::local {

namespace kubelet_detail {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using boost::system::error_code;
using namespace std::chrono_literals;
using namespace asio::experimental::awaitable_operators;

namespace {

// Output read per exec message. A full message (4-byte frame header, channel byte, data) is
// exactly four 16 KiB TLS records: 32 KiB of data made two full records and a 5-byte third, a
// record and a send of its own. Larger messages halve the per-message work on both sides.
constexpr std::size_t kChunk = 64 * 1024 - 5;

// Exec stdin and stdout pipes hold a megabyte where the budget allows: the writer and the reader
// then wake each other per megabyte instead of per few pages (a 100 MB upload: +15-20%).
constexpr int kExecPipeBytes = 1024 * 1024;

// A byte stream for Beast's websocket: replays bytes the HTTP server read past the request head,
// then reads the socket; every inbound byte goes through a FrameSniffer.
class ExecStream {
public:
    using executor_type = asio::any_io_executor;
    ExecStream(net::AnyStream& s, beast::flat_buffer& pre, FrameSniffer& sniffer)
        : s_(&s), pre_(&pre), sniffer_(&sniffer) {}
    executor_type get_executor() { return s_->get_executor(); }
    net::AnyStream& next() { return *s_; }

    template <class MutableBufferSequence, class Token>
    auto async_read_some(const MutableBufferSequence& buffers, Token&& token) {
        asio::mutable_buffer b;
        for (auto it = asio::buffer_sequence_begin(buffers); it != asio::buffer_sequence_end(buffers); ++it) {
            if (asio::mutable_buffer(*it).size() != 0) {
                b = *it;
                break;
            }
        }
        return asio::async_initiate<Token, void(error_code, std::size_t)>(
            [this](auto handler, asio::mutable_buffer buf) {
                auto ex = asio::get_associated_executor(handler, s_->get_executor());
                if (pre_->size() > 0) {
                    std::size_t n = asio::buffer_copy(buf, pre_->data());
                    pre_->consume(n);
                    sniffer_->feed(static_cast<const unsigned char*>(buf.data()), n);
                    asio::post(ex, [h = std::move(handler), n]() mutable { std::move(h)(error_code{}, n); });
                    return;
                }
                s_->async_read_some(buf, asio::bind_executor(ex, [this, buf, h = std::move(handler)](
                                                                     error_code ec, std::size_t n) mutable {
                                        sniffer_->feed(static_cast<const unsigned char*>(buf.data()), n);
                                        std::move(h)(ec, n);
                                    }));
            },
            token, b);
    }

    template <class ConstBufferSequence, class Token>
    auto async_write_some(const ConstBufferSequence& buffers, Token&& token) {
        return s_->async_write_some(buffers, std::forward<Token>(token));
    }

private:
    net::AnyStream* s_;
    beast::flat_buffer* pre_;
    FrameSniffer* sniffer_;
};

void beast_close_socket(ExecStream& s) { s.next().close(); }
[[maybe_unused]] void teardown(beast::role_type role, ExecStream& s, error_code& ec) {
    net::teardown(role, s.next(), ec);
}
template <class TeardownHandler>
void async_teardown(beast::role_type role, ExecStream& s, TeardownHandler&& handler) {
    net::async_teardown(role, s.next(), std::forward<TeardownHandler>(handler));
}

// Serialises writes of several coroutines on one executor (a timer used as a condition variable).
class WriteGate {
public:
    explicit WriteGate(asio::any_io_executor ex) : cv_(ex) {}
    asio::awaitable<void> lock() {
        while (busy_) {
            cv_.expires_at(asio::steady_timer::time_point::max());
            co_await cv_.async_wait(tuple_awaitable);
        }
        busy_ = true;
    }
    void unlock() {
        busy_ = false;
        cv_.cancel();
    }

private:
    bool busy_ = false;
    asio::steady_timer cv_;
};

struct ExecSession {
    using Ws = websocket::stream<ExecStream>;
    ExecSession(asio::any_io_executor ex, net::AnyStream& s, beast::flat_buffer& pre)
        : ws(s, pre, sniffer), gate(ex), in_sd(ex), out_sd(ex), err_sd(ex), close_timer(ex), watch_timer(ex) {}
    ~ExecSession() {
        if (pidfd >= 0) ::close(pidfd);
    }
    ExecSession(const ExecSession&) = delete;
    ExecSession& operator=(const ExecSession&) = delete;
    FrameSniffer sniffer;
    Ws ws;
    WriteGate gate;
    bool v5 = true;
    asio::posix::stream_descriptor in_sd, out_sd, err_sd;
    util::GrownPipe in_room, out_room;  // see kExecPipeBytes
    asio::steady_timer close_timer, watch_timer;
    pid_t pid = -1;
    int pidfd = -1;
    std::set<pid_t>* exec_pids = nullptr;  // the kubelet's, holding `pid` until it is reaped
    std::shared_ptr<PodSpawner> spawner;   // or the pod's spawner started the command
    std::uint64_t spawn_id = 0;
    bool exited = false;
    bool reader_done = false;
    bool closing = false;
    int pumps_left = 0;
    int pumps_writing = 0;
    bool holding = false;  // a pump's message was held for the other's write to send
    std::uint64_t progress = 0;

    asio::awaitable<error_code> send(unsigned char channel, const void* data, std::size_t n) {
        std::string msg(1, static_cast<char>(channel));
        msg.append(static_cast<const char*>(data), n);
        co_await gate.lock();
        auto [ec, written] = co_await ws.async_write(asio::buffer(msg), tuple_awaitable);
        (void)written;
        gate.unlock();
        co_return ec;
    }

    // Ends the session's hold on its command: the kubelet's relay is killed (the command, in a
    // session of its own, runs on until a client kills it), or the spawner's answer no longer awaited.
    void kill_process() {
        if (spawner && !exited) spawner->abandon(spawn_id);
        if (pid > 0 && !exited) {
            ::kill(-pid, SIGKILL);
            ::kill(pid, SIGKILL);
        }
    }

    // Output both pumps read in the same turn (a command's last stdout and stderr bytes, a shell
    // session's two trailers) leaves in one TCP segment, so the client wakes once for it: a pump
    // with bytes yields a turn, and while the other pump has bytes waiting too, its message's
    // records are held for the other's write to send (see net::AnyStream::hold_writes).
    asio::awaitable<void> pump(asio::posix::stream_descriptor& sd, unsigned char channel, util::GrownPipe* room) {
        std::vector<char> buf(kChunk + 1);
        buf[0] = static_cast<char>(channel);
        for (;;) {
            auto [ec, n] = co_await sd.async_read_some(asio::buffer(buf.data() + 1, kChunk), tuple_awaitable);
            if (n > 0) {
                ++progress;
                ++pumps_writing;
                if (pumps_left > 1) co_await asio::post(ws.get_executor(), tuple_awaitable);
                co_await gate.lock();
                const bool hold = pumps_writing > 1;
                struct Held {
                    net::AnyStream& stream;
                    ~Held() { stream.hold_writes(false); }  // also if the write throws
                } held{ws.next_layer().next()};
                held.stream.hold_writes(hold);
                auto [wec, w] = co_await ws.async_write(asio::buffer(buf.data(), n + 1), tuple_awaitable);
                (void)w;
                held.stream.hold_writes(false);
                holding = hold && !wec;
                gate.unlock();
                --pumps_writing;
                if (wec) {
                    kill_process();  // nobody reads the output any more
                    break;
                }
            }
            if (ec) break;
        }
        if (room && sd.is_open()) room->shrink(sd.native_handle());
        error_code ignored;
        sd.close(ignored);
        if (--pumps_left == 0) watch_timer.cancel();
        co_await release_held();
    }

    // Sends held records that no other write took along (the other pump ended without one).
    asio::awaitable<void> release_held() {
        if (!holding || pumps_writing > 0) co_return;
        co_await gate.lock();
        if (holding) {
            holding = false;
            co_await ws.next_layer().next().async_flush(tuple_awaitable);
        }
        gate.unlock();
    }

    // After the process exited, output pipes may be held open by its background children:
    // stop pumping once nothing flows for a while.
    asio::awaitable<void> drain_watch() {
        std::uint64_t last = progress;
        while (pumps_left > 0) {
            watch_timer.expires_after(1s);
            co_await watch_timer.async_wait(tuple_awaitable);
            if (pumps_left == 0) break;
            if (progress == last && pumps_writing == 0) {
                error_code ignored;
                out_sd.cancel(ignored);
                err_sd.cancel(ignored);
                break;
            }
            last = progress;
        }
    }

    asio::awaitable<void> outputs(bool out, bool err) {
        if (out && err) {
            co_await (pump(out_sd, 1, &out_room) && pump(err_sd, 2, nullptr));
        } else if (out) {
            co_await pump(out_sd, 1, &out_room);
        } else if (err) {
            co_await pump(err_sd, 2, nullptr);
        }
    }

    asio::awaitable<int> wait_process() {
        // Not `?:` over two co_awaits: g++ 12 may destroy such a result early.
        std::optional<int> reaped;
        if (spawner) reaped = co_await spawner->wait(spawn_id);
        else reaped = co_await reap_child(ws.get_executor(), pidfd, pid);
        if (!reaped) {
            kill_process();  // cancelled: the command must not outlive its session
            co_return 255;
        }
        int code = *reaped;
        exited = true;
        // Reaped: the pid may be reused from now on, so the shutdown's kill list forgets it.
        if (exec_pids && pid > 0) exec_pids->erase(pid);
        close_stdin();
        co_return code;
    }

    // The pipe shrinks back first, so that its pages return to the budget (util::GrownPipe).
    void close_stdin() {
        if (!in_sd.is_open()) return;
        in_room.shrink(in_sd.native_handle());
        error_code ignored;
        in_sd.close(ignored);
    }

    asio::awaitable<void> reader(bool want_stdin) {
        beast::flat_buffer buf;
        for (;;) {
            auto [ec, n] = co_await ws.async_read(buf, tuple_awaitable);
            (void)n;
            if (ec) break;
            bool violation = !ws.got_binary() || sniffer.fragmented();
            auto data = static_cast<const unsigned char*>(buf.data().data());
            std::size_t size = buf.size();
            if (!violation && size > 0) {
                unsigned ch = data[0];
                if (ch == 0) {
                    if (want_stdin && in_sd.is_open() && size > 1) {
                        auto [wec, w] =
                            co_await asio::async_write(in_sd, asio::buffer(data + 1, size - 1), tuple_awaitable);
                        (void)w;
                        if (wec) close_stdin();
                    }
                } else if (ch == 255 && v5) {
                    if (size != 2 || data[1] > 4) {
                        violation = true;
                    } else if (data[1] == 0) {
                        close_stdin();
                    }
                }
                // Channel 4 (resize) and others: ignored; there is no terminal.
            }
            buf.consume(buf.size());
            if (violation) {
                co_await gate.lock();
                closing = true;
                co_await ws.async_close(websocket::close_code::protocol_error, tuple_awaitable);
                gate.unlock();
                break;
            }
        }
        reader_done = true;
        close_timer.cancel();
        // Client gone (or protocol error): no one will read the result.
        if (!closing) kill_process();
        close_stdin();
        if (closing) kill_process();
    }

    asio::awaitable<void> main_flow(bool out, bool err, const std::vector<std::string>& command) {
        pumps_left = (out ? 1 : 0) + (err ? 1 : 0);
        co_await (outputs(out, err) && run_until_exit());
        int code = exit_code;
        if (!reader_done && !closing) {
            auto status = json::serialize(exec_exit_status(code, command));
            co_await send(3, status.data(), status.size());
            co_await gate.lock();
            closing = true;
            co_await ws.async_close(websocket::close_code::normal, tuple_awaitable);
            gate.unlock();
        }
        // Give the client a moment to answer the close, then cut the connection.
        if (!reader_done) {
            close_timer.expires_after(5s);
            co_await close_timer.async_wait(tuple_awaitable);
            if (!reader_done) ws.next_layer().next().close();
        }
    }

    int exit_code = 255;
    asio::awaitable<void> run_until_exit() {
        exit_code = co_await wait_process();
        if (pumps_left > 0) co_await drain_watch();
    }
};

}  // namespace

}  // namespace kubelet_detail

using namespace kubelet_detail;

asio::awaitable<void> Kubelet::serve_exec(StreamRequest request) {
    auto core = impl_->core;
    auto& stream = request.stream;
    unsigned version = request.request.version();
    ExecQuery q = parse_exec_query(request.request.target());
    std::string container = q.container;
    if (auto bad = pick_container(request.pod, q.has_container, container)) {
        co_await write_status(stream, version, 400, "BadRequest", *bad);
        co_return;
    }
    if (q.command.empty()) {
        co_await write_status(stream, version, 400, "BadRequest",
                              "you must specify at least one command for the container");
        co_return;
    }
    if (!q.in && !q.out && !q.err) {
        co_await write_status(stream, version, 400, "BadRequest",
                              "you must specify at least 1 of stdin, stdout, stderr");
        co_return;
    }
    if (q.tty) q.err = false;  // a terminal merges stderr into stdout
    if (!websocket::is_upgrade(request.request)) {
        co_await write_status(
            stream, version, 400, "BadRequest",
            "the local cluster serves exec over WebSocket only (v5.channel.k8s.io, v4.channel.k8s.io)");
        co_return;
    }
    std::string protocol;
    {
        std::string offered(request.request[http::field::sec_websocket_protocol]);
        std::set<std::string> set;
        std::stringstream ss(offered);
        std::string item;
        while (std::getline(ss, item, ',')) {
            item.erase(0, item.find_first_not_of(" \t"));
            item.erase(item.find_last_not_of(" \t") + 1);
            set.insert(item);
        }
        if (set.count("v5.channel.k8s.io")) {
            protocol = "v5.channel.k8s.io";
        } else if (set.count("v4.channel.k8s.io")) {
            protocol = "v4.channel.k8s.io";
        }
    }
    if (protocol.empty()) {
        co_await write_response(stream, version, http::status::forbidden, "text/plain", "");
        co_return;
    }
    std::string uid = str(obj(request.pod, "metadata"), "uid");
    std::shared_ptr<PodRecord> pod;
    if (auto it = core->pods.find(uid); it != core->pods.end() && !it->second->removed) pod = it->second;
    // A pod published Ready can be a moment ahead of its process bookkeeping under load: wait
    // briefly in exactly that state instead of failing the exec.
    if (pod && pod->plan && container == pod->container_name) {
        asio::steady_timer settle(core->executor);
        for (int i = 0; i < 150 && !pod->removed && pod->ready && !pod->running(); ++i) {
            settle.expires_after(std::chrono::milliseconds(20));
            co_await settle.async_wait(tuple_awaitable);
        }
    }
    bool running = pod && pod->running() && pod->plan && container == pod->container_name;
    std::string not_found = "container not found (\"" + container + "\")";
    if (!running && protocol != "v5.channel.k8s.io") {
        co_await write_response(stream, version, http::status::internal_server_error, "text/plain", not_found);
        co_return;
    }

    auto session = std::make_unique<ExecSession>(core->executor, stream, request.buffer);
    auto& s = *session;
    s.v5 = protocol == "v5.channel.k8s.io";
    s.ws.set_option(websocket::stream_base::decorator(
        [protocol](websocket::response_type& res) { res.set(http::field::sec_websocket_protocol, protocol); }));
    s.ws.auto_fragment(false);
    s.ws.binary(true);
    s.ws.read_message_max(32 * 1024 * 1024);
    auto [aec] = co_await s.ws.async_accept(request.request, tuple_awaitable);
    if (aec) {
        stream.close();
        co_return;
    }
    auto fail_session = [&](std::string message) -> asio::awaitable<void> {
        auto body = json::serialize(exec_internal_error(message));
        co_await s.send(3, body.data(), body.size());
        co_await s.ws.async_close(websocket::close_code::normal, tuple_awaitable);
        beast::flat_buffer drain;
        stream.expires_after(5s);
        for (;;) {
            auto [ec, n] = co_await s.ws.async_read(drain, tuple_awaitable);
            (void)n;
            if (ec) break;
            drain.consume(drain.size());
        }
        stream.close();
    };
    if (!running) {
        co_await fail_session("unable to upgrade connection: " + not_found);
        co_return;
    }

    // The connected marker: an empty message on the lowest requested output channel.
    unsigned char marker = q.out ? 1 : q.err ? 2 : 3;
    co_await s.send(marker, nullptr, 0);

    // Pipes: ours non-blocking and close-on-exec; the child's ends are dup'ed onto 0/1/2.
    int in_p[2] = {-1, -1}, out_p[2] = {-1, -1}, err_p[2] = {-1, -1};
    Fd null_fd(::open("/dev/null", O_RDWR | O_CLOEXEC));
    bool ok = ::pipe2(in_p, O_CLOEXEC) == 0 && ::pipe2(out_p, O_CLOEXEC) == 0 && ::pipe2(err_p, O_CLOEXEC) == 0;
    Fd in_r(in_p[0]), in_w(in_p[1]), out_r(out_p[0]), out_w(out_p[1]), err_r(err_p[0]), err_w(err_p[1]);
    if (ok) {
        if (q.in) s.in_room = util::GrownPipe(in_p[1], kExecPipeBytes);
        if (q.out) s.out_room = util::GrownPipe(out_p[1], kExecPipeBytes);
    }
    if (!ok || null_fd.fd < 0) {
        co_await fail_session(std::string("unable to create pipes: ") + std::strerror(errno));
        co_return;
    }
    // Checked again: the container may have ended during the handshake, and its pid with it.
    if (pod->removed || !pod->running()) {
        co_await fail_session("unable to upgrade connection: " + not_found);
        co_return;
    }
    const int in_fd = q.in ? in_r.fd : null_fd.fd;
    const int out_fd = q.out ? out_w.fd : null_fd.fd;
    const int err_fd = q.err ? err_w.fd : (q.tty && q.out ? out_w.fd : null_fd.fd);
    if (auto spawner = co_await spawner_for(core, pod)) {
        if (auto id = co_await spawner->submit(q.command, in_fd, out_fd, err_fd)) {
            s.spawner = std::move(spawner);
            s.spawn_id = *id;
        }
    }
    // Without a spawner: a process of its own per command (kubesandbox-enter, or a shell
    // without isolation).
    auto start_one = [&]() -> pid_t {
        Spawn sp;
        sp.env = pod->plan->env;
        sp.new_session = true;
        if (core->isolation) {
            // The command counts against the pod's limits (memory, pids) like its own processes.
            const int pinned = pod->inner_pidfd.fd >= 0 ? 3 : -1;
            sp.argv =
                exec_argv(*pod->plan, core->layout, pod->inner_pid, pinned,
                          core->cgroups ? core->cgroups->procs_files(pod->uid) : std::vector<std::string>{}, q.command);
        } else {
            sp.argv = {"/bin/sh", "-c", "cd \"$0\" && exec \"$@\"", (pod->dir / "workspace").string()};
            sp.argv.insert(sp.argv.end(), q.command.begin(), q.command.end());
        }
        sp.dups = {{in_fd, 0}, {out_fd, 1}, {err_fd, 2}};
        if (core->isolation && pod->inner_pidfd.fd >= 0) sp.dups.push_back({pod->inner_pidfd.fd, 3});
        return sp.run();
    };
    // The container may have ended while the spawner started.
    if (!s.spawner && (pod->removed || !pod->running())) {
        co_await fail_session("unable to upgrade connection: " + not_found);
        co_return;
    }
    pid_t pid = s.spawner ? 0 : start_one();
    in_r.reset();
    out_w.reset();
    err_w.reset();
    if (pid < 0) {
        co_await fail_session(std::string("unable to start the command: ") + std::strerror(-pid));
        co_return;
    }
    if (pid > 0) {
        s.pid = pid;
        s.pidfd = util::open_pidfd(pid);
        core->exec_pids.insert(pid);
        s.exec_pids = &core->exec_pids;
    }
    for (int fd : {in_w.fd, out_r.fd, err_r.fd}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    s.in_sd.assign(in_w.release());
    s.out_sd.assign(out_r.release());
    s.err_sd.assign(err_r.release());
    if (!q.in) {
        error_code ignored;
        s.in_sd.close(ignored);
    }
    stream.expires_never();
    co_await (s.reader(q.in) && s.main_flow(q.out, q.err, q.command));
    if (pid > 0 && !s.exited) core->exec_pids.erase(pid);
    stream.close();
}

}  // namespace kubesandbox::local
