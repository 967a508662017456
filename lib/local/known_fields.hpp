// Which JSON fields the local API server knows per kind, for fieldValidation (Strict / Warn /
// Ignore): unknown fields are reported by path and dropped, as a real server's decoder does.
// Built-in kinds are described down to the pod spec and container fields; deeper structures
// and custom resources' spec/status are opaque (kept whole). Sans-IO.
#pragma once

#include "local/store.hpp"

#include <boost/json/object.hpp>

#include <string>
#include <vector>

namespace kubesandbox::local {

// Removes the fields of `object` (a `t` object) that the schema does not know and returns their
// paths in document order, e.g. "datta", "metadata.lables", "spec.containers[0].imagee".
std::vector<std::string> prune_unknown_fields(const ResourceType& t, boost::json::object& object);

}  // namespace kubesandbox::local
