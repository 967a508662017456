#include "kube/retry_policy.hpp"

#include <algorithm>

namespace kubesandbox::kube {

std::optional<std::chrono::milliseconds> retry_delay(const Attempt& a, const KubeClientOptions& options,
                                                     std::mt19937_64& rng) {
    if (a.number >= options.max_retries) return std::nullopt;
    const bool status_retryable = a.http_status == 429 || (a.http_status >= 500 && a.http_status != 501);
    const bool transport_failure = a.http_status == 0;
    if (status_retryable && !a.idempotent) return std::nullopt;
    if (transport_failure && !a.idempotent && a.request_sent) return std::nullopt;
    if (!status_retryable && !transport_failure) return std::nullopt;

    if (a.retry_after) {
        return std::min<std::chrono::milliseconds>(*a.retry_after, std::chrono::milliseconds(60'000));
    }
    // Exponential backoff with full jitter in [base/2, base].
    const auto cap = options.retry_max_backoff.count();
    long long base = options.retry_initial_backoff.count();
    for (int i = 0; i < a.number && base < cap; ++i) base *= 2;
    base = std::min<long long>(base, cap);
    std::uniform_int_distribution<long long> jitter(base / 2, std::max<long long>(base / 2, base));
    return std::chrono::milliseconds(jitter(rng));
}

}  // namespace kubesandbox::kube
