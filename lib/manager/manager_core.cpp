#include "manager/manager_core.hpp"

#include "util/time_format.hpp"

#include <algorithm>
#include <cmath>

namespace kubesandbox::manager {

Result<void> validate_scope(std::string_view scope) {
    auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
    bool ok = !scope.empty() && scope.size() <= 32 && alnum(scope.front()) && alnum(scope.back()) &&
              std::all_of(scope.begin(), scope.end(), [&](char c) { return alnum(c) || c == '-'; });
    if (!ok)
        return fail(errc::invalid_config, "scope \"" + std::string(scope) +
                                              "\" must be 1-32 lowercase letters, digits and '-', "
                                              "starting and ending with a letter or digit");
    return {};
}

Result<void> validate_thread_id(std::string_view thread_id) {
    if (thread_id.empty()) return fail(errc::invalid_argument, "thread id must not be empty");
    if (thread_id.size() > 1024) return fail(errc::invalid_argument, "thread id longer than 1024 bytes");
    if (thread_id.find('\0') != std::string_view::npos)
        return fail(errc::invalid_argument, "thread id must not contain NUL");
    return {};
}

std::string sandbox_id_for(std::string_view scope, std::string_view thread_id) {
    std::string id;
    id.reserve(scope.size() + 1 + thread_id.size());
    id.append(scope).append(1, ':').append(thread_id);
    return id;
}

std::optional<std::string> thread_of(std::string_view scope, std::string_view sandbox_id) {
    if (sandbox_id.size() <= scope.size() + 1 || sandbox_id.substr(0, scope.size()) != scope ||
        sandbox_id[scope.size()] != ':')
        return std::nullopt;
    return std::string(sandbox_id.substr(scope.size() + 1));
}

Verdict classify(SandboxOrigin origin, std::string_view known_instance, std::string_view got_instance,
                 bool expect_existing) {
    const bool history = !known_instance.empty() || expect_existing;
    switch (origin) {
        case SandboxOrigin::existing:
            // Another incarnation than the one this manager saw: someone re-created it meanwhile.
            if (!known_instance.empty() && !got_instance.empty()) {
                if (known_instance != got_instance) return {AcquireKind::recreated, true};
                return {AcquireKind::cached, false};
            }
            return {AcquireKind::reconnected, false};
        case SandboxOrigin::adopted:
            if (history) return {AcquireKind::recreated, true};
            return {AcquireKind::adopted, false};
        case SandboxOrigin::created:
        case SandboxOrigin::claimed_warm:
            if (history) return {AcquireKind::recreated, true};
            return {AcquireKind::created, false};
        case SandboxOrigin::replaced:
            return {AcquireKind::recreated, true};
    }
    return {AcquireKind::created, false};
}

bool reconnect_only(OnLost on_lost, bool has_history) { return on_lost == OnLost::error && has_history; }

bool veto_reaping(std::size_t busy, std::chrono::steady_clock::time_point last_used,
                  std::chrono::steady_clock::time_point now, std::optional<std::chrono::seconds> idle_ttl,
                  bool past_absolute_ttl) {
    if (busy > 0) return true;
    if (past_absolute_ttl) return false;
    return idle_ttl && now - last_used < *idle_ttl;
}

bool past_absolute_ttl(std::string_view created_at, std::optional<std::chrono::seconds> absolute_ttl,
                       std::chrono::system_clock::time_point now) {
    if (!absolute_ttl) return false;
    auto created = util::parse_rfc3339(created_at);
    return created && now - *created >= *absolute_ttl;
}

std::chrono::milliseconds next_pass_in(std::chrono::milliseconds interval, unsigned failures,
                                       std::chrono::milliseconds initial, std::chrono::milliseconds max,
                                       double jitter01) {
    using ms = std::chrono::milliseconds;
    jitter01 = std::clamp(jitter01, 0.0, 1.0);
    if (failures == 0) return interval;
    double base = static_cast<double>(initial.count()) * std::pow(2.0, std::min(failures - 1, 30u));
    base = std::min(base, static_cast<double>(max.count()));
    return ms(static_cast<ms::rep>(base * (0.5 + 0.5 * jitter01)));
}

}  // namespace kubesandbox::manager
