// The socket deadline on a bare io_context (no socket): when it expires, that a re-arm keeps or
// replaces the wait as it should, and that a disarmed or destroyed deadline holds no work.
#include "net/socket_deadline.hpp"

#include <gtest/gtest.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

namespace {
using namespace kubesandbox;
namespace asio = boost::asio;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct Fixture {
    asio::io_context io;
    Clock::time_point start = Clock::now();
    int expired = 0;
    std::optional<Clock::duration> expired_after;
    net::Deadline deadline{io.get_executor(), [this] {
                               ++expired;
                               expired_after = Clock::now() - start;
                           }};
    // Runs until there is no work left (bounded): how long that took.
    Clock::duration run() {
        const auto t0 = Clock::now();
        io.run_for(5s);
        return Clock::now() - t0;
    }
};

TEST(SocketDeadline, ExpiresOnceWhenItsTimePasses) {
    Fixture f;
    f.deadline.arm(50ms);
    EXPECT_LT(f.run(), 4s);  // ran out of work: nothing waits after the expiry
    EXPECT_EQ(f.expired, 1);
    ASSERT_TRUE(f.expired_after);
    EXPECT_GE(*f.expired_after, 50ms);
}

TEST(SocketDeadline, ADisarmedDeadlineHoldsNoWork) {
    Fixture f;
    f.deadline.arm(10s);
    f.deadline.disarm();
    EXPECT_LT(f.run(), 2s);  // the 10 s wait was dropped a turn later
    EXPECT_EQ(f.expired, 0);
}

TEST(SocketDeadline, ALaterDeadlineKeepsTheWaitOutAndExpiresOnItsOwnTime) {
    Fixture f;
    f.deadline.arm(100ms);
    f.deadline.disarm();
    f.deadline.arm(300ms);  // same turn: the 100 ms wait stays, wakes early and waits again
    f.run();
    EXPECT_EQ(f.expired, 1);
    ASSERT_TRUE(f.expired_after);
    EXPECT_GE(*f.expired_after, 300ms);
}

TEST(SocketDeadline, AnEarlierDeadlineReplacesTheWaitOut) {
    Fixture f;
    f.deadline.arm(10s);
    f.deadline.arm(50ms);
    EXPECT_LT(f.run(), 2s);
    EXPECT_EQ(f.expired, 1);
    ASSERT_TRUE(f.expired_after);
    EXPECT_GE(*f.expired_after, 50ms);
    EXPECT_LT(*f.expired_after, 2s);
}

TEST(SocketDeadline, AWaitDroppedAfterADisarmGivesWayToTheNextArm) {
    Fixture f;
    f.deadline.arm(60ms);
    // A request ends within its deadline and the next starts after the executor's next turn:
    // the disarm's check has dropped the first wait by then, and the second arm waits anew.
    asio::post(f.io, [&] {
        f.deadline.disarm();
        asio::post(f.io, [&] { f.deadline.arm(400ms); });
    });
    f.run();
    EXPECT_EQ(f.expired, 1);
    ASSERT_TRUE(f.expired_after);
    EXPECT_GE(*f.expired_after, 400ms);
}

TEST(SocketDeadline, ADestroyedDeadlineNeverExpires) {
    asio::io_context io;
    int expired = 0;
    {
        net::Deadline d(io.get_executor(), [&] { ++expired; });
        d.arm(20ms);
    }
    const auto t0 = Clock::now();
    io.run_for(5s);
    EXPECT_LT(Clock::now() - t0, 2s);
    EXPECT_EQ(expired, 0);
}

// Owners on a strand, the timer's handlers on two threads: arms, disarms and expiries interleave
// (ASan and UBSan watch the shared state), and each last deadline still expires.
TEST(SocketDeadline, SurvivesArmsAndExpiriesAcrossThreads) {
    asio::io_context io(2);
    auto strand = asio::make_strand(io);
    std::atomic<int> expired{0};
    constexpr int rounds = 300;
    std::vector<std::unique_ptr<net::Deadline>> deadlines;
    for (int i = 0; i < 4; ++i)
        deadlines.push_back(std::make_unique<net::Deadline>(io.get_executor(), [&] { ++expired; }));
    std::atomic<int> done{0};
    std::function<void(int, int)> step = [&](int i, int n) {
        if (n == rounds) {
            deadlines[i]->arm(1ms);  // left to expire
            ++done;
            return;
        }
        if (n % 3 == 0) deadlines[i]->arm(std::chrono::microseconds(n % 7 * 100));
        else if (n % 3 == 1) deadlines[i]->disarm();
        else deadlines[i]->arm(1s);
        asio::post(strand, [&step, i, n] { step(i, n + 1); });
    };
    for (int i = 0; i < 4; ++i) asio::post(strand, [&step, i] { step(i, 0); });
    std::thread other([&] { io.run_for(10s); });
    io.run_for(10s);
    other.join();
    EXPECT_EQ(done.load(), 4);
    EXPECT_GE(expired.load(), 4);  // at least each last one (short ones before may have, too)
    // Each last deadline expired: nothing was left waiting, so both threads ran out of work.
    EXPECT_TRUE(io.stopped());
}

}  // namespace
