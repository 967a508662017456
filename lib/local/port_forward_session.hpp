// Port-forward internals shared by its two files: the session plumbing every wire variant uses
// (a transport, its single writer, forwarded connections into the pod) and the SPDY session's
// entry. port_forward.cpp holds the transports, the channel-protocol session and the entry
// point; port_forward_spdy.cpp the SPDY/3.1 session.
#pragma once

#include "local/port_forward.hpp"

#include <kubesandbox/error.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/object.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace kubesandbox::local::port_forward_detail {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;

inline constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);

inline constexpr std::size_t chunk_size = 32 * 1024;            // client-go's copy size
inline constexpr std::size_t outbox_high_water = 1 << 20;       // producers pause above this
inline constexpr std::size_t inbound_limit = 8 << 20;           // per stream, beyond the SPDY window
inline constexpr auto pair_timeout = std::chrono::seconds(30);  // kubelet: waiting for the stream pair

// A condition variable for one single-threaded executor: notify() wakes every waiter.
class Signal {
public:
    explicit Signal(const asio::any_io_executor& ex) : timer_(ex) {
        timer_.expires_at(asio::steady_timer::time_point::max());
    }
    asio::awaitable<void> wait() {
        auto [ec] = co_await timer_.async_wait(tuple_awaitable);
        (void)ec;
    }
    void notify() { timer_.cancel(); }

private:
    asio::steady_timer timer_;
};

struct PodRef {
    std::string name, uid;
    std::string forward_error(std::uint16_t port, const std::string& why) const {
        return "error forwarding port " + std::to_string(port) + " to pod " + name + ", uid " + uid + ": " + why;
    }
};

PodRef pod_ref(const boost::json::object& pod);

// Where session bytes come from and go to.
class Transport {
public:
    virtual ~Transport() = default;
    // The next chunk (raw SPDY, tunnel) or message (channel protocol); an error once the peer is gone.
    virtual asio::awaitable<Result<std::string>> read() = 0;
    virtual asio::awaitable<bool> write(const std::string& data) = 0;
    virtual asio::awaitable<void> close() = 0;  // graceful end after the last write
    virtual void abort() = 0;
};

// The single writer of a transport: frames/messages queue here in order; producers pause while
// more than outbox_high_water bytes are queued (backpressure from the client connection).
class Outbox {
public:
    Outbox(const asio::any_io_executor& ex, Transport& transport, bool coalesce)
        : transport_(transport), coalesce_(coalesce), wake_(ex), room_(ex) {}

    void push(std::string bytes) {
        if (finishing_ || done_) return;
        bytes_ += bytes.size();
        queue_.push_back(std::move(bytes));
        wake_.notify();
    }
    bool done() const noexcept { return done_; }
    asio::awaitable<void> wait_room() {
        while (bytes_ > outbox_high_water && !done_) co_await room_.wait();
    }
    // Closes the transport gracefully once everything queued so far is written.
    void finish() {
        finishing_ = true;
        wake_.notify();
    }

    asio::awaitable<void> run() {
        while (true) {
            while (queue_.empty() && !finishing_) co_await wake_.wait();
            if (queue_.empty()) {
                co_await transport_.close();
                break;
            }
            std::string chunk = std::move(queue_.front());
            queue_.pop_front();
            // SPDY bytes may be merged into one write; channel messages may not.
            while (coalesce_ && !queue_.empty() && chunk.size() < 256 * 1024) {
                chunk += queue_.front();
                queue_.pop_front();
            }
            bool ok = co_await transport_.write(chunk);
            bytes_ -= std::min(bytes_, chunk.size());
            room_.notify();
            if (!ok) {
                transport_.abort();
                break;
            }
        }
        done_ = true;
        queue_.clear();
        bytes_ = 0;
        room_.notify();
    }

private:
    Transport& transport_;
    bool coalesce_;
    std::deque<std::string> queue_;
    std::size_t bytes_ = 0;
    bool finishing_ = false;
    bool done_ = false;
    Signal wake_, room_;
};

// One forwarded TCP connection into the pod; bytes from the client queue in `inbound` until
// written (the queue exists before the connection does).
struct Upstream {
    explicit Upstream(const asio::any_io_executor& ex) : socket(ex), ready(ex) {}
    tcp::socket socket;
    std::deque<std::string> inbound;
    std::size_t inbound_bytes = 0;
    bool inbound_fin = false;  // the client half-closed: shut down our sending side when drained
    bool closed = false;
    Signal ready;

    void push(std::string bytes) {
        inbound_bytes += bytes.size();
        inbound.push_back(std::move(bytes));
        ready.notify();
    }
    void finish_inbound() {
        inbound_fin = true;
        ready.notify();
    }
    void close() {
        closed = true;
        error_code ec;
        socket.close(ec);
        ready.notify();
    }
};

// Writes client bytes to the pod; `on_written(n)` after each write (SPDY window updates).
asio::awaitable<void> pump_to_upstream(std::shared_ptr<Upstream> up, std::function<void(std::size_t)> on_written);

void spawn(const asio::any_io_executor& ex, asio::awaitable<void> coro);

// port_forward_spdy.cpp: serves SPDY/3.1 port-forward streams over `transport` (a plain upgraded
// connection or a WebSocket tunnel) until the client is done.
asio::awaitable<void> run_spdy_session(asio::any_io_executor ex, std::unique_ptr<Transport> transport,
                                       PodNetwork network, PodRef pod);

}  // namespace kubesandbox::local::port_forward_detail
