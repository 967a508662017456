#include "providers/raw/pod_state.hpp"

#include "util/json_access.hpp"
#include "util/time_format.hpp"

#include <boost/json/parse.hpp>

namespace kubesandbox::raw {

namespace json = boost::json;
using std::chrono::system_clock;
using util::annotation_of;
using util::label_of;
using util::metadata_of;
using util::object_at;
using util::string_at;

namespace {

bool is_reserved_label(std::string_view key) {
    return key == "managed-by" || key == "sandbox-id" || key == "pool-status" || key == "namespace-mode" ||
           key == "config-hash";
}

errc waiting_reason_code(const std::string& reason) {
    if (reason == "ErrImagePull" || reason == "ImagePullBackOff" || reason == "InvalidImageName" ||
        reason == "ErrImageNeverPull")
        return errc::image_pull_failed;
    if (reason == "CrashLoopBackOff" || reason == "CreateContainerConfigError" || reason == "CreateContainerError" ||
        reason == "RunContainerError" || reason == "PreStartHookError" || reason == "PostStartHookError")
        return errc::pod_failed;
    return errc{};
}

std::optional<system_clock::time_point> created_time(const json::object& o) {
    auto created = util::parse_rfc3339(annotation_of(o, keys::created_at));
    if (!created) created = util::parse_rfc3339(string_at(metadata_of(o), "creationTimestamp"));
    return created;
}

}  // namespace

Evaluation evaluate_pod(const json::object& pod) {
    Evaluation ev;
    const auto& m = metadata_of(pod);
    std::string name = string_at(m, "name");
    if (m.contains("deletionTimestamp")) {
        ev.state = PodState::failed;
        ev.dead = true;
        ev.error = make_error(errc::pod_failed, "pod " + name + " is being deleted");
        return ev;
    }
    const json::object* status = object_at(pod, "status");
    if (!status) return ev;
    std::string phase = string_at(status, "phase");
    if (phase == "Failed" || phase == "Succeeded") {
        std::string reason = string_at(status, "reason");
        std::string message = string_at(status, "message");
        ev.state = PodState::failed;
        ev.dead = true;
        ev.error = make_error(errc::pod_failed, "pod " + name + " " + phase + (reason.empty() ? "" : ": " + reason) +
                                                    (message.empty() ? "" : ": " + message));
        ev.error.reason = reason;
        return ev;
    }
    for (const char* list : {"initContainerStatuses", "containerStatuses"}) {
        const json::array* statuses = util::array_at(*status, list);
        if (!statuses) continue;
        bool init = std::string_view(list) == "initContainerStatuses";
        for (const auto& cs : *statuses) {
            if (!cs.is_object()) continue;
            const auto& c = cs.get_object();
            const json::object* st = object_at(c, "state");
            if (!st) continue;
            std::string cname = string_at(c, "name");
            if (auto* w = object_at(*st, "waiting")) {
                std::string reason = string_at(w, "reason");
                std::string message = string_at(w, "message");
                errc code = waiting_reason_code(reason);
                if (code != errc{}) {
                    ev.state = PodState::failed;
                    ev.error = make_error(code, "pod " + name + " container " + cname + ": " + reason +
                                                    (message.empty() ? "" : ": " + message));
                    ev.error.reason = reason;
                    return ev;
                }
            } else if (auto* t = object_at(*st, "terminated")) {
                std::string reason = string_at(t, "reason");
                std::int64_t code = util::int_at(t, "exitCode").value_or(0);
                if (init && code == 0) continue;  // a finished init container is progress
                std::string message = string_at(t, "message");
                ev.state = PodState::failed;
                ev.dead = true;
                ev.error =
                    make_error(errc::pod_failed, "pod " + name + " container " + cname + " terminated (exit " +
                                                     std::to_string(code) + (reason.empty() ? "" : ", " + reason) +
                                                     ")" + (message.empty() ? "" : ": " + message));
                ev.error.reason = reason.empty() ? "Terminated" : reason;
                return ev;
            }
        }
    }
    if (const json::array* conditions = util::array_at(*status, "conditions")) {
        for (const auto& c : *conditions) {
            if (!c.is_object()) continue;
            if (string_at(c.get_object(), "type") == "Ready" && string_at(c.get_object(), "status") == "True") {
                ev.state = PodState::ready;
                return ev;
            }
        }
    }
    return ev;
}

Evaluation evaluate_sandbox(const json::object& pod, bool require_setup) {
    auto ev = evaluate_pod(pod);
    if (ev.state != PodState::ready || !require_setup) return ev;
    std::string setup = annotation_of(pod, keys::setup);
    if (setup == "pending") {
        ev.state = PodState::waiting;
    } else if (setup == "failed") {
        const auto& m = metadata_of(pod);
        ev.state = PodState::failed;
        ev.error = make_error(errc::pod_failed, "setup_script failed in pod " + string_at(m, "namespace") + "/" +
                                                    string_at(m, "name") + " (run by its creator)");
    }
    return ev;
}

bool is_ready(const json::object& pod) { return evaluate_sandbox(pod, true).state == PodState::ready; }

std::string status_of(const json::object& pod) {
    if (metadata_of(pod).contains("deletionTimestamp")) return "terminated";
    std::string phase = string_at(object_at(pod, "status"), "phase");
    if (phase == "Succeeded") return "terminated";
    if (phase == "Failed") return "failed";
    auto ev = evaluate_sandbox(pod, true);
    if (ev.state == PodState::failed) return "failed";
    if (label_of(pod, keys::pool_status) == "warm") return "warm";
    if (phase == "Running" && ev.state == PodState::ready) return "running";
    return "pending";
}

SandboxInfo info_of(const json::object& pod) {
    SandboxInfo info;
    const auto& m = metadata_of(pod);
    info.pod_name = string_at(m, "name");
    info.namespace_name = string_at(m, "namespace");
    std::string original = annotation_of(pod, keys::id_original);
    std::string label = label_of(pod, keys::sandbox_id);
    if (!original.empty()) info.id = original;
    else if (!label.empty() && label != info.pod_name) info.id = label;  // a caller id
    else info.id = info.pod_name;  // a random sandbox: its pod name (accepted as an id like id())
    info.status = status_of(pod);
    info.instance = string_at(m, "uid");
    info.created_at = annotation_of(pod, keys::created_at);
    if (info.created_at.empty()) info.created_at = string_at(m, "creationTimestamp");
    info.last_activity = annotation_of(pod, keys::last_activity);
    json::object originals;
    if (auto o = annotation_of(pod, keys::labels_original); !o.empty()) {
        boost::system::error_code ec;
        auto v = json::parse(o, ec);
        if (!ec && v.is_object()) originals = v.get_object();
    }
    if (auto* labels = object_at(m, "labels")) {
        std::string_view prefix = keys::prefix;
        for (const auto& [k, v] : *labels) {
            std::string_view key = k;
            if (key.substr(0, prefix.size()) != prefix || !v.is_string()) continue;
            std::string user(key.substr(prefix.size()));
            if (is_reserved_label(user)) continue;
            auto orig = originals.find(user);
            if (orig != originals.end() && orig->value().is_string())
                info.labels[user] = std::string(orig->value().get_string());
            else info.labels[user] = std::string(v.get_string());
        }
    }
    return info;
}

bool being_deleted(const json::object& o) {
    if (metadata_of(o).contains("deletionTimestamp")) return true;
    return string_at(object_at(o, "status"), "phase") == "Terminating";
}

std::optional<std::chrono::seconds> age_of(const json::object& o, system_clock::time_point now) {
    auto created = created_time(o);
    if (!created) return std::nullopt;
    return std::chrono::duration_cast<std::chrono::seconds>(now - *created);
}

bool setup_abandoned(const json::object& pod, const RawProviderOptions& options, system_clock::time_point now) {
    if (annotation_of(pod, keys::setup) != "pending") return false;
    auto age = age_of(pod, now);
    // Ready within startup_timeout, the script bounded by it too: the creator died mid-setup.
    return age && *age > 2 * options.startup_timeout + std::chrono::seconds(60);
}

bool should_reap(const json::object& pod, const RawProviderOptions& options,
                 std::optional<std::chrono::seconds> max_idle, system_clock::time_point now) {
    auto ev = evaluate_pod(pod);
    auto age = age_of(pod, now);
    // Dead pods (terminal phase, a terminated container; failed warm pods too) never recover
    // under restartPolicy Never; a pod stuck failing to start (image pull...) is reaped once
    // its creator has certainly given up.
    if (ev.dead || setup_abandoned(pod, options, now)) return true;
    if (ev.state == PodState::failed && age && *age > options.startup_timeout + std::chrono::seconds(30)) return true;
    auto created = created_time(pod);
    if (auto ttl = util::parse_decimal(annotation_of(pod, keys::ttl_seconds)); ttl && created)
        if (now - *created > std::chrono::seconds(*ttl)) return true;
    std::optional<std::chrono::seconds> idle;
    bool warm = label_of(pod, keys::pool_status) == "warm";
    if (max_idle && !warm) idle = *max_idle;  // warm pods are idle by design
    else if (auto t = util::parse_decimal(annotation_of(pod, keys::ttl_idle_seconds))) idle = std::chrono::seconds(*t);
    if (!idle) return false;
    auto ref = util::parse_rfc3339(annotation_of(pod, keys::last_activity));
    if (!ref) ref = created;
    return ref && now - *ref > *idle;
}

bool is_idle(const json::object& pod, system_clock::time_point now) {
    std::chrono::seconds idle{300};
    if (auto t = util::parse_decimal(annotation_of(pod, keys::ttl_idle_seconds))) idle = std::chrono::seconds(*t);
    auto ref = util::parse_rfc3339(annotation_of(pod, keys::last_activity));
    if (!ref) ref = util::parse_rfc3339(annotation_of(pod, keys::created_at));
    return ref && now - *ref > idle;
}

}  // namespace kubesandbox::raw
