// Client-side token bucket (client-go's QPS + burst), sans-IO: reserve() says how long the
// caller must wait; the caller sleeps. Thread-safe.
#pragma once

#include <algorithm>
#include <chrono>
#include <mutex>

namespace kubesandbox::kube {

class RateLimiter {
public:
    using Clock = std::chrono::steady_clock;

    RateLimiter(double qps, int burst, Clock::time_point now = Clock::now())
        : qps_(qps), burst_(std::max(1, burst)), tokens_(static_cast<double>(std::max(1, burst))), last_(now) {}

    // Takes one token, possibly from the future; returns how long to wait before using it.
    Clock::duration reserve(Clock::time_point now = Clock::now()) {
        if (qps_ <= 0) return Clock::duration::zero();
        std::lock_guard lock(mutex_);
        refill(now);
        tokens_ -= 1.0;
        if (tokens_ >= 0) return Clock::duration::zero();
        return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(-tokens_ / qps_));
    }

private:
    void refill(Clock::time_point now) {
        if (now > last_) {
            const double elapsed = std::chrono::duration<double>(now - last_).count();
            tokens_ = std::min<double>(burst_, tokens_ + elapsed * qps_);
            last_ = now;
        }
    }

    std::mutex mutex_;
    double qps_;
    int burst_;
    double tokens_;
    Clock::time_point last_;
};

}  // namespace kubesandbox::kube
