// When to retry a request, and after how long. Sans-IO, so the rules are unit-tested.
#pragma once

#include <kubesandbox/error.hpp>
#include <kubesandbox/kube_types.hpp>

#include <chrono>
#include <optional>
#include <random>

namespace kubesandbox::kube {

struct Attempt {
    int number = 0;             // 0 for the first try
    bool idempotent = false;    // GET/LIST/PUT/DELETE/PATCH, or a create marked idempotent
    bool request_sent = false;  // false when we failed before a byte could reach the server
    unsigned http_status = 0;   // 0 when the attempt failed below HTTP
    std::optional<std::chrono::seconds> retry_after;
};

// nullopt = do not retry. Rules: never past max_retries; 429 and 5xx retried only for
// idempotent requests, honouring Retry-After; connection failures retried for idempotent
// requests, and for any request when nothing was sent; everything else is final.
std::optional<std::chrono::milliseconds> retry_delay(const Attempt& attempt, const KubeClientOptions& options,
                                                     std::mt19937_64& rng);

}  // namespace kubesandbox::kube
