// What a sandbox pod's JSON says about it: ready, still starting or failed (and why), its
// SandboxInfo, whether cleanup may reap it. Pure functions over the object, unit-tested
// without a cluster (kubernetes-wire.md §8 for the readiness rules).
#pragma once

#include <kubesandbox/error.hpp>
#include <kubesandbox/raw_provider.hpp>

#include <boost/json/object.hpp>

#include <chrono>
#include <optional>
#include <string>

namespace kubesandbox::raw {

enum class PodState { ready, waiting, failed };

struct Evaluation {
    PodState state{PodState::waiting};
    Error error{};
    bool dead{false};  // failed for good: being deleted, terminal phase, a container terminated
};

Evaluation evaluate_pod(const boost::json::object& pod);
// For others than the sandbox's creator, ready also needs the creator's setup_script done.
Evaluation evaluate_sandbox(const boost::json::object& pod, bool require_setup);
bool is_ready(const boost::json::object& pod);  // evaluate_sandbox(pod, true) is ready
// pending | running | warm | terminated | failed
std::string status_of(const boost::json::object& pod);
SandboxInfo info_of(const boost::json::object& pod);

bool being_deleted(const boost::json::object& o);
// From our created-at annotation, else the creationTimestamp.
std::optional<std::chrono::seconds> age_of(const boost::json::object& o, std::chrono::system_clock::time_point now);
// A setup_script still "pending" long after its creator could be running it.
bool setup_abandoned(const boost::json::object& pod, const RawProviderOptions& options,
                     std::chrono::system_clock::time_point now);

// cleanup()'s verdict on one of our pods: past its TTL or idle limit (max_idle overrides the
// pod's own for non-warm pods), dead, stuck failing to start, or abandoned mid-setup.
bool should_reap(const boost::json::object& pod, const RawProviderOptions& options,
                 std::optional<std::chrono::seconds> max_idle, std::chrono::system_clock::time_point now);
// Running with no activity for its ttl-idle-seconds (default 300 s).
bool is_idle(const boost::json::object& pod, std::chrono::system_clock::time_point now);

}  // namespace kubesandbox::raw
