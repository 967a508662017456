// The client-side token bucket, with injected time.
#include "kube/rate_limiter.hpp"

#include <gtest/gtest.h>

using kubesandbox::kube::RateLimiter;
using namespace std::chrono_literals;
using Clock = RateLimiter::Clock;

namespace {
long long ms(Clock::duration d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); }
}  // namespace

TEST(RateLimiter, BurstIsFreeThenOneTokenPerInterval) {
    const auto t0 = Clock::time_point{} + 1000s;
    RateLimiter limiter(5, 3, t0);
    EXPECT_NEAR(ms(limiter.reserve(t0)), 0, 1);
    EXPECT_NEAR(ms(limiter.reserve(t0)), 0, 1);
    EXPECT_NEAR(ms(limiter.reserve(t0)), 0, 1);
    // The bucket is empty: each further request waits one more 1/qps = 200 ms.
    EXPECT_NEAR(ms(limiter.reserve(t0)), 200, 1);
    EXPECT_NEAR(ms(limiter.reserve(t0)), 400, 1);
    EXPECT_NEAR(ms(limiter.reserve(t0)), 600, 1);
}

TEST(RateLimiter, RefillsWithTimeButNeverBeyondBurst) {
    const auto t0 = Clock::time_point{} + 1000s;
    RateLimiter limiter(5, 1, t0);
    EXPECT_NEAR(ms(limiter.reserve(t0)), 0, 1);
    EXPECT_NEAR(ms(limiter.reserve(t0)), 200, 1);          // borrowed from the future
    EXPECT_NEAR(ms(limiter.reserve(t0 + 200ms)), 200, 1);  // the borrowed token is spent at 200 ms
    // A long idle time refills only up to the burst (1): one free request, then waiting again.
    EXPECT_NEAR(ms(limiter.reserve(t0 + 60s)), 0, 1);
    EXPECT_NEAR(ms(limiter.reserve(t0 + 60s)), 200, 1);
}

TEST(RateLimiter, SixRequestsAtFivePerSecondBurstOneTakeOneSecond) {
    const auto t0 = Clock::time_point{} + 1000s;
    RateLimiter limiter(5, 1, t0);
    Clock::duration last{};
    for (int i = 0; i < 6; ++i) last = limiter.reserve(t0);
    EXPECT_NEAR(ms(last), 1000, 1);
}

TEST(RateLimiter, NonPositiveQpsDisablesAndBurstIsAtLeastOne) {
    const auto t0 = Clock::time_point{} + 1000s;
    RateLimiter off(0, 1, t0);
    for (int i = 0; i < 100; ++i) EXPECT_NEAR(ms(off.reserve(t0)), 0, 1);
    RateLimiter zero_burst(10, 0, t0);
    EXPECT_NEAR(ms(zero_burst.reserve(t0)), 0, 1);
    EXPECT_NEAR(ms(zero_burst.reserve(t0)), 100, 1);
}

TEST(RateLimiter, TimeGoingBackwardsDoesNotMintTokens) {
    const auto t0 = Clock::time_point{} + 1000s;
    RateLimiter limiter(5, 1, t0);
    EXPECT_NEAR(ms(limiter.reserve(t0)), 0, 1);
    EXPECT_NEAR(ms(limiter.reserve(t0 - 10s)), 200, 1);
}
