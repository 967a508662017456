// Pod Security admission as the API server applies it to a namespace labelled
// pod-security.kubernetes.io/enforce: the baseline and restricted checks of a pod, with the
// upstream wording of each violation. Sans-IO.
#pragma once

#include <boost/json/object.hpp>

#include <optional>
#include <string>
#include <vector>

namespace kubesandbox::local {

enum class PodSecurityLevel { privileged, baseline, restricted };

// The level a namespace enforces (its labels), nullopt for none or an unknown value.
std::optional<PodSecurityLevel> enforced_level(const boost::json::object& namespace_labels);

// The violations of `pod` (a whole Pod object) at `level`, each as "check (details)"; empty
// when the pod is admitted.
std::vector<std::string> pod_security_violations(const boost::json::object& pod, PodSecurityLevel level);

// `pods "NAME" is forbidden: violates PodSecurity "restricted:latest": a, b`.
std::string pod_security_message(const std::string& pod_name, PodSecurityLevel level, const std::string& version,
                                 const std::vector<std::string>& violations);

}  // namespace kubesandbox::local
