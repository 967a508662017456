// A pod's spawner, from the kubelet's side: one kubesandbox-enter --serve per running pod, which
// entered the pod once and starts each exec'd command in it (spawn_protocol.hpp). An exec then
// costs a message and a fork in a small process instead of a program start, seven setns calls,
// three cgroup moves and a seccomp filter load.
#pragma once

#include "local/process.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kubesandbox::local {

// When a pod tries again to start its spawner after failing to (a start that timed out on a
// loaded machine, say): 10 s after the first failure, doubling up to 5 min; a new container
// starts afresh. Meanwhile its execs start one by one, as without a spawner.
class SpawnerBackoff {
public:
    using Clock = std::chrono::steady_clock;

    bool may_try(std::uint64_t generation, Clock::time_point now) const {
        return generation != generation_ || failures_ == 0 || now >= next_try_;
    }
    void failed(std::uint64_t generation, Clock::time_point now) {
        if (generation != generation_) failures_ = 0;
        generation_ = generation;
        ++failures_;
        next_try_ = now + delay(failures_);
    }
    void succeeded() { failures_ = 0; }
    int failures() const { return failures_; }

    static std::chrono::seconds delay(int failures) {
        constexpr std::chrono::seconds first{10}, most{300};
        std::chrono::seconds d = first;
        for (int i = 1; i < failures && d < most; ++i) d *= 2;
        return std::min(d, most);
    }

private:
    std::uint64_t generation_ = 0;
    int failures_ = 0;
    Clock::time_point next_try_{};
};

class PodSpawner : public std::enable_shared_from_this<PodSpawner> {
public:
    // Starts `program` (its argv, environment and descriptors 0-2 and 4 onwards set by the
    // caller) with the spawner's socket as descriptor 3, and waits up to `ready_timeout` for it
    // to say it is ready. `on_start` gets the process's pid as soon as it runs, `on_exit` once it
    // has ended and been reaped (even when the start failed). On failure returns null and sets
    // `why`.
    static boost::asio::awaitable<std::shared_ptr<PodSpawner>> start(
        boost::asio::any_io_executor executor, Spawn program, std::chrono::milliseconds ready_timeout,
        std::function<void(pid_t)> on_start, std::function<void(pid_t)> on_exit, std::string& why);

    PodSpawner(const PodSpawner&) = delete;
    PodSpawner& operator=(const PodSpawner&) = delete;
    ~PodSpawner();

    // Hands `argv` with its stdin, stdout and stderr to the spawner; the command's id, or nullopt
    // when this spawner cannot take it (too long a command line, or the spawner is gone): the
    // caller then starts the command another way. The descriptors are copied on the way.
    boost::asio::awaitable<std::optional<std::uint64_t>> submit(const std::vector<std::string>& argv, int in, int out,
                                                                int err);

    // The exit code of command `id` (128 + the signal that killed it); 137 when the spawner
    // ended first (the pod went away, and its commands with it); nullopt when cancelled.
    boost::asio::awaitable<std::optional<int>> wait(std::uint64_t id);

    // Nobody awaits command `id` any more: its wait ends now (with 255) and its status is
    // dropped when it comes. The command itself runs on.
    void abandon(std::uint64_t id);

    bool alive() const { return alive_; }
    pid_t pid() const { return pid_; }

    // Closes the socket: the spawner ends (its commands run on). Idempotent.
    void stop();

private:
    struct Waiter {
        std::optional<int> exit_code;
        std::unique_ptr<boost::asio::steady_timer> wake;
    };

    PodSpawner(boost::asio::any_io_executor executor, int socket, pid_t pid, int pidfd);
    boost::asio::awaitable<void> read_replies();
    boost::asio::awaitable<void> reap();
    void end();  // every waiter still waiting gets 137

    boost::asio::any_io_executor executor_;
    boost::asio::posix::stream_descriptor socket_;
    pid_t pid_;
    Fd pidfd_;
    bool alive_ = true;
    std::uint64_t next_id_ = 0;
    std::map<std::uint64_t, Waiter> waiters_;
    std::function<void(pid_t)> on_exit_;
};

}  // namespace kubesandbox::local
