#include "local/pod_spawner.hpp"

#include "local/spawn_protocol.hpp"
#include "util/child_process.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include <fcntl.h>

namespace kubesandbox::local {

namespace asio = boost::asio;
namespace spawn = spawn_protocol;
using namespace asio::experimental::awaitable_operators;

namespace {
constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);
constexpr int kEndedWithThePod = 128 + SIGKILL;

// One datagram with the command's three descriptors attached. Not in a coroutine: the control
// buffer needs cmsghdr's alignment, which a coroutine frame does not promise.
ssize_t send_with_descriptors(int socket, const std::string& message, const int (&fds)[spawn::kStdioCount]) {
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof fds)] = {};
    iovec iov{const_cast<char*>(message.data()), message.size()};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof fds);
    std::memcpy(CMSG_DATA(c), fds, sizeof fds);
    return ::sendmsg(socket, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
}
}  // namespace

PodSpawner::PodSpawner(asio::any_io_executor executor, int socket, pid_t pid, int pidfd)
    : executor_(executor), socket_(executor, socket), pid_(pid), pidfd_(pidfd) {}

PodSpawner::~PodSpawner() { stop(); }

asio::awaitable<std::shared_ptr<PodSpawner>> PodSpawner::start(asio::any_io_executor executor, Spawn program,
                                                               std::chrono::milliseconds ready_timeout,
                                                               std::function<void(pid_t)> on_start,
                                                               std::function<void(pid_t)> on_exit, std::string& why) {
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
        why = std::string("cannot create the spawner's socket: ") + std::strerror(errno);
        co_return nullptr;
    }
    Fd ours(pair[0]), theirs(pair[1]);
    program.dups.push_back({theirs.fd, 3});
    const pid_t pid = program.run();
    theirs.reset();
    if (pid < 0) {
        why = std::string("cannot start the spawner: ") + std::strerror(-pid);
        co_return nullptr;
    }
    ::fcntl(ours.fd, F_SETFL, ::fcntl(ours.fd, F_GETFL) | O_NONBLOCK);
    std::shared_ptr<PodSpawner> self(new PodSpawner(executor, ours.release(), pid, util::open_pidfd(pid)));
    self->on_exit_ = std::move(on_exit);
    if (on_start) on_start(pid);
    asio::co_spawn(executor, self->reap(), asio::detached);

    // The first message says the spawner joined the pod; until then a failure is its exit.
    asio::steady_timer timer(executor, ready_timeout);
    std::array<char, spawn::kReplySize + 1> buffer;
    ssize_t n = -1;
    bool timed_out = false;
    for (;;) {
        auto first = co_await (self->socket_.async_wait(asio::posix::descriptor_base::wait_read, tuple_awaitable) ||
                               timer.async_wait(tuple_awaitable));
        timed_out = first.index() == 1;
        if (timed_out) break;
        n = ::recv(self->socket_.native_handle(), buffer.data(), buffer.size(), MSG_DONTWAIT);
        if (n >= 0 || (errno != EAGAIN && errno != EINTR)) break;  // else a spurious readiness report
    }
    auto ready =
        n > 0 ? spawn::decode_reply(std::string_view(buffer.data(), static_cast<std::size_t>(n))) : std::nullopt;
    if (!ready || ready->id != 0) {
        why = timed_out ? "the spawner was not ready in time" : "the spawner ended before it was ready";
        self->stop();
        // Through the pidfd: the pid itself may be reaped and reused by now.
        if (self->pidfd_.fd >= 0) ::syscall(SYS_pidfd_send_signal, self->pidfd_.fd, SIGKILL, nullptr, 0);
        co_return nullptr;
    }
    asio::co_spawn(executor, self->read_replies(), asio::detached);
    co_return self;
}

asio::awaitable<std::optional<std::uint64_t>> PodSpawner::submit(const std::vector<std::string>& argv, int in, int out,
                                                                 int err) {
    if (!alive_) co_return std::nullopt;
    const std::uint64_t id = ++next_id_;
    auto message = spawn::encode_request(id, argv);
    if (!message) co_return std::nullopt;
    const int fds[spawn::kStdioCount] = {in, out, err};
    for (;;) {
        if (!alive_ || !socket_.is_open()) co_return std::nullopt;
        ssize_t n = send_with_descriptors(socket_.native_handle(), *message, fds);
        if (n == static_cast<ssize_t>(message->size())) break;
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) {
            // The spawner is behind (a burst of execs): its socket's queue is full.
            auto [ec] = co_await socket_.async_wait(asio::posix::descriptor_base::wait_write, tuple_awaitable);
            if (ec) co_return std::nullopt;
            continue;
        }
        // Gone (or refused a whole datagram, which it never does): nothing was started.
        co_return std::nullopt;
    }
    Waiter& w = waiters_[id];
    w.wake = std::make_unique<asio::steady_timer>(executor_);
    co_return id;
}

asio::awaitable<std::optional<int>> PodSpawner::wait(std::uint64_t id) {
    auto self = shared_from_this();
    for (;;) {
        auto it = waiters_.find(id);
        if (it == waiters_.end()) co_return kEndedWithThePod;  // never submitted here
        if (it->second.exit_code) {
            int code = *it->second.exit_code;
            waiters_.erase(it);
            co_return code;
        }
        it->second.wake->expires_at(asio::steady_timer::time_point::max());
        co_await it->second.wake->async_wait(tuple_awaitable);
        if ((co_await asio::this_coro::cancellation_state).cancelled() != asio::cancellation_type::none) {
            waiters_.erase(id);
            co_return std::nullopt;
        }
    }
}

asio::awaitable<void> PodSpawner::read_replies() {
    auto self = shared_from_this();
    std::array<char, 64> buffer;
    bool ended = false;
    while (!ended) {
        auto [ec] = co_await socket_.async_wait(asio::posix::descriptor_base::wait_read, tuple_awaitable);
        if (ec || !socket_.is_open()) break;
        for (;;) {
            ssize_t n = ::recv(socket_.native_handle(), buffer.data(), buffer.size(), MSG_DONTWAIT);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && errno == EAGAIN) break;
            if (n <= 0) {
                ended = true;
                break;
            }
            auto reply = spawn::decode_reply(std::string_view(buffer.data(), static_cast<std::size_t>(n)));
            if (!reply) continue;
            auto it = waiters_.find(reply->id);
            if (it == waiters_.end()) continue;
            if (it->second.exit_code) continue;  // abandoned: its wait() erases it
            it->second.exit_code = exit_code_of(reply->wait_status);
            it->second.wake->cancel();
        }
    }
    end();
}

asio::awaitable<void> PodSpawner::reap() {
    auto self = shared_from_this();
    co_await reap_child(executor_, pidfd_.fd, pid_);
    alive_ = false;
    if (on_exit_) on_exit_(pid_);
}

void PodSpawner::abandon(std::uint64_t id) {
    auto it = waiters_.find(id);
    if (it == waiters_.end()) return;
    if (!it->second.exit_code) it->second.exit_code = 255;
    it->second.wake->cancel();
}

void PodSpawner::end() {
    alive_ = false;
    for (auto& [id, w] : waiters_) {
        if (w.exit_code) continue;
        w.exit_code = kEndedWithThePod;
        w.wake->cancel();
    }
}

void PodSpawner::stop() {
    alive_ = false;
    boost::system::error_code ignored;
    socket_.close(ignored);
    end();
}

}  // namespace kubesandbox::local
