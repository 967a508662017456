// When the client retries a request, and after how long.
#include "kube/retry_policy.hpp"

#include <gtest/gtest.h>

namespace {
using namespace kubesandbox;
using kube::Attempt;
using namespace std::chrono_literals;

Attempt attempt(int number, bool idempotent, bool sent, unsigned status) {
    Attempt a;
    a.number = number;
    a.idempotent = idempotent;
    a.request_sent = sent;
    a.http_status = status;
    return a;
}

TEST(RetryPolicy, WhatIsRetried) {
    KubeClientOptions o;
    std::mt19937_64 rng(1);
    EXPECT_TRUE(kube::retry_delay(attempt(0, true, true, 503), o, rng));
    EXPECT_TRUE(kube::retry_delay(attempt(0, true, true, 429), o, rng));
    EXPECT_TRUE(kube::retry_delay(attempt(0, true, true, 0), o, rng));     // connection failure
    EXPECT_FALSE(kube::retry_delay(attempt(0, true, true, 501), o, rng));  // not implemented is final
    EXPECT_FALSE(kube::retry_delay(attempt(0, true, true, 404), o, rng));
    EXPECT_FALSE(kube::retry_delay(attempt(0, true, true, 409), o, rng));
    // A non-idempotent request is retried only when nothing reached the server.
    EXPECT_FALSE(kube::retry_delay(attempt(0, false, true, 503), o, rng));
    EXPECT_FALSE(kube::retry_delay(attempt(0, false, true, 0), o, rng));
    EXPECT_TRUE(kube::retry_delay(attempt(0, false, false, 0), o, rng));
    // Never past max_retries.
    EXPECT_FALSE(kube::retry_delay(attempt(o.max_retries, true, true, 503), o, rng));
}

TEST(RetryPolicy, BackoffGrowsWithJitterAndHonoursRetryAfter) {
    KubeClientOptions o;
    o.retry_initial_backoff = 100ms;
    o.retry_max_backoff = 800ms;
    o.max_retries = 10;
    std::mt19937_64 rng(7);
    for (int n = 0; n < 8; ++n) {
        long long base = std::min(100LL << n, 800LL);
        for (int k = 0; k < 20; ++k) {
            auto d = kube::retry_delay(attempt(n, true, true, 503), o, rng);
            ASSERT_TRUE(d);
            EXPECT_GE(d->count(), base / 2) << "attempt " << n;
            EXPECT_LE(d->count(), base) << "attempt " << n;
        }
    }
    auto a = attempt(0, true, true, 429);
    a.retry_after = 3s;
    EXPECT_EQ(kube::retry_delay(a, o, rng), 3000ms);
    a.retry_after = std::chrono::seconds(3600);
    EXPECT_EQ(kube::retry_delay(a, o, rng), 60000ms);  // capped
}

}  // namespace
